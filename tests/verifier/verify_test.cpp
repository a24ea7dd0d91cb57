// verify(): equivalences it must accept, differences it must reject, what a verdict says, and
// the errors it raises on graphs that cannot be compared.
#include <gtest/gtest.h>

#include <cmath>

#include "graphs.h"
#include "kiln/interp/interp.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/verifier/scale.h"
#include "kiln/verifier/verify.h"

namespace kiln::verifier {
namespace {

// A spec from its inputs and nodes (JSON fragments).
KernelGraph spec(const std::string& inputs, const std::string& nodes, const std::string& outputs) {
  return parse_spec(R"({"name": "t", "inputs": [)" + inputs + R"(], "nodes": [)" + nodes +
                    R"(], "outputs": [)" + outputs + "]}");
}

std::string in(const std::string& name, const std::string& shape) {
  return R"({"name": ")" + name + R"(", "shape": )" + shape + R"(, "dtype": "f16"})";
}

::testing::AssertionResult equivalent(const KernelGraph& a, const KernelGraph& b,
                                      const VerifyOptions& opt = {}) {
  Verdict v = verify(a, b, opt);
  if (v.equivalent()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << v.summary();
}

const std::string kX = in("X", "[4, 64]");

TEST(Accepts, MatmulChainsInEitherAssociation) {
  std::string ins = in("A", "[8, 16]") + "," + in("B", "[16, 32]") + "," + in("C", "[32, 4]");
  KernelGraph left = spec(ins,
                          R"({"name": "AB", "op": "matmul", "inputs": ["A", "B"]},
                             {"name": "O", "op": "matmul", "inputs": ["AB", "C"]})",
                          R"("O")");
  KernelGraph right = spec(ins,
                           R"({"name": "BC", "op": "matmul", "inputs": ["B", "C"]},
                              {"name": "O", "op": "matmul", "inputs": ["A", "BC"]})",
                           R"("O")");
  EXPECT_TRUE(equivalent(left, right));
}

TEST(Accepts, RmsNormAndItsExpansion) {
  std::string ins = kX + "," + in("w", "[64]");
  KernelGraph fused =
      spec(ins, R"({"name": "O", "op": "rms_norm", "inputs": ["X", "w"], "attrs": {"eps": 1e-5}})",
           R"("O")");
  KernelGraph rsqrt = spec(ins, R"(
      {"name": "sq", "op": "square", "inputs": ["X"]},
      {"name": "ms", "op": "mean", "inputs": ["sq"], "attrs": {"dim": -1}},
      {"name": "eps", "op": "constant", "attrs": {"value": 1e-5}},
      {"name": "e", "op": "add", "inputs": ["ms", "eps"]},
      {"name": "r", "op": "rsqrt", "inputs": ["e"]},
      {"name": "n", "op": "mul", "inputs": ["X", "r"]},
      {"name": "O", "op": "mul", "inputs": ["n", "w"]})",
                           R"("O")");
  KernelGraph sqrt_div = spec(ins, R"(
      {"name": "sq", "op": "mul", "inputs": ["X", "X"]},
      {"name": "ss", "op": "sum", "inputs": ["sq"], "attrs": {"dim": 1}},
      {"name": "n", "op": "constant", "attrs": {"value": 64}},
      {"name": "ms", "op": "div", "inputs": ["ss", "n"]},
      {"name": "eps", "op": "constant", "attrs": {"value": 1e-5}},
      {"name": "e", "op": "add", "inputs": ["eps", "ms"]},
      {"name": "r", "op": "sqrt", "inputs": ["e"]},
      {"name": "xw", "op": "mul", "inputs": ["w", "X"]},
      {"name": "O", "op": "div", "inputs": ["xw", "r"]})",
                              R"("O")");
  EXPECT_TRUE(equivalent(fused, rsqrt));
  EXPECT_TRUE(equivalent(fused, sqrt_div));
}

