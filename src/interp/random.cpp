// The seeded input generator of interp.h, specified bit for bit in docs/interpreter.md so that a
// GPU harness can produce the same inputs.
#include <algorithm>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "kiln/interp/float_domain.h"
#include "kiln/interp/interp.h"
#include "kiln/ir/diag.h"

namespace kiln {

namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// splitmix64's output function.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Irwin-Hall normal value (runtime/harness/kiln_rng.h's kiln_rng_normal, docs/interpreter.md).
float normal_value(uint64_t stream, uint64_t e, float sd) {
  const uint64_t ns = mix64(stream ^ 0x6e6f726d616cull);
  int32_t s = 0;
  for (uint64_t j = 0; j < 12; ++j)
    s += static_cast<int32_t>(mix64(ns + kGolden * (12 * e + j + 1)) >> 44);
  s -= 6 << 20;
  if (s == 0) s = 1;
  const float x = static_cast<float>(s) * 0x1p-20f;  // exact
  return x * sd;
}

}  // namespace

HostTensor random_tensor(const TensorDesc& t, uint64_t seed, int input_index, double normal_std,
                         const std::vector<uint8_t>& rows) {
  HostTensor h{t.shape, t.dtype, {}};
  const int64_t n = interp::elements(t.shape), cols = interp::num_cols(t.shape);
  KILN_ASSERT(rows.empty() || static_cast<int64_t>(rows.size()) == interp::num_rows(t.shape),
              "{} row flags for {}", rows.size(), shape_str(t.shape));
  h.data.resize(static_cast<size_t>(n));  // zeros, committed only where written
  const uint64_t stream = mix64(seed + kGolden * (static_cast<uint64_t>(input_index) + 1));
  const float sd = static_cast<float>(normal_std);
  auto value = [&](int64_t e) {
    if (normal_std > 0)
      return interp::round_float_to_dtype(normal_value(stream, static_cast<uint64_t>(e), sd),
                                          t.dtype);
    uint64_t z = mix64(stream + kGolden * (static_cast<uint64_t>(e) + 1));
    // Top 24 bits, centred: an integer in [-2^23, 2^23), never 0.
    int32_t k = static_cast<int32_t>(z >> 40) - (1 << 23);
    if (k == 0) k = 1;
    float x = static_cast<float>(k) * 0x1p-24f;  // exact
    return interp::round_float_to_dtype(x, t.dtype);
  };
  if (rows.empty()) {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 1 << 16),
                      [&](const tbb::blocked_range<int64_t>& r) {
                        for (int64_t e = r.begin(); e < r.end(); ++e) h.data[e] = value(e);
                      });
    return h;
  }
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(cols, 1));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, static_cast<int64_t>(rows.size()), grain),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      for (int64_t row = r.begin(); row < r.end(); ++row)
                        if (rows[row])
                          for (int64_t e = row * cols; e < (row + 1) * cols; ++e)
                            h.data[e] = value(e);
                    });
  return h;
}

std::vector<HostTensor> random_inputs(const KernelGraph& g, uint64_t seed, double normal_std,
                                      const std::vector<std::vector<uint8_t>>* rows) {
  KILN_ASSERT(!rows || rows->size() == g.inputs.size(), "{} row sets for {} inputs", rows->size(),
              g.inputs.size());
  static const std::vector<uint8_t> all;
  std::vector<HostTensor> v;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    v.push_back(random_tensor(g.tensor(g.inputs[i]), seed, static_cast<int>(i), normal_std,
                              rows ? (*rows)[i] : all));
  return v;
}

}  // namespace kiln
