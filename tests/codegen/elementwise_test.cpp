// The elementwise op table (kiln/ir/elementwise.h) through every layer that reads it: the
// interpreter's float domains, the verifier's field and degree domains (through verify), the
// pruner's abstract expressions, and the emitted CUDA run in the CPU simulator (the float64
// reference expressions: sim_reference_test.cpp). Every op of the table is covered by
// construction (testing::elementwise_cases iterates KILN_OPS).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "all_ops.h"
#include "kiln/interp/float_domain.h"
#include "kiln/search/absexpr.h"
#include "kiln/verifier/verify.h"
#include "sim_runner.h"

namespace kiln {
namespace {

using testing::elementwise_cases;
using testing::OpCase;

// Y = op(X) (unary) or op(X, Z) (binary), X and Z f32 [4, 64].
KernelGraph one_op(OpKind k, const Attrs& a) {
  KernelGraphBuilder b("t");
  const int x = b.input("X", {4, 64}, DType::F32);
  const int z = b.input("Z", {4, 64}, DType::F32);
  std::vector<int> in =
      op_class(k) == OpClass::Binary ? std::vector<int>{x, z} : std::vector<int>{x};
  b.output(b.op(k, in, a, "Y"));
  return std::move(b).finish();
}

// Y = f(X, Z) written with other ops (f names its result Y): what the table says an op equals.
KernelGraph composed(const std::function<int(KernelGraphBuilder&, int, int)>& f) {
  KernelGraphBuilder b("t");
  const int x = b.input("X", {4, 64}, DType::F32);
  const int z = b.input("Z", {4, 64}, DType::F32);
  b.output(f(b, x, z));
  return std::move(b).finish();
}

int op1(KernelGraphBuilder& b, OpKind k, int x, const std::string& name, Attrs a = {}) {
  return b.op(k, {x}, a, name);
}

// Float semantics: float32 and float64 agree, and known values hold (the new ops against libm's
// definition, the others at one point each).
TEST(Elementwise, FloatSemanticsAgreeAcrossPrecisionsAndKnownValues) {
  for (const OpCase& c : elementwise_cases()) {
    SCOPED_TRACE(c.name);
    for (double x : {-2.5, -0.75, 0.3, 1.7}) {
      const double y = op_class(c.kind) == OpClass::Binary ? 0.9 : 0;
      double d = 0;
      float f = 0;
      if (op_class(c.kind) == OpClass::Binary) {
        d = interp::F64Domain::binary(c.kind, x, y);
        f = interp::F32Domain::binary(c.kind, float(x), float(y));
      } else {
        const double arg =
            (c.kind == OpKind::Log || c.kind == OpKind::Sqrt || c.kind == OpKind::Rsqrt)
                ? std::fabs(x)
                : x;
        d = interp::F64Domain::unary(c.kind, c.attrs, arg);
        f = interp::F32Domain::unary(c.kind, c.attrs, float(arg));
      }
      ASSERT_TRUE(std::isfinite(d)) << x;
      EXPECT_NEAR(f, d, 1e-6 * (1 + std::fabs(d))) << x;
    }
  }
  const std::map<OpKind, double> at_half = {
      {OpKind::Softplus, std::log(1 + std::exp(0.5))},
      {OpKind::Sin, std::sin(0.5)},
      {OpKind::Cos, std::cos(0.5)},
      {OpKind::Sigmoid, 1 / (1 + std::exp(-0.5))},
      {OpKind::Silu, 0.5 / (1 + std::exp(-0.5))},
      {OpKind::Rsqrt, 1 / std::sqrt(0.5)},
  };
  for (const auto& [k, want] : at_half)
    EXPECT_NEAR(interp::F64Domain::unary(k, {}, 0.5), want, 1e-15) << op_name(k);
  // softplus's stable form: no overflow where exp(x) would, no loss near 0.
  EXPECT_EQ(interp::F64Domain::unary(OpKind::Softplus, {}, 800.0), 800.0);
  EXPECT_NEAR(interp::F64Domain::unary(OpKind::Softplus, {}, -40.0), std::exp(-40.0), 1e-30);
  EXPECT_EQ(interp::F32Domain::unary(OpKind::Softplus, {}, 100.0f), 100.0f);
}

// The field semantics (through the verifier, which also runs the degree domain for its bound):
// every op is equivalent to itself, different from every other op and attrs variant, and equal
// to what the table composes it from.
TEST(Elementwise, FieldSemanticsSeparateEveryOpAndKeepTheIdentities) {
  const std::vector<OpCase> cases = elementwise_cases();
  verifier::VerifyOptions opt;
  opt.trials = 3;
  for (size_t i = 0; i < cases.size(); ++i) {
    const KernelGraph a = one_op(cases[i].kind, cases[i].attrs);
    EXPECT_TRUE(verifier::verify(a, a, opt).equivalent()) << cases[i].name;
    for (size_t j = i + 1; j < cases.size(); ++j) {
      if (op_class(cases[i].kind) != op_class(cases[j].kind)) continue;
      verifier::Verdict v = verifier::verify(a, one_op(cases[j].kind, cases[j].attrs), opt);
      EXPECT_EQ(v.outcome, verifier::Outcome::Different)
          << cases[i].name << " vs " << cases[j].name << ": " << v.summary();
    }
  }
  struct Identity {
    OpKind op;
    std::function<int(KernelGraphBuilder&, int, int)> as;
  };
  const std::vector<Identity> ids = {
      {OpKind::Rsqrt,
       [](auto& b, int x, int) {
         return op1(b, OpKind::Reciprocal, op1(b, OpKind::Sqrt, x, "s"), "Y");
       }},
      {OpKind::Silu,
       [](auto& b, int x, int) {
         return b.op(OpKind::Mul, {x, op1(b, OpKind::Sigmoid, x, "s")}, {}, "Y");
       }},
      {OpKind::Square,
       [](auto& b, int x, int) {
         return b.op(OpKind::Mul, {x, x}, {}, "Y");
       }},
      {OpKind::Neg,
       [](auto& b, int x, int) {
         Attrs c;
         c.value = -1;
         return b.op(OpKind::Mul, {b.op(OpKind::Constant, {}, c, "c"), x}, {}, "Y");
       }},
      {OpKind::Exp,  // exp(x) = exp(x - z) * exp(z): the field model's homomorphism
       [](auto& b, int x, int z) {
         return b.op(OpKind::Mul,
                     {op1(b, OpKind::Exp, b.op(OpKind::Sub, {x, z}, {}, "d"), "e1"),
                      op1(b, OpKind::Exp, z, "e2")},
                     {}, "Y");
       }},
  };
  for (const Identity& id : ids) {
    verifier::Verdict v = verifier::verify(one_op(id.op, {}), composed(id.as), opt);
    EXPECT_TRUE(v.equivalent()) << op_name(id.op) << ": " << v.summary();
  }
}

// The abstract expressions: distinct for distinct ops and attrs variants, shared where the table
// says two forms are one function (rsqrt = 1 / sqrt, silu = x * sigmoid(x)).
TEST(Elementwise, AbstractExpressionsSeparateEveryOp) {
  using search::AbsExpr;
  auto same = [](AbsExpr a, AbsExpr b) {
    return !search::structural_less(a, b) && !search::structural_less(b, a);
  };
  const std::vector<OpCase> cases = elementwise_cases();
  std::vector<AbsExpr> e;
  for (const OpCase& c : cases) {
    const KernelGraph g = one_op(c.kind, c.attrs);
    e.push_back(search::abstract_of(g, g.outputs[0]));
  }
  for (size_t i = 0; i < cases.size(); ++i)
    for (size_t j = i + 1; j < cases.size(); ++j)
      EXPECT_FALSE(same(e[i], e[j])) << cases[i].name << " vs " << cases[j].name;
  const KernelGraph r = composed([](auto& b, int x, int) {
    return op1(b, OpKind::Reciprocal, op1(b, OpKind::Sqrt, x, "s"), "Y");
  });
  const KernelGraph rs = one_op(OpKind::Rsqrt, {});
  EXPECT_TRUE(same(search::abstract_of(r, r.outputs[0]), search::abstract_of(rs, rs.outputs[0])));
}

// The emitted CUDA of every op (the table's device expressions and runtime functors), run in the
// simulator against the interpreter's float64 evaluation, within the f32 tolerance.
TEST(Elementwise, EmittedKernelsOfEveryOpMatchTheInterpreter) {
  const KernelGraph g = testing::all_ops_spec();
  EXPECT_EQ(testing::check_in_simulator(g, g, 3, "all_ops"), "");
}

// Every op's row is complete: a weight, and a degree rule consistent with its class.
TEST(Elementwise, EveryRowHasItsColumns) {
  for (const OpInfo& info : all_ops()) {
    if (!is_elementwise(info.kind)) {
      EXPECT_EQ(op_weight(info.kind), info.kind == OpKind::Constant ? 0 : 1) << info.name;
      continue;
    }
    EXPECT_GE(op_weight(info.kind), 1) << info.name;
    const DegreeRule r = degree_rule(info.kind);
    const bool binary_rule = r == DegreeRule::AddSub || r == DegreeRule::Mul ||
                             r == DegreeRule::Div || r == DegreeRule::SelectPair;
    EXPECT_EQ(binary_rule, op_class(info.kind) == OpClass::Binary) << info.name;
  }
}

}  // namespace
}  // namespace kiln