TEST(Accepts, SoftmaxWithAndWithoutMaxSubtraction) {
  KernelGraph softmax = spec(
      kX, R"({"name": "O", "op": "softmax", "inputs": ["X"], "attrs": {"dim": -1}})", R"("O")");
  KernelGraph plain = spec(kX, R"(
      {"name": "e", "op": "exp", "inputs": ["X"]},
      {"name": "s", "op": "sum", "inputs": ["e"], "attrs": {"dim": -1}},
      {"name": "O", "op": "div", "inputs": ["e", "s"]})",
                           R"("O")");
  KernelGraph safe = spec(kX, R"(
      {"name": "m", "op": "max", "inputs": ["X"], "attrs": {"dim": -1}},
      {"name": "d", "op": "sub", "inputs": ["X", "m"]},
      {"name": "e", "op": "exp", "inputs": ["d"]},
      {"name": "s", "op": "sum", "inputs": ["e"], "attrs": {"dim": -1}},
      {"name": "O", "op": "div", "inputs": ["e", "s"]})",
                          R"("O")");
  // Subtracting any per-row value, not only the max, gives the same softmax.
  KernelGraph shifted = spec(kX, R"(
      {"name": "m", "op": "sum", "inputs": ["X"], "attrs": {"dim": -1}},
      {"name": "d", "op": "sub", "inputs": ["X", "m"]},
      {"name": "e", "op": "exp", "inputs": ["d"]},
      {"name": "s", "op": "sum", "inputs": ["e"], "attrs": {"dim": -1}},
      {"name": "O", "op": "div", "inputs": ["e", "s"]})",
                             R"("O")");
  EXPECT_TRUE(equivalent(softmax, plain));
  EXPECT_TRUE(equivalent(softmax, safe));
  EXPECT_TRUE(equivalent(plain, safe));
  EXPECT_TRUE(equivalent(safe, shifted));
}

TEST(Accepts, SplitKvFlashDecodingWithRescalingAgainstPlainAttention) {
  KernelGraph ref = testing::attention_spec(2, 8, 16, 256);
  KernelGraph flash = testing::flash_decoding(2, 8, 16, 256, 4, 4, 4);
  EXPECT_TRUE(equivalent(ref, flash));
  VerifyOptions scaled;
  scaled.max_work = 0;
  EXPECT_TRUE(equivalent(ref, flash, scaled));
  // Other splits of the same work.
  EXPECT_TRUE(equivalent(ref, testing::flash_decoding(2, 8, 16, 256, 8, 2, 8)));
  EXPECT_TRUE(equivalent(ref, testing::flash_decoding(2, 8, 16, 256, 2, 16, 1)));
  FloatCheck fc = float_check(ref, flash, 1);
  EXPECT_TRUE(fc.ok) << fc.summary();
}

TEST(Accepts, SiluAsXTimesSigmoid) {
  KernelGraph silu = spec(kX, R"({"name": "O", "op": "silu", "inputs": ["X"]})", R"("O")");
  KernelGraph expanded = spec(kX, R"(
      {"name": "s", "op": "sigmoid", "inputs": ["X"]},
      {"name": "O", "op": "mul", "inputs": ["s", "X"]})",
                              R"("O")");
  EXPECT_TRUE(equivalent(silu, expanded));
}

TEST(Accepts, SumOfProductIsProductWithSum) {
  std::string ins = in("x", "[4, 16]") + "," + in("W", "[16, 32]");
  KernelGraph a = spec(ins, R"(
      {"name": "P", "op": "matmul", "inputs": ["x", "W"]},
      {"name": "O", "op": "sum", "inputs": ["P"], "attrs": {"dim": -1}})",
                       R"("O")");
  KernelGraph b = spec(ins, R"(
      {"name": "s", "op": "sum", "inputs": ["W"], "attrs": {"dim": 1}},
      {"name": "O", "op": "matmul", "inputs": ["x", "s"]})",
                       R"("O")");
  EXPECT_TRUE(equivalent(a, b));
}

TEST(Accepts, ExpOfASumAndMeanOverAnyCount) {
  std::string ins = in("X", "[4, 6]") + "," + in("Y", "[4, 6]");
  KernelGraph a = spec(ins, R"(
      {"name": "s", "op": "add", "inputs": ["X", "Y"]},
      {"name": "e", "op": "exp", "inputs": ["s"]},
      {"name": "O", "op": "mean", "inputs": ["e"], "attrs": {"dim": 1}})",
                       R"("O")");
  KernelGraph b = spec(ins, R"(
      {"name": "ex", "op": "exp", "inputs": ["X"]},
      {"name": "ey", "op": "exp", "inputs": ["Y"]},
      {"name": "p", "op": "mul", "inputs": ["ex", "ey"]},
      {"name": "s", "op": "sum", "inputs": ["p"], "attrs": {"dim": 1}},
      {"name": "n", "op": "constant", "attrs": {"value": 6}},
      {"name": "O", "op": "div", "inputs": ["s", "n"]})",
                       R"("O")");
  EXPECT_TRUE(equivalent(a, b));
}

