// Kiln runtime, wgmma: Hopper warpgroup matmul (wgmma.mma_async, sm_90a only) on shared-memory
// tiles, and a block-tiled GEMM built on it for large m.
//
// A warpgroup is 4 consecutive warps starting at a warp index divisible by 4; all 128 threads
// execute every call here together. Operands come from shared memory through 64-bit matrix
// descriptors, in the 128-byte-swizzle layout, which is exactly a SmemTile with
// Layout::Swizzled and 128-byte rows (64 f16/bf16) whose base is 1024-byte aligned:
//   A (M x K, K contiguous, "K-major"): 64 rows per instruction in 8-row groups 1024 bytes apart
//     (SBO = 1024); a k16 step advances the start address by 32 bytes inside the 128-byte row.
//   B (K x N with N contiguous, "N-major", imm-trans-b = 1): the tile is split into panels of
//     64 columns, each a K x 64 swizzled tile; LBO = bytes between panels, SBO = 1024 (8 k-rows).
//     This is the row-major weight layout of the spec, so no transpose is needed anywhere.
// Accumulators (m64nN, f32): thread (warp w of the group, g = lane / 4, t = lane % 4) holds
// d[4i + 2h + e] = D[16w + g + 8h][8i + 2t + e], i.e. FragC's mapping for each n8 block i.
//
// Ordering: shared memory filled by cp.async or ordinary stores must be followed, in each writing
// thread, by fence_proxy_async_smem() and then a barrier before wgmma reads it (wgmma reads
// through the async proxy). wgmma_fence() precedes the first wgmma of a batch (and any wgmma whose
// accumulators other instructions touched); wgmma_commit() closes a batch; wgmma_wait<N>() waits
// until at most N batches are pending, and wgmma_fence_acc() then pins the accumulators so that
// the compiler reads them only after the wait.
//
// On sm_80 (and plain sm_90) these functions trap; check the device and build for sm_90a.
#ifndef KILN_RT_WGMMA_CUH
#define KILN_RT_WGMMA_CUH

#ifndef KILN_RT_COPY_CUH
#include "copy.cuh"
#endif
#ifndef KILN_RT_ELEMENTWISE_CUH
#include "elementwise.cuh"
#endif
#ifndef KILN_RT_TMA_CUH
#include "tma.cuh"
#endif

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_RT_WGMMA 1
#else
#define KILN_RT_WGMMA 0
#endif

namespace kiln {
namespace rt {

// Shared-memory matrix descriptor, 128-byte swizzle. Fields (16-byte units): start address
// bits 0-13, leading byte offset 16-29, stride byte offset 32-45, base offset 49-51 (0: the
// swizzle pattern repeats from a 1024-byte aligned address), layout bits 62-63 (1 = 128B swizzle).
KILN_DEV uint64_t wgmma_desc_sw128(uint32_t saddr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return uint64_t((saddr >> 4) & 0x3FFF) | (uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

KILN_DEV void wgmma_fence() {
#if KILN_RT_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
KILN_DEV void wgmma_commit() {
#if KILN_RT_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
template <int N>
KILN_DEV void wgmma_wait() {
#if KILN_RT_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}
// Ties each accumulator register to this point of the instruction stream (no code), so reads
// and writes of d are not moved across the wgmma issue / wait around it.
template <int NREG>
KILN_DEV void wgmma_fence_acc(float (&d)[NREG]) {
#pragma unroll
  for (int i = 0; i < NREG; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define KILN_RT_WGMMA_D64                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define KILN_RT_WGMMA_OUT64(d)                                                                    \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d (64 x 128, f32) += A (64 x 16, K-major) * B (16 x 128, N-major), T = __half or
// __nv_bfloat16. Issues the instruction; completion is wgmma_commit / wgmma_wait's business.
template <typename T>
KILN_DEV void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b);

template <>
KILN_DEV void wgmma_m64n128k16<__half>(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
#if KILN_RT_WGMMA
  // scale-d = 1 (accumulate), scale-a = scale-b = 1, A K-major (0), B N-major (1).
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " KILN_RT_WGMMA_D64
      ", %64, %65, p, 1, 1, 0, 1;\n}\n"
      : KILN_RT_WGMMA_OUT64(d)
      : "l"(desc_a), "l"(desc_b), "r"(1));
#else
  __trap();
#endif
}
template <>
KILN_DEV void wgmma_m64n128k16<__nv_bfloat16>(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
#if KILN_RT_WGMMA
  // scale-d = 1 (accumulate), scale-a = scale-b = 1, A K-major (0), B N-major (1).
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " KILN_RT_WGMMA_D64
      ", %64, %65, p, 1, 1, 0, 1;\n}\n"
      : KILN_RT_WGMMA_OUT64(d)
      : "l"(desc_a), "l"(desc_b), "r"(1));
#else
  __trap();
#endif
}
#undef KILN_RT_WGMMA_D64
#undef KILN_RT_WGMMA_OUT64

// ---- Generic m64nNk16 wrappers ----------------------------------------------------------------
//
// wgmma_ss<T, N, TB>(d, desc_a, desc_b, scale_d): d (64 x N, f32) = (scale_d ? d : 0) +
// A (64 x 16, shared memory, K-major) * B (16 x N, shared memory; TB = 1: N-major, 0: K-major).
// wgmma_rs<T, N, TB>(d, a, desc_b, scale_d): the same with A in registers: thread (warp w of the
// group, g = lane / 4, t = lane % 4) holds a[0] = A[16w + g][2t, 2t+1], a[1] = A[16w + g + 8][2t,
// 2t+1], a[2] = A[16w + g][2t+8, 2t+9], a[3] = A[16w + g + 8][2t+8, 2t+9] (pack2 pairs), i.e.
// mma.sync's A fragment of the warp's 16 rows. scale_d = 0 overwrites d, so a fresh product
// needs no zeroing. N in {16, 32, 64, 128, 256}; T = __half or __nv_bfloat16. The bodies below
// are generated by scripts/gen_wgmma_ops.py (one asm statement per shape and type).
template <typename T>
struct IsBf16 {
  static constexpr bool value = false;
};
template <>
struct IsBf16<__nv_bfloat16> {
  static constexpr bool value = true;
};

template <typename T, int TB>
KILN_DEV void wgmma_ss_n16(float (&d)[8], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  if constexpr (IsBf16<T>::value) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7"
        "}, "
        "%8, %9, p, 1, 1, 0, %11;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7"
        "}, "
        "%8, %9, p, 1, 1, 0, %11;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  __trap();
#endif
}
template <typename T, int TB>
KILN_DEV void wgmma_ss_n32(float (&d)[16], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  if constexpr (IsBf16<T>::value) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, "
        "%16, %17, p, 1, 1, 0, %19;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, "
        "%16, %17, p, 1, 1, 0, %19;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  __trap();
#endif
}
template <typename T, int TB>
KILN_DEV void wgmma_ss_n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  if constexpr (IsBf16<T>::value) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, "
        "%32, %33, p, 1, 1, 0, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, "
        "%32, %33, p, 1, 1, 0, %35;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  __trap();
#endif
}
template <typename T, int TB>
KILN_DEV void wgmma_ss_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  if constexpr (IsBf16<T>::value) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, "
        "%64, %65, p, 1, 1, 0, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, "
        "%64, %65, p, 1, 1, 0, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  __trap();
#endif
}
template <typename T, int TB>
KILN_DEV void wgmma_ss_n256(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  if constexpr (IsBf16<T>::value) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "
        "%111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
        "%127"
        "}, "
        "%128, %129, p, 1, 1, 0, %131;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
          "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
          "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
          "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
          "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "
        "%111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
        "%127"
        "}, "
        "%128, %129, p, 1, 1, 0, %131;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
          "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
          "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
          "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
          "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  __trap();
#endif
}
template <typename T, int TB>
KILN_DEV void wgmma_rs_n16(float (&d)[8], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  if constexpr (IsBf16<T>::value) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7"
        "}, "
        "{%8, %9, %10, %11}, %12, p, 1, 1, %14;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7"
        "}, "
        "{%8, %9, %10, %11}, %12, p, 1, 1, %14;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  __trap();
#endif
}
template <typename T, int TB>
KILN_DEV void wgmma_rs_n32(float (&d)[16], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  if constexpr (IsBf16<T>::value) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  __trap();
#endif
}
template <typename T, int TB>
KILN_DEV void wgmma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  if constexpr (IsBf16<T>::value) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  __trap();
#endif
}
template <typename T, int TB>
KILN_DEV void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  if constexpr (IsBf16<T>::value) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  __trap();
#endif
}
template <typename T, int TB>
KILN_DEV void wgmma_rs_n256(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  if constexpr (IsBf16<T>::value) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %133, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "
        "%111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
        "%127"
        "}, "
        "{%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
          "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
          "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
          "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
          "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %133, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "
        "%111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
        "%127"
        "}, "
        "{%128, %129, %130, %131}, %132, p, 1, 1, %134;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
          "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
          "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
          "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
          "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TB));
  }
#else
  __trap();
#endif
}

// wgmma_ss_tf32_nN(d, desc_a, desc_b, scale_d): d (64 x N, f32) = (scale_d ? d : 0) + A (64 x 8,
// K-major) * B (8 x N, K-major), tf32 operands (float storage; the hardware reads the upper 19
// bits). A k8 step is 32 bytes, as a 16-bit k16 step: the same descriptors walk both.
KILN_DEV void wgmma_ss_tf32_n64(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, "
      "%32, %33, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#else
  __trap();
#endif
}
KILN_DEV void wgmma_ss_tf32_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, "
      "%64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#else
  __trap();
#endif
}
KILN_DEV void wgmma_ss_tf32_n256(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if KILN_RT_WGMMA
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
      "{"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127"
      "}, "
      "%128, %129, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#else
  __trap();
#endif
}

