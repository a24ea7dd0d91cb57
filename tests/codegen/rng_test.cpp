// The harness's generator (runtime/harness/kiln_rng.h, inlined into every harness) is the
// documented one: rounded to each dtype it gives exactly kiln::random_tensor's values, for the
// uniform and for the normal variant (the range rule's std-1 inputs), whose samples are normal
// enough.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../../runtime/harness/kiln_rng.h"
#include "kiln/interp/interp.h"

namespace kiln {
namespace {

TEST(Rng, MatchesInterpreterGeneratorBitForBit) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (int input : {0, 1, 5}) {
      TensorDesc t{"x", {3, 1000}, dt};
      HostTensor h = random_tensor(t, 42, input);
      uint64_t stream = kiln_rng_stream(42, input);
      for (size_t e = 0; e < h.data.size(); ++e) {
        float x = kiln_rng_value(stream, e);
        double want = h.data[e];
        if (dt == DType::F32) {
          ASSERT_EQ(double(x), want) << e;
        } else {
          // want is x rounded to nearest even at the dtype's precision; check it is the nearest.
          double q = dt == DType::F16 ? std::ldexp(1.0, std::max(std::ilogb(x), -14) - 10)
                                      : std::ldexp(1.0, std::ilogb(x) - 7);
          ASSERT_LE(std::fabs(want - x), q / 2) << e;
          ASSERT_EQ(std::fmod(want, q), 0.0) << e;
        }
      }
    }
}

// x rounded to the dtype with round-to-nearest-even, written independently of the interpreter:
// q is the dtype's spacing at |x| (f16 subnormals below 2^-14); every step is exact in double.
double round_rne(float x, DType dt) {
  if (dt == DType::F32) return x;
  const int ex = std::ilogb(x);
  const double q =
      dt == DType::F16 ? std::ldexp(1.0, std::max(ex, -14) - 10) : std::ldexp(1.0, ex - 7);
  const double lo = std::floor(double(x) / q) * q;
  const double d2 = 2 * (double(x) - lo);
  if (d2 < q) return lo;
  if (d2 > q) return lo + q;
  return std::fmod(lo / q, 2.0) == 0 ? lo : lo + q;  // a tie: the even multiple of q
}

TEST(Rng, NormalMatchesInterpreterGeneratorBitForBit) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (uint64_t seed : {0ull, 42ull, 0x8000000000000005ull})
      for (int input : {0, 1, 5})
        for (double sd : {1.0, 0.5, 3.0}) {
          TensorDesc t{"x", {3, 1000}, dt};
          HostTensor h = random_tensor(t, seed, input, sd);
          const uint64_t stream = kiln_rng_stream(seed, input);
          for (size_t e = 0; e < h.data.size(); ++e) {
            const float x = kiln_rng_normal(stream, e, static_cast<float>(sd));
            ASSERT_EQ(round_rne(x, dt), h.data[e])
                << dtype_name(dt) << " seed " << seed << " input " << input << " sd " << sd << " e "
                << e;
          }
        }
}

TEST(Rng, NormalValuesAreStdOneNeverZeroAndPinned) {
  const int n = 100000;
  TensorDesc t{"x", {n}, DType::F32};
  HostTensor h = random_tensor(t, 7, 0, 1.0);
  double sum = 0, sum2 = 0, within1 = 0, maxabs = 0;
  for (double v : h.data) {
    ASSERT_NE(v, 0.0);
    sum += v;
    sum2 += v * v;
    within1 += std::fabs(v) < 1;
    maxabs = std::max(maxabs, std::fabs(v));
  }
  const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  // Standard errors at n = 1e5: 0.0032 for the mean, 0.0022 for the std, 0.0015 for the mass.
  EXPECT_NEAR(mean, 0.0, 0.015);
  EXPECT_NEAR(sd, 1.0, 0.01);
  EXPECT_NEAR(within1 / n, 0.6827, 0.01);
  EXPECT_GT(maxabs, 3.5);  // tails, not a squashed distribution
  EXPECT_LE(maxabs, 6.0);  // Irwin-Hall of 12 is bounded by 6
  // Never 0 in any dtype, and the uniform generator's stream gives other values.
  for (DType dt : {DType::F16, DType::BF16}) {
    HostTensor r = random_tensor({"x", {n}, dt}, 7, 0, 1.0);
    for (double v : r.data) ASSERT_NE(v, 0.0) << dtype_name(dt);
  }
  EXPECT_NE(random_tensor(t, 7, 0).data, h.data);
  // A std of 2 doubles every f32 value exactly (the std is the only rounding).
  HostTensor h2 = random_tensor(t, 7, 0, 2.0);
  for (size_t e = 0; e < 1000; ++e) ASSERT_EQ(h2.data[e], 2 * h.data[e]) << e;
  // Pinned values (also computed by an independent Python transcription of the formula in
  // docs/interpreter.md): the GPU harness relies on them bit for bit.
  EXPECT_EQ(random_tensor({"x", {4}, DType::F32}, 0, 0, 1.0).data,
            (HostData{0x1.d84ccp-2, -0x1.a9096p+0, -0x1.82118p-3, -0x1.7bcfp-4}));
  EXPECT_EQ(random_tensor({"x", {4}, DType::F16}, 12345, 3, 1.0).data,
            (HostData{-0x1.798p+0, 0x1.cbp-1, -0x1.06cp-4, -0x1.81p-2}));
  EXPECT_EQ(random_tensor({"x", {4}, DType::BF16}, 12345, 3, 1.0).data,
            (HostData{-0x1.7ap+0, 0x1.cap-1, -0x1.06p-4, -0x1.82p-2}));
}

}  // namespace
}  // namespace kiln
