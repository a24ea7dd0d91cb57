// The e-graph's invariants (hash-consing, congruence after rebuild, explanations), the runner's
// stop reasons and the extraction's choices.
#include <gtest/gtest.h>

#include "kiln/algebra/algebra.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/verifier/verify.h"

namespace kiln::algebra {
namespace {

ENode op(OpKind k, std::vector<ClassId> kids, DType dt = DType::F32) {
  ENode n;
  n.kind = k;
  n.dtype = dt;
  n.kids = std::move(kids);
  return n;
}

TEST(EGraph, EqualNodesAreOneClass) {
  EGraph g;
  ClassId x = g.add_input(0, {4, 4}, DType::F32, "x");
  ClassId a = g.add(op(OpKind::Exp, {x}), "spec");
  ClassId b = g.add(op(OpKind::Exp, {x}), "spec");
  EXPECT_EQ(a, b);
  EXPECT_EQ(g.num_nodes(), 2u);
  // Another dtype is another value.
  ClassId h = g.add(op(OpKind::Exp, {x}, DType::F16), "spec");
  EXPECT_NE(h, a);
  EXPECT_FALSE(g.merge(a, h, "test")) << "a value stored in two types merged";
}

TEST(EGraph, RebuildRestoresCongruence) {
  EGraph g;
  ClassId x = g.add_input(0, {4, 4}, DType::F32, "x");
  ClassId y = g.add_input(1, {4, 4}, DType::F32, "y");
  ClassId fx = g.add(op(OpKind::Exp, {x}), "spec");
  ClassId fy = g.add(op(OpKind::Exp, {y}), "spec");
  ClassId gfx = g.add(op(OpKind::Neg, {fx}), "spec");
  ClassId gfy = g.add(op(OpKind::Neg, {fy}), "spec");
  ASSERT_NE(g.find(gfx), g.find(gfy));
  EXPECT_TRUE(g.merge(x, y, "x-is-y"));
  EXPECT_EQ(g.rebuild(), 2u);  // exp(x) = exp(y), then neg(exp(x)) = neg(exp(y))
  EXPECT_EQ(g.find(fx), g.find(fy));
  EXPECT_EQ(g.find(gfx), g.find(gfy));
  // Hash-consing sees the merged classes: a new neg(exp(y)) is the same class.
  EXPECT_EQ(g.add(op(OpKind::Neg, {fy}), "spec"), g.find(gfx));
  // Every class's nodes are unique after rebuild.
  EXPECT_EQ(g.cls(gfx).nodes.size(), 1u);
  // The explanation names the rule, then congruence.
  std::vector<std::string> why = g.explain(gfx, gfy);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_NE(why[0].find("congruence"), std::string::npos) << why[0];
  std::vector<std::string> base = g.explain(x, y);
  ASSERT_EQ(base.size(), 1u);
  EXPECT_NE(base[0].find("x-is-y"), std::string::npos) << base[0];
  EXPECT_TRUE(g.explain(x, g.add(op(OpKind::Sqrt, {x}), "spec")).empty());
}

TEST(EGraph, ARightSideThatDoesNotTypeIsRefused) {
  EGraph g;
  ClassId x = g.add_input(0, {4, 3}, DType::F32, "x");
  ClassId y = g.add_input(1, {4, 3}, DType::F32, "y");
  EXPECT_THROW(g.add(op(OpKind::MatMul, {x, y}), "test"), UserError);
  Match m;
  m.target = x;
  m.rhs = {{OpKind::MatMul, DType::F32, {x, y}, {}}};
  m.rule = "test";
  EXPECT_FALSE(apply_match(g, m));
}

TermGraph spec_terms(const char* json) {
  return term_graph(parse_spec(json));
}

TEST(Saturate, StopsForEachLimitAndSaysWhy) {
  const TermGraph t = spec_terms(R"({"name": "c", "inputs": [
      {"name": "X", "shape": [16, 64], "dtype": "f32"}, {"name": "A", "shape": [64, 4], "dtype": "f32"},
      {"name": "B", "shape": [4, 64], "dtype": "f32"}, {"name": "C", "shape": [64, 64], "dtype": "f32"}],
    "nodes": [{"name": "AB", "op": "matmul", "inputs": ["A", "B"]},
              {"name": "ABC", "op": "matmul", "inputs": ["AB", "C"]},
              {"name": "Y", "op": "matmul", "inputs": ["X", "ABC"]}], "outputs": ["Y"]})");
  AlgebraOptions o;
  o.limits.max_iterations = 0;
  EXPECT_EQ(rewrite(t, o).saturation.stop, Stop::IterationLimit);
  o.limits.max_iterations = 50;
  o.limits.max_nodes = 12;
  EXPECT_EQ(rewrite(t, o).saturation.stop, Stop::NodeLimit);
  o.limits.max_nodes = 100000;
  AlgebraResult r = rewrite(t, o);
  EXPECT_EQ(r.saturation.stop, Stop::Saturated) << r.summary();
  // A chain of four has five associations, all found.
  EXPECT_GT(r.saturation.applied["matmul-assoc"], 0);
  o.limits.max_seconds = 0;
  EXPECT_EQ(rewrite(t, o).saturation.stop, Stop::TimeLimit);
  // A graph no rule matches saturates at once.
  AlgebraResult none = rewrite(spec_terms(R"({"name": "e", "inputs": [
      {"name": "X", "shape": [4, 4], "dtype": "f32"}],
    "nodes": [{"name": "Y", "op": "exp", "inputs": ["X"]}], "outputs": ["Y"]})"),
                               {});
  EXPECT_EQ(none.saturation.stop, Stop::Saturated);
  EXPECT_EQ(none.graphs.size(), 1u);
  EXPECT_TRUE(none.graphs[0].as_written);
}

