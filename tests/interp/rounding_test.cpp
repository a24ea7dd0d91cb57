// Round-to-nearest-even into f16 and bf16: edge cases, agreement of the exact double path with
// the fast float path, and (where the compiler has _Float16) agreement with the hardware type.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "kiln/interp/float_domain.h"

namespace kiln::interp {
namespace {

const double kInf = std::numeric_limits<double>::infinity();

TEST(Rounding, F16Edges) {
  auto r = [](double x) {
    double v = round_to_dtype(x, DType::F16);
    EXPECT_TRUE(std::isnan(v) || v == round_to_dtype_reference(x, DType::F16)) << x;
    return v;
  };
  EXPECT_EQ(r(1.0), 1.0);
  EXPECT_EQ(r(1.0 + 0x1p-11), 1.0);                      // tie, even is 1
  EXPECT_EQ(r(1.0 + 3 * 0x1p-11), 1.0 + 0x1p-9);         // tie, even is up
  EXPECT_EQ(r(1.0 + 0x1p-11 + 0x1p-30), 1.0 + 0x1p-10);  // just above the tie
  EXPECT_EQ(r(65504.0), 65504.0);                        // max finite
  EXPECT_EQ(r(65519.99), 65504.0);
  EXPECT_EQ(r(65520.0), kInf);  // tie with 65536: even, overflows
  EXPECT_EQ(r(-1e6), -kInf);
  EXPECT_EQ(r(0x1p-24), 0x1p-24);  // least subnormal
  EXPECT_EQ(r(0x1p-25), 0.0);      // tie with 0: even is 0
  EXPECT_EQ(r(0x1p-25 + 0x1p-40), 0x1p-24);
  EXPECT_EQ(r(3 * 0x1p-25), 2 * 0x1p-24);    // tie between 1 and 2 quanta: 2
  EXPECT_EQ(r(0x1p-14 - 0x1p-26), 0x1p-14);  // rounds up into the normals
  EXPECT_TRUE(std::signbit(r(-0x1p-26)));    // underflow keeps the sign
  EXPECT_TRUE(std::isnan(r(NAN)));
  EXPECT_EQ(r(kInf), kInf);
  EXPECT_EQ(r(1e-320), 0.0);  // double subnormal
}

TEST(Rounding, Bf16Edges) {
  auto r = [](double x) {
    double v = round_to_dtype(x, DType::BF16);
    EXPECT_TRUE(std::isnan(v) || v == round_to_dtype_reference(x, DType::BF16)) << x;
    return v;
  };
  EXPECT_EQ(r(1.0 + 0x1p-8), 1.0);  // tie, even
  EXPECT_EQ(r(1.0 + 3 * 0x1p-8), 1.0 + 0x1p-6);
  EXPECT_EQ(r(0x1.fep127), 0x1.fep127);  // max finite
  EXPECT_EQ(r(0x1.ffp127), kInf);        // tie above max: even is 2^128
  EXPECT_EQ(r(0x1.fefffp127), 0x1.fep127);
  EXPECT_EQ(r(0x1p-133), 0x1p-133);  // least subnormal
  EXPECT_EQ(r(0x1p-134), 0.0);
  EXPECT_EQ(r(0x1.8p-134), 0x1p-133);
  // No double rounding: through float, 1 + 2^-8 + 2^-35 would become the tie 1 + 2^-8 and
  // then round down to 1; exactly, it is above the tie and rounds up.
  EXPECT_EQ(r(1.0 + 0x1p-8 + 0x1p-35), 1.0 + 0x1p-7);
  EXPECT_EQ(round_float_to_dtype(static_cast<float>(1.0 + 0x1p-8 + 0x1p-35), DType::BF16), 1.0f);
}

TEST(Rounding, F32IsIeee) {
  EXPECT_EQ(round_to_dtype(1.0 + 0x1p-24, DType::F32), 1.0);
  EXPECT_EQ(round_to_dtype(1.0 + 3 * 0x1p-24, DType::F32), 1.0 + 0x1p-22);
  EXPECT_EQ(round_to_dtype(1e39, DType::F32), kInf);
}

// The float fast path equals the exact path on every float (sampled densely, plus every
// exponent's boundary patterns).
TEST(Rounding, FloatPathMatchesExactPath) {
  std::mt19937 rng(1234);
  auto check = [](uint32_t bits) {
    float f = std::bit_cast<float>(bits);
    for (DType t : {DType::F16, DType::BF16}) {
      double want = round_to_dtype_reference(f, t);
      float got = round_float_to_dtype(f, t);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << std::hex << bits;
      } else {
        ASSERT_EQ(static_cast<double>(got), want) << std::hex << bits << " dtype " << int(t);
      }
    }
  };
  for (int i = 0; i < 2000000; ++i) check(rng());
  for (uint32_t e = 0; e < 512; ++e)
    for (uint32_t low : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x2000u, 0x3000u, 0x7fffu, 0x8000u,
                         0x8001u, 0x18000u, 0x7fffffu})
      check((e << 23) | low);
}

#ifdef __FLT16_MAX__
TEST(Rounding, F16MatchesCompilerHalf) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 1000000; ++i) {
    uint64_t bits = rng();
    // Doubles around the f16 range, including subnormals.
    double x =
        std::ldexp(static_cast<double>(bits >> 11) / 0x1p53, static_cast<int>(bits % 48) - 30);
    if (bits & 1024) x = -x;
    double want = static_cast<double>(static_cast<_Float16>(x));
    ASSERT_EQ(round_to_dtype(x, DType::F16), want) << x;
    ASSERT_EQ(round_to_dtype_reference(x, DType::F16), want) << x;
    float xf = static_cast<float>(x);
    ASSERT_EQ(round_float_to_dtype(xf, DType::F16), static_cast<float>(static_cast<_Float16>(xf)))
        << xf;
  }
}
#endif

}  // namespace
}  // namespace kiln::interp