TEST(Rejects, DifferentEps) {
  std::string ins = kX + "," + in("w", "[64]");
  KernelGraph a =
      spec(ins, R"({"name": "O", "op": "rms_norm", "inputs": ["X", "w"], "attrs": {"eps": 1e-6}})",
           R"("O")");
  KernelGraph b =
      spec(ins, R"({"name": "O", "op": "rms_norm", "inputs": ["X", "w"], "attrs": {"eps": 1e-5}})",
           R"("O")");
  EXPECT_FALSE(equivalent(a, b));
}

TEST(Rejects, DifferentReductionDim) {
  std::string ins = in("X", "[16, 16]");
  KernelGraph a = spec(
      ins, R"({"name": "O", "op": "sum", "inputs": ["X"], "attrs": {"dim": 0, "keepdim": false}})",
      R"("O")");
  KernelGraph b = spec(
      ins, R"({"name": "O", "op": "sum", "inputs": ["X"], "attrs": {"dim": 1, "keepdim": false}})",
      R"("O")");
  EXPECT_FALSE(equivalent(a, b));
}

TEST(Rejects, TransposedOperand) {
  std::string ins = in("A", "[16, 16]") + "," + in("B", "[16, 16]");
  KernelGraph a = spec(ins, R"({"name": "O", "op": "matmul", "inputs": ["A", "B"]})", R"("O")");
  KernelGraph b = spec(ins, R"(
      {"name": "T", "op": "transpose", "inputs": ["A"]},
      {"name": "O", "op": "matmul", "inputs": ["T", "B"]})",
                       R"("O")");
  EXPECT_FALSE(equivalent(a, b));
}

TEST(Rejects, MeanInsteadOfSum) {
  KernelGraph a =
      spec(kX, R"({"name": "O", "op": "sum", "inputs": ["X"], "attrs": {"dim": -1}})", R"("O")");
  KernelGraph b =
      spec(kX, R"({"name": "O", "op": "mean", "inputs": ["X"], "attrs": {"dim": -1}})", R"("O")");
  EXPECT_FALSE(equivalent(a, b));
}

TEST(Rejects, DifferentNonlinearities) {
  auto unary = [](const std::string& op, const std::string& attrs = "{}") {
    return spec(kX,
                R"({"name": "O", "op": ")" + op + R"(", "inputs": ["X"], "attrs": )" + attrs + "}",
                R"("O")");
  };
  EXPECT_FALSE(equivalent(unary("gelu"), unary("gelu", R"({"approximate": "tanh"})")));
  EXPECT_FALSE(equivalent(unary("sqrt"), unary("rsqrt")));
  EXPECT_FALSE(equivalent(unary("sigmoid"), unary("tanh")));
  EXPECT_FALSE(equivalent(unary("leaky_relu"), unary("leaky_relu", R"({"negative_slope": 0.2})")));
  EXPECT_FALSE(equivalent(unary("relu"), unary("neg")));
  EXPECT_TRUE(equivalent(unary("relu"), unary("clamp", R"({"min": 0})")));
}