// The cheapest association of X (A B) with a rank-4 A B is (X A) B, and the chain's cheapest
// order is found through several steps; the graph as written stays first.
TEST(Extract, CheapestAssociationAndTheWrittenGraphFirst) {
  const char* text = R"({"name": "lr", "inputs": [
      {"name": "X", "shape": [16, 512], "dtype": "f16"}, {"name": "A", "shape": [512, 4], "dtype": "f16"},
      {"name": "B", "shape": [4, 512], "dtype": "f16"}],
    "nodes": [{"name": "AB", "op": "matmul", "inputs": ["A", "B"]},
              {"name": "Y", "op": "matmul", "inputs": ["X", "AB"]}], "outputs": ["Y"]})";
  const KernelGraph spec = parse_spec(text);
  AlgebraResult r = rewrite(term_graph(spec), {});
  ASSERT_GE(r.graphs.size(), 2u) << r.summary();
  EXPECT_TRUE(r.graphs[0].as_written);
  const TermGraph& best = r.graphs[1].graph;
  EXPECT_LT(r.graphs[1].cost_us, r.graphs[0].cost_us);
  // Y = (X A) B: the output's matmul reads a [16, 4] product.
  const TermNode& y = best.nodes[best.outputs[0]];
  ASSERT_EQ(y.kind, OpKind::MatMul);
  EXPECT_EQ(best.nodes[y.inputs[0]].shape, (Shape{16, 4}));
  EXPECT_EQ(best.nodes[y.inputs[0]].dtype, DType::F32) << "a new intermediate is stored in f32";
  EXPECT_EQ(y.name, "Y");
  EXPECT_EQ(y.dtype, DType::F16);
  ASSERT_FALSE(r.graphs[1].rewrites.empty());
  EXPECT_NE(r.graphs[1].rewrites[0].find("matmul-assoc"), std::string::npos);
  for (const Extracted& x : r.graphs)
    EXPECT_TRUE(verifier::verify(spec, to_kernel_graph(x.graph)).equivalent());
}

// mean(X Wᵀ, -1) (linear_mean's form): the cheapest graph sums W's rows, one pass over W, and
// reads X once: no [m, n] product.
TEST(Extract, MeanOfALinearLayerSumsTheWeightRows) {
  const KernelGraph spec = parse_spec(R"({"name": "lm", "inputs": [
      {"name": "X", "shape": [64, 256], "dtype": "bf16"}, {"name": "W", "shape": [512, 256], "dtype": "bf16"}],
    "nodes": [{"name": "Wt", "op": "transpose", "inputs": ["W"]},
              {"name": "H", "op": "matmul", "inputs": ["X", "Wt"]},
              {"name": "S", "op": "sum", "inputs": ["H"], "attrs": {"dim": -1}},
              {"name": "c", "op": "constant", "attrs": {"value": 0.001953125}},
              {"name": "Y", "op": "mul", "inputs": ["S", "c"]}],
    "outputs": ["Y"]})");
  AlgebraResult r = rewrite(term_graph(spec), {});
  ASSERT_GE(r.graphs.size(), 2u) << r.summary();
  const TermGraph& best = r.graphs[1].graph;
  bool product = false, w_rows = false;
  for (const TermNode& n : best.nodes) {
    product |= n.kind == OpKind::MatMul && n.shape == Shape{64, 512};
    w_rows |= n.kind == OpKind::Sum && n.attrs.dim == 0 && best.nodes[n.inputs[0]].name == "W";
  }
  EXPECT_FALSE(product);
  EXPECT_TRUE(w_rows);
  for (const Extracted& x : r.graphs)
    EXPECT_TRUE(verifier::verify(spec, to_kernel_graph(x.graph)).equivalent()) << x.rewrites[0];
}

}  // namespace
}  // namespace kiln::algebra