template <typename T, int N, int TB>
KILN_DEV void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  if constexpr (sizeof(T) == 4) {  // float operands: tf32 (m64nNk8), both K-major
    static_assert(TB == 0 && (N == 64 || N == 128 || N == 256), "tf32: K-major B, n 64/128/256");
    if constexpr (N == 64) wgmma_ss_tf32_n64(d, desc_a, desc_b, scale_d);
    if constexpr (N == 128) wgmma_ss_tf32_n128(d, desc_a, desc_b, scale_d);
    if constexpr (N == 256) wgmma_ss_tf32_n256(d, desc_a, desc_b, scale_d);
    return;
  } else {
    static_assert(N == 16 || N == 32 || N == 64 || N == 128 || N == 256, "wgmma n");
    if constexpr (N == 16) wgmma_ss_n16<T, TB>(d, desc_a, desc_b, scale_d);
    if constexpr (N == 32) wgmma_ss_n32<T, TB>(d, desc_a, desc_b, scale_d);
    if constexpr (N == 64) wgmma_ss_n64<T, TB>(d, desc_a, desc_b, scale_d);
    if constexpr (N == 128) wgmma_ss_n128<T, TB>(d, desc_a, desc_b, scale_d);
    if constexpr (N == 256) wgmma_ss_n256<T, TB>(d, desc_a, desc_b, scale_d);
  }
}
template <typename T, int N, int TB>
KILN_DEV void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  static_assert(N == 16 || N == 32 || N == 64 || N == 128 || N == 256, "wgmma n");
  if constexpr (N == 16) wgmma_rs_n16<T, TB>(d, a, desc_b, scale_d);
  if constexpr (N == 32) wgmma_rs_n32<T, TB>(d, a, desc_b, scale_d);
  if constexpr (N == 64) wgmma_rs_n64<T, TB>(d, a, desc_b, scale_d);
  if constexpr (N == 128) wgmma_rs_n128<T, TB>(d, a, desc_b, scale_d);
  if constexpr (N == 256) wgmma_rs_n256<T, TB>(d, a, desc_b, scale_d);
}

// d += A[a_row0 .. +64, 0 .. BK] * B[0 .. BK, 0 .. 128] for one warpgroup, issued as BK / 16
// wgmmas in one committed batch (not waited for). A: an R x BK K-major swizzled tile with
// 128-byte rows (BK = 64 elements); B: two BK x 64 swizzled panels, panel_b1 = panel_b0 +
// panel_stride bytes. All bases 1024-byte aligned; a_row0 a multiple of 8.
template <typename T, int BK>
KILN_DEV void wgmma_tile_m64n128(float (&d)[64], uint32_t a_base, int a_row0, uint32_t b_base,
                                 uint32_t panel_stride) {
  static_assert(BK * int(sizeof(T)) == 128, "128-byte swizzle rows: BK = 64 for 16-bit types");
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < BK / 16; ++kk) {
    const uint64_t da = wgmma_desc_sw128(a_base + a_row0 * 128 + kk * 32, 16, 1024);
    const uint64_t db = wgmma_desc_sw128(b_base + kk * 16 * 128, panel_stride, 1024);
    wgmma_m64n128k16<T>(d, da, db);
  }
  wgmma_commit();
}

// ---- Block GEMM -------------------------------------------------------------------------------
//
// C[M, N] = epi(A[M, K] B[K, N]), row-major, f16/bf16 in, f32 accumulate. Block tile
// (64 * WG) x 128 x 64 with WG consumer warpgroups (each 64 rows x 128 columns), STAGES-deep
// cp.async ring (zero-filled edges, so any M, N, K); every thread loads, then each warpgroup
// issues its wgmmas. Preconditions: lda, ldb multiples of 8; A, B 16-byte aligned; block of
// 128 * WG threads and WgmmaGemm::kSmemBytes of dynamic shared memory.
template <typename T, int WG, int STAGES>
struct WgmmaGemm {
  static constexpr int kBM = 64 * WG, kBN = 128, kBK = 64, kStages = STAGES;
  static constexpr int kThreads = 128 * WG;
  using TileA = SmemTile<T, kBM, kBK, Layout::Swizzled>;
  using PanelB = SmemTile<T, kBK, 64, Layout::Swizzled>;
  static constexpr int kStageBytes = TileA::kBytes + 2 * PanelB::kBytes;
  static constexpr int kSmemBytes = STAGES * kStageBytes + 1024;  // + alignment slack
  static_assert(TileA::kBytes % 1024 == 0 && PanelB::kBytes % 1024 == 0, "1024-byte atoms");
};

