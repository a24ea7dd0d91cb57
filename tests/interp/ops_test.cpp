// Hand-computed values for every op class, evaluated as one-op kernel graphs in float64, and the
// interpreter's input checking and precision semantics.
#include <cmath>

#include "helpers.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"

namespace kiln {
namespace {

using testing::eval1;
using testing::expect_near;
using testing::host;

TEST(Ops, MatmulTwoByThreeTimesThreeByTwo) {
  auto y = eval1(OpKind::MatMul,
                 {host({2, 3}, {1, 2, 3, 4, 5, 6}), host({3, 2}, {7, 8, 9, 10, 11, 12})});
  expect_near(y, {2, 2}, {58, 64, 139, 154});
}

TEST(Ops, MatmulBroadcastsBatchDims) {
  // B has no batch dims: shared by both batches of A.
  auto y = eval1(OpKind::MatMul, {host({2, 1, 2}, {1, 2, 3, 4}), host({2, 1}, {5, 6})});
  expect_near(y, {2, 1, 1}, {17, 39});
  // A's batch dim of 1 stretches over B's three.
  y = eval1(OpKind::MatMul, {host({1, 1, 2}, {1, 2}), host({3, 2, 1}, {1, 1, 2, 0, 0, 3})});
  expect_near(y, {3, 1, 1}, {3, 2, 6});
}

TEST(Ops, TransposeDefaultAndPerm) {
  auto y = eval1(OpKind::Transpose, {host({2, 3}, {0, 1, 2, 3, 4, 5})});
  expect_near(y, {3, 2}, {0, 3, 1, 4, 2, 5});
  Attrs a;
  a.perm = {2, 0, 1};  // out[i][j][0] = x[j][0][i]
  y = eval1(OpKind::Transpose, {host({2, 1, 3}, {0, 1, 2, 3, 4, 5})}, a);
  expect_near(y, {3, 2, 1}, {0, 3, 1, 4, 2, 5});
}

TEST(Ops, BinaryBroadcast) {
  auto y = eval1(OpKind::Add, {host({2, 3}, {1, 2, 3, 4, 5, 6}), host({3}, {10, 20, 30})});
  expect_near(y, {2, 3}, {11, 22, 33, 14, 25, 36});
  y = eval1(OpKind::Mul, {host({2, 1}, {2, 3}), host({1, 3}, {1, 10, 100})});
  expect_near(y, {2, 3}, {2, 20, 200, 3, 30, 300});
  y = eval1(OpKind::Sub, {host({3}, {1, 2, 3}), host({2, 1}, {1, 2})});
  expect_near(y, {2, 3}, {0, 1, 2, -1, 0, 1});
  y = eval1(OpKind::Div, {host({2}, {1, 3}), host({}, {4})});
  expect_near(y, {2}, {0.25, 0.75});
  y = eval1(OpKind::Maximum, {host({3}, {1, 5, -2}), host({3}, {2, 4, -3})});
  expect_near(y, {3}, {2, 5, -2});
  y = eval1(OpKind::Minimum, {host({3}, {1, 5, -2}), host({1}, {0})});
  expect_near(y, {3}, {0, 0, -2});
}

TEST(Ops, ReductionsWithAndWithoutKeepdim) {
  const auto x = host({2, 3}, {1, 5, 3, 4, 2, 6});
  Attrs a;
  a.dim = 1;
  expect_near(eval1(OpKind::Sum, {x}, a), {2, 1}, {9, 12});
  expect_near(eval1(OpKind::Mean, {x}, a), {2, 1}, {3, 4});
  a.dim = 0;
  a.keepdim = false;
  expect_near(eval1(OpKind::Sum, {x}, a), {3}, {5, 7, 9});
  expect_near(eval1(OpKind::Max, {x}, a), {3}, {4, 5, 6});
  a.dim = -1;
  expect_near(eval1(OpKind::Max, {x}, a), {2}, {5, 6});
  a.keepdim = true;
  expect_near(eval1(OpKind::Max, {x}, a), {2, 1}, {5, 6});
  // A middle dim of a rank-3 tensor.
  a.dim = 1;
  expect_near(eval1(OpKind::Sum, {host({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})}, a), {2, 1, 2},
              {4, 6, 12, 14});
  a.keepdim = false;
  expect_near(eval1(OpKind::Mean, {host({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8})}, a), {2, 2},
              {2, 3, 6, 7});
}

TEST(Ops, SoftmaxLastAndOtherDim) {
  // The logs are rounded to f32 as inputs: hence the looser tolerance.
  auto y = eval1(OpKind::Softmax, {host({1, 3}, {0, std::log(2.0), std::log(4.0)})});
  expect_near(y, {1, 3}, {1.0 / 7, 2.0 / 7, 4.0 / 7}, 1e-7);
  Attrs a;
  a.dim = 0;
  y = eval1(OpKind::Softmax, {host({2, 2}, {0, 5, std::log(3.0), 5})}, a);
  expect_near(y, {2, 2}, {0.25, 0.5, 0.75, 0.5}, 1e-7);
  // Large values do not overflow: the max is subtracted.
  y = eval1(OpKind::Softmax, {host({2}, {1000, 1000})});
  expect_near(y, {2}, {0.5, 0.5});
}

TEST(Ops, RmsNormWithAndWithoutWeight) {
  Attrs a;
  a.eps = 0;
  const double r = std::sqrt(12.5);  // mean of 3^2 and 4^2
  auto y = eval1(OpKind::RmsNorm, {host({1, 2}, {3, 4})}, a);
  expect_near(y, {1, 2}, {3 / r, 4 / r});
  y = eval1(OpKind::RmsNorm, {host({2, 2}, {3, 4, 0, 2}), host({2}, {2, 0.5})}, a);
  expect_near(y, {2, 2}, {6 / r, 2 / r, 0, 0.5 * 2 / std::sqrt(2.0)});
  // eps defaults to 1e-6 and is added under the root.
  y = eval1(OpKind::RmsNorm, {host({2}, {0, 0})});
  expect_near(y, {2}, {0, 0});
  y = eval1(OpKind::RmsNorm, {host({1}, {0x1p-10})});
  expect_near(y, {1}, {0x1p-10 / std::sqrt(0x1p-20 + 1e-6)});
}

TEST(Ops, Unaries) {
  auto u = [](OpKind k, double x, Attrs a = {}) { return eval1(k, {host({1}, {x})}, a).data[0]; };
  EXPECT_EQ(u(OpKind::Neg, 2), -2);
  EXPECT_EQ(u(OpKind::Exp, 0), 1);
  EXPECT_EQ(u(OpKind::Log, 1), 0);
  EXPECT_EQ(u(OpKind::Sqrt, 4), 2);
  EXPECT_EQ(u(OpKind::Rsqrt, 4), 0.5);
  EXPECT_EQ(u(OpKind::Reciprocal, 4), 0.25);
  EXPECT_EQ(u(OpKind::Square, -3), 9);
  EXPECT_EQ(u(OpKind::Tanh, 0), 0);
  EXPECT_EQ(u(OpKind::Sigmoid, 0), 0.5);
  EXPECT_NEAR(u(OpKind::Silu, 1), 0.7310585786300049, 1e-15);
  EXPECT_EQ(u(OpKind::Relu, -1), 0);
  EXPECT_EQ(u(OpKind::Relu, 1.5), 1.5);
  Attrs leaky;
  leaky.negative_slope = 0.125;
  EXPECT_EQ(u(OpKind::LeakyRelu, -2, leaky), -0.25);
  EXPECT_EQ(u(OpKind::LeakyRelu, 3, leaky), 3);
  EXPECT_NEAR(u(OpKind::LeakyRelu, -1), -0.01, 1e-17);  // default slope
}

TEST(Ops, GeluBothForms) {
  auto g = [](double x, GeluApprox ap) {
    Attrs a;
    a.approximate = ap;
    return eval1(OpKind::Gelu, {host({1}, {x})}, a).data[0];
  };
  // Reference values of x * Phi(x) and of the tanh approximation (as torch computes them).
  EXPECT_NEAR(g(1, GeluApprox::None), 0.8413447460685429, 1e-15);
  EXPECT_NEAR(g(-1, GeluApprox::None), -0.15865525393145707, 1e-15);
  EXPECT_NEAR(g(1, GeluApprox::Tanh), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(g(-1, GeluApprox::Tanh), -0.15880800939172324, 1e-15);
  EXPECT_EQ(g(0, GeluApprox::Tanh), 0);
}

TEST(Ops, ClampWithOneOrBothBounds) {
  const auto x = host({4}, {-2, 0.5, 3, 1});
  Attrs lo;
  lo.min = 0;
  expect_near(eval1(OpKind::Clamp, {x}, lo), {4}, {0, 0.5, 3, 1});
  Attrs hi;
  hi.max = 1;
  expect_near(eval1(OpKind::Clamp, {x}, hi), {4}, {-2, 0.5, 1, 1});
  Attrs both = lo;
  both.max = 0.75;
  expect_near(eval1(OpKind::Clamp, {x}, both), {4}, {0, 0.5, 0.75, 0.75});
}

TEST(Ops, ConstantsBroadcastAndKeepF16Dtype) {
  KernelGraphBuilder b("consts");
  int x = b.input("x", {2}, DType::F16);
  Attrs q, one;
  q.value = 0.25;
  one.value = 1;
  int cq = b.op(OpKind::Constant, {}, q, "q");
  int c1 = b.op(OpKind::Constant, {}, one, "one");
  int y = b.op(OpKind::Add, {b.op(OpKind::Mul, {x, cq}, {}, "xq"), c1}, {}, "y");
  b.output(y);
  b.output(cq);  // a constant output is a scalar
  KernelGraph g = std::move(b).finish();
  EXPECT_EQ(g.tensor(y).dtype, DType::F16);
  auto out = evaluate(g, {host({2}, {4, -8}, DType::F16)});
  expect_near(out[0], {2}, {2, -1});
  expect_near(out[1], {}, {0.25});
}

TEST(Ops, F32RoundsStoredTensorsF64DoesNot) {
  KernelGraphBuilder b("round");
  int x = b.input("x", {1}, DType::F16);
  int e = b.input("e", {1}, DType::F32);
  int y = b.op(OpKind::Add, {x, e}, {}, "y");  // f16 result
  b.output(y);
  KernelGraph g = std::move(b).finish();
  std::vector<HostTensor> in = {host({1}, {1}, DType::F16), host({1}, {0x1p-11}, DType::F32)};
  // 1 + 2^-11 is halfway between two f16 values; the tie goes to the even one, 1.
  EXPECT_EQ(evaluate(g, in, {Precision::F32, 0})[0].data[0], 1.0);
  EXPECT_EQ(evaluate(g, in, {Precision::F64, 0})[0].data[0], 1.0 + 0x1p-11);
}

TEST(Ops, InputsAreRoundedToTheirDtype) {
  auto y = eval1(OpKind::Neg, {host({1}, {1.0 + 0x1p-12}, DType::F16)});
  EXPECT_EQ(y.data[0], -1.0);
}

TEST(Ops, OutputsMayRepeatOrNameAnInput) {
  KernelGraphBuilder b("outs");
  int x = b.input("x", {2}, DType::F32);
  int y = b.op(OpKind::Neg, {x}, {}, "y");
  b.output(y);
  b.output(x);
  b.output(y);
  auto out = evaluate(std::move(b).finish(), {host({2}, {1, 2})});
  ASSERT_EQ(out.size(), 3u);
  expect_near(out[0], {2}, {-1, -2});
  expect_near(out[1], {2}, {1, 2});
  expect_near(out[2], {2}, {-1, -2});
}

ErrorCode error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.code();
  }
  ADD_FAILURE() << "no UserError";
  return ErrorCode::Unsupported;
}

TEST(Ops, MismatchedInputsAreShapeErrors) {
  KernelGraph g = testing::one_op_graph(OpKind::Neg, {host({2, 2}, {}, DType::F16)});
  EXPECT_EQ(error_of([&] { evaluate(g, {}); }), ErrorCode::Shape);
  EXPECT_EQ(error_of([&] {
              evaluate(g, {host({4}, {1, 2, 3, 4}, DType::F16)});
            }),
            ErrorCode::Shape);
  EXPECT_EQ(error_of([&] {
              evaluate(g, {host({2, 2}, {1, 2, 3, 4}, DType::BF16)});
            }),
            ErrorCode::Shape);
  EXPECT_EQ(error_of([&] {
              evaluate(g, {host({2, 2}, {1, 2, 3}, DType::F16)});
            }),
            ErrorCode::Shape);
}

TEST(Ops, RelativeL2AndTolerances) {
  EXPECT_EQ(relative_l2_error(host({2}, {3, 4}), host({2}, {3, 4})), 0);
  EXPECT_NEAR(relative_l2_error(host({2}, {3, 5}), host({2}, {3, 4})), 0.2, 1e-15);
  EXPECT_EQ(relative_l2_error(host({2}, {3, 4}), host({2}, {0, 0})), 5);  // ref all zero
  EXPECT_TRUE(std::isinf(relative_l2_error(host({2}, {NAN, 4}), host({2}, {3, 4}))));
  EXPECT_TRUE(std::isinf(relative_l2_error(host({2}, {3, 4}), host({1, 2}, {3, 4}))));
  EXPECT_EQ(spec_tolerance(DType::F32), 1e-4);
  EXPECT_EQ(spec_tolerance(DType::F16), 5e-3);
  EXPECT_EQ(spec_tolerance(DType::BF16), 2e-2);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// layer_norm (a composite the spec parser writes as primitive nodes) means what it says: per row
// of the last dim, (x - mean) / sqrt(var + eps) * w + b with the biased variance, computed here
// directly in float64; without bias, and without weight and bias.
TEST(Ops, LayerNormCompositeMatchesItsDefinition) {
  for (int nin : {1, 2, 3}) {
    const char* ins[] = {R"(["X"])", R"(["X", "w"])", R"(["X", "w", "b"])"};
    KernelGraph g = parse_spec(std::string(R"({"name": "ln", "inputs": [
        {"name": "X", "shape": [3, 5, 16], "dtype": "f32"},
        {"name": "w", "shape": [16], "dtype": "f32"}, {"name": "b", "shape": [16], "dtype": "f32"}],
        "nodes": [{"name": "Y", "op": "layer_norm", "inputs": )") +
                               ins[nin - 1] + R"(, "attrs": {"eps": 0.25}}], "outputs": ["Y"]})");
    const std::vector<HostTensor> in = random_inputs(g, 3, 1.0);
    const HostTensor y = evaluate(g, in)[0];
    ASSERT_EQ(y.shape, (Shape{3, 5, 16}));
    for (int r = 0; r < 15; ++r) {
      const double* x = in[0].data.data() + r * 16;
      double mean = 0, var = 0;
      for (int j = 0; j < 16; ++j) mean += x[j] / 16;
      for (int j = 0; j < 16; ++j) var += (x[j] - mean) * (x[j] - mean) / 16;
      for (int j = 0; j < 16; ++j) {
        double want = (x[j] - mean) / std::sqrt(var + 0.25);
        if (nin >= 2) want *= in[1].data[j];
        if (nin == 3) want += in[2].data[j];
        EXPECT_NEAR(y.data[r * 16 + j], want, 1e-12) << nin << " inputs, row " << r << " col " << j;
      }
    }
  }
}

}  // namespace
}  // namespace kiln
