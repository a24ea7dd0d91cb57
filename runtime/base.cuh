// Kiln runtime, base: the macros, integer helpers and PTX address helpers every other runtime
// header uses.
//
// The runtime is header-only and depends only on the CUDA toolkit. The emitter inlines the
// headers' text into each generated .cu, in the order kiln_runtime.cuh includes them; every
// header is guarded, and every include of a sibling header is wrapped in that sibling's guard,
// so the concatenation compiles as is without a runtime/ directory on the include path.
// Targets: sm_80 and newer (cp.async, ldmatrix, bf16 mma); sm_90 adds the bulk-copy engine.
// The headers also compile under NVRTC (for in-process profiling): host-side helpers (launchers,
// planning) sit behind #ifndef __CUDACC_RTC__.
#ifndef KILN_RT_BASE_CUH
#define KILN_RT_BASE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#if defined(__CUDACC_RTC__)
// NVRTC has no <stdint.h>; these are the LP64 types it would give.
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned long long uintptr_t;
#else
#include <stdint.h>
#endif

// +infinity as a float constant, usable in device code and in default member initializers.
#if defined(__CUDACC_RTC__)
#define KILN_INF (__int_as_float(0x7f800000))
#else
#define KILN_INF (__builtin_huge_valf())
#endif

#define KILN_DEV __device__ __forceinline__
#define KILN_HD __host__ __device__ __forceinline__

// True while compiling device code for sm_90 or newer (bulk copies, mbarrier tx-count).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KILN_RT_SM90 1
#else
#define KILN_RT_SM90 0
#endif

namespace kiln {
namespace rt {

KILN_HD constexpr int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}
KILN_HD constexpr int round_up(int a, int b) {
  return ceil_div(a, b) * b;
}
KILN_HD constexpr int min_i(int a, int b) {
  return a < b ? a : b;
}
KILN_HD constexpr int max_i(int a, int b) {
  return a > b ? a : b;
}

// Lane within the warp and warp within the block, for 1-D blocks.
KILN_DEV int lane_id() {
  return threadIdx.x & 31;
}
KILN_DEV int warp_id() {
  return threadIdx.x >> 5;
}

// 32-bit shared-state-space address of a generic pointer into shared memory, for PTX operands.
KILN_DEV uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#ifndef __CUDACC_RTC__
// Raises Kernel's dynamic shared-memory limit to `bytes` on the first call (one flag per kernel;
// one GPU per process assumed), so that later launches can be captured into CUDA graphs: the
// attribute call itself must not run inside a capture.
template <auto Kernel>
inline cudaError_t raise_smem_limit_once(int bytes) {
  static bool done = false;
  if (done) return cudaSuccess;
  const cudaError_t e =
      cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) done = true;
  return e;
}

// cudaSuccess when the current device can run sm_90a code (wgmma, TMA, setmaxnreg), else
// cudaErrorInvalidDeviceFunction: the launchers of those kernels return it instead of launching
// code that would trap. One query per process (one GPU per process assumed).
inline cudaError_t require_sm90() {
  static int major = -1;
  if (major < 0) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e != cudaSuccess) {
      major = -1;
      return e;
    }
  }
  return major >= 9 ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_BASE_CUH
