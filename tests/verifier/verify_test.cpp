// verify(): equivalences it must accept, differences it must reject, what a verdict says, and
// the errors it raises on graphs that cannot be compared.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>

#include <fmt/format.h>

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

// The row max of X, and relu of it (the "running max initialised to 0" bug): they differ only on
// rows whose max is negative.
KernelGraph row_max(const std::string& ins) {
  return spec(ins, R"({"name": "O", "op": "max", "inputs": ["X"], "attrs": {"dim": 1}})", R"("O")");
}
KernelGraph relu_row_max(const std::string& ins) {
  return spec(ins, R"(
      {"name": "m", "op": "max", "inputs": ["X"], "attrs": {"dim": 1}},
      {"name": "O", "op": "relu", "inputs": ["m"]})",
              R"("O")");
}

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

// A divisor that the orders with every constant above (or below) the rest make zero on every
// trial, but that is |c| > 0 in the real order: relu(c) + relu(-c). Those two orders leave the
// cycle after two zero divisors each, and the random order decides: the spec is equivalent to
// itself (unbounded: relu's selections matter), and a wrong divisor is still rejected. A
// divisor that is zero under every order stays inconclusive (ADivisionByZeroIsInconclusive).
TEST(Verdict, AnOrderThatZeroesADivisorLeavesTheCycle) {
  const std::string common = R"(
      {"name": "mu", "op": "mean", "inputs": ["X"], "attrs": {"dim": -1}},
      {"name": "C", "op": "sub", "inputs": ["X", "mu"]},
      {"name": "P", "op": "relu", "inputs": ["C"]},
      {"name": "Nn", "op": "neg", "inputs": ["C"]},
      {"name": "Q", "op": "relu", "inputs": ["Nn"]},
      {"name": "A", "op": "add", "inputs": ["P", "Q"]},
      {"name": "ma", "op": "mean", "inputs": ["A"], "attrs": {"dim": -1}},)";
  KernelGraph a = spec(kX, common + R"(
      {"name": "O", "op": "div", "inputs": ["C", "ma"]})",
                       R"("O")");
  Verdict same = verify(a, a);
  ASSERT_EQ(same.outcome, Outcome::Equivalent) << same.summary();
  EXPECT_TRUE(same.selection_dependent);
  EXPECT_EQ(same.dropped_orders, 2);
  EXPECT_GE(same.trials, 6);
  EXPECT_NE(same.summary().find("dropped"), std::string::npos);
  // C / (2 ma) is not C / ma.
  KernelGraph b = spec(kX, common + R"(
      {"name": "m2", "op": "add", "inputs": ["ma", "ma"]},
      {"name": "O", "op": "div", "inputs": ["C", "m2"]})",
                       R"("O")");
  EXPECT_EQ(verify(a, b).outcome, Outcome::Different);
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

// Issue 13, class 1: the scaled instance keeps full-size counts and never reinterprets a
// constant. A constant that equals the *shrunk* count was accepted before.
TEST(Scaling, CountsStayFullSizeAndNoConstantIsReinterpreted) {
  std::string ins = in("X", "[512, 4096]");
  KernelGraph mean =
      spec(ins, R"({"name": "O", "op": "mean", "inputs": ["X"], "attrs": {"dim": 1}})", R"("O")");
  auto scaled_sum = [&](const std::string& op, double c) {
    return spec(ins,
                R"(
      {"name": "s", "op": "sum", "inputs": ["X"], "attrs": {"dim": 1}},
      {"name": "c", "op": "constant", "attrs": {"value": )" +
                    fmt::format("{}", c) + R"(}},
      {"name": "O", "op": ")" +
                    op + R"(", "inputs": ["s", "c"]})",
                R"("O")");
  };
  VerifyOptions forced;
  forced.max_work = 0;  // scale even where it is cheap
  for (const VerifyOptions& opt : {VerifyOptions{}, forced}) {
    // The right constants, either spelling.
    EXPECT_TRUE(equivalent(mean, scaled_sum("mul", 1.0 / 4096), opt));
    EXPECT_TRUE(equivalent(mean, scaled_sum("div", 4096), opt));
    // The shrunk count (4096 -> 4) and a tile's count (128): wrong, and rejected.
    for (double c : {4.0, 128.0, 32.0}) {
      EXPECT_FALSE(verify(mean, scaled_sum("div", c), opt).equivalent()) << c;
      EXPECT_FALSE(verify(mean, scaled_sum("mul", 1 / c), opt).equivalent()) << c;
    }
  }
  ScaledPair sp = scale_pair(mean, scaled_sum("mul", 1.0 / 4096));
  EXPECT_TRUE(sp.scaled);
  // The scaled mean still divides by 4096; the constant is untouched.
  for (const KernelOp& op : sp.a.ops)
    if (op.kind == OpKind::Mean) {
      EXPECT_EQ(op.attrs.count, 4096);
    }
  for (const KernelOp& op : sp.b.ops)
    if (op.kind == OpKind::Constant) {
      EXPECT_EQ(op.attrs.value, 1.0 / 4096);
    }
}

