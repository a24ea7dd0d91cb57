// Kiln runtime, reduce: warp and block reductions (sum, max) of float32 values.
//
// Warp reductions are xor butterflies over shfl.sync, so every participating lane ends with the
// result and no shared memory is touched. Block reductions reduce per warp, exchange one value
// per warp through a caller-provided scratch of 32 floats, and reduce again in every warp, so
// the result reaches every thread after two barriers.
#ifndef KILN_RT_REDUCE_CUH
#define KILN_RT_REDUCE_CUH

#ifndef KILN_RT_BASE_CUH
#include "base.cuh"
#endif

namespace kiln {
namespace rt {

struct SumOp {
  KILN_DEV float operator()(float a, float b) const { return a + b; }
  KILN_DEV static float identity() { return 0.0f; }
};
struct MaxOp {
  KILN_DEV float operator()(float a, float b) const { return fmaxf(a, b); }
  KILN_DEV static float identity() { return -KILN_INF; }
};

// Reduces v over aligned groups of WIDTH consecutive lanes (WIDTH a power of two <= 32); every
// lane gets its group's result. All 32 lanes of the warp must call it (full shuffle mask).
// WIDTH = 4 reduces over an mma quad (the lanes that share a fragment row).
template <int WIDTH = 32, class Op>
KILN_DEV float warp_reduce(float v, Op op) {
  static_assert(WIDTH >= 1 && WIDTH <= 32 && (WIDTH & (WIDTH - 1)) == 0, "WIDTH: power of two");
#pragma unroll
  for (int o = WIDTH / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <int WIDTH = 32>
KILN_DEV float warp_sum(float v) {
  return warp_reduce<WIDTH>(v, SumOp());
}
template <int WIDTH = 32>
KILN_DEV float warp_max(float v) {
  return warp_reduce<WIDTH>(v, MaxOp());
}

// Reduces v over the whole block; every thread gets the result. Every thread of the block must
// call it (it has barriers), the block's thread count must be a multiple of 32 (at most 1024),
// and scratch must point to at least 32 floats of shared memory. Safe to call back to back with
// the same scratch: the leading barrier keeps a call from overwriting values a slow warp of the
// previous call is still reading.
template <class Op>
KILN_DEV float block_reduce(float v, Op op, float* scratch) {
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int nwarps = (blockDim.x * blockDim.y * blockDim.z) >> 5;
  v = warp_reduce<32>(v, op);
  __syncthreads();
  if ((tid & 31) == 0) scratch[tid >> 5] = v;
  __syncthreads();
  float r = (tid & 31) < nwarps ? scratch[tid & 31] : Op::identity();
  return warp_reduce<32>(r, op);
}
KILN_DEV float block_sum(float v, float* scratch) {
  return block_reduce(v, SumOp(), scratch);
}
KILN_DEV float block_max(float v, float* scratch) {
  return block_reduce(v, MaxOp(), scratch);
}

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_REDUCE_CUH
