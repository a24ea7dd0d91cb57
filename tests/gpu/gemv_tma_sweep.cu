// Decode-GEMV prototype sweep on the GPU (a measurement tool, not a test): Y[M, N] = X[M, K] W[K, N]
// (f16 in, f32 accumulate, f16 out, all row-major) with W streamed through shared memory by the
// TMA copy engine, against the current runtime GEMV (runtime/gemv.cuh, configured as the planner in
// codegen/schedule.cpp configures it) and a pure read-bandwidth kernel, on the decode shapes.
//
// Build and run (CUDA toolkit only, sm_90a):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tests/gpu/gemv_tma_sweep.cu -o gemv_tma_sweep
//   ./gemv_tma_sweep            # all shapes;  ./gemv_tma_sweep 0,2  only shapes 0 and 2
//
// Prototype (gemv_tma_kernel): one block = 4 consumer warps (one warpgroup) + 1 producer warp.
// The block owns BN columns and one k-range (split-K over gridDim.y). Lane 0 of the producer warp
// streams stages of BK rows of K into an ST-deep ring: per stage BN / 64 TMA boxes of W
// ([BK rows][64 columns], 128-byte swizzle) and BK / 64 boxes of X ([8 MT rows][64 k], same
// swizzle; rows >= M and k >= K are zero-filled by the copy engine), completing on full[s]; the
// 128 consumer threads release a stage by arriving on empty[s] (count 128). So the bytes in
// flight are the ring, not registers. The consumers compute Y^T = W^T X^T on tensor cores:
//   WG = true : wgmma m64nNk16 (N = 8 MT), A = W^T from the W panel (M-major: imm-trans-a = 1),
//               B = X^T from the X panel (K-major), one m64 instruction per 64-column panel;
//   WG = false: mma.sync m16n8k16, A = W^T via ldmatrix.trans (warp w takes columns 16w..16w+15
//               of every panel), B = X^T via ldmatrix.
// Both leave thread (warp w, g = lane / 4, t = lane % 4) with acc[j][4 mt + 2 h + e] = the sum for
// column n0 + 64 j + 16 w + g + 8 h and row m = 8 mt + 2 t + e. Partials of the k-splits meet in
// shared memory (the ring, reused): with splits > 1 the splits of a column block are one cluster
// (1, splits, 1) and each CTA stores into the owner of each 16-column unit (DSMEM), the owner sums
// its units over source ranks 0..splits-1 in order (deterministic) and writes f16.
//
// Correctness: per configuration, X and W (copy 0) get fresh random values in [-1, 1), the output
// is poisoned with NaN, one call runs, and 256 sampled columns (all M rows) are compared with a
// CPU double reference (||out - ref|| / ||ref|| <= 5e-3; no NaN anywhere in the output). A
// failing configuration is not timed.
// Timing: as gemv_sweep.cu (tests/gpu/gpu_timing.h): medians of 15 CUDA-graph replays of 20 calls,
// W rotating over copies totalling > 200 MB. GB/s counts W bytes only; % is of the cudaMemcpy
// device-to-device rate measured at start (bytes read + written).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../runtime/kiln_runtime.cuh"

using namespace kiln::rt;

// The configuration being run, named in any CUDA error (a trapped kernel ends the process there).
static char g_current[160] = "setup";

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      fflush(stdout);                                                                         \
      fprintf(stderr, "%s:%d: %s: %s\n  while running: %s\n", __FILE__, __LINE__, #x,         \
              cudaGetErrorString(e_), g_current);                                             \
      exit(1);                                                                                \
    }                                                                                         \
  } while (0)

#include "gpu_timing.h"

// ---- Local primitives (kiln: candidates for runtime/copy.cuh, tma.cuh, wgmma.cuh) --------------

// kiln: mbar_wait with a bound: spins on try_wait and traps after 2^32 clocks (~2 s), so that a
// protocol bug shows as a launch error instead of a hang.
KILN_DEV void mbar_wait_bounded(uint64_t* bar, uint32_t parity) {
  if (mbar_try_wait(bar, parity)) return;
  const long long t0 = clock64();
  while (!mbar_try_wait(bar, parity)) {
    if (clock64() - t0 > (1ll << 32)) __trap();
  }
}

// kiln: 8-byte store into (possibly another CTA's) shared memory at a shared::cluster address.
KILN_DEV void dsmem_store2(uint32_t caddr, float a, float b) {
#if KILN_RT_SM90
  asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};\n" ::"r"(caddr), "f"(a), "f"(b)
               : "memory");
#else
  __trap();
#endif
}

// kiln: an L2 policy that marks lines evict-first (for data read exactly once).
KILN_DEV uint64_t l2_policy_evict_first() {
#if KILN_RT_SM90
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
#else
  __trap();
  return 0;
#endif
}

// kiln: tma_load_2d with an L2 cache-policy hint.
KILN_DEV void tma_load_2d_hint(void* smem_dst, const TmaDesc* desc, int row, int col, uint64_t* bar,
                               uint64_t policy) {
#if KILN_RT_SM90
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_u32(smem_dst)),
      "l"(desc), "r"(col), "r"(row), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
#else
  __trap();
#endif
}

// kiln: d (64 x N, f32) += A (64 x 16) * B (16 x N) with A M-major (imm-trans-a = 1: the smem tile
// is [16 k][64 m], m contiguous, 128-byte swizzle) and B K-major (imm-trans-b = 0: [N][16 k] rows,
// k contiguous). N = 8, 16 or 32; d holds N / 2 floats per thread: d[4 i + 2 h + e] =
// D[16 w + g + 8 h][8 i + 2 t + e].
template <int N>
KILN_DEV void wgmma_m64k16_ta(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b);