TEST(Verdict, SaysWhereTheGraphsDiffer) {
  // O = X + Z against X + 2 Z: they differ everywhere, and the verdict names the first element.
  std::string ins = kX + "," + in("Z", "[4, 1]");
  KernelGraph a = spec(ins, R"({"name": "O", "op": "add", "inputs": ["X", "Z"]})", R"("O")");
  KernelGraph b = spec(ins, R"(
      {"name": "two", "op": "constant", "attrs": {"value": 2}},
      {"name": "Z2", "op": "mul", "inputs": ["Z", "two"]},
      {"name": "O", "op": "add", "inputs": ["X", "Z2"]})",
                       R"("O")");
  VerifyOptions opt;
  opt.seed = 1234;
  Verdict v = verify(a, b, opt);
  ASSERT_EQ(v.outcome, Outcome::Different);
  EXPECT_EQ(v.output, 0);
  EXPECT_EQ(v.output_name, "O");
  EXPECT_EQ(v.element, (std::vector<int64_t>{0, 0}));  // the first element that differs
  EXPECT_EQ(v.seed, 1234u);
  EXPECT_EQ(v.failing_seed, trial_seed(1234, 0));
  EXPECT_NE(v.summary().find("NOT equivalent"), std::string::npos);
  // Reproducible: the same seed gives the same verdict.
  Verdict w = verify(a, b, opt);
  EXPECT_EQ(w.element, v.element);
  EXPECT_EQ(w.failing_seed, v.failing_seed);
}

TEST(Verdict, BoundIsBelowTwoToTheMinusSixtyByDefault) {
  KernelGraph ref = testing::attention_spec(2, 8, 16, 64);
  KernelGraph flash = testing::flash_decoding(2, 8, 16, 64, 4, 2, 2);
  Verdict v = verify(ref, flash);
  ASSERT_TRUE(v.equivalent()) << v.summary();
  EXPECT_LT(v.bound, std::ldexp(1.0, -60));
  EXPECT_GT(v.degree, 1u);
  EXPECT_NEAR(std::log2(v.bound), v.trials * std::log2(v.per_trial_bound), 1e-9);
  VerifyOptions one;
  one.trials = 1;
  EXPECT_EQ(verify(ref, flash, one).trials, 1);
}

TEST(Verdict, ADivisionByZeroIsInconclusive) {
  KernelGraph a = spec(kX, R"(
      {"name": "d", "op": "sub", "inputs": ["X", "X"]},
      {"name": "O", "op": "div", "inputs": ["X", "d"]})",
                       R"("O")");
  Verdict v = verify(a, a);
  EXPECT_EQ(v.outcome, Outcome::Inconclusive);
  EXPECT_GT(v.inconclusive_trials, 0);
}

TEST(Scaling, ShrinksUnitsAndMapsIndicesBack) {
  KernelGraph ref = testing::attention_spec(2, 64, 64, 4096);
  KernelGraph flash = testing::flash_decoding(2, 64, 64, 4096, 32, 8, 4);
  ScaledPair sp = scale_pair(ref, flash);
  ASSERT_TRUE(sp.scaled);
  // Rows: unit 32 (the row tile) -> 4; head dim 64 -> 4; keys: unit 128 (4096 / 32) -> 4.
  EXPECT_EQ(sp.a.tensor(sp.a.inputs[0]).shape, (Shape{2, 8, 4}));
  EXPECT_EQ(sp.a.tensor(sp.a.inputs[1]).shape, (Shape{2, 4, 128}));
  EXPECT_EQ(sp.b.tensor(sp.b.outputs[0]).shape, (Shape{2, 8, 4}));
  EXPECT_EQ(sp.full_index(0, {1, 5, 3}), (std::vector<int64_t>{1, 33, 3}));
  EXPECT_TRUE(verify(sp.a, sp.b).equivalent());
}

TEST(Scaling, SampledRowsWhenNothingElseHelps) {
  KernelGraph ref = testing::attention_spec(2, 64, 16, 256);
  KernelGraph flash = testing::flash_decoding(2, 64, 16, 256, 4, 4, 4);
  VerifyOptions opt;
  opt.scale = false;
  opt.sample_work = 1000;
  Verdict v = verify(ref, flash, opt);
  EXPECT_TRUE(v.equivalent()) << v.summary();
  EXPECT_TRUE(v.sampled);
  EXPECT_GT(v.rows_checked, 0);
  EXPECT_LT(v.rows_checked, v.rows_total);
  // A wrong candidate is still caught on sampled rows: here the combine drops the rescale.
  KernelGraph wrong = flash;
  auto bg = std::make_shared<BlockGraph>(*wrong.ops.back().block);
  for (BlockOp& op : bg->ops)
    if (op.name == "acc_o") op.kind = OpKind::AccumSum, op.inputs.resize(1);
  wrong.ops.back().block = bg;
  wrong = rebuild_graph(wrong);
  EXPECT_FALSE(verify(ref, wrong, opt).equivalent());
}