// A mean taken per 128-wide tile (a block-level mean, count 128) and then scaled by 1/32 over
// the 32 tiles is the row mean: accepted, scaled or not (the old constant rewriting rejected it);
// with 1/128 instead of 1/32 it is wrong and rejected.
TEST(Scaling, PerTileMeanThenScaleIsTheRowMean) {
  std::string ins = in("X", "[64, 4096]");
  KernelGraph mean =
      spec(ins, R"({"name": "O", "op": "mean", "inputs": ["X"], "attrs": {"dim": 1}})", R"("O")");
  VerifyOptions forced;
  forced.max_work = 0;
  for (const VerifyOptions& opt : {VerifyOptions{}, forced}) {
    EXPECT_TRUE(equivalent(mean, testing::tiled_mean(64, 4096, 128, 1.0 / 32), opt));
    EXPECT_FALSE(verify(mean, testing::tiled_mean(64, 4096, 128, 1.0 / 128), opt).equivalent());
  }
}

// Issue 13, class 2: selections. max(X) against relu(max(X)) (a running max initialised to 0)
// differs only on rows whose max is negative; it must be rejected on every seed, also on one row
// where a random order almost never puts 0 above 4096 values.
TEST(Selections, AMaxAgainstAConstantIsRejectedOnEverySeed) {
  for (const char* shape : {"[1, 4096]", "[512, 4096]", "[4, 64]"}) {
    std::string ins = in("X", shape);
    KernelGraph mx = row_max(ins), relu = relu_row_max(ins);
    KernelGraph clamp = spec(ins, R"(
      {"name": "m", "op": "max", "inputs": ["X"], "attrs": {"dim": 1}},
      {"name": "O", "op": "clamp", "inputs": ["m"], "attrs": {"max": 0.5}})",
                             R"("O")");
    int rejected = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      VerifyOptions opt;
      opt.seed = seed;
      rejected += !verify(mx, relu, opt).equivalent();
      EXPECT_FALSE(verify(mx, clamp, opt).equivalent()) << shape << " seed " << seed;
    }
    std::printf("max vs relu(max) %s: rejected on %d of 20 seeds\n", shape, rejected);
    EXPECT_EQ(rejected, 20) << shape;
  }
}

// A verdict carries a bound only when no output depends on what a selection selects.
TEST(Selections, UnboundedWhereSelectionsMatterBoundedWhereTheyCancel) {
  KernelGraph relu = spec(kX, R"({"name": "O", "op": "relu", "inputs": ["X"]})", R"("O")");
  KernelGraph maxi = spec(kX, R"(
      {"name": "z", "op": "constant", "attrs": {"value": 0}},
      {"name": "O", "op": "maximum", "inputs": ["X", "z"]})",
                          R"("O")");
  Verdict v = verify(relu, maxi);
  EXPECT_TRUE(v.equivalent());
  EXPECT_FALSE(v.bounded());
  EXPECT_TRUE(v.selection_dependent);
  EXPECT_EQ(v.bound, 1.0);
  EXPECT_GE(v.trials, 6);
  EXPECT_NE(v.summary().find("UNBOUNDED"), std::string::npos);
  // Softmax with a max that cancels, flash decoding's running maxima: bounded.
  KernelGraph sm =
      spec(kX, R"({"name": "O", "op": "softmax", "inputs": ["X"], "attrs": {"dim": 1}})", R"("O")");
  KernelGraph by_hand = spec(kX, R"(
      {"name": "e", "op": "exp", "inputs": ["X"]},
      {"name": "s", "op": "sum", "inputs": ["e"], "attrs": {"dim": 1}},
      {"name": "O", "op": "div", "inputs": ["e", "s"]})",
                             R"("O")");
  Verdict w = verify(sm, by_hand);
  EXPECT_TRUE(w.bounded()) << w.summary();
  EXPECT_GT(w.selections, 0u);
  EXPECT_LT(w.bound, std::pow(2.0, -60));
  Verdict f = verify(testing::attention_spec(2, 8, 16, 256),
                     testing::flash_decoding(2, 8, 16, 256, 4, 4, 4));
  EXPECT_TRUE(f.bounded()) << f.summary();
}