template <>
KILN_DEV void wgmma_m64k16_ta<8>(float (&d)[4], uint64_t desc_a, uint64_t desc_b) {
#if KILN_RT_WGMMA
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 1, "
      "0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(desc_a), "l"(desc_b), "r"(1));
#else
  __trap();
#endif
}
template <>
KILN_DEV void wgmma_m64k16_ta<16>(float (&d)[8], uint64_t desc_a, uint64_t desc_b) {
#if KILN_RT_WGMMA
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, "
      "%9, p, 1, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "l"(desc_a), "l"(desc_b), "r"(1));
#else
  __trap();
#endif
}
template <>
KILN_DEV void wgmma_m64k16_ta<32>(float (&d)[16], uint64_t desc_a, uint64_t desc_b) {
#if KILN_RT_WGMMA
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "r"(1));
#else
  __trap();
#endif
}

// ---- The prototype ---------------------------------------------------------------------------

// Geometry of gemv_tma_kernel<WG, MT, BN, BK, ST>: MT m-tiles of 8 rows (M <= 8 MT), BN columns
// per block, BK rows of K per stage, ST stages.
template <int MT, int BN, int BK, int ST>
struct TmaGemv {
  static_assert(MT == 1 || MT == 2 || MT == 4, "8, 16 or 32 padded rows");
  static_assert(BN == 64 || BN == 128 || BN == 256, "64-column panels, up to 4");
  static_assert(BK % 64 == 0 && BK >= 64 && BK <= 256, "64-k X panels; TMA box rows <= 256");
  static_assert(ST >= 2, "a ring");
  static constexpr int kMP = 8 * MT;              // padded rows of X / accumulator columns
  static constexpr int kNJ = BN / 64;             // W panels per stage
  static constexpr int kNX = BK / 64;             // X panels per stage
  static constexpr int kWPanel = BK * 128;        // bytes: [BK][64] f16, 128B-swizzled
  static constexpr int kXPanel = kMP * 128;       // bytes: [MP][64] f16, 128B-swizzled
  static constexpr int kStage = kNJ * kWPanel + kNX * kXPanel;
  static constexpr int kRing = ST * kStage;
  static constexpr int kSmem = kRing + 1024;      // + slack for 1024-byte alignment
  static constexpr int kThreads = 160;            // 4 consumer warps + 1 producer warp
  static constexpr int kUnits = BN / 16;          // reduction units: 16 columns each
  static constexpr int kPitch = kMP + 8;          // floats per column row of a unit slot
  static constexpr int kSlotFloats = 16 * kPitch;
  static constexpr int kAcc = 4 * MT;             // accumulator floats per panel per thread
  static_assert(kWPanel % 1024 == 0 && kXPanel % 1024 == 0, "swizzle atoms stay aligned");
  // Bytes of the reduction slots for a split count (must fit in the ring).
  static int red_bytes(int splits) { return ceil_div(kUnits, splits) * splits * kSlotFloats * 4; }
};

// grid = (ceil(N / BN), splits), block 160, dynamic smem TmaGemv::kSmem; splits > 1 needs cluster
// dims (1, splits, 1), splits <= 8. k_chunk: rows of K per split, a multiple of BK.
// map_w: W [K][N], box [BK][64], 128B swizzle; map_x: X [M][K], box [8 MT][64], 128B swizzle.
template <bool WG, int MT, int BN, int BK, int ST>
__global__ void __launch_bounds__(160, 2)
    gemv_tma_kernel(const __grid_constant__ TmaDesc map_w, const __grid_constant__ TmaDesc map_x,
                    __half* __restrict__ out, int M, int N, int K, int k_chunk, int evict_first) {
#if KILN_RT_WGMMA
  using G = TmaGemv<MT, BN, BK, ST>;
  extern __shared__ __align__(1024) unsigned char tma_gemv_smem[];
  __shared__ __align__(8) uint64_t full[ST], empty[ST];
  unsigned char* const ring =
      tma_gemv_smem + ((1024 - (smem_u32(tma_gemv_smem) & 1023)) & 1023);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int n0 = blockIdx.x * BN;
  const int splits = gridDim.y;
  const int k_begin = blockIdx.y * k_chunk;
  const int k_end = min_i(K, k_begin + k_chunk);
  const int ntiles = k_end > k_begin ? ceil_div(k_end - k_begin, BK) : 0;
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < ST; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 128);
    }
    fence_mbar_init();
  }
  __syncthreads();

  float acc[G::kNJ][G::kAcc];
#pragma unroll
  for (int j = 0; j < G::kNJ; ++j)
