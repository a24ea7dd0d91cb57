// Magnitudes at std 1 (magnitude.h): the estimates bound what std-1 normal data reaches, and they
// grow as sums and products do, so that f16 storage is refused exactly where values outgrow it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kiln/ir/magnitude.h"

namespace kiln {
namespace {

Magnitude matmul_of(const Magnitude& a, const Magnitude& b, int64_t k) {
  return op_magnitude(OpKind::MatMul, {}, {a, b}, k, false, false);
}
Magnitude unary(OpKind kind, const Magnitude& a) {
  return op_magnitude(kind, {}, {a}, 1, false, false);
}

TEST(Magnitude, MatmulsGrowAsTheSquareRootOfK) {
  const Magnitude x = Magnitude::input();
  for (int64_t k : {64, 1024, 4096}) {
    const Magnitude h = matmul_of(x, x, k);
    EXPECT_TRUE(h.known);
    EXPECT_EQ(h.mean, 0.0);  // centred
    EXPECT_DOUBLE_EQ(h.rms, std::sqrt(double(k)));
    EXPECT_DOUBLE_EQ(h.bound, 6 * std::sqrt(double(k)));
    EXPECT_FALSE(magnitude_overflows(h, DType::F16)) << k;  // X W itself is safe in f16
  }
  // One term: a product of two normals, whose 1e-9 tail is ~19 sigma^2 (3.2 x 6), not 6 x 6.
  EXPECT_DOUBLE_EQ(matmul_of(x, x, 1).bound, 3.2 * 6.0);
}

TEST(Magnitude, SquaresAndProductsOfMatmulsOutgrowF16) {
  const Magnitude x = Magnitude::input();
  // square(X W): 36 k at std 1, past 65504 from k ~ 1820 (rms_norm(X W) decomposed, k 2048).
  EXPECT_FALSE(magnitude_overflows(unary(OpKind::Square, matmul_of(x, x, 1024)), DType::F16));
  EXPECT_TRUE(magnitude_overflows(unary(OpKind::Square, matmul_of(x, x, 2048)), DType::F16));
  EXPECT_FALSE(magnitude_overflows(unary(OpKind::Square, matmul_of(x, x, 2048)), DType::BF16));
  EXPECT_FALSE(magnitude_overflows(unary(OpKind::Square, matmul_of(x, x, 2048)), DType::F32));
  // mul(x, x) is a square; silu(X W1) * (X W3) at k 4096 too.
  const Magnitude h = matmul_of(x, x, 4096);
  EXPECT_TRUE(
      magnitude_overflows(op_magnitude(OpKind::Mul, {}, {h, h}, 1, true, false), DType::F16));
  EXPECT_TRUE(magnitude_overflows(
      op_magnitude(OpKind::Mul, {}, {unary(OpKind::Silu, h), h}, 1, false, false), DType::F16));
  // A sum of squares grows as n (biased terms), not sqrt(n).
  const Magnitude sq = unary(OpKind::Square, x);
  EXPECT_DOUBLE_EQ(sq.mean, 1.0);  // biased: E x^2 = 1
  const Magnitude ss = op_magnitude(OpKind::Sum, {}, {sq}, 4096, false, false);
  EXPECT_GE(ss.bound, 4096.0);
  const Magnitude ms = op_magnitude(OpKind::Mean, {}, {sq}, 4096, false, false);
  EXPECT_LT(ms.bound, 36.0);
}

TEST(Magnitude, DenominatorsAreUnknownAndBoundingOpsBoundAnything) {
  const Magnitude x = Magnitude::input();
  const Magnitude u = op_magnitude(OpKind::Div, {}, {x, x}, 1, false, false);
  EXPECT_FALSE(u.known);
  EXPECT_FALSE(magnitude_overflows(u, DType::F16));  // unknown is the exp rule's business
  EXPECT_FALSE(unary(OpKind::Reciprocal, x).known);
  EXPECT_FALSE(unary(OpKind::Exp, x).known);
  EXPECT_FALSE(unary(OpKind::Square, u).known);  // unknown spreads
  EXPECT_FALSE(op_magnitude(OpKind::Add, {}, {x, u}, 1, false, false).known);
  EXPECT_DOUBLE_EQ(unary(OpKind::Tanh, u).bound, 1.0);
  EXPECT_DOUBLE_EQ(unary(OpKind::Softmax, u).bound, 1.0);
  EXPECT_DOUBLE_EQ(op_magnitude(OpKind::Exp, {}, {u}, 1, false, true).bound, 1.0);
  EXPECT_DOUBLE_EQ(op_magnitude(OpKind::RmsNorm, {}, {u}, 4096, false, false).bound, 64.0);
  EXPECT_FALSE(op_magnitude(OpKind::RmsNorm, {}, {x, u}, 4096, false, false).known);  // weight
  Attrs both;
  both.min = -2.0;
  both.max = 3.0;
  EXPECT_DOUBLE_EQ(op_magnitude(OpKind::Clamp, both, {u}, 1, false, false).bound, 3.0);
  Attrs low;
  low.min = -2.0;
  EXPECT_FALSE(op_magnitude(OpKind::Clamp, low, {u}, 1, false, false).known);
  Attrs c;
  c.value = -0.125;
  EXPECT_DOUBLE_EQ(op_magnitude(OpKind::Constant, c, {}, 1, false, false).bound, 0.125);
}

// The bounds hold on std-1 normal data: the largest |value| of X W, square(X W), sum(square(X W))
// and (X W1) * (X W3) over a few thousand draws stays below the estimate.
TEST(Magnitude, BoundsHoldOnNormalDraws) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd(0.0, 1.0);
  const int64_t k = 256, n = 64, rows = 64;
  std::vector<double> w1(k * n), w3(k * n), x(k);
  for (double& v : w1) v = nd(rng);
  for (double& v : w3) v = nd(rng);
  const Magnitude in = Magnitude::input();
  const Magnitude h = matmul_of(in, in, k);
  const Magnitude sq = unary(OpKind::Square, h);
  const Magnitude ss = op_magnitude(OpKind::Sum, {}, {sq}, n, false, false);
  const Magnitude pr = op_magnitude(OpKind::Mul, {}, {h, h}, 1, false, false);
  double mh = 0, msq = 0, mss = 0, mpr = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (double& v : x) v = std::clamp(nd(rng), -6.0, 6.0);
    double s = 0;
    for (int64_t j = 0; j < n; ++j) {
      double a = 0, b = 0;
      for (int64_t i = 0; i < k; ++i) {
        a += x[i] * w1[i * n + j];
        b += x[i] * w3[i * n + j];
      }
      mh = std::max(mh, std::fabs(a));
      msq = std::max(msq, a * a);
      s += a * a;
      mpr = std::max(mpr, std::fabs(a * b));
    }
    mss = std::max(mss, s);
  }
  EXPECT_LT(mh, h.bound);
  EXPECT_LT(msq, sq.bound);
  EXPECT_LT(mss, ss.bound);
  EXPECT_LT(mpr, pr.bound);
  // ... and are not wildly loose: within 10x of what 4096 draws reach.
  EXPECT_GT(mh * 10, h.bound);
  EXPECT_GT(msq * 10, sq.bound);
  EXPECT_GT(mpr * 10, pr.bound);
}

}  // namespace
}  // namespace kiln