template <class G, typename TO, class Epi>
__global__ void __launch_bounds__(G::kThreads, 1)
    wgmma_gemm_kernel(const typename G::TileA::Elem* A, int64_t lda,
                      const typename G::TileA::Elem* B, int64_t ldb, TO* C, int64_t ldc, int M,
                      int N, int K, Epi epi) {
  pdl_entry();  // before any load or store (base.cuh)
  using T = typename G::TileA::Elem;
  using TileA = typename G::TileA;
  using PanelB = typename G::PanelB;
  constexpr int S = G::kStages, BK = G::kBK;
  extern __shared__ __align__(1024) char wgmma_smem_raw[];
  // The swizzle pattern is anchored to 1024-byte aligned shared addresses.
  char* smem = wgmma_smem_raw + ((1024 - (smem_u32(wgmma_smem_raw) & 1023)) & 1023);
  const int tid = threadIdx.x, wg = tid >> 7;
  const int m0 = blockIdx.y * G::kBM, n0 = blockIdx.x * G::kBN;
  const GmemView<const T> a{A + m0 * lda, M - m0, K, lda};
  const GmemView<const T> b{B + n0, K, N - n0, ldb};
  auto stage = [&](int s) { return smem + s * G::kStageBytes; };
  auto load_stage = [&](int s, int kt) {
    char* p = stage(s);
    cp_async_g2s<G::kThreads>(TileA(p), a.offset(0, kt * BK), tid);
    cp_async_g2s<G::kThreads>(PanelB(p + TileA::kBytes), b.offset(kt * BK, 0), tid);
    cp_async_g2s<G::kThreads>(PanelB(p + TileA::kBytes + PanelB::kBytes), b.offset(kt * BK, 64),
                              tid);
  };

  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.0f;

  const int ktiles = ceil_div(K, BK);
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<S - 2>();
    fence_proxy_async_smem();  // cp.async wrote through the generic proxy; wgmma reads async
    __syncthreads();           // all copies of stage kt landed; stage kt-1 no longer read
    const int next = kt + S - 1;
    if (next < ktiles) load_stage(next % S, next);
    cp_async_commit();
    const uint32_t base = smem_u32(stage(kt % S));
    wgmma_tile_m64n128<T, BK>(d, base, wg * 64, base + TileA::kBytes, PanelB::kBytes);
    wgmma_wait<0>();
    wgmma_fence_acc(d);
  }
  cp_async_wait_all();

  // Epilogue straight from the accumulators: rows 16 w + g (+8), column pairs 8 i + 2t.
  const int lane = tid & 31, w = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 16; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = m0 + wg * 64 + 16 * w + g + 8 * h, c = n0 + 8 * i + 2 * t;
      if (r >= M || c >= N) continue;
      TO* p = C + r * ldc + c;
      const float v0 = epi(d[4 * i + 2 * h], r, c);
      if (c + 1 < N && (reinterpret_cast<uintptr_t>(p) % (2 * sizeof(TO))) == 0) {
        const float v1 = epi(d[4 * i + 2 * h + 1], r, c + 1);
        if constexpr (sizeof(TO) == 4) {
          *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
        } else {
          *reinterpret_cast<uint32_t*>(p) = pack2<TO>(v0, v1);
        }
      } else {
        p[0] = from_f32<TO>(v0);
        if (c + 1 < N) p[1] = from_f32<TO>(epi(d[4 * i + 2 * h + 1], r, c + 1));
      }
    }
}

// ---- Warp-specialized persistent block GEMM (TMA + mbarriers, clusters) ----------------------
//
// C[M, N] = epi(A B0, A B1, m, n) with one (NB = 1) or two (NB = 2, e.g. silu(X W1) * (X W2))
// weights sharing A. Output tiles of 128 x 128, k-tiles of 64, three warpgroups:
//   warpgroup 0 produces: one thread issues TMA loads of A (128 x 64) and the B panels (64 x 64,
//     NB * 2 of them) into a STAGES-deep ring of 128B-swizzled stages, posting bytes on full[s];
//   warpgroups 1 and 2 consume rows 0-63 and 64-127 of the tile: per k-tile one committed batch
//     of 4 wgmmas m64nNk16 with N = 128 NB (for NB = 2 one instruction covers both weights: the
//     stage's four B panels are evenly spaced, so they form one 64 x 256 B operand), then
//     wgmma_wait<1> and the release of the previous stage on empty[s] (the tensor cores never
//     wait for a barrier).
// The grid is persistent: each CTA (or cluster) walks output tiles blockIdx-strided in a raster
// grouped along M (group_m cluster rows per group, so that the tiles in flight share A rows and B
// columns in L2), and the producer streams the next tile's stages while the consumers run the
// epilogue. With CLUSTER = 2 the two CTAs of a cluster take vertically adjacent tiles (the same
// columns) and each loads half of the B panels once, multicast into both CTAs' stages; a stage is
// refilled only after both CTAs' consumers released it (empty[s] counts 2 * CLUSTER arrivals,
// the remote ones through the cluster's shared memory). The epilogue of 16-bit outputs goes
// through shared memory (128B-swizzled 64 x 64 boxes, conflict-free) and TMA stores that run
// while the next tile computes; f32 outputs, or a C that TMA cannot address (ldc * sizeof(TO) not
// a multiple of 16, C not 16-byte aligned), take direct 4-/8-byte stores. epi is called only for
// elements inside [M, N]. setmaxnreg moves registers from the producer (40) to the consumers
// (232). Any M, N, K >= 1 (TMA zero-fills the edges); lda, ldb multiples of 8, A and B 16-byte
// aligned. Epi: float(float v0, float v1, int m, int n) const (v1 = 0 when NB = 1).
//
// Defaults measured on the H100 (tests/gpu/gemm_ws_bench.cu): two weights take CLUSTER = 2 with
// 4 stages (4096^3 f16 386 us, as CLUSTER 1; on rows that are not 128-byte aligned, 4000 x 4040 x
// 4000, 388 us against 485: halving the B traffic matters there; 3 stages with CLUSTER 2: 423
// us); one weight takes CLUSTER = 1 with 6 stages (4096^3 197 us; CLUSTER 2: 222 us).
//
// KB (B K-major): B is given as B^T, an [N, K] row-major tensor (PyTorch's nn.Linear weight), so
// that C = epi(A B) reads it in place. Its stage panels are [64 n][64 k] boxes, 128B-swizzled like
// A, and the wgmmas read B K-major (imm-trans-b = 0): no transpose anywhere. ldb is then B^T's row
// stride.
//
// PP (ping-pong, one weight): each consumer warpgroup takes whole 128 x 128 tiles, alternately
// (the cluster's tiles j with j % 2 == its index), so that one warpgroup's epilogue runs while the
// other's wgmmas keep the tensor cores busy. The ring's order makes them alternate: tile j + 1's
// stages follow tile j's. A stage is released by the one warpgroup that read it (empty[s] counts
// CLUSTER arrivals). Otherwise both warpgroups share each tile (64 rows each) and the tensor
// cores idle during every epilogue: measured on the H100, silu(x + bias) after a 512 x 14336 x
// 4096 bf16 GEMM took 128 us against 94 without the epilogue.
template <typename T, int NB, int STAGES, int CLUSTER = (NB == 2 ? 2 : 1), bool KB = false,
          bool PP = false>