#pragma unroll
    for (int i = 0; i < G::kAcc; ++i) acc[j][i] = 0.0f;

  if (warp == 4) {
    // Producer: one thread issues every copy.
    if (lane == 0) {
      tma_prefetch_desc(&map_w);
      tma_prefetch_desc(&map_x);
      const uint64_t policy = l2_policy_evict_first();
      for (int it = 0; it < ntiles; ++it) {
        const int s = it % ST;
        if (it >= ST) mbar_wait_bounded(&empty[s], ((it / ST) - 1) & 1);
        unsigned char* const stage = ring + s * G::kStage;
        mbar_arrive_expect_tx(&full[s], G::kStage);
        const int k = k_begin + it * BK;
#pragma unroll
        for (int j = 0; j < G::kNJ; ++j) {
          if (evict_first)
            tma_load_2d_hint(stage + j * G::kWPanel, &map_w, k, n0 + 64 * j, &full[s], policy);
          else
            tma_load_2d(stage + j * G::kWPanel, &map_w, k, n0 + 64 * j, &full[s]);
        }
#pragma unroll
        for (int p = 0; p < G::kNX; ++p)
          tma_load_2d(stage + G::kNJ * G::kWPanel + p * G::kXPanel, &map_x, 0, k + 64 * p,
                      &full[s]);
      }
    }
    __syncwarp();
  } else if constexpr (WG) {
    // Consumer warpgroup, wgmma: per stage BK / 16 k-steps x kNJ panels, one committed batch;
    // the previous stage is released once its batch has completed (wait_group 1).
    for (int it = 0; it < ntiles; ++it) {
      const int s = it % ST;
      mbar_wait_bounded(&full[s], (it / ST) & 1);
      const uint32_t base = smem_u32(ring + s * G::kStage);
      const uint32_t xb = base + G::kNJ * G::kWPanel;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        // B = X^T, K-major: rows m 128 bytes apart, 8-row groups 1024 apart (SBO); the k16 step
        // moves 32 bytes inside the swizzled row.
        const uint64_t db = wgmma_desc_sw128(xb + (kk >> 2) * G::kXPanel + (kk & 3) * 32, 16, 1024);
#pragma unroll
        for (int j = 0; j < G::kNJ; ++j) {
          // A = W^T, M-major: one 64-column swizzle atom wide; the two 8-k groups of the k16 step
          // are 1024 bytes apart (SBO; LBO, the stride between 64-wide atoms, is unused at m64
          // and set to the same value).
          const uint64_t da = wgmma_desc_sw128(base + j * G::kWPanel + kk * 2048, 1024, 1024);
          wgmma_m64k16_ta<G::kMP>(acc[j], da, db);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();
      if (it > 0) mbar_arrive(&empty[(it - 1) % ST]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int j = 0; j < G::kNJ; ++j) wgmma_fence_acc(acc[j]);
  } else {
    // Consumer warps, mma.sync: warp w computes columns 16 w .. 16 w + 15 of every panel.
    const int r8 = lane & 7, mi = lane >> 3;
    // ldmatrix.trans of W: matrix mi = (k half mi >> 1, n half mi & 1); lane supplies row r8.
    const uint32_t w_off = (r8 + 8 * (mi >> 1)) * 128 + (((2 * warp + (mi & 1)) ^ r8) << 4);
    // ldmatrix of X (rows m, k contiguous): matrix mi = (m half mi >> 1, k half mi & 1), for
    // each 16-k quarter kq of a 64-k panel.
    uint32_t x_off[4];
#pragma unroll
    for (int kq = 0; kq < 4; ++kq)
      x_off[kq] = (r8 + (MT == 1 ? 0 : 8 * (mi >> 1))) * 128 + (((2 * kq + (mi & 1)) ^ r8) << 4);
    FragC c[G::kNJ][MT];
#pragma unroll
    for (int j = 0; j < G::kNJ; ++j)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c[j][mt].zero();
    for (int it = 0; it < ntiles; ++it) {
      const int s = it % ST;
      mbar_wait_bounded(&full[s], (it / ST) & 1);
      const uint32_t base = smem_u32(ring + s * G::kStage);
      const uint32_t xb = base + G::kNJ * G::kWPanel;
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        FragB b[MT];
        const uint32_t xp = xb + (kk >> 2) * G::kXPanel + x_off[kk & 3];
        if constexpr (MT == 1) {
          uint32_t r[2];
          ldmatrix_x2(r, xp);
          b[0].x[0] = r[0], b[0].x[1] = r[1];
        } else {
#pragma unroll
          for (int q = 0; q < MT / 2; ++q) {
            uint32_t r[4];
            ldmatrix_x4(r, xp + q * 2048);
            b[2 * q].x[0] = r[0], b[2 * q].x[1] = r[1];
            b[2 * q + 1].x[0] = r[2], b[2 * q + 1].x[1] = r[3];
          }
        }
#pragma unroll
        for (int j = 0; j < G::kNJ; ++j) {
          FragA a;
          ldmatrix_x4_trans(a.x, base + j * G::kWPanel + kk * 2048 + w_off);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) mma_16816<__half>(c[j][mt], a, b[mt]);
        }
      }
      mbar_arrive(&empty[s]);  // after the mmas that consumed this stage's fragments
    }
#pragma unroll
    for (int j = 0; j < G::kNJ; ++j)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[j][4 * mt + i] = c[j][mt].x[i];
  }

  // ---- Split-K reduction through the (now idle) ring, and the f16 store ----
  // Barrier 1: every CTA of the cluster has finished reading its ring (all copies landed and were
  // consumed), so the ring may be overwritten, also remotely.
  if (splits > 1) {
    cluster_arrive();
    cluster_wait();
  } else {
    __syncthreads();
  }
  float* const slots = reinterpret_cast<float*>(ring);  // [unit / splits][source][16][kPitch]
  const int rank = splits > 1 ? int(cluster_ctarank()) : 0;
  if (warp < 4) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < G::kNJ; ++j) {
      const int u = 4 * j + warp, owner = u % splits, q = u / splits;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float* p = slots + ((q * splits + rank) * 16 + g + 8 * h) * G::kPitch + 8 * mt + 2 * t;
          const float v0 = acc[j][4 * mt + 2 * h], v1 = acc[j][4 * mt + 2 * h + 1];
          if (splits > 1)
            dsmem_store2(dsmem_map(smem_u32(p), owner), v0, v1);
          else
            *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
        }
    }
  }
  // Barrier 2: all stores above are visible to their owners (release / acquire).
  if (splits > 1) {
    cluster_arrive();
    cluster_wait();
  } else {
    __syncthreads();
  }
  const int nq = rank < G::kUnits ? (G::kUnits - rank + splits - 1) / splits : 0;
  const int total = nq * 8 * M;
  for (int i = tid; i < total; i += G::kThreads) {
    const int m = i % M, r = i / M, np = r & 7, q = r >> 3;
    const int u = q * splits + rank;
    const float* p = slots + (q * splits) * G::kSlotFloats + (2 * np) * G::kPitch + m;
    float s0 = 0.0f, s1 = 0.0f;
    for (int src = 0; src < splits; ++src) {  // fixed order: deterministic
      s0 += p[src * G::kSlotFloats];
      s1 += p[src * G::kSlotFloats + G::kPitch];
    }
    const int n = n0 + 16 * u + 2 * np;
    if (n < N)
      *reinterpret_cast<__half2*>(out + static_cast<int64_t>(m) * N + n) = __floats2half2_rn(s0, s1);
  }