// Issue 13, class 3: the outputs are the kernel's ABI: names, order, shapes and dtypes.
TEST(Errors, OutputsMustAgreeInNameOrderShapeAndDtype) {
  KernelGraph a = spec(kX, R"({"name": "O", "op": "neg", "inputs": ["X"]})", R"("O")");
  auto code = [&](const KernelGraph& x, const KernelGraph& y) {
    try {
      verify(x, y);
    } catch (const UserError& e) {
      return e.code();
    }
    return ErrorCode::Io;
  };
  KernelGraph bf16 = a;
  bf16.tensors[bf16.outputs[0]].dtype = DType::BF16;
  EXPECT_EQ(code(a, bf16), ErrorCode::Shape);
  KernelGraph named = spec(kX, R"({"name": "P", "op": "neg", "inputs": ["X"]})", R"("P")");
  EXPECT_EQ(code(a, named), ErrorCode::Name);
  KernelGraph two = spec(kX, R"({"name": "O", "op": "neg", "inputs": ["X"]},
                                {"name": "P", "op": "exp", "inputs": ["X"]})",
                         R"("O", "P")");
  KernelGraph swapped = spec(kX, R"({"name": "O", "op": "neg", "inputs": ["X"]},
                                    {"name": "P", "op": "exp", "inputs": ["X"]})",
                             R"("P", "O")");
  EXPECT_EQ(code(two, swapped), ErrorCode::Name);
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
  ASSERT_EQ(ok.outputs.size(), 2u);  // uniform and std-1 normal inputs
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
  EXPECT_EQ(s.outputs[0].rows_checked, 3);  // first, last and a random row, always
}

// Issue 13, class 4: the float check predicts the GPU. A softmax written as exp / sum with its
// exponentials stored in f16 is right on small uniform inputs and overflows at std 1 (logits of
// std 8): the check fails it there, and it passes the spec's own softmax.
TEST(FloatCheck, StdOneInputsAndSixteenBitStorage) {
  std::string ins = in("A", "[8, 64]") + ", " + in("B", "[64, 64]");
  KernelGraph sm = spec(ins, R"(
      {"name": "s", "op": "matmul", "inputs": ["A", "B"]},
      {"name": "O", "op": "softmax", "inputs": ["s"], "attrs": {"dim": 1}})",
                        R"("O")");
  KernelGraph naive = spec(ins, R"(
      {"name": "s", "op": "matmul", "inputs": ["A", "B"]},
      {"name": "e", "op": "exp", "inputs": ["s"]},
      {"name": "t", "op": "sum", "inputs": ["e"], "attrs": {"dim": 1}},
      {"name": "O", "op": "div", "inputs": ["e", "t"]})",
                           R"("O")");
  // The parser keeps e and t in f32 (the range rule, store_unbounded_intermediates); a μGraph
  // may store them in f16, which is what this candidate does.
  for (const char* n : {"e", "t"}) naive.tensors[naive.find_tensor(n)].dtype = DType::F16;
  FloatCheckOptions gpu;
  gpu.candidate_f32 = true;
  FloatCheck fc = float_check(sm, naive, 2, gpu);
  EXPECT_FALSE(fc.ok) << fc.summary();
  ASSERT_EQ(fc.outputs.size(), 2u);
  EXPECT_EQ(fc.outputs[0].inputs, "uniform");
  EXPECT_TRUE(fc.outputs[0].ok) << fc.summary();
  EXPECT_EQ(fc.outputs[1].inputs, "normal 1");
  EXPECT_FALSE(fc.outputs[1].ok) << fc.summary();
  EXPECT_NE(fc.failures().find("normal 1"), std::string::npos);
  EXPECT_TRUE(float_check(sm, sm, 2, gpu).ok);
  // In float64 the naive spelling is right: the failure is the storage, as on the GPU.
  EXPECT_TRUE(float_check(sm, naive, 2).ok);
}

