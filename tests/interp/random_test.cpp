// The seeded input generator: determinism, independence of seeds and inputs, the documented
// formula, representability in each dtype, distribution, and never all zeros.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kiln/interp/float_domain.h"
#include "kiln/interp/interp.h"

namespace kiln {
namespace {

// The generator exactly as docs/interpreter.md states it, written independently of random.cpp.
double reference_value(uint64_t seed, int input, uint64_t e, DType t) {
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const uint64_t g = 0x9e3779b97f4a7c15ull;
  uint64_t s = mix(seed + g * (uint64_t(input) + 1));
  uint64_t h = mix(s + g * (e + 1));
  int64_t k = int64_t(h >> 40) - (int64_t(1) << 23);
  if (k == 0) k = 1;
  return interp::round_to_dtype(std::ldexp(double(k), -24), t);
}

TEST(Random, FollowsTheDocumentedFormula) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    HostTensor h = random_tensor({"x", {3, 70}, t}, 42, 2);
    ASSERT_EQ(h.shape, (Shape{3, 70}));
    ASSERT_EQ(h.dtype, t);
    for (size_t e = 0; e < h.data.size(); ++e)
      ASSERT_EQ(h.data[e], reference_value(42, 2, e, t)) << e;
  }
  // Pinned values (also checked by an independent Python transcription of the formula), so
  // that any change of the generator is noticed: GPU harnesses rely on it bit for bit.
  EXPECT_EQ(random_tensor({"x", {4}, DType::F32}, 0, 0).data,
            (HostData{0x1.3836e8p-3, 0x1.9c1518p-3, -0x1.ce56fp-4, 0x1.4055dp-3}));
  EXPECT_EQ(random_tensor({"x", {4}, DType::F16}, 12345, 3).data,
            (HostData{0x1.0f4p-3, 0x1.2fp-4, 0x1.f28p-3, 0x1.bdcp-2}));
  EXPECT_EQ(random_tensor({"x", {4}, DType::BF16}, 12345, 3).data,
            (HostData{0x1.1p-3, 0x1.3p-4, 0x1.f2p-3, 0x1.bep-2}));
}

TEST(Random, DeterministicAndIndependent) {
  TensorDesc t{"x", {64, 32}, DType::F16};
  EXPECT_EQ(random_tensor(t, 7, 0).data, random_tensor(t, 7, 0).data);
  EXPECT_NE(random_tensor(t, 7, 0).data, random_tensor(t, 8, 0).data);
  EXPECT_NE(random_tensor(t, 7, 0).data, random_tensor(t, 7, 1).data);
  // Element e does not depend on the shape: a prefix of a bigger tensor is the same.
  HostTensor big = random_tensor({"x", {64, 64}, DType::F16}, 7, 0);
  HostTensor small = random_tensor(t, 7, 0);
  for (size_t i = 0; i < small.data.size(); ++i) ASSERT_EQ(big.data[i], small.data[i]);
}

TEST(Random, RepresentableInDtypeAndInRange) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    HostTensor h = random_tensor({"x", {100000}, t}, 3, 1);
    for (double v : h.data) {
      ASSERT_EQ(interp::round_to_dtype(v, t), v);
      ASSERT_GE(v, -0.5);
      ASSERT_LE(v, 0.5);  // f16/bf16 rounding may reach 0.5 from below
      ASSERT_NE(v, 0.0);
    }
  }
}

TEST(Random, UniformLooking) {
  HostTensor h = random_tensor({"x", {1 << 20}, DType::F32}, 11, 0);
  double sum = 0, sq = 0;
  std::vector<int> bins(16, 0);
  for (double v : h.data) {
    sum += v;
    sq += v * v;
    bins[static_cast<int>((v + 0.5) * 16)]++;
  }
  const double n = static_cast<double>(h.data.size());
  EXPECT_NEAR(sum / n, 0.0, 2e-3);
  EXPECT_NEAR(sq / n, 1.0 / 12, 1e-3);
  for (int b : bins) EXPECT_NEAR(b, n / 16, n / 16 * 0.02);
  std::vector<double> sorted(h.data.begin(), h.data.end());
  std::sort(sorted.begin(), sorted.end());
  size_t distinct = std::unique(sorted.begin(), sorted.end()) - sorted.begin();
  EXPECT_GT(distinct, h.data.size() * 9 / 10);
}

// Generating some rows only: those rows are the full tensor's, bit for bit (a row does not
// depend on which others are drawn), and the rest are zero.
TEST(Random, RowsOnlyAreTheFullTensorsRows) {
  for (double sd : {0.0, 1.0}) {
    const TensorDesc d{"x", {2, 5, 33}, DType::BF16};
    const HostTensor full = random_tensor(d, 9, 1, sd);
    const std::vector<uint8_t> rows = {1, 0, 0, 1, 0, 1, 0, 0, 0, 1};
    const HostTensor part = random_tensor(d, 9, 1, sd, rows);
    ASSERT_EQ(part.data.size(), full.data.size());
    for (size_t e = 0; e < full.data.size(); ++e)
      ASSERT_EQ(part.data[e], rows[e / 33] ? full.data[e] : 0.0) << e;
  }
}

TEST(Random, NeverAllZeros) {
  // Even a one-element tensor, for many seeds and every dtype.
  for (uint64_t s = 0; s < 2000; ++s)
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      ASSERT_NE(random_tensor({"x", {}, t}, s, 0).data[0], 0.0);
}

TEST(Random, InputsOfAGraph) {
  KernelGraphBuilder b("g");
  int x = b.input("x", {4, 8}, DType::F16);
  int w = b.input("w", {8}, DType::BF16);
  b.output(b.op(OpKind::Mul, {x, w}, {}, "y"));
  KernelGraph g = std::move(b).finish();
  auto in = random_inputs(g, 5);
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].data, random_tensor(g.tensor(x), 5, 0).data);
  EXPECT_EQ(in[1].data, random_tensor(g.tensor(w), 5, 1).data);
  EXPECT_EQ(in[1].dtype, DType::BF16);
}

}  // namespace
}  // namespace kiln