#else
  __trap();
#endif
}

template <bool WG, int MT, int BN, int BK, int ST>
struct TmaRunner {
  using G = TmaGemv<MT, BN, BK, ST>;
  static constexpr auto kernel = gemv_tma_kernel<WG, MT, BN, BK, ST>;
  static int chunk(int K, int splits) { return round_up(ceil_div(K, splits), BK); }
  static cudaLaunchConfig_t config(int N, int splits, cudaStream_t st, cudaLaunchAttribute* attr) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(ceil_div(N, BN), splits, 1);
    cfg.blockDim = dim3(G::kThreads, 1, 1);
    cfg.dynamicSmemBytes = G::kSmem;
    cfg.stream = st;
    if (splits > 1) {
      attr->id = cudaLaunchAttributeClusterDimension;
      attr->val.clusterDim.x = 1;
      attr->val.clusterDim.y = splits;
      attr->val.clusterDim.z = 1;
      cfg.attrs = attr;
      cfg.numAttrs = 1;
    }
    return cfg;
  }
  static cudaError_t prepare() {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::kSmem);
  }
  static cudaError_t launch(const TmaDesc& mw, const TmaDesc& mx, __half* out, int M, int N, int K,
                            int splits, int ef, cudaStream_t st) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = config(N, splits, st, &attr);
    return cudaLaunchKernelEx(&cfg, kernel, mw, mx, out, M, N, K, chunk(K, splits), ef);
  }
};

// ---- Reference kernels ------------------------------------------------------------------------

// Pure read bandwidth: sums W with 16-byte streaming loads, 8 in flight per thread.
__global__ void __launch_bounds__(512) read_bw_kernel(const uint4* __restrict__ p, int64_t n16,
                                                      uint32_t* __restrict__ sink) {
  constexpr int U = 8;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t a = 0;
  for (; i + (U - 1) * stride < n16; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = ld_stream_128(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) a += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = ld_stream_128(p + i);
    a += v.x + v.y + v.z + v.w;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  if ((threadIdx.x & 31) == 0) sink[blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5)] = a;
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// p[i] = uniform in [-1, 1) from a hash of (i, seed), rounded to f16.
__global__ void fill_random(__half* p, int64_t n, uint64_t seed) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t h = uint32_t(mix64(uint64_t(i) + seed * 0x9e3779b97f4a7c15ull) >> 32);
    p[i] = __float2half_rn(float(h >> 8) * (1.0f / 8388608.0f) - 1.0f);
  }
}
// out[c][k] = W[k][cols[c]] (as float), for the CPU reference.
__global__ void gather_cols(const __half* W, int N, int K, const int* cols, int ncols, float* out) {
  const int64_t total = int64_t(ncols) * K, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int c = int(i % ncols), k = int(i / ncols);
    out[int64_t(c) * K + k] = __half2float(W[int64_t(k) * N + cols[c]]);
  }
}

// ---- Host harness ----------------------------------------------------------------------------

static double g_copy_gbps = 0;
static int g_sms = 0;
static uint64_t g_seed = 1;

struct Shape {
  int M, K, N;
};

struct Bufs {
  int M, K, N, copies;
  std::vector<__half*> W;
  __half *X, *out;
  int* d_cols;
  float* d_wcols;
  uint32_t* sink;
  std::vector<int> cols;
};

static constexpr int kSampleCols = 256;