struct WgmmaGemmWS {
  // A k-tile is one 128-byte swizzle row: 64 k of a 16-bit type, 32 of float; either way four
  // 32-byte wgmma k-steps (k16 of 16-bit, k8 of tf32).
  static constexpr int kBM = 128, kBN = 128, kBK = 128 / int(sizeof(T)), kStages = STAGES, kNB = NB;
  static constexpr int kKSteps = 4;
  static constexpr int kCluster = CLUSTER;
  static constexpr bool kKB = KB, kPP = PP;
  // Float operands are tf32 hi/lo pairs (gemm_f32x3_launch): A [M, 2K] = [hi | lo], B^T [N, 2K]
  // likewise, and the kernel walks three K segments, hi*hi + hi*lo + lo*hi (K a multiple of 32).
  static constexpr bool kSplit3 = sizeof(T) == 4;
  static_assert(!kSplit3 || KB, "tf32 operands are K-major only");
  static_assert(!PP || NB == 1, "ping-pong holds a whole tile's accumulators: one weight");
  static constexpr int kThreads = 384;
  using TileA = SmemTile<T, kBM, kBK, Layout::Swizzled>;
  // A B panel: 64 columns n, as k rows x 64 n (N-major) or 64 n rows x k (KB).
  using PanelB = SmemTile<T, KB ? 64 : kBK, KB ? kBK : 64, Layout::Swizzled>;
  static constexpr int kBBytes = 2 * PanelB::kBytes;  // one weight's 64 x 128 stage
  static constexpr int kStageBytes = TileA::kBytes + NB * kBBytes;
  static constexpr int kRingBytes = STAGES * kStageBytes;
  // Epilogue staging of a 16-bit 128 x 128 output tile (two 64 x 64 boxes per consumer), kept
  // when it fits next to the ring (1024 bytes left for the static mbarriers and their alignment).
  static constexpr int kCBytes = kBM * kBN * 2;
  static constexpr bool kStageC = kRingBytes + 1024 + kCBytes + 1024 <= 227 * 1024;
  static constexpr int kSmemBytes = kRingBytes + 1024 + (kStageC ? kCBytes : 0);
  static_assert(NB == 1 || NB == 2, "one or two weights");
  static_assert(CLUSTER == 1 || CLUSTER == 2, "clusters of 1 or 2 CTAs");
  static_assert(kSmemBytes + 1024 <= 227 * 1024, "too many stages for shared memory");
};

struct WgmmaEpiIdentity {
  KILN_DEV float operator()(float v0, float, int, int) const { return v0; }
};
struct WgmmaEpiSiluMul {
  KILN_DEV float operator()(float v0, float v1, int, int) const {
    return v0 / (1.0f + expf(-v0)) * v1;
  }
};

KILN_DEV void setmaxnreg_inc_232() {
#if KILN_RT_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
#endif
}
KILN_DEV void setmaxnreg_dec_40() {
#if KILN_RT_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
#endif
}
// Barrier `id` (1..15; 0 is __syncthreads') over the first `threads` threads that reach it, a
// multiple of 32 (e.g. one warpgroup).
KILN_DEV void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The output tile that cluster tile u of wgmma_ws_gemm_kernel's walk maps to: groups of group_m
// cluster rows (CLUSTER tile rows each), column-major inside a group; this CTA takes tile row
// CLUSTER * row + rank.
KILN_DEV void wgmma_ws_tile(int u, int crows, int ntn, int group_m, int cluster, int rank, int* m0,
                            int* n0) {
  const int per_group = group_m * ntn, grp = u / per_group, first = grp * group_m;
  const int rows = min_i(crows - first, group_m), r = u - grp * per_group;
  *m0 = ((first + r % rows) * cluster + rank) * 128;
  *n0 = (r / rows) * 128;
}