TEST(Scaling, RewritesAHandWrittenMeanConstantWithTheCount) {
  // mean over 4096 spelled as sum * 1/4096 on one side, as mean on the other.
  std::string ins = in("X", "[2, 4096]");
  KernelGraph a =
      spec(ins, R"({"name": "O", "op": "mean", "inputs": ["X"], "attrs": {"dim": 1}})", R"("O")");
  KernelGraph b = spec(ins, R"(
      {"name": "s", "op": "sum", "inputs": ["X"], "attrs": {"dim": 1}},
      {"name": "c", "op": "constant", "attrs": {"value": 0.000244140625}},
      {"name": "O", "op": "mul", "inputs": ["s", "c"]})",
                       R"("O")");
  ScaledPair sp = scale_pair(a, b);
  EXPECT_TRUE(sp.scaled);
  EXPECT_EQ(sp.constants_rewritten, 1);
  VerifyOptions opt;
  opt.max_work = 0;
  EXPECT_TRUE(equivalent(a, b, opt));
  // With 1/2048 it is twice the mean: rejected, scaled or not.
  KernelGraph c = spec(ins, R"(
      {"name": "s", "op": "sum", "inputs": ["X"], "attrs": {"dim": 1}},
      {"name": "c", "op": "constant", "attrs": {"value": 0.00048828125}},
      {"name": "O", "op": "mul", "inputs": ["s", "c"]})",
                       R"("O")");
  EXPECT_FALSE(equivalent(a, c, opt));
  EXPECT_FALSE(equivalent(a, c));
}

TEST(Errors, GraphsWithOtherInterfacesAreUserErrors) {
  KernelGraph a = spec(kX, R"({"name": "O", "op": "neg", "inputs": ["X"]})", R"("O")");
  KernelGraph renamed =
      spec(in("Y", "[4, 64]"), R"({"name": "O", "op": "neg", "inputs": ["Y"]})", R"("O")");
  KernelGraph reshaped =
      spec(in("X", "[4, 32]"), R"({"name": "O", "op": "neg", "inputs": ["X"]})", R"("O")");
  KernelGraph reduced =
      spec(kX, R"({"name": "O", "op": "sum", "inputs": ["X"], "attrs": {"dim": 0}})", R"("O")");
  KernelGraph two = spec(kX, R"({"name": "O", "op": "neg", "inputs": ["X"]})", R"("O", "X")");
  auto code = [&](const KernelGraph& b) {
    try {
      verify(a, b);
    } catch (const UserError& e) {
      return e.code();
    }
    return ErrorCode::Io;
  };
  EXPECT_EQ(code(renamed), ErrorCode::Name);
  EXPECT_EQ(code(reshaped), ErrorCode::Shape);
  EXPECT_EQ(code(reduced), ErrorCode::Shape);
  EXPECT_EQ(code(two), ErrorCode::Shape);
}

TEST(FloatCheck, PassesEquivalentGraphsAndFailsWrongOnes) {
  KernelGraph ref = testing::attention_spec(2, 8, 16, 64);
  FloatCheck ok = float_check(ref, testing::flash_decoding(2, 8, 16, 64, 4, 2, 2), 3);
  EXPECT_TRUE(ok.ok) << ok.summary();
  ASSERT_EQ(ok.outputs.size(), 1u);
  EXPECT_LT(ok.outputs[0].error, 1e-12);
  EXPECT_EQ(ok.outputs[0].tolerance, 5e-3);
  KernelGraph neg = spec(kX, R"({"name": "O", "op": "neg", "inputs": ["X"]})", R"("O")");
  KernelGraph id = spec(kX, R"({"name": "O", "op": "relu", "inputs": ["X"]})", R"("O")");
  EXPECT_FALSE(float_check(neg, id, 3).ok);
  // Sampled rows when large.
  FloatCheckOptions sample;
  sample.max_work = 0;
  sample.rows = 2;
  FloatCheck s = float_check(neg, neg, 3, sample);
  EXPECT_TRUE(s.ok && s.sampled);
  EXPECT_GE(s.outputs[0].rows_checked, 1);  // rows that cost little more than the first
  EXPECT_LE(s.outputs[0].rows_checked, 2);
}

}  // namespace
}  // namespace kiln::verifier
