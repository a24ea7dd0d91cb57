// Each rule, alone, on random shapes: it fires, and every graph extracted from what it made is
// proven equal to the spec by the finite-field verifier. Where a rule's law holds only under a
// condition, a spec that breaks the condition shows the rule does not fire.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include <fmt/format.h>

#include "kiln/algebra/algebra.h"
#include "kiln/ir/json_io.h"
#include "kiln/verifier/verify.h"

namespace kiln::algebra {
namespace {

struct Outcome {
  int64_t applied = 0;
  size_t graphs = 0;
};

// Saturates `spec` with one rule and verifies every extracted graph (the cheapest and each
// single deviation from it) against the spec.
Outcome prove(const std::string& rule, const std::string& spec_text) {
  const KernelGraph spec = parse_spec(spec_text);
  const Rule* r = rule_named(rule);
  EXPECT_NE(r, nullptr) << rule;
  if (!r) return {};
  const std::vector<Rule> one{*r};
  AlgebraOptions o;
  o.rules = &one;
  o.keep_costlier = true;
  o.max_graphs = 64;
  o.limits.max_iterations = 3;
  AlgebraResult res = rewrite(term_graph(spec), o);
  for (const Extracted& x : res.graphs) {
    const KernelGraph g = to_kernel_graph(x.graph);
    verifier::Verdict v = verifier::verify(spec, g);
    EXPECT_TRUE(v.equivalent()) << rule << ": " << fmt::format("{}", fmt::join(x.rewrites, "; "))
                                << "\n"
                                << spec_text;
  }
  auto it = res.saturation.applied.find(rule);
  return {it == res.saturation.applied.end() ? 0 : it->second, res.graphs.size()};
}

std::string spec(const std::string& inputs, const std::string& nodes, const char* out = "Y") {
  return fmt::format(R"({{"name": "r", "inputs": [{}], "nodes": [{}], "outputs": ["{}"]}})", inputs,
                     nodes, out);
}
std::string in(const char* name, std::vector<int64_t> shape, const char* dt = "f32") {
  return fmt::format(R"({{"name": "{}", "shape": [{}], "dtype": "{}"}})", name,
                     fmt::join(shape, ", "), dt);
}

class Rules : public ::testing::Test {
 protected:
  std::mt19937 rng{2026};
  int64_t dim() { return std::uniform_int_distribution<int64_t>(2, 9)(rng); }
  void fires(const char* rule, const std::string& s) {
    Outcome o = prove(rule, s);
    EXPECT_GT(o.applied, 0) << rule << " did not fire on\n" << s;
    EXPECT_GE(o.graphs, 2u) << rule << " made no other graph of\n" << s;
  }
  void silent(const char* rule, const std::string& s) {
    EXPECT_EQ(prove(rule, s).applied, 0) << rule << " fired on\n" << s;
  }
};

TEST_F(Rules, MatmulAssociativity) {
  for (int t = 0; t < 3; ++t) {
    int64_t m = dim(), k = dim(), r = dim(), n = dim();
    fires("matmul-assoc", spec(in("X", {m, k}) + "," + in("A", {k, r}) + "," + in("B", {r, n}),
                               R"({"name": "AB", "op": "matmul", "inputs": ["A", "B"]},
                  {"name": "Y", "op": "matmul", "inputs": ["X", "AB"]})"));
    // Batched, 16-bit operands.
    int64_t b = dim();
    fires("matmul-assoc", spec(in("X", {b, m, k}, "f16") + "," + in("A", {b, k, r}, "f16") + "," +
                                   in("B", {b, r, n}, "f16"),
                               R"({"name": "XA", "op": "matmul", "inputs": ["X", "A"]},
                  {"name": "Y", "op": "matmul", "inputs": ["XA", "B"]})"));
  }
}

TEST_F(Rules, MatmulDistributesAndFactors) {
  for (int t = 0; t < 3; ++t) {
    int64_t m = dim(), k = dim(), n = dim();
    for (const char* op : {"add", "sub"}) {
      fires("matmul-distribute",
            spec(in("X", {m, k}) + "," + in("A", {k, n}) + "," + in("B", {k, n}),
                 fmt::format(R"({{"name": "S", "op": "{}", "inputs": ["A", "B"]}},
                    {{"name": "Y", "op": "matmul", "inputs": ["X", "S"]}})",
                             op)));
      fires("matmul-factor",
            spec(in("X", {m, k}) + "," + in("A", {k, n}) + "," + in("B", {k, n}),
                 fmt::format(R"({{"name": "P", "op": "matmul", "inputs": ["X", "A"]}},
                    {{"name": "Q", "op": "matmul", "inputs": ["X", "B"]}},
                    {{"name": "Y", "op": "{}", "inputs": ["P", "Q"]}})",
                             op)));
      fires("matmul-factor",
            spec(in("A", {m, k}) + "," + in("B", {m, k}) + "," + in("W", {k, n}),
                 fmt::format(R"({{"name": "P", "op": "matmul", "inputs": ["A", "W"]}},
                    {{"name": "Q", "op": "matmul", "inputs": ["B", "W"]}},
                    {{"name": "Y", "op": "{}", "inputs": ["P", "Q"]}})",
                             op)));
    }
  }
  // Operands of other shapes (a broadcast add) are left alone.
  silent("matmul-distribute", spec(in("X", {4, 6}) + "," + in("A", {6, 5}) + "," + in("b", {5}),
                                   R"({"name": "S", "op": "add", "inputs": ["A", "b"]},
                  {"name": "Y", "op": "matmul", "inputs": ["X", "S"]})"));
}

TEST_F(Rules, SumThroughMatmul) {
  for (int t = 0; t < 3; ++t) {
    int64_t m = dim(), k = dim(), n = dim(), b = dim();
    for (int d : {0, 1})
      for (bool keep : {true, false})
        fires("sum-through-matmul",
              spec(in("X", {m, k}) + "," + in("W", {k, n}),
                   fmt::format(R"({{"name": "H", "op": "matmul", "inputs": ["X", "W"]}},
                      {{"name": "Y", "op": "sum", "inputs": ["H"], "attrs": {{"dim": {}, "keepdim": {}}}}})",
                               d, keep)));
    // A batch dim of X over a 2-D W.
    fires("sum-through-matmul", spec(in("X", {b, m, k}, "bf16") + "," + in("W", {k, n}, "bf16"),
                                     R"({"name": "H", "op": "matmul", "inputs": ["X", "W"]},
                  {"name": "Y", "op": "sum", "inputs": ["H"], "attrs": {"dim": 0}})"));
  }
  // max does not move through a matmul.
  silent("sum-through-matmul", spec(in("X", {4, 6}) + "," + in("W", {6, 5}),
                                    R"({"name": "H", "op": "matmul", "inputs": ["X", "W"]},
                  {"name": "Y", "op": "max", "inputs": ["H"], "attrs": {"dim": 1}})"));
}

TEST_F(Rules, ReductionsThroughTransposes) {
  for (int t = 0; t < 3; ++t) {
    int64_t a = dim(), b = dim(), c = dim();
    for (const char* op : {"sum", "max"})
      for (int d : {0, 1, 2})
        fires(
            "reduce-through-transpose",
            spec(
                in("X", {a, b, c}),
                fmt::format(
                    R"({{"name": "T", "op": "transpose", "inputs": ["X"], "attrs": {{"perm": [2, 0, 1]}}}},
                      {{"name": "Y", "op": "{}", "inputs": ["T"], "attrs": {{"dim": {}}}}})",
                    op, d)));
  }
}

TEST_F(Rules, ScalesMoveOutOfSums) {
  int64_t m = dim(), n = dim();
  fires("scale-out-of-sum", spec(in("X", {m, n}) + "," + in("r", {m, 1}),
                                 R"({"name": "P", "op": "mul", "inputs": ["X", "r"]},
                  {"name": "Y", "op": "sum", "inputs": ["P"], "attrs": {"dim": 1}})"));
  fires("scale-out-of-sum", spec(in("X", {m, n}) + "," + in("r", {m, 1}),
                                 R"({"name": "P", "op": "div", "inputs": ["X", "r"]},
                  {"name": "Y", "op": "sum", "inputs": ["P"], "attrs": {"dim": 1}})"));
  // A scale that varies along the summed dim stays inside.
  silent("scale-out-of-sum", spec(in("X", {m, n}) + "," + in("c", {n}),
                                  R"({"name": "P", "op": "mul", "inputs": ["X", "c"]},
                  {"name": "Y", "op": "sum", "inputs": ["P"], "attrs": {"dim": 1}})"));
}

TEST_F(Rules, ScalesMoveIntoAndOutOfMatmuls) {
  for (int t = 0; t < 2; ++t) {
    int64_t m = dim(), k = dim(), n = dim();
    const std::string xw = in("X", {m, k}) + "," + in("W", {k, n});
    for (const char* op : {"mul", "div"}) {
      // A scalar, a per-row and a per-column scale after the product.
      for (std::vector<int64_t> s : {std::vector<int64_t>{}, {m, 1}, {n}, {1, n}})
        fires("scale-into-matmul",
              spec(xw + "," + in("s", s),
                   fmt::format(R"({{"name": "H", "op": "matmul", "inputs": ["X", "W"]}},
                      {{"name": "Y", "op": "{}", "inputs": ["H", "s"]}})",
                               op)));
      // Before it: on X's rows, on W's columns.
      fires("scale-out-of-matmul",
            spec(xw + "," + in("s", {m, 1}),
                 fmt::format(R"({{"name": "P", "op": "{}", "inputs": ["X", "s"]}},
                    {{"name": "Y", "op": "matmul", "inputs": ["P", "W"]}})",
                             op)));
      fires("scale-out-of-matmul",
            spec(xw + "," + in("s", {n}),
                 fmt::format(R"({{"name": "P", "op": "{}", "inputs": ["W", "s"]}},
                    {{"name": "Y", "op": "matmul", "inputs": ["X", "P"]}})",
                             op)));
    }
    // A scale along the contracted dim cannot leave the product.
    silent("scale-out-of-matmul", spec(xw + "," + in("s", {k}),
                                       R"({"name": "P", "op": "mul", "inputs": ["X", "s"]},
                  {"name": "Y", "op": "matmul", "inputs": ["P", "W"]})"));
    // Nor can a full [m, n] operand enter one.
    silent("scale-into-matmul", spec(xw + "," + in("s", {m, n}),
                                     R"({"name": "H", "op": "matmul", "inputs": ["X", "W"]},
                  {"name": "Y", "op": "mul", "inputs": ["H", "s"]})"));
  }
}

TEST_F(Rules, ConstantsFoldOnlyWhereExact) {
  const std::string x = in("X", {dim(), dim()});
  for (double c : {4096.0, 3.0, 0.25})
    fires("div-by-constant",
          spec(x, fmt::format(R"({{"name": "c", "op": "constant", "attrs": {{"value": {}}}}},
                  {{"name": "Y", "op": "div", "inputs": ["X", "c"]}})",
                              c)));
  silent("div-by-constant", spec(x, R"({"name": "c", "op": "constant", "attrs": {"value": 0.3}},
                  {"name": "Y", "op": "div", "inputs": ["X", "c"]})"));
  for (auto [a, b] : {std::pair{0.5, 3.0}, {1.0 / 3, 1.0 / 7}, {1.0 / 4096, 2.0}})
    fires("fold-constants",
          spec(x, fmt::format(R"({{"name": "a", "op": "constant", "attrs": {{"value": {}}}}},
                  {{"name": "b", "op": "constant", "attrs": {{"value": {}}}}},
                  {{"name": "P", "op": "mul", "inputs": ["X", "a"]}},
                  {{"name": "Y", "op": "mul", "inputs": ["b", "P"]}})",
                              a, b)));
  // 0.1 * 0.3 is not a double: the product would be a different real.
  silent("fold-constants", spec(x, R"({"name": "a", "op": "constant", "attrs": {"value": 0.1}},
                  {"name": "b", "op": "constant", "attrs": {"value": 0.3}},
                  {"name": "P", "op": "mul", "inputs": ["X", "a"]},
                  {"name": "Y", "op": "mul", "inputs": ["P", "b"]})"));
}

TEST_F(Rules, TransposesThroughMatmulsTransposesAndElementwiseOps) {
  for (int t = 0; t < 2; ++t) {
    int64_t m = dim(), k = dim(), n = dim();
    fires("transpose-of-matmul", spec(in("A", {m, k}) + "," + in("B", {k, n}),
                                      R"({"name": "H", "op": "matmul", "inputs": ["A", "B"]},
                  {"name": "Y", "op": "transpose", "inputs": ["H"]})"));
    fires("transpose-of-matmul", spec(in("A", {k, m}) + "," + in("B", {n, k}),
                                      R"({"name": "At", "op": "transpose", "inputs": ["A"]},
                  {"name": "Bt", "op": "transpose", "inputs": ["B"]},
                  {"name": "Y", "op": "matmul", "inputs": ["At", "Bt"]})"));
    fires("transpose-of-transpose",
          spec(in("X", {m, k, n}),
               R"({"name": "T", "op": "transpose", "inputs": ["X"], "attrs": {"perm": [1, 2, 0]}},
                  {"name": "U", "op": "transpose", "inputs": ["T"], "attrs": {"perm": [2, 0, 1]}},
                  {"name": "Y", "op": "exp", "inputs": ["U"]})"));
    fires("transpose-of-transpose",
          spec(in("X", {m, k, n}),
               R"({"name": "T", "op": "transpose", "inputs": ["X"], "attrs": {"perm": [1, 2, 0]}},
                  {"name": "Y", "op": "transpose", "inputs": ["T"], "attrs": {"perm": [1, 0, 2]}})"));
    fires("transpose-through-elementwise",
          spec(in("X", {m, n}) + "," + in("Z", {m, n}) + "," + in("s", {1}),
               R"({"name": "A", "op": "add", "inputs": ["X", "Z"]},
                  {"name": "B", "op": "mul", "inputs": ["A", "s"]},
                  {"name": "C", "op": "tanh", "inputs": ["B"]},
                  {"name": "Y", "op": "transpose", "inputs": ["C"]})"));
  }
  // A per-row operand does not follow the transpose.
  silent("transpose-through-elementwise", spec(in("X", {4, 5}) + "," + in("r", {4, 1}),
                                               R"({"name": "A", "op": "add", "inputs": ["X", "r"]},
                  {"name": "Y", "op": "transpose", "inputs": ["A"]})"));
}

TEST_F(Rules, ExpsCombine) {
  int64_t m = dim(), n = dim();
  for (const char* op : {"mul", "div"})
    fires("exp-combine", spec(in("X", {m, n}) + "," + in("r", {m, 1}),
                              fmt::format(R"({{"name": "A", "op": "exp", "inputs": ["X"]}},
                  {{"name": "B", "op": "exp", "inputs": ["r"]}},
                  {{"name": "Y", "op": "{}", "inputs": ["A", "B"]}})",
                                          op)));
}

// The shift of a normalization cancels only where it is constant along the normalized dim
// (issue 16's rewrite, now an e-graph rule).
TEST_F(Rules, ShiftCancelsOnlyWhereConstantAlongTheSum) {
  const std::string xs = in("X", {8, 32}) + "," + in("Y2", {8, 32}) + "," + in("c", {8, 1});
  auto norm = [&](const char* shift, int dim) {
    return spec(xs, fmt::format(R"({}
        {{"name": "E", "op": "exp", "inputs": ["D"]}},
        {{"name": "L", "op": "sum", "inputs": ["E"], "attrs": {{"dim": {}}}}},
        {{"name": "Y", "op": "div", "inputs": ["E", "L"]}})",
                                shift, dim));
  };
  fires("cancel-shift", norm(R"({"name": "D", "op": "sub", "inputs": ["X", "c"]},)", 1));
  fires("cancel-shift", norm(R"({"name": "M", "op": "max", "inputs": ["X"], "attrs": {"dim": 0}},
                {"name": "D", "op": "sub", "inputs": ["X", "M"]},)",
                             0));
  silent("cancel-shift", norm(R"({"name": "D", "op": "sub", "inputs": ["X", "Y2"]},)", 1));
  silent("cancel-shift", norm(R"({"name": "D", "op": "sub", "inputs": ["X", "c"]},)", 0));
}

}  // namespace
}  // namespace kiln::algebra

namespace kiln::algebra {
namespace {

// Random programs over the rules' vocabulary (matmul chains, transposes, reductions, scales by
// constants, per-row and per-column vectors, exp, add/sub/mul/div), every rule at once: every
// graph the pass extracts, costlier ones included, is proven equal to the program.
TEST(RandomPrograms, RewriteOnlyToEqualPrograms) {
  const char* seed_env = std::getenv("KILN_ALGEBRA_SEED");
  std::mt19937 rng(seed_env ? std::atoi(seed_env) : 17);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  auto extent = [&] { return std::uniform_int_distribution<int64_t>(2, 7)(rng); };
  int fired = 0, graphs = 0;
  for (int trial = 0; trial < 400; ++trial) {
    // Values: name and shape; every value is rank 2.
    struct V {
      std::string name;
      int64_t r, c;
    };
    std::vector<V> vals;
    std::string inputs, nodes;
    int next = 0;
    auto fresh = [&] { return fmt::format("t{}", next++); };
    auto input = [&](int64_t r, int64_t c) {
      V v{fresh(), r, c};
      inputs += (inputs.empty() ? "" : ",") + in(v.name.c_str(), {r, c});
      vals.push_back(v);
      return v;
    };
    auto node = [&](const std::string& op, std::vector<std::string> args, int64_t r, int64_t c,
                    const std::string& attrs = "") {
      V v{fresh(), r, c};
      nodes += fmt::format(R"({}{{"name": "{}", "op": "{}", "inputs": ["{}"]{}}})",
                           nodes.empty() ? "" : ",", v.name, op, fmt::join(args, "\", \""),
                           attrs.empty() ? "" : ", \"attrs\": " + attrs);
      vals.push_back(v);
      return v;
    };
    V cur = input(extent(), extent());
    const int steps = 2 + pick(4);
    // The verifier reads exp of a value computed from an exp as a PRF, not a homomorphism
    // (docs/verifier.md, "False negatives"): no second exp after the first, or a true rewrite
    // there (a second softmax's shift cancelled) could not be proven.
    bool exp_seen = false;
    for (int s = 0; s < steps; ++s) {
      int what = pick(8);
      if (exp_seen && (what == 5 || what == 7)) what = 2;
      exp_seen |= what == 5 || what == 7;
      switch (what) {
        case 0:
        case 1: {  // a matmul by a new weight, sometimes a product of two
          const int64_t n = extent();
          if (pick(2)) {
            const int64_t r = extent();
            V a = input(cur.c, r), b = input(r, n);
            V ab = node("matmul", {a.name, b.name}, cur.c, n);
            cur = node("matmul", {cur.name, ab.name}, cur.r, n);
          } else {
            V w = input(cur.c, n);
            cur = node("matmul", {cur.name, w.name}, cur.r, n);
          }
          break;
        }
        case 2:
          cur = node("transpose", {cur.name}, cur.c, cur.r);
          break;
        case 3: {  // a sum over one dim, kept
          const int d = pick(2);
          cur = node("sum", {cur.name}, d == 0 ? 1 : cur.r, d == 1 ? 1 : cur.c,
                     fmt::format(R"({{"dim": {}}})", d));
          break;
        }
        case 4: {  // a scale: a constant, a per-row or a per-column vector
          const char* op = pick(2) ? "mul" : "div";
          const int kind = pick(3);
          if (kind == 0) {
            V k = node("constant", {}, 1, 1, fmt::format(R"({{"value": {}}})", 1 << pick(4)));
            vals.back().r = vals.back().c = 0;
            cur = node(op, {cur.name, k.name}, cur.r, cur.c);
          } else {
            V s = kind == 1 ? input(cur.r, 1) : input(1, cur.c);
            cur = node(op, {cur.name, s.name}, cur.r, cur.c);
          }
          break;
        }
        case 5:
          cur = node("exp", {cur.name}, cur.r, cur.c);
          break;
        case 6: {  // a residual of the same shape
          V z = input(cur.r, cur.c);
          cur = node(pick(2) ? "add" : "sub", {cur.name, z.name}, cur.r, cur.c);
          break;
        }
        case 7: {  // a normalization along one dim with a per-row shift
          V m = node("max", {cur.name}, cur.r, 1, R"({"dim": 1})");
          V d = node("sub", {cur.name, m.name}, cur.r, cur.c);
          V e = node("exp", {d.name}, cur.r, cur.c);
          V l = node("sum", {e.name}, cur.r, 1, R"({"dim": 1})");
          cur = node("div", {e.name, l.name}, cur.r, cur.c);
          break;
        }
      }
    }
    // Constants are written with no inputs: the node() helper wrote "inputs": [""].
    std::string text = spec(inputs, nodes, cur.name.c_str());
    for (size_t p = text.find(R"("inputs": [""])"); p != std::string::npos;
         p = text.find(R"("inputs": [""])", p))
      text.replace(p, 14, R"("inputs": [])");
    SCOPED_TRACE(text);
    const KernelGraph g = parse_spec(text);
    AlgebraOptions o;
    o.keep_costlier = true;
    o.max_graphs = 12;
    o.limits.max_iterations = 4;
    o.limits.max_nodes = 600;
    AlgebraResult res = rewrite(term_graph(g), o);
    for (size_t i = 1; i < res.graphs.size(); ++i) {
      const KernelGraph x = to_kernel_graph(res.graphs[i].graph);
      const verifier::Verdict v = verifier::verify(g, x);
      EXPECT_TRUE(v.equivalent()) << verifier::outcome_name(v.outcome) << ": "
                                  << fmt::format("{}", fmt::join(res.graphs[i].rewrites, "; "));
      ++graphs;
    }
    fired += res.graphs.size() > 1;
  }
  // The generator is not idle: most programs have some rewrite.
  EXPECT_GT(fired, 160);
  EXPECT_GT(graphs, 500);
}

}  // namespace
}  // namespace kiln::algebra