template <class G, typename TO, class Epi>
__global__ void __launch_bounds__(384, 1)
    wgmma_ws_gemm_kernel(const __grid_constant__ TmaDesc map_a,
                         const __grid_constant__ TmaDesc map_b0,
                         const __grid_constant__ TmaDesc map_b1,
                         const __grid_constant__ TmaDesc map_c, TO* C, int64_t ldc, int M, int N,
                         int K, int group_m, int tma_store, int splits, int64_t split_stride,
                         int batch, Epi epi) {
  pdl_entry();  // before any load or store (base.cuh)
  using T = typename G::TileA::Elem;
  using TileA = typename G::TileA;
  using PanelB = typename G::PanelB;
  constexpr int S = G::kStages, NB = G::kNB, CL = G::kCluster, BN = 128 * NB;
  constexpr bool kSmemC = G::kStageC && sizeof(TO) == 2;
  extern __shared__ __align__(1024) char wgmma_ws_smem_raw[];
  __shared__ __align__(8) uint64_t full[S], empty[S];
  // PP: order[c] completes a phase each time the other consumer has received the last stage of
  // one of its tiles; consumer c starts a tile only after that (see below).
  __shared__ __align__(8) uint64_t order[2];
  char* smem = wgmma_ws_smem_raw + ((1024 - (smem_u32(wgmma_ws_smem_raw) & 1023)) & 1023);
  const int tid = threadIdx.x, wg = tid >> 7;
  const int rank = CL > 1 ? int(cluster_ctarank()) : 0;
  const int ntn = ceil_div(N, G::kBN), crows = ceil_div(ceil_div(M, G::kBM), CL);
  const int tiles = crows * ntn, cid = blockIdx.x / CL, nclusters = gridDim.x / CL;
  // kSplit3: ring iteration kt of a tile is k-tile kt % kseg of segment kt / kseg.
  const int kseg = ceil_div(K, G::kBK), ktiles = G::kSplit3 ? 3 * kseg : kseg;
  // Split-K (float operands, splits > 1): work unit v is split v / tiles of tile v % tiles, ring
  // iterations [kt_begin, kt_end) of the tile's k-tiles, its f32 partial stored at C + split *
  // split_stride (the caller's epilogue is the identity then; a reduce kernel sums the splits).
  // Float operands also batch: their maps are 3-D ([batch, rows, 2K]) and work unit v is, after
  // its split, tile v % tiles of batch index (v / tiles) % batch, stored at C + z M ldc. Only float
  // operands split K or batch: 16-bit instantiations compile to the loop without either.
  const int btiles = G::kSplit3 ? tiles * batch : tiles;
  const int units = G::kSplit3 ? btiles * splits : tiles;
  auto kt_begin = [&](int sp) { return int(int64_t(sp) * ktiles / splits); };
  auto stage = [&](int s) { return smem + s * G::kStageBytes; };
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      mbar_init(&full[s], 1);
      // One arrival per consumer warpgroup of the cluster that reads the stage.
      mbar_init(&empty[s], G::kPP ? CL : 2 * CL);
    }
    mbar_init(&order[0], 1);
    mbar_init(&order[1], 1);
    fence_mbar_init();
  }
  // The peer's copies and arrivals target these barriers: all initialized before any is issued.
  if constexpr (CL > 1) {
    cluster_sync_all();
  } else {
    __syncthreads();
  }

  if (wg == 0) {
    // Producer. No block-wide barrier may follow the role split (only the final cluster one).
    setmaxnreg_dec_40();
    if (tid == 0) {
      tma_prefetch_desc(&map_a);
      tma_prefetch_desc(&map_b0);
      if (NB > 1) tma_prefetch_desc(&map_b1);
      int s = 0, it = 0;
      uint32_t ph = 0;
      for (int v = cid; v < units; v += nclusters) {
        int u = v, z = 0, kt0 = 0, kt1 = ktiles;
        if constexpr (G::kSplit3) {
          const int sp = v / btiles, r = v - sp * btiles;
          z = r / tiles;
          u = r - z * tiles;
          kt0 = kt_begin(sp), kt1 = kt_begin(sp + 1);
        }
        int m0, n0;
        wgmma_ws_tile(u, crows, ntn, group_m, CL, rank, &m0, &n0);
        for (int kt = kt0; kt < kt1; ++kt, ++it) {
          if (it >= S) mbar_wait(&empty[s], ph ^ 1);  // every consumer released round it/S - 1
          char* p = stage(s);
          int ka = kt * G::kBK, kb = ka;
          if constexpr (G::kSplit3) {  // segments hi*hi, hi*lo, lo*hi
            const int seg = kt / kseg, k0 = (kt - seg * kseg) * G::kBK;
            ka = k0 + (seg == 2 ? K : 0);
            kb = k0 + (seg == 1 ? K : 0);
          }
          mbar_arrive_expect_tx(&full[s], G::kStageBytes);
          if constexpr (G::kSplit3) {
            tma_load_3d(p, &map_a, z, m0, ka, &full[s]);
          } else {
            tma_load_2d(p, &map_a, m0, ka, &full[s]);
          }
#pragma unroll
          for (int j = 0; j < 2 * NB; ++j) {  // B panel j: weight j / 2, columns n0 + 64 (j % 2)
            if (j % CL != rank) continue;
            const TmaDesc* mb = j < 2 ? &map_b0 : &map_b1;
            char* pb = p + TileA::kBytes + j * PanelB::kBytes;
            // A panel is rows k, columns n of B, or (KB) rows n, columns k of B^T.
            const int pr = G::kKB ? n0 + 64 * (j & 1) : kb;
            const int pc = G::kKB ? kb : n0 + 64 * (j & 1);
            if constexpr (G::kSplit3) {
              tma_load_3d(pb, mb, z, pr, pc, &full[s]);
            } else if constexpr (CL > 1) {
              tma_load_2d_multicast(pb, mb, pr, pc, &full[s], uint16_t((1u << CL) - 1));
            } else {
              tma_load_2d(pb, mb, pr, pc, &full[s]);
            }
          }
          if (++s == S) s = 0, ph ^= 1;
        }
      }
    }
  } else {
    setmaxnreg_inc_232();
    const int c = wg - 1;  // consumer: rows 64c .. 64c + 63 of each tile, or (PP) every other tile
    const int lane = tid & 31, w = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const bool leader = (tid & 127) == 0;
    auto release = [&](int s) {
      if (!leader) return;
      if constexpr (CL > 1) {
#pragma unroll
        for (int r = 0; r < CL; ++r) mbar_arrive_cluster(&empty[s], r);
      } else {
        mbar_arrive(&empty[s]);
      }
    };
    char* cbuf = smem + G::kRingBytes + c * (G::kCBytes / 2);  // two 64 x 64 boxes (kSmemC)
    TO* cbase = C;  // the output, or this unit's split partial
    // Stores rows row0 .. row0 + 63, columns n0 .. n0 + 127 of C from accumulators dd (dd[0, 64):
    // A B0; dd[64, 128): A B1 with NB = 2).
    auto epilogue = [&](const float(&dd)[BN / 2], int row0, int n0) {
      bool staged = false;
      if constexpr (kSmemC) {
        staged = tma_store != 0;
        if (staged) {
          // Every value first, into registers: the epilogue's own loads (a bias, an operand of
          // the output's shape) then issue together rather than one per store below (the
          // stores' memory clobbers would order them).
          uint32_t packed[16][2];
#pragma unroll
          for (int i = 0; i < 16; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = 16 * w + g + 8 * h, col = 8 * i + 2 * t, q = 4 * i + 2 * h;
              const int gm = row0 + r, gn = n0 + col;
              const bool in = gm < M && gn < N, in1 = gm < M && gn + 1 < N;
              const float y0 =
                  in ? epi(dd[q], NB > 1 ? dd[(64 + q) % (BN / 2)] : 0.0f, gm, gn) : 0.0f;
              const float y1 =
                  in1 ? epi(dd[q + 1], NB > 1 ? dd[(65 + q) % (BN / 2)] : 0.0f, gm, gn + 1) : 0.0f;
              packed[i][h] = pack2<TO>(y0, y1);
            }
          // The previous stores have read the boxes; then every thread writes its pairs,
          // 128B-swizzled (16-byte chunk i % 8 of row r at chunk (i % 8) ^ (r % 8)), so the 8
          // rows x 4 threads of one store land in 32 distinct banks.
          if (leader) bulk_wait_read<0>();
          named_barrier_sync(1 + c, 128);
          const uint32_t cb = smem_u32(cbuf);
#pragma unroll
          for (int i = 0; i < 16; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int r = 16 * w + g + 8 * h;
              const uint32_t addr = cb + (i >> 3) * 8192 + r * 128 + (((i & 7) ^ g) << 4) + 4 * t;
              asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(packed[i][h]) : "memory");
            }
          fence_proxy_async_smem();  // the copy engine reads what the stores wrote
          named_barrier_sync(1 + c, 128);
          if (leader) {
            tma_store_2d(&map_c, cbuf, row0, n0);
            if (n0 + 64 < N) tma_store_2d(&map_c, cbuf + 8192, row0, n0 + 64);
            bulk_commit();
          }
        }
      }
      if (!staged) {
#pragma unroll
        for (int i = 0; i < 16; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = row0 + 16 * w + g + 8 * h, col = n0 + 8 * i + 2 * t;
            if (r >= M || col >= N) continue;
            const int q = 4 * i + 2 * h;
            const float v10 = NB > 1 ? dd[(64 + q) % (BN / 2)] : 0.0f;
            const float v11 = NB > 1 ? dd[(65 + q) % (BN / 2)] : 0.0f;
            TO* p = (G::kSplit3 ? cbase : C) + r * ldc + col;
            const float y0 = epi(dd[q], v10, r, col);
            if (col + 1 < N && (reinterpret_cast<uintptr_t>(p) % (2 * sizeof(TO))) == 0) {
              const float y1 = epi(dd[q + 1], v11, r, col + 1);
              if constexpr (sizeof(TO) == 4) {
                *reinterpret_cast<float2*>(p) = make_float2(y0, y1);
              } else {
                *reinterpret_cast<uint32_t*>(p) = pack2<TO>(y0, y1);
              }
            } else {
              p[0] = from_f32<TO>(y0);
              if (col + 1 < N) p[1] = from_f32<TO>(epi(dd[q + 1], v11, r, col + 1));
            }
          }
      }
    };
    // The B operand of k16 step kk of stage base b_base.
    auto desc_b = [&](uint32_t b_base, int kk) {
      return G::kKB ? wgmma_desc_sw128(b_base + kk * 32, 16, 1024)
                    : wgmma_desc_sw128(b_base + kk * 2048, PanelB::kBytes, 1024);
    };
    constexpr int TB = G::kKB ? 0 : 1;  // imm-trans-b: B N-major
    if constexpr (G::kPP) {
      // Ping-pong: this warpgroup's tiles are the cluster's tiles j with j % 2 == c, all 128 rows
      // (d0: rows 0-63, d1: rows 64-127); tile j's k-tiles are ring iterations j ktiles + kt.
      // A full[s] wait by parity is sound only within one phase of the barrier, so tile j starts
      // once the other warpgroup has received tile j - 1's last stage (order[c]): every earlier
      // iteration's phase has then completed. The two warpgroups take turns, one tile apart.
      float d0[BN / 2], d1[BN / 2];
      int j = 0;
      for (int u = cid; u < tiles; u += nclusters, ++j) {
        if ((j & 1) != c) continue;
        int m0, n0;
        wgmma_ws_tile(u, crows, ntn, group_m, CL, rank, &m0, &n0);
        if (j > 0) mbar_wait(&order[c], uint32_t(((j - 1) / 2) & 1));
        int prev = 0;
        for (int kt = 0; kt < ktiles; ++kt) {
          const int it = j * ktiles + kt, s = it % S;
          mbar_wait(&full[s], uint32_t((it / S) & 1));
          if (kt == ktiles - 1 && leader) mbar_arrive(&order[1 - c]);  // the other's turn
          const uint32_t a_base = smem_u32(stage(s));
          const uint32_t b_base = a_base + TileA::kBytes;
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < G::kKSteps; ++kk) {
            const uint64_t db = desc_b(b_base, kk);
            const int sc = (kt > 0 || kk > 0) ? 1 : 0;  // k-tile 0 overwrites
            wgmma_ss<T, BN, TB>(d0, wgmma_desc_sw128(a_base + kk * 32, 16, 1024), db, sc);
            wgmma_ss<T, BN, TB>(d1, wgmma_desc_sw128(a_base + 64 * 128 + kk * 32, 16, 1024), db,
                                sc);
          }
          wgmma_commit();
          wgmma_wait<1>();  // the batch of k-tile kt - 1 is done: its stage may be refilled
          if (kt > 0) release(prev);
          prev = s;
        }
        wgmma_wait<0>();
        wgmma_fence_acc(d0);
        wgmma_fence_acc(d1);
        release(prev);
        if (m0 < M) epilogue(d0, m0, n0);
        if (m0 + 64 < M) epilogue(d1, m0 + 64, n0);
      }
    } else {
      float d[BN / 2];  // d[0, 64): A B0; d[64, 128): A B1 (NB = 2)
      // kSplit3: the tensor cores' f32 accumulation is not rounded to nearest (measured on the
      // H100/H200: relative error growing linearly with K, 8.5e-5 at K = 8192 without this), so d
      // restarts every kPromote k-tiles and is added to total in ordinary f32 (round to nearest).
      constexpr int kPromote = 8;
      float total[G::kSplit3 ? BN / 2 : 1];
      int s = 0;
      uint32_t ph = 0;
      for (int v = cid; v < units; v += nclusters) {
        int u = v, sp = 0, z = 0, kt0 = 0, kt1 = ktiles;
        if constexpr (G::kSplit3) {
          sp = v / btiles;
          const int r = v - sp * btiles;
          z = r / tiles;
          u = r - z * tiles;
          kt0 = kt_begin(sp), kt1 = kt_begin(sp + 1);
        }
        int m0, n0;
        wgmma_ws_tile(u, crows, ntn, group_m, CL, rank, &m0, &n0);
        int prev = 0;
        for (int kt = kt0; kt < kt1; ++kt) {
          mbar_wait(&full[s], ph);
          const uint32_t a_base = smem_u32(stage(s)) + c * 64 * 128;
          const uint32_t b_base = smem_u32(stage(s)) + TileA::kBytes;
          const bool fresh = G::kSplit3 ? (kt - kt0) % kPromote == 0 : kt == kt0;
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < G::kKSteps; ++kk) {
            const uint64_t da = wgmma_desc_sw128(a_base + kk * 32, 16, 1024);
            wgmma_ss<T, BN, TB>(d, da, desc_b(b_base, kk), (!fresh || kk > 0) ? 1 : 0);
          }
          wgmma_commit();
          wgmma_wait<1>();  // the batch of k-tile kt - 1 is done: its stage may be refilled
          if (kt > kt0) release(prev);
          prev = s;
          if (++s == S) s = 0, ph ^= 1;
          if constexpr (G::kSplit3) {
            if ((kt - kt0) % kPromote == kPromote - 1 || kt == kt1 - 1) {
              wgmma_wait<0>();
              wgmma_fence_acc(d);
#pragma unroll
              for (int i = 0; i < BN / 2; ++i)
                total[i] = (kt - kt0 < kPromote ? 0.0f : total[i]) + d[i];
            }
          }
        }
        wgmma_wait<0>();
        wgmma_fence_acc(d);
        release(prev);
        const int row0 = m0 + 64 * c;
        if (row0 >= M) continue;  // a cluster's tile row past the end (odd number of tile rows)
        if constexpr (G::kSplit3) {
          cbase = C + sp * split_stride + int64_t(z) * M * ldc;
          epilogue(total, row0, n0);
        } else {
          epilogue(d, row0, n0);
        }
      }
    }
    if (kSmemC && tma_store && leader) bulk_wait<0>();  // the last stores done before exit
  }
  // No CTA leaves while its peer may still arrive on its barriers or multicast into it.
  if constexpr (CL > 1) cluster_sync_all();
}

