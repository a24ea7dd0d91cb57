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
#include <stdlib.h>
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

// Attribute a of the current device into v.
inline cudaError_t device_attribute(cudaDeviceAttr a, int& v) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&v, a, dev);
  return e;
}

// cudaSuccess when the current device can run sm_90a code (wgmma, TMA, setmaxnreg), else
// cudaErrorInvalidDeviceFunction: the launchers of those kernels return it instead of launching
// code that would trap. One query per process (one GPU per process assumed).
inline cudaError_t require_sm90() {
  static int major = -1;
  if (major < 0) {
    const cudaError_t e = device_attribute(cudaDevAttrComputeCapabilityMajor, major);
    if (e != cudaSuccess) {
      major = -1;
      return e;
    }
  }
  return major >= 9 ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}
#endif  // __CUDACC_RTC__

// ---- Timing probes (diagnostics; compiled out unless KILN_PROBE is defined) ------------------
// KILN_PROBE_AT(ev) records the global timer (ns) and the SM's cycle counter at event ev (0 ..
// 31) of the calling CTA, overwriting the previous launch's values; the harness built with
// -DKILN_PROBE prints, after its timing loop, each event's spread over the CTAs of the last
// launch (kiln_probe_report). For finding where a latency-bound kernel's time goes, not for
// measuring it: the probes' stores cost a few cycles each. Events are the kernel's to number.
#ifdef KILN_PROBE
#define KILN_PROBE_CTAS 4096
__device__ unsigned long long kiln_probe_ns[KILN_PROBE_CTAS][32];
__device__ long long kiln_probe_clk[KILN_PROBE_CTAS][32];
__device__ __forceinline__ void kiln_probe_at(int ev) {
  const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (cta >= KILN_PROBE_CTAS || ev < 0 || ev >= 32) return;
  unsigned long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  kiln_probe_ns[cta][ev] = ns;
  kiln_probe_clk[cta][ev] = clock64();
}
#define KILN_PROBE_AT(ev) ::kiln::rt::kiln_probe_at(ev)
#else
#define KILN_PROBE_AT(ev) \
  do {                    \
  } while (0)
#endif

// ---- Programmatic dependent launch ---------------------------------------------------------------
// Every kernel Kiln launches starts with pdl_entry(), and every launch goes through launch()
// below, which on sm_90 and newer allows programmatic stream serialization: the kernel may be
// launched, and its blocks scheduled, before the kernel ahead of it in the stream (ours or the
// caller's) has finished. pdl_entry() waits until that kernel has completed and its memory is
// visible, before this kernel's first load or store; so the order of every read and write is the
// stream's, whatever the kernel before. A no-op for a kernel launched without the attribute and
// below sm_90. Every thread calls it, before anything else.
// early_trigger also lets the next kernel launch at once, rather than when this one ends (its
// own pdl_entry() still waits for all of this one): only for kernels of a few small CTAs. H100
// (session 13, graphs of 50 calls; µs without PDL / PDL triggered at the end / at the start):
// skinny_gemm N 2304 m 16 (TMA GEMV) 28.0 / 27.8 / 34.4, swiglu m 16 129.4 / 129.0 / 143.3,
// linear_mean m 16 14.9 / 14.3 / 16.5, lora 6.9 / 6.7 / 7.9, gqa bs 1 8.2 / 7.9 / 8.5: next
// kernels launched early hold SMs the big kernels need; double_norm n 1 (a row chain, one CTA)
// 2.74 / 2.51 / 2.40, and chains of 1 / 2 / 3 dependent double_norm kernels 2.35 / 4.97 / 7.42
// without PDL, 2.05 / 4.08 / 6.07 triggered at the start (tests/gpu/row_norm_sweep.cu --pdl).
KILN_DEV void pdl_entry(bool early_trigger = false) {
#if KILN_RT_SM90
  if (early_trigger) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#else
  (void)early_trigger;
#endif
}

#ifndef __CUDACC_RTC__
// Whether launches may overlap the previous kernel: the current device is sm_90 or newer, and
// KILN_NO_PDL is not set in the environment (for measuring the difference). Cached per device.
inline bool pdl_enabled() {
  static int env = -1;
  if (env < 0) env = getenv("KILN_NO_PDL") != nullptr ? 1 : 0;
  if (env) return false;
  static int major[64];  // 0: not asked yet
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (major[dev] == 0) {
    int m = 0;
    if (cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) m = -1;
    major[dev] = m > 0 ? m : -1;
  }
  return major[dev] >= 9;
}

// The programmatic-dependent-launch attribute, for launch() and for launchers that build their
// own cudaLaunchConfig_t (with room for it): appends it to attr[n] and counts it when
// pdl_enabled().
inline void add_pdl_attribute(cudaLaunchAttribute* attr, unsigned& n) {
  if (!pdl_enabled()) return;
  attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[n].val.programmaticStreamSerializationAllowed = 1;
  ++n;
}

// Launches kernel(args...) on `grid` x `block` with `smem` bytes of dynamic shared memory on
// `stream`, in clusters of `cluster` CTAs along x when cluster > 1 (sm_90), allowing programmatic
// dependent launch where pdl_enabled(). The kernel must begin with pdl_entry().
template <class... P, class... A>
inline cudaError_t launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, int cluster, A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  add_pdl_attribute(attr, n);
  if (cluster > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = static_cast<unsigned>(cluster);
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<A&&>(args)...);
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_BASE_CUH