static Bufs alloc_bufs(const Shape& s) {
  Bufs b;
  b.M = s.M, b.K = s.K, b.N = s.N;
  const size_t wbytes = size_t(s.K) * s.N * sizeof(__half);
  b.copies = int(std::max<size_t>(2, (size_t(200) << 20) / wbytes + 1));
  b.W.resize(b.copies);
  for (int c = 0; c < b.copies; ++c) {
    CK(cudaMalloc(&b.W[c], wbytes));
    fill_random<<<1024, 256>>>(b.W[c], int64_t(s.K) * s.N, 1000 + c);
    CK(cudaGetLastError());
  }
  CK(cudaMalloc(&b.X, size_t(s.M) * s.K * sizeof(__half)));
  CK(cudaMalloc(&b.out, size_t(s.M) * s.N * sizeof(__half)));
  // Sampled columns: the first, the last, and random others (distinct).
  std::mt19937 rng(12345u + s.N);
  std::vector<int> all(s.N);
  for (int i = 0; i < s.N; ++i) all[i] = i;
  std::shuffle(all.begin() + 1, all.end() - 1, rng);
  const int ns = std::min(kSampleCols, s.N);
  b.cols.assign(all.begin(), all.begin() + ns - 1);
  b.cols.push_back(s.N - 1);
  CK(cudaMalloc(&b.d_cols, b.cols.size() * sizeof(int)));
  CK(cudaMemcpy(b.d_cols, b.cols.data(), b.cols.size() * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&b.d_wcols, b.cols.size() * size_t(s.K) * sizeof(float)));
  CK(cudaMalloc(&b.sink, size_t(1) << 20));
  CK(cudaDeviceSynchronize());
  return b;
}

static void free_bufs(Bufs& b) {
  for (auto p : b.W) CK(cudaFree(p));
  CK(cudaFree(b.X));
  CK(cudaFree(b.out));
  CK(cudaFree(b.d_cols));
  CK(cudaFree(b.d_wcols));
  CK(cudaFree(b.sink));
}

// Fresh random X and W copy 0, output poisoned with NaN (0xffff). Returns nothing; the reference
// data is fetched by check_output.
static void refill(Bufs& b) {
  ++g_seed;
  fill_random<<<1024, 256>>>(b.W[0], int64_t(b.K) * b.N, g_seed * 7919);
  CK(cudaGetLastError());
  fill_random<<<256, 256>>>(b.X, int64_t(b.M) * b.K, g_seed * 7919 + 1);
  CK(cudaGetLastError());
  CK(cudaMemset(b.out, 0xff, size_t(b.M) * b.N * sizeof(__half)));
  CK(cudaDeviceSynchronize());
}

// Compares the output of the call just made (on X, W[0]) with a CPU double reference on the
// sampled columns; every output element must be a number (the NaN poison overwritten).
static bool check_output(Bufs& b, double* rel_err, int* nan_count) {
  CK(cudaDeviceSynchronize());
  const int ns = int(b.cols.size());
  gather_cols<<<512, 256>>>(b.W[0], b.N, b.K, b.d_cols, ns, b.d_wcols);
  CK(cudaGetLastError());
  std::vector<float> wc(size_t(ns) * b.K);
  std::vector<__half> xh(size_t(b.M) * b.K), oh(size_t(b.M) * b.N);
  CK(cudaMemcpy(wc.data(), b.d_wcols, wc.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(xh.data(), b.X, xh.size() * sizeof(__half), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(oh.data(), b.out, oh.size() * sizeof(__half), cudaMemcpyDeviceToHost));
  int nans = 0;
  for (const __half& v : oh)
    if (std::isnan(__half2float(v))) ++nans;
  std::vector<double> x(xh.size());
  for (size_t i = 0; i < xh.size(); ++i) x[i] = __half2float(xh[i]);
  double num = 0, den = 0;
  for (int c = 0; c < ns; ++c) {
    const float* w = wc.data() + size_t(c) * b.K;
    for (int m = 0; m < b.M; ++m) {
      const double* xr = x.data() + size_t(m) * b.K;
      double r = 0;
      for (int k = 0; k < b.K; ++k) r += xr[k] * double(w[k]);
      const double o = __half2float(oh[size_t(m) * b.N + b.cols[c]]);
      num += (o - r) * (o - r);
      den += r * r;
    }
  }
  *rel_err = std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
  *nan_count = nans;
  return nans == 0 && *rel_err <= 5e-3;
}

struct Result {
  std::string name;
  double us;
};

struct ShapeResults {
  Shape s;
  double bw_us = 0, rt_us = 0;
  std::string rt_name;
  std::vector<Result> tma;
};

static void print_line(const char* kind, const Shape& s, const char* cfg, const char* extra,
                       bool ok, double err, double us, double wbytes) {
  if (us > 0) {
    const double gbps = wbytes / (us * 1e3);
    printf("%-4s m%-2d K%-5d N%-5d %-34s %-34s %s err %.1e %8.2f us %6.0f GB/s %5.1f%%\n", kind,
           s.M, s.K, s.N, cfg, extra, ok ? "ok  " : "FAIL", err, us, gbps,
           100.0 * gbps / g_copy_gbps);
  } else {
    printf("%-4s m%-2d K%-5d N%-5d %-34s %-34s %s err %.1e   (not timed)\n", kind, s.M, s.K, s.N,
           cfg, extra, ok ? "ok  " : "FAIL", err);
  }
  fflush(stdout);
}

// One prototype configuration: check, then time.
template <bool WG, int MT, int BN, int BK, int ST>
static void run_tma(Bufs& b, ShapeResults& res, int splits_req, int ef) {
  using R = TmaRunner<WG, MT, BN, BK, ST>;
  using G = typename R::G;
  const Shape s = res.s;
  const int M = s.M, N = s.N, K = s.K;
  const int chunk = R::chunk(K, splits_req);
  const int splits = ceil_div(K, chunk);
  char cfg[96], extra[96];
  snprintf(cfg, sizeof cfg, "%s bn%d bk%d st%d s%d%s", WG ? "wgmma" : "mma  ", BN, BK, ST, splits,
           ef ? " ef" : "");
  if (M > 8 * MT || splits > 8 || G::red_bytes(splits) > G::kRing) {
    printf("TMA  m%-2d K%-5d N%-5d %-34s skipped (unsupported)\n", M, K, N, cfg);
    return;
  }
  snprintf(g_current, sizeof g_current, "TMA m%d K%d N%d %s", M, K, N, cfg);
  // Setup failures that leave the context usable skip the configuration instead of exiting.
  auto soft = [&](cudaError_t e, const char* what) {
    if (e == cudaSuccess) return false;
    cudaGetLastError();
    printf("TMA  m%-2d K%-5d N%-5d %-34s skipped: %s: %s\n", M, K, N, cfg, what,
           cudaGetErrorString(e));
    fflush(stdout);
    return true;
  };
  if (soft(R::prepare(), "smem attribute")) return;
  int per_sm = 0, clusters = 0;
  if (soft(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, R::kernel, G::kThreads,
                                                         G::kSmem),
           "occupancy"))
    return;
  const int cb = ceil_div(N, BN), blocks = cb * splits;
  double waves;
  if (splits > 1) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t lc = R::config(N, splits, 0, &attr);
    if (soft(cudaOccupancyMaxActiveClusters(&clusters, R::kernel, &lc), "cluster occupancy"))
      return;
    waves = clusters > 0 ? double(cb) / clusters : 99;
  } else {
    waves = per_sm > 0 ? double(blocks) / (per_sm * g_sms) : 99;
  }
  snprintf(extra, sizeof extra, "%4d blk %3dKB %d/SM cl%-3d wave%.2f", blocks, G::kSmem / 1024,
           per_sm, clusters, waves);
  if (per_sm == 0 || (splits > 1 && clusters == 0)) {
    printf("TMA  m%-2d K%-5d N%-5d %-34s %s cannot launch\n", M, K, N, cfg, extra);
    return;
  }
  // Tensor maps: one per W copy (box [BK][64]), one for X (box [8 MT][64]).
  std::vector<TmaDesc> mw(b.copies);
  TmaDesc mx;
  for (int c = 0; c < b.copies; ++c)
    if (soft(tma_encode_2d(&mw[c], b.W[c], K, N, N, BK, 64, true), "W tensor map")) return;
  if (soft(tma_encode_2d(&mx, b.X, M, K, K, 8 * MT, 64, true), "X tensor map")) return;
  // Correctness.
  refill(b);
  if (soft(R::launch(mw[0], mx, b.out, M, N, K, splits, ef, 0), "launch")) return;
  CK(cudaDeviceSynchronize());  // a trap here is sticky: the process ends, naming g_current
  double err;
  int nans;
  const bool ok = check_output(b, &err, &nans);
  double us = 0;
  if (ok) {
    us = time_us(
        [&](int i, cudaStream_t st) {
          CK(R::launch(mw[i % b.copies], mx, b.out, M, N, K, splits, ef, st));
        },
        20, 15);
    res.tma.push_back({cfg, us});
  } else if (nans) {
    snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " NaN%d", nans);
  }
  print_line("TMA", s, cfg, extra, ok, err, us, double(K) * N * 2);
}