// ---- 16-bit operands that TMA cannot address in place -----------------------------------------
//
// TMA needs 16-byte row strides: a weight stored K x N with N not a multiple of 8 (a prime N), or
// any operand with such a K, cannot stream into the wgmma GEMM as stored. gemm16_staged_launch
// copies them first: B as B^T [N, Kp] (K-major, whichever way it is stored) and, where A's rows
// are not aligned, A as [M, Kp]; Kp is K rounded up to 64, zeros past K. One side of the copy:
// X's R x K view, element (r, k) at X[r * ld + k] (trans 0) or X[k * ld + r] (trans 1).
template <typename T>
struct Stage16Side {
  const T* x;
  T* y;
  int rows;
  int trans;
  int64_t ld;
};

// Grid (a_tiles + b row tiles) x (Kp / 64) blocks, one dimension (a y-grid stops at 65535 row
// tiles), block (32, 8): one 64 x 64 tile (rows r, columns k)
// through shared memory, so that reads are coalesced whichever way the side is stored and the
// copy's rows are written in 16-byte stores. Each thread has its 16 loads in flight before it
// stores any (a copy of one element per load and store ran 34 us for a 12.5 MB weight on an
// H200: latency, not bandwidth). Row tiles below a_tiles are A's (none where A is read in
// place), the rest B's. Kp is a multiple of 64.
template <typename T>
__global__ void __launch_bounds__(256)
    stage16_kernel(Stage16Side<T> a, Stage16Side<T> b, int K, int Kp, int a_tiles) {
  pdl_entry();                                     // before any load or store (base.cuh)
  __shared__ __align__(16) uint16_t tile[64][66];  // 33 words a row: conflict-free columns
  const int ktiles = Kp / 64, t = int(blockIdx.x / unsigned(ktiles));
  const bool on_a = t < a_tiles;
  const int k0 = int(blockIdx.x % unsigned(ktiles)) * 64, r0 = 64 * (on_a ? t : t - a_tiles);
  const uint16_t* X = reinterpret_cast<const uint16_t*>(on_a ? a.x : b.x);
  uint16_t* Y = reinterpret_cast<uint16_t*>(on_a ? a.y : b.y);
  const int R = on_a ? a.rows : b.rows, trans = on_a ? a.trans : b.trans;
  const int64_t ld = on_a ? a.ld : b.ld;
  const int tx = threadIdx.x, ty = threadIdx.y;
  uint16_t v[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int i = ty + 8 * (j >> 1), c = tx + 32 * (j & 1);
    if (trans) {  // row k0 + i of the stored K x R matrix, column r0 + c
      const int k = k0 + i, r = r0 + c;
      v[j] = (k < K && r < R) ? X[int64_t(k) * ld + r] : uint16_t(0);
    } else {
      const int r = r0 + i, k = k0 + c;
      v[j] = (k < K && r < R) ? X[int64_t(r) * ld + k] : uint16_t(0);
    }
  }
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int i = ty + 8 * (j >> 1), c = tx + 32 * (j & 1);
    if (trans) {
      tile[c][i] = v[j];
    } else {
      tile[i][c] = v[j];
    }
  }
  __syncthreads();
  // 64 rows x 8 chunks of 8 columns: two 16-byte stores per thread.
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int e = ty * 32 + tx + 256 * j, rr = e >> 3, q = e & 7;
    if (r0 + rr >= R) continue;
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&tile[rr][8 * q]);
    *reinterpret_cast<uint4*>(Y + int64_t(r0 + rr) * Kp + k0 + 8 * q) =
        make_uint4(w[0], w[1], w[2], w[3]);
  }
}