// Where the float64 reference itself leaves the f32 range, the range rule exempts the inputs.
TEST(FloatCheck, InputsWhoseReferenceLeavesTheF32RangeAreExempt) {
  std::string ins = R"({"name": "X", "shape": [4, 64], "dtype": "f32"})";
  KernelGraph big = spec(ins, R"(
      {"name": "c", "op": "constant", "attrs": {"value": 100}},
      {"name": "y", "op": "mul", "inputs": ["X", "c"]},
      {"name": "O", "op": "exp", "inputs": ["y"]})",
                         R"("O")");
  FloatCheckOptions gpu;
  gpu.candidate_f32 = true;
  FloatCheck fc = float_check(big, big, 1, gpu);
  EXPECT_TRUE(fc.ok) << fc.summary();
  ASSERT_EQ(fc.exempt.size(), 1u);
  EXPECT_EQ(fc.exempt[0], "normal 1");
  EXPECT_EQ(fc.outputs.size(), 1u);  // the uniform set only
}

// Sampled rows include the first, the last and a random row of every output, so a difference in
// the last grid block is seen; and inputs of one sign show a max initialised to 0.
TEST(FloatCheck, SampledRowsReachTheLastBlockAndSignedInputsReachSelections) {
  std::string ins = in("X", "[1024, 64]");
  KernelGraph neg = spec(ins, R"({"name": "O", "op": "neg", "inputs": ["X"]})", R"("O")");
  FloatCheckOptions sample;
  sample.max_work = 0;
  sample.rows = 3;
  FloatCheck s = float_check(neg, neg, 3, sample);
  EXPECT_TRUE(s.ok && s.sampled);
  EXPECT_GE(s.outputs[0].rows_checked, 3);
  // The first and the last row: the first and the last block along every grid dim of a row.
  for (const FloatCheck::Output& o : s.outputs) {
    EXPECT_EQ(o.rows.front(), 0);
    EXPECT_EQ(o.rows.back(), 1023);
  }
  // max vs relu(max): random signs almost always hide it; negative inputs show it.
  std::string one = in("X", "[64, 256]");
  KernelGraph mx = row_max(one), relu = relu_row_max(one);
  EXPECT_TRUE(float_check(mx, relu, 3).ok);  // why the float check alone is not enough
  FloatCheckOptions signed_in;
  signed_in.signed_inputs = true;
  FloatCheck f = float_check(mx, relu, 3, signed_in);
  EXPECT_FALSE(f.ok);
  EXPECT_NE(f.failures().find("negative"), std::string::npos) << f.summary();
}

// The memory limit against sampled rows: a check of 3 rows of a 2^31-element tensor holds those
// rows only and runs under a small limit; a check whose sampled rows still read a whole huge
// operand (every row of W for any row of X·W) is skipped with the reason, before allocating.
TEST(FloatCheck, SampledRowsFitTheMemoryLimitOrTheCheckIsSkipped) {
  KernelGraph big =
      spec(in("X", "[32768, 65536]"), R"({"name": "O", "op": "exp", "inputs": ["X"]})", R"("O")");
  FloatCheckOptions opt;
  opt.rows = 3;
  opt.max_bytes = int64_t{512} << 20;
  FloatCheck f = float_check(big, big, 5, opt);
  EXPECT_TRUE(f.ok && f.sampled && !f.skipped) << f.summary();
  EXPECT_EQ(f.outputs.at(0).rows_total, 32768);
  struct rusage ru {};
  ASSERT_EQ(getrusage(RUSAGE_SELF, &ru), 0);
  EXPECT_LT(ru.ru_maxrss, 1 << 20) << "peak resident set, KB (a whole tensor: 16 GB in f64)";

  KernelGraph mm = spec(in("X", "[64, 16384]") + ", " + in("W", "[16384, 16384]"),
                        R"({"name": "O", "op": "matmul", "inputs": ["X", "W"]})", R"("O")");
  FloatCheck m = float_check(mm, mm, 5, opt);
  EXPECT_TRUE(m.ok && m.skipped) << m.summary();
  EXPECT_NE(m.memory.find("memory limit"), std::string::npos) << m.summary();
}

// The spec as its own candidate, evaluated as the GPU stores it (every tensor rounded to its
// dtype): with the exponentials of unbounded scores stored in f32 (store_unbounded_intermediates,
// at parse time) it passes on std-1 inputs, where f16 storage gave inf on every input.
TEST(FloatCheck, TheSpecIsACorrectFallbackOnStdOneInputs) {
  const KernelGraph spec =
      load_graph_file(std::string(KILN_SOURCE_DIR) + "/tests/data/trust/rms_qk_attention.json");
  FloatCheckOptions opt;
  opt.candidate_f32 = true;
  opt.rows = 4;
  FloatCheck f = float_check(spec, spec, 7, opt);
  EXPECT_TRUE(f.ok && !f.skipped) << f.summary();
}

}  // namespace
}  // namespace kiln::verifier