// The runtime GEMV as codegen/schedule.cpp plans it (plan_schedule, OpClass::Matmul, "gemv").
struct RtPlan {
  int mt, warps_k, min_blocks, unroll, splits;
  bool wide, cluster;
};
static RtPlan plan_runtime(int M, int N, int K, int sms) {
  RtPlan p;
  const int64_t slabs = ceil_div(N, 64);
  p.mt = ceil_div(M, 8);
  p.wide = 2 * slabs >= 3 * int64_t(sms);
  p.warps_k = p.wide ? 8 : 4;
  p.min_blocks = p.wide || p.mt >= 4 ? 2 : 3;
  p.unroll = p.wide && p.mt >= 4 ? 1 : 2;
  int splits = p.wide ? 1 : int(std::max<int64_t>(1, 5 * int64_t(sms) / (2 * slabs)));
  splits = int(std::min<int64_t>(splits, std::max<int64_t>(1, K / (256 * p.warps_k))));
  p.cluster = splits > 1;
  if (p.cluster) splits = std::min(splits, 8);
  const int chunk = round_up(ceil_div(K, splits), 16);
  splits = ceil_div(K, chunk);
  if (splits == 1) p.cluster = false;
  p.splits = splits;
  return p;
}

template <int MT, int WK, int U, int MINB>
static void run_runtime_inst(Bufs& b, ShapeResults& res, const RtPlan& p) {
  const Shape s = res.s;
  const int M = s.M, N = s.N, K = s.K;
  float* ws = nullptr;
  int* cnt = nullptr;
  const int cb = gemv_col_blocks(N, 1);
  if (p.splits > 1 && !p.cluster) {
    CK(cudaMalloc(&ws, gemv_workspace_floats(N, 1, p.splits, MT, 1) * sizeof(float)));
    CK(cudaMalloc(&cnt, cb * sizeof(int)));
    CK(cudaMemset(cnt, 0, cb * sizeof(int)));
  }
  auto call = [&](int i, cudaStream_t st) {
    const __half* w = b.W[i % b.copies];
    if (p.cluster)
      CK((gemv_cluster_launch<__half, __half, MT, 1, 1, WK, U, MINB, GemvIdentity>(
          b.X, K, w, w, N, b.out, N, M, N, K, p.splits, st)));
    else
      CK((gemv_launch<__half, __half, MT, 1, 1, WK, U, MINB, GemvIdentity>(
          b.X, K, w, w, N, b.out, N, M, N, K, p.splits, ws, cnt, st)));
  };
  char cfg[96], extra[96];
  snprintf(cfg, sizeof cfg, "runtime mt%d w1x%d u%d minb%d s%d%s", MT, WK, U, MINB, p.splits,
           p.cluster ? " cl" : "");
  snprintf(extra, sizeof extra, "%4d blk (planner's choice)", cb * p.splits);
  snprintf(g_current, sizeof g_current, "RT m%d K%d N%d %s", M, K, N, cfg);
  refill(b);
  call(0, 0);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  double err;
  int nans;
  const bool ok = check_output(b, &err, &nans);
  double us = 0;
  if (ok) {
    us = time_us(call, 20, 15);
    res.rt_us = us;
    res.rt_name = cfg;
  }
  print_line("RT", s, cfg, extra, ok, err, us, double(K) * N * 2);
  if (ws) CK(cudaFree(ws));
  if (cnt) CK(cudaFree(cnt));
}