#ifndef __CUDACC_RTC__
// Launches wgmma_gemm_kernel; grid (ceil(N / 128), ceil(M / (64 WG))). The device must be sm_90
// and the code built for sm_90a.
template <class G, typename TO, class Epi>
inline cudaError_t wgmma_gemm_launch(const typename G::TileA::Elem* A, int64_t lda,
                                     const typename G::TileA::Elem* B, int64_t ldb, TO* C,
                                     int64_t ldc, int M, int N, int K, Epi epi,
                                     cudaStream_t stream) {
  constexpr auto kernel = wgmma_gemm_kernel<G, TO, Epi>;
  cudaError_t e = require_sm90();
  if (e == cudaSuccess) e = raise_smem_limit_once<kernel>(G::kSmemBytes);
  if (e != cudaSuccess) return e;
  dim3 grid(ceil_div(N, G::kBN), ceil_div(M, G::kBM));
  return launch(kernel, grid, dim3(G::kThreads), G::kSmemBytes, stream, 1, A, lda, B, ldb, C, ldc,
                M, N, K, epi);
}

// Tuning knobs of wgmma_ws_gemm_launch, for measurement tools (defaults otherwise).
struct WgmmaWsTuning {
  int group_m = 8;        // cluster rows per raster group
  bool tma_store = true;  // stage 16-bit outputs through shared memory + TMA stores
  int max_clusters = 0;   // persistent grid size cap (0: as many as fit at once)
  // Split-K (not with PP): `splits` f32 partials of C, split_stride elements apart (C must then be
  // float and the epilogue the identity; the caller sums them).
  int splits = 1;
  int64_t split_stride = 0;
  // Float operands only: `batch` products, A and B (B^T) each [batch, rows, lda / ldb] densely,
  // C's batch index z at C + z M ldc.
  int batch = 1;
};

