// Kiln runtime, accum: the accumulators of block graphs (accum_sum, accum_max, accum_rescale),
// held in float32 registers across the iterations of a block graph's for-loop.
//
// accum_rescale is the online-softmax form. Each iteration brings a tile value v that was
// computed relative to the tile's own max m (for softmax·V: v = sum_j exp(x_j - m) * V_j, or the
// denominator sum_j exp(x_j - m)); the accumulator keeps the running max M and
//   M_new = max(M_old, m),   acc = acc * exp(M_old - M_new) + v * exp(m - M_new).
// Any M works mathematically (it cancels between numerator and denominator), which is why the
// verifier can treat it as an arbitrary value; the max keeps exp from overflowing. A -inf max
// (nothing accumulated yet, or a fully masked tile) contributes a factor of exactly 0, never
// exp(-inf - -inf) = NaN. Partial states from different blocks (flash-decoding splits) merge with
// the same rule, so the merge order does not matter up to rounding.
#ifndef KILN_RT_ACCUM_CUH
#define KILN_RT_ACCUM_CUH

#ifndef KILN_RT_BASE_CUH
#include "base.cuh"
#endif

namespace kiln {
namespace rt {

struct AccumSum {
  float acc = 0.0f;
  KILN_DEV void update(float v) { acc += v; }
  KILN_DEV void merge(const AccumSum& o) { acc += o.acc; }
};

struct AccumMax {
  float acc = -KILN_INF;
  KILN_DEV void update(float v) { acc = fmaxf(acc, v); }
  KILN_DEV void merge(const AccumMax& o) { acc = fmaxf(acc, o.acc); }
};

// exp(m_from - m_to) with m_to >= m_from, and 0 when m_from is -inf. ex2.approx of a
// non-positive argument: relative error about |m_from - m_to| * 2^-22, far under f32 tolerance.
KILN_DEV float rescale_factor(float m_from, float m_to) {
  return m_from == -KILN_INF ? 0.0f : __expf(m_from - m_to);
}

// Rescale coefficients for one online-softmax step: on return m_run is max(m_run, m_tile),
// a = exp(m_old - m_run) multiplies the old accumulator(s), b = exp(m_tile - m_run) the tile's.
KILN_DEV void online_rescale(float& m_run, float m_tile, float& a, float& b) {
  const float m_new = fmaxf(m_run, m_tile);
  a = rescale_factor(m_run, m_new);
  b = rescale_factor(m_tile, m_new);
  m_run = m_new;
}

// N accumulators that share one running max (a row of softmax·V, or N = 1 for a denominator).
template <int N>
struct AccumRescale {
  float m = -KILN_INF;
  float acc[N];

  KILN_DEV AccumRescale() {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = 0.0f;
  }
  // Adds a tile's values v[0..N), computed relative to the tile's max m_tile.
  KILN_DEV void update(const float* v, float m_tile) {
    float a, b;
    online_rescale(m, m_tile, a, b);
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = acc[i] * a + v[i] * b;
  }
  KILN_DEV void update(float v, float m_tile) {
    static_assert(N == 1, "scalar update needs N == 1");
    update(&v, m_tile);
  }
  // Merges another partial state (another split of the same row).
  KILN_DEV void merge(const AccumRescale& o) {
    update(o.acc, o.m);
  }
};

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_ACCUM_CUH