static void run_runtime(Bufs& b, ShapeResults& res) {
  const RtPlan p = plan_runtime(res.s.M, res.s.N, res.s.K, g_sms);
  // The planner's template arguments depend only on (wide, mt): six instances.
  if (!p.wide && p.mt == 1) run_runtime_inst<1, 4, 2, 3>(b, res, p);
  else if (!p.wide && p.mt == 2) run_runtime_inst<2, 4, 2, 3>(b, res, p);
  else if (!p.wide && p.mt == 4) run_runtime_inst<4, 4, 2, 2>(b, res, p);
  else if (p.wide && p.mt == 1) run_runtime_inst<1, 8, 2, 2>(b, res, p);
  else if (p.wide && p.mt == 2) run_runtime_inst<2, 8, 2, 2>(b, res, p);
  else if (p.wide && p.mt == 4) run_runtime_inst<4, 8, 1, 2>(b, res, p);
  else printf("RT   no instance for mt %d\n", p.mt);
}

static void run_bw(Bufs& b, ShapeResults& res, int blocks_per_sm) {
  const int64_t n16 = int64_t(b.K) * b.N * 2 / 16;
  const int grid = g_sms * blocks_per_sm;
  snprintf(g_current, sizeof g_current, "BW m%d K%d N%d grid %d", b.M, b.K, b.N, grid);
  const double us = time_us(
      [&](int i, cudaStream_t st) {
        read_bw_kernel<<<grid, 512, 0, st>>>(reinterpret_cast<const uint4*>(b.W[i % b.copies]),
                                             n16, b.sink);
        CK(cudaGetLastError());
      },
      20, 15);
  char cfg[96];
  snprintf(cfg, sizeof cfg, "read-bw %dx512 thr, 8x16B/thr", grid);
  print_line("BW", res.s, cfg, "(W bytes read, no compute)", true, 0.0, us,
             double(b.K) * b.N * 2);
  if (res.bw_us == 0 || us < res.bw_us) res.bw_us = us;
}

// Prototype configurations: kind (BN, BK, ST), variant, splits, evict-first.
enum Kind { K128x64s4, K128x64s8, K256x64s4, K256x64s3, K128x128s4, K64x64s8 };
struct Cfg {
  Kind kind;
  bool wg;
  int splits;
  int ef;
};

template <bool WG, int MT>
static void dispatch_kind(Bufs& b, ShapeResults& res, const Cfg& c) {
  switch (c.kind) {
    case K128x64s4: run_tma<WG, MT, 128, 64, 4>(b, res, c.splits, c.ef); break;
    case K128x64s8: run_tma<WG, MT, 128, 64, 8>(b, res, c.splits, c.ef); break;
    case K256x64s4: run_tma<WG, MT, 256, 64, 4>(b, res, c.splits, c.ef); break;
    case K256x64s3: run_tma<WG, MT, 256, 64, 3>(b, res, c.splits, c.ef); break;
    case K128x128s4: run_tma<WG, MT, 128, 128, 4>(b, res, c.splits, c.ef); break;
    case K64x64s8: run_tma<WG, MT, 64, 64, 8>(b, res, c.splits, c.ef); break;
  }
}
template <int MT>
static void run_cfg(Bufs& b, ShapeResults& res, const Cfg& c) {
  if (c.wg)
    dispatch_kind<true, MT>(b, res, c);
  else
    dispatch_kind<false, MT>(b, res, c);
}