// Encodes the tensor maps and launches wgmma_ws_gemm_kernel: a persistent grid of
// min(cluster tiles, clusters resident at once) clusters of G::kCluster CTAs. B1 is read only when
// G::kNB == 2; ldb is B's row stride, or B^T's where G::kKB. sm_90a only. The number of resident
// clusters is asked once per instantiation (one GPU per process assumed), so later launches can be
// captured in CUDA graphs.
template <class G, typename TO, class Epi>
inline cudaError_t wgmma_ws_gemm_launch(const typename G::TileA::Elem* A, int64_t lda,
                                        const typename G::TileA::Elem* B0,
                                        const typename G::TileA::Elem* B1, int64_t ldb, TO* C,
                                        int64_t ldc, int M, int N, int K, Epi epi,
                                        cudaStream_t stream,
                                        const WgmmaWsTuning& tune = WgmmaWsTuning()) {
  cudaError_t e = require_sm90();
  if (e != cudaSuccess) return e;
  if (M < 1 || N < 1 || K < 1) return cudaErrorInvalidValue;
  if (G::kSplit3 && K % G::kBK != 0) return cudaErrorInvalidValue;
  TmaDesc ma, mb0, mb1, mc;
  const int64_t kcols = G::kSplit3 ? 2 * int64_t(K) : K;  // hi | lo
  const typename G::TileA::Elem* b1 = G::kNB > 1 ? B1 : B0;
  if (tune.batch < 1 || (tune.batch > 1 && !G::kSplit3)) return cudaErrorInvalidValue;
  if (G::kSplit3) {  // [batch, rows, 2K] maps, boxes of one matrix
    e = tma_encode_3d(&ma, A, tune.batch, M, kcols, lda, int64_t(M) * lda, G::kBM, G::kBK, true);
    if (e == cudaSuccess)
      e = tma_encode_3d(&mb0, B0, tune.batch, N, kcols, ldb, int64_t(N) * ldb, 64, G::kBK, true);
    mb1 = mb0;
  } else {
    e = tma_encode_2d(&ma, A, M, kcols, lda, G::kBM, G::kBK, true);
  }
  if (G::kSplit3) {
    // encoded above
  } else if (G::kKB) {  // B^T [N, K]: boxes of 64 n x one k-tile
    if (e == cudaSuccess) e = tma_encode_2d(&mb0, B0, N, kcols, ldb, 64, G::kBK, true);
    if (e == cudaSuccess) e = tma_encode_2d(&mb1, b1, N, kcols, ldb, 64, G::kBK, true);
  } else {
    if (e == cudaSuccess) e = tma_encode_2d(&mb0, B0, K, N, ldb, G::kBK, 64, true);
    if (e == cudaSuccess) e = tma_encode_2d(&mb1, b1, K, N, ldb, G::kBK, 64, true);
  }
  if (e != cudaSuccess) return e;
  int tma_store = 0;
  if (G::kStageC && sizeof(TO) == 2 && tune.tma_store)
    tma_store = tma_encode_2d(&mc, C, M, N, ldc, 64, 64, true) == cudaSuccess ? 1 : 0;
  if (!tma_store) mc = ma;  // unused
  constexpr auto kernel = wgmma_ws_gemm_kernel<G, TO, Epi>;
  e = raise_smem_limit_once<kernel>(G::kSmemBytes);
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = G::kCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.blockDim = dim3(G::kThreads);
  cfg.dynamicSmemBytes = G::kSmemBytes;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = G::kCluster > 1 ? 1 : 0;
  static int resident = 0;  // clusters resident at once on this GPU
  if (resident == 0) {
    if (G::kCluster > 1) {
      cfg.gridDim = dim3(G::kCluster);
      e = cudaOccupancyMaxActiveClusters(&resident, kernel, &cfg);
    } else {
      e = device_attribute(cudaDevAttrMultiProcessorCount, resident);
    }
    if (e != cudaSuccess) return e;
    if (resident < 1) return cudaErrorInvalidConfiguration;
  }
  if (tune.splits < 1 || (tune.splits > 1 && (G::kPP || sizeof(TO) != 4)))
    return cudaErrorInvalidValue;
  const int tiles =
      ceil_div(ceil_div(M, G::kBM), G::kCluster) * ceil_div(N, G::kBN) * tune.splits * tune.batch;
  int clusters = min_i(tiles, resident);
  if (tune.max_clusters > 0) clusters = min_i(clusters, tune.max_clusters);
  cfg.gridDim = dim3(clusters * G::kCluster);
  unsigned n = cfg.numAttrs;
  add_pdl_attribute(attr, n);
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, ma, mb0, mb1, mc, C, ldc, M, N, K, max_i(1, tune.group_m),
                            tma_store, tune.splits, tune.split_stride, tune.batch, epi);
}
// Kp of gemm16_staged_launch (K rounded up to 64), and its workspace: room for both operands'
// copies (A's is used only where A's rows are not 16-byte aligned), each 16-byte aligned.
inline int stage16_padded_k(int K) {
  return (K + 63) / 64 * 64;
}
inline size_t gemm16_staged_workspace(int M, int N, int K) {
  return (size_t(M) + size_t(N)) * size_t(stage16_padded_k(K)) * 2;
}

// The staging pass of gemm16_staged_launch alone (one launch, none where nothing needs a copy):
// on return a2 / lda2 and b2 / ldb2 name the operands to read, 16-byte aligned with row strides
// of a multiple of 8: A as given where K and its rows are aligned, else its copy [M, Kp]; B^T as
// given where K is and B is K-major with aligned rows, else its copy [N, Kp]. Both are copied
// where K is not a multiple of 8 or under 64; the copies are zero past K, so a consumer of
// copies may read up to Kp columns of both.
template <typename T>
inline cudaError_t stage16_launch(const T* A, int64_t lda, const T* B, int64_t ldb, bool b_kmajor,
                                  int M, int N, int K, void* workspace, cudaStream_t stream,
                                  const T*& a2, int64_t& lda2, const T*& b2, int64_t& ldb2) {
  if (M < 1 || N < 1 || K < 1 || workspace == nullptr || lda < K || ldb < (b_kmajor ? K : N) ||
      (reinterpret_cast<uintptr_t>(workspace) & 15) != 0)
    return cudaErrorInvalidValue;
  const int Kp = stage16_padded_k(K);
  T* ca = static_cast<T*>(workspace);
  T* cb = ca + size_t(M) * Kp;
  // With K not a multiple of 8, or under 64, both are copied, so that a consumer may read K
  // rounded up to 8 or to 64 (zeros past K in both).
  const bool full = K % 8 == 0 && K >= 64;
  const bool a_in_place = full && lda % 8 == 0 && (reinterpret_cast<uintptr_t>(A) & 15) == 0;
  const bool b_in_place =
      full && b_kmajor && ldb % 8 == 0 && (reinterpret_cast<uintptr_t>(B) & 15) == 0;
  a2 = a_in_place ? A : ca, lda2 = a_in_place ? lda : Kp;
  b2 = b_in_place ? B : cb, ldb2 = b_in_place ? ldb : Kp;
  const int a_tiles = a_in_place ? 0 : (M + 63) / 64, b_tiles = b_in_place ? 0 : (N + 63) / 64;
  if (a_tiles + b_tiles == 0) return cudaSuccess;
  const Stage16Side<T> sa{A, ca, M, 0, lda};
  const Stage16Side<T> sb{B, cb, N, b_kmajor ? 0 : 1, ldb};
  const int64_t blocks = int64_t(a_tiles + b_tiles) * (Kp / 64);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  return launch(stage16_kernel<T>, dim3(unsigned(blocks)), dim3(32, 8), 0, stream, 1, sa, sb, K, Kp,
                a_tiles);
}

// C [M, N] (row stride ldc, any) = epi(A B) for 16-bit A [M, K] (row stride lda) and B [K, N]
// (B[k * ldb + n]) or, with b_kmajor, B^T [N, K] (B[n * ldb + k]), whatever their strides: the
// staging pass (stage16_launch), then the ping-pong wgmma GEMM reading B K-major. Epi as
// wgmma_ws_gemm_launch's (epi(v, 0, m, n)). sm_90a only.
template <typename T, typename TO, class Epi>
inline cudaError_t gemm16_staged_launch(const T* A, int64_t lda, const T* B, int64_t ldb,
                                        bool b_kmajor, TO* C, int64_t ldc, int M, int N, int K,
                                        void* workspace, Epi epi, cudaStream_t stream) {
  const T *a2, *b2;
  int64_t lda2, ldb2;
  cudaError_t e =
      stage16_launch(A, lda, B, ldb, b_kmajor, M, N, K, workspace, stream, a2, lda2, b2, ldb2);
  if (e != cudaSuccess) return e;
  // K under 64 read as one whole k-tile of the zero-padded copies: with a single partial k-tile
  // (K 7 or 33, B K-major, 20000 rows by 513) the GEMM hung on an H200 (session 25; not yet
  // understood); K rounded up to 8 otherwise.
  using G = WgmmaGemmWS<T, 1, 6, 1, true, true>;
  const int kg = K < 64 ? 64 : (K + 7) / 8 * 8;
  return wgmma_ws_gemm_launch<G, TO, Epi>(a2, lda2, b2, b2, ldb2, C, ldc, M, N, kg, epi, stream);
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_WGMMA_CUH