static std::vector<Cfg> configs_for(const Shape& s) {
  const bool W = true, S = false;  // wgmma / mma.sync
  if (s.N == 6144) {  // 48 column blocks at bn128, 24 at bn256, 96 at bn64
    std::vector<Cfg> v = {{K128x64s8, W, 2, 0},  {K128x64s4, W, 3, 0},  {K128x64s4, W, 5, 0},
                          {K256x64s4, W, 5, 0},  {K256x64s3, W, 8, 0},  {K64x64s8, W, 1, 0},
                          {K64x64s8, W, 2, 0},   {K128x64s4, S, 3, 0},  {K256x64s4, S, 5, 0},
                          {K128x64s4, W, 5, 1}};
    if (s.M > 16) {
      v.push_back({K128x128s4, W, 2, 0});
      v.push_back({K128x64s8, S, 2, 0});
    }
    return v;
  }
  if (s.N == 16384) {  // 128 column blocks at bn128
    return {{K128x64s8, W, 1, 0}, {K128x128s4, W, 1, 0}, {K256x64s4, W, 2, 0},
            {K64x64s8, W, 1, 0},  {K128x64s4, W, 2, 0},  {K128x64s8, S, 1, 0},
            {K64x64s8, S, 1, 0},  {K128x64s8, W, 1, 1}};
  }
  if (s.N == 13312) {  // 104 column blocks at bn128, 52 at bn256
    return {{K128x64s8, W, 1, 0}, {K128x128s4, W, 1, 0}, {K256x64s3, W, 5, 0},
            {K128x64s4, W, 2, 0}, {K64x64s8, W, 1, 0},   {K256x64s4, W, 2, 0},
            {K128x64s8, S, 1, 0}, {K256x64s3, S, 5, 0}};
  }
  // N = 2304: 18 column blocks at bn128, 36 at bn64
  return {{K128x64s8, W, 7, 0},  {K128x64s8, W, 6, 0}, {K128x64s4, W, 7, 0},
          {K128x64s4, W, 8, 0},  {K64x64s8, W, 7, 0},  {K128x128s4, W, 7, 0},
          {K128x64s4, S, 7, 0},  {K64x64s8, S, 7, 0}};
}

static void run_shape(ShapeResults& res) {
  const Shape s = res.s;
  printf("\n== M %d  K %d  N %d: W %.1f MB, floor at copy rate %.2f us ==\n", s.M, s.K, s.N,
         double(s.K) * s.N * 2 / 1e6, double(s.K) * s.N * 2 / (g_copy_gbps * 1e3));
  fflush(stdout);
  Bufs b = alloc_bufs(s);
  run_bw(b, res, 4);
  run_bw(b, res, 2);
  run_runtime(b, res);
  const int mt = ceil_div(s.M, 8) <= 1 ? 1 : ceil_div(s.M, 8) <= 2 ? 2 : 4;
  for (const Cfg& c : configs_for(s)) {
    if (mt == 1) run_cfg<1>(b, res, c);
    else if (mt == 2) run_cfg<2>(b, res, c);
    else run_cfg<4>(b, res, c);
  }
  free_bufs(b);
}

int main(int argc, char** argv) {
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  g_sms = prop.multiProcessorCount;
  printf("device %s, sm_%d%d, %d SMs, L2 %d MB, smem/block optin %zu KB\n", prop.name, prop.major,
         prop.minor, g_sms, prop.l2CacheSize >> 20, prop.sharedMemPerBlockOptin >> 10);
  if (prop.major != 9) {
    fprintf(stderr, "needs an sm_90 GPU (built for sm_90a)\n");
    return 1;
  }
  {
    const size_t bytes = size_t(1) << 30;
    char *a, *c;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&c, bytes));
    CK(cudaMemset(a, 1, bytes));
    const double us = time_us(
        [&](int, cudaStream_t st) {
          CK(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice, st));
        },
        5, 7);
    g_copy_gbps = 2.0 * bytes / (us * 1e3);
    printf("copy (cudaMemcpy D2D 1 GiB, read + write): %.0f GB/s\n", g_copy_gbps);
    CK(cudaFree(a));
    CK(cudaFree(c));
  }
  const std::vector<Shape> shapes = {{32, 4096, 6144},  {16, 4096, 6144},  {1, 6656, 16384},
                                     {8, 6656, 16384},  {16, 6656, 16384}, {32, 6656, 16384},
                                     {32, 16384, 13312}, {32, 16384, 2304}, {1, 16384, 2304}};
  std::vector<bool> want(shapes.size(), argc < 2);
  if (argc >= 2) {
    std::string arg = argv[1];
    size_t pos = 0;
    while (pos <= arg.size()) {
      const size_t e = arg.find(',', pos);
      const std::string tok = arg.substr(pos, e == std::string::npos ? std::string::npos : e - pos);
      if (!tok.empty()) {
        const int i = atoi(tok.c_str());
        if (i >= 0 && i < int(shapes.size())) want[i] = true;
      }
      if (e == std::string::npos) break;
      pos = e + 1;
    }
  }
  printf("columns: kind shape config | blocks, dynamic smem, resident blocks/SM, max active "
         "clusters, waves | check | time\n");
  std::vector<ShapeResults> all;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (!want[i]) continue;
    ShapeResults r;
    r.s = shapes[i];
    run_shape(r);
    all.push_back(r);
  }
  printf("\n== Summary (us; floor = W bytes at the copy rate) ==\n");
  for (const ShapeResults& r : all) {
    const double floor_us = double(r.s.K) * r.s.N * 2 / (g_copy_gbps * 1e3);
    const Result* best = nullptr;
    for (const Result& t : r.tma)
      if (!best || t.us < best->us) best = &t;
    printf("SUMMARY m%-2d K%-5d N%-5d floor %6.2f  read-bw %6.2f  runtime %6.2f  best-tma %6.2f "
           "(%s)  tma/runtime %.3f\n",
           r.s.M, r.s.K, r.s.N, floor_us, r.bw_us, r.rt_us, best ? best->us : 0.0,
           best ? best->name.c_str() : "none", best && r.rt_us > 0 ? best->us / r.rt_us : 0.0);
  }
  return 0;
}
