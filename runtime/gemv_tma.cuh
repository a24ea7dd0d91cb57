// Kiln runtime, gemv_tma: the decode GEMV of gemv.cuh, Y[M, N] = epi(X[M, K] W[K, N]) for
// M <= 32 and a large row-major f16/bf16 W streamed from DRAM once, with W moved by the TMA copy
// engine into a shared-memory ring and multiplied by one warpgroup's wgmma (sm_90a only).
//
// Why a second GEMV: gemv_kernel keeps every byte of W in flight in registers (four 16-byte loads
// per lane and k-step) and byte-permutes it into mma fragments, so the bytes in flight per SM are
// bounded by the register file and the issue slots. Here one thread issues 2-D boxes, the bytes
// in flight are the ring (128 KB of weight per block as the planner configures it, no registers),
// and the tensor cores read the ring directly. On the H100 that was faster on every decode shape
// measured, 8 to 436 MB of weight (0.53-0.99 of the register GEMV's time); the planner chooses
// (codegen/schedule.cpp, plan_gemv_tma; numbers in docs/runtime.md).
//
// Block: 160 threads, one consumer warpgroup (warps 0-3) and one producer warp (warp 4; lane 0
// issues every copy), plus the rows warp below with Epi::kRowSumSq. The block owns BN columns (n0 =
// blockIdx.x * BN) and one k-range of k_chunk rows (split blockIdx.y). Per stage of BK rows of K:
// NW * BN / 64 boxes of W ([BK][64], 128-byte swizzle, L2 evict-first: read once) and BK / 64 boxes
// of X ([8 MT][64], 128-byte swizzle). The copy engine zero-fills rows >= M, k >= K and columns >=
// N, so there are no bounds checks in the loop. full[s] completes with the stage's bytes, empty[s]
// with one arrival per consumer warp. A consumer releases stage it - 1 once the wgmmas of stage it
// are issued and those of stage it - 1 are done (wgmma_wait<1>), so the tensor cores never wait for
// a barrier.
//
// Math: Y^T = W^T X^T per 64-column panel, as wgmma m64nNk16 with N = 8 MT: A = W^T read M-major
// from the W panel (imm-trans-a = 1: the panel is [16 k][64 n] per k-step, n contiguous), B = X^T
// read K-major from the X panel ([8 MT rows][64 k]). Thread (warp w, g = lane / 4, t = lane % 4)
// holds acc[v][j][4 i + 2 h + e] = the sum for column n0 + 64 j + 16 w + g + 8 h, row 8 i + 2 t +
// e.
//
// Row sums of squares (Epi::kRowSumSq, for rms_norm(X) W): a sixth warp reads each stage's X
// panels from shared memory (16-byte chunk c of the stage's X panels holds row (c / 8) % 8 MT),
// sums the squares and releases the stage too (empty[s] then counts five arrivals), so the
// consumers' loop is the same as without it; padding rows and k >= K are zeros. (Done by the
// consumers between their wgmma issue and wait, it had cost 1-7 us at M = 32 on the H100.)
//
// Epilogue and split-K: after the loop the ring is idle. Each CTA writes its partial sums there as
// [NW][8 MT][BN + 4] floats (row m, columns contiguous) and its row sums of squares. With
// splits > 1 the CTAs of a column block form one cluster (1, splits, 1), rank = blockIdx.y: a
// cluster barrier (release / acquire) makes every partial visible, each rank takes a contiguous
// share of the block's groups of 8 columns and adds the partials of ranks 0, 1, ..., splits - 1
// in that order (DSMEM loads; deterministic, independent of timing), runs the epilogue and stores
// 16-byte vectors; a second cluster barrier keeps every CTA resident until the remote reads of
// its shared memory are done. With one split the same code reads the CTA's own shared memory.
//
// Preconditions (gemv_tma_supported covers the integer ones): M <= 8 MT; N % 8 == 0; K >= 1;
// X, W0, W1 16-byte aligned with ldx, ldw multiples of 8 (TMA strides); out 16-byte aligned,
// ldo * sizeof(TO) % 16 == 0; splits in [1, 8]; an sm_90 device and a build for sm_90a.
#ifndef KILN_RT_GEMV_TMA_CUH
#define KILN_RT_GEMV_TMA_CUH

#ifndef KILN_RT_WGMMA_CUH
#include "wgmma.cuh"
#endif
#ifndef KILN_RT_GEMV_CUH
#include "gemv.cuh"
#endif

namespace kiln {
namespace rt {

// d (64 x N, f32) += A (64 x 16) B (16 x N) with A M-major in shared memory (TA = 1, imm-trans-a:
// rows of 64 m, 128-byte swizzle, the two 8-k halves of the k16 step SBO bytes apart) or K-major
// (TA = 0: 64 rows of 128-byte swizzled k, 8-row groups SBO bytes apart) and B K-major (N rows of
// 16 k). N = 8, 16 or 32: d has N / 2 floats per thread, d[4 i + 2 h + e] =
// D[16 w + g + 8 h][8 i + 2 t + e].
template <typename T, int N, int TA = 1>
KILN_DEV void wgmma_ta_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b) {
  static_assert(N == 8 || N == 16 || N == 32, "wgmma n8, n16, n32");
#if KILN_RT_WGMMA
  constexpr bool kBf16 = IsBf16<T>::value;
  if constexpr (N == 8 && kBf16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, "
        "%7, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TA));
  } else if constexpr (N == 8) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, %7, "
        "0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TA));
  } else if constexpr (N == 16 && kBf16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
        "%8, %9, p, 1, 1, %11, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TA));
  } else if constexpr (N == 16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
        "%8, %9, p, 1, 1, %11, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TA));
  } else if constexpr (kBf16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TA));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TA));
  }
#else
  (void)d, (void)desc_a, (void)desc_b;
  __trap();
#endif
}

// Dynamic shared memory of gemv_tma_kernel in bytes: the ring of `stages` stages (nw weight boxes
// [bk][bn] and the X box [8 mt][bk], 16-bit) or the split-K partials, whichever is larger, plus
// 1024 for aligning the ring. One block per SM needs at most 227 KB (the static part aside).
KILN_HD constexpr int gemv_tma_smem_bytes(int mt, int nw, int bn, int bk, int stages) {
  return max_i(stages * (nw * bn * bk * 2 + 8 * mt * bk * 2), nw * 8 * mt * (bn + 4) * 4) + 1024;
}

// Geometry of gemv_tma_kernel: MT m-tiles of 8 rows (M <= 8 MT), NW weights, BN columns per
// block, BK rows of K per stage, STAGES stages; ROWS: the row-sum-of-squares warp is there.
template <typename T, int MT, int NW, int BN, int BK, int STAGES, bool ROWS = false>
struct GemvTma {
  static_assert(sizeof(T) == 2, "f16 or bf16 operands");
  static_assert(MT == 1 || MT == 2 || MT == 4, "8, 16 or 32 padded rows (wgmma n8, n16, n32)");
  static_assert(NW == 1 || NW == 2, "one or two weights");
  static_assert(BN == 64 || BN == 128 || BN == 256, "one to four 64-column panels");
  static_assert(BK % 64 == 0 && BK >= 64 && BK <= 256, "64-k X panels; TMA box rows <= 256");
  static_assert(STAGES >= 2, "a ring");
  static constexpr int kMP = 8 * MT;                   // padded rows: the wgmma n
  static constexpr int kNJ = BN / 64;                  // W panels per weight and stage
  static constexpr int kNX = BK / 64;                  // X panels per stage
  static constexpr int kWPanel = BK * 128;             // bytes of one [BK][64] W box
  static constexpr int kXPanel = kMP * 128;            // bytes of one [8 MT][64] X box
  static constexpr int kXOffset = NW * kNJ * kWPanel;  // the X panels follow the W panels
  static constexpr int kStageBytes = kXOffset + kNX * kXPanel;
  static constexpr int kPitch = BN + 4;  // floats per row of the partial
  static constexpr int kPartBytes = NW * kMP * kPitch * 4;
  static constexpr int kRingBytes = STAGES * kStageBytes;
  static constexpr int kSmemBytes = max_i(kRingBytes, kPartBytes) + 1024;  // + 1024-byte align
  static_assert(kSmemBytes == gemv_tma_smem_bytes(MT, NW, BN, BK, STAGES), "one formula");
  static constexpr int kThreads = ROWS ? 192 : 160;  // consumers, producer, rows warp
  static constexpr int kAcc = kMP / 2;               // accumulator floats per panel, thread
  static constexpr int kXChunks = kNX * kMP * 8;     // 16-byte chunks of X per stage
  static constexpr int kRowSlots = kMP / 4;          // rows one lane of the rows warp sums
  static_assert(kXPanel % 1024 == 0 && kWPanel % 1024 == 0, "swizzle atoms stay 1024-aligned");
  static_assert(kSmemBytes <= 227 * 1024, "ring too large for shared memory");
};

// WK (the weights K-major): W_v is given as W_v^T, an [N, K] row-major tensor (PyTorch's
// nn.Linear weight). A stage then holds, per weight, BK / 64 boxes [BN n][64 k] (128-byte swizzle,
// the same bytes as the [BK][64] boxes of the N-major layout), and A = W^T is read K-major
// (imm-trans-a = 0): 64-column panel j of sub-box p starts 8192 j bytes into it.
//
// grid = (ceil(N / BN), splits), block GemvTma::kThreads (160, or 192 with Epi::kRowSumSq),
// dynamic shared memory GemvTma::kSmemBytes; splits > 1 needs cluster dims (1, splits, 1),
// splits <= 8. k_chunk: rows of K per split, a multiple of BK
// (a split with an empty k-range contributes zeros). map_x: X [M][K], box [8 MT][64]; map_w0/1:
// W [K][N], box [BK][64] (WK: W^T [N][K], box [BN][64]); all 128-byte swizzled (gemv_tma_launch
// encodes them). W1 is read only when NW == 2. Epi: as gemv_kernel's.
template <typename T, typename TO, int MT, int NW, int BN, int BK, int STAGES, int MIN_BLOCKS,
          class Epi, bool WK = false>
__global__ void __launch_bounds__(Epi::kRowSumSq ? 192 : 160, MIN_BLOCKS)
    gemv_tma_kernel(const __grid_constant__ TmaDesc map_x, const __grid_constant__ TmaDesc map_w0,
                    const __grid_constant__ TmaDesc map_w1, TO* __restrict__ out, int64_t ldo,
                    int M, int N, int K, int k_chunk, Epi epi) {
  pdl_entry();  // before any load or store (base.cuh)
#if KILN_RT_WGMMA
  constexpr bool kRows = Epi::kRowSumSq;
  using G = GemvTma<T, MT, NW, BN, BK, STAGES, kRows>;
  constexpr int R = G::kRowSlots;
  extern __shared__ __align__(1024) unsigned char gemv_tma_smem[];
  __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
  __shared__ float srow[kRows ? G::kMP : 1];  // this CTA's row sums of squares
  unsigned char* const ring = gemv_tma_smem + ((1024 - (smem_u32(gemv_tma_smem) & 1023)) & 1023);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int n0 = blockIdx.x * BN;
  const int rank = blockIdx.y, splits = gridDim.y;  // cluster (1, splits, 1): rank = blockIdx.y
  const int k_begin = rank * k_chunk, k_end = min_i(K, k_begin + k_chunk);
  const int ntiles = k_end > k_begin ? ceil_div(k_end - k_begin, BK) : 0;
  // Epi::kXOnes: X is a row of ones (GemvOnesX), written once into every stage's X panels here
  // (row 0 of each panel: 64 ones in its own 128-byte line, which the swizzle leaves in place;
  // the other rows zero) and never copied; the stages then carry W only.
  constexpr bool kOnes = GemvXOnes<Epi>::value;
  static_assert(!kOnes || (MT == 1 && !kRows), "a ones row: M = 1, no row sums");
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kRows ? 5 : 4);  // one arrival per consumer warp (+ rows warp)
    }
    fence_mbar_init();
  }
  if constexpr (kOnes) {
    const uint32_t one = pack2<T>(1.0f, 1.0f);
    constexpr int kWords = G::kNX * G::kXPanel / 4;  // 32-bit words of one stage's X panels
    for (int i = tid; i < STAGES * kWords; i += blockDim.x) {
      const int s = i / kWords, w = i % kWords;
      const bool row0 = (w % (G::kXPanel / 4)) < 32;  // the first 128 bytes of a panel
      *reinterpret_cast<uint32_t*>(ring + s * G::kStageBytes + G::kXOffset + 4 * w) =
          row0 ? one : 0u;
    }
    fence_proxy_async_smem();  // the generic-proxy stores, before wgmma reads them
  }
  __syncthreads();

  float acc[NW][G::kNJ][G::kAcc];
#pragma unroll
  for (int v = 0; v < NW; ++v)
#pragma unroll
    for (int j = 0; j < G::kNJ; ++j)
#pragma unroll
      for (int i = 0; i < G::kAcc; ++i) acc[v][j][i] = 0.0f;

  if (warp == 5) {
    // Rows warp: lane l sums chunks l + 32 i of each stage's X panels, i.e. rows (l / 8 + 4 i) %
    // 8 MT; slot i % (2 MT) of rsq holds row l / 8 + 4 (i % (2 MT)).
    float rsq[R];
#pragma unroll
    for (int r = 0; r < R; ++r) rsq[r] = 0.0f;
    for (int it = 0; it < ntiles; ++it) {
      const int s = it % STAGES;
      mbar_wait(&full[s], (it / STAGES) & 1);
      const unsigned char* const xs = ring + s * G::kStageBytes + G::kXOffset;
#pragma unroll
      for (int i = 0; i < G::kXChunks / 32; ++i) {
        const uint4 q = *reinterpret_cast<const uint4*>(xs + (lane + 32 * i) * 16);
        const uint32_t w4[4] = {q.x, q.y, q.z, q.w};
        float sq = 0.0f;
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float2 f = unpack2<T>(w4[u]);
          sq += f.x * f.x + f.y * f.y;
        }
        rsq[i % R] += sq;
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float x = rsq[r];
      x += __shfl_xor_sync(0xffffffffu, x, 1);
      x += __shfl_xor_sync(0xffffffffu, x, 2);
      x += __shfl_xor_sync(0xffffffffu, x, 4);
      if ((lane & 7) == 0) srow[(lane >> 3) + 4 * r] = x;
    }
  } else if (warp == 4) {
    // Producer: one thread issues every copy.
    if (lane == 0 && ntiles > 0) {
      if constexpr (!kOnes) tma_prefetch_desc(&map_x);
      tma_prefetch_desc(&map_w0);
      if (NW > 1) tma_prefetch_desc(&map_w1);
      const uint64_t policy = l2_policy_evict_first();
      for (int it = 0; it < ntiles; ++it) {
        const int s = it % STAGES;
        if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) - 1) & 1);
        unsigned char* const st = ring + s * G::kStageBytes;
        mbar_arrive_expect_tx(&full[s], kOnes ? G::kXOffset : G::kStageBytes);
        const int k = k_begin + it * BK;
#pragma unroll
        for (int v = 0; v < NW; ++v) {
          const TmaDesc* mw = v == 0 ? &map_w0 : &map_w1;
          if constexpr (WK) {
#pragma unroll
            for (int p = 0; p < G::kNX; ++p)
              tma_load_2d_hint(st + v * G::kNJ * G::kWPanel + p * BN * 128, mw, n0, k + 64 * p,
                               &full[s], policy);
          } else {
#pragma unroll
            for (int j = 0; j < G::kNJ; ++j)
              tma_load_2d_hint(st + (v * G::kNJ + j) * G::kWPanel, mw, k, n0 + 64 * j, &full[s],
                               policy);
          }
        }
        if constexpr (!kOnes)
#pragma unroll
          for (int p = 0; p < G::kNX; ++p)
            tma_load_2d(st + G::kXOffset + p * G::kXPanel, &map_x, 0, k + 64 * p, &full[s]);
      }
    }
    __syncwarp();
  } else {
    // Consumer warpgroup: per stage BK / 16 k-steps x NW * BN / 64 panels, one committed batch.
    for (int it = 0; it < ntiles; ++it) {
      const int s = it % STAGES;
      mbar_wait(&full[s], (it / STAGES) & 1);
      const uint32_t base = smem_u32(ring + s * G::kStageBytes);
      const uint32_t xb = base + G::kXOffset;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        // B = X^T, K-major: rows m 128 bytes apart, 8-row groups 1024 apart (SBO); the k16 step
        // moves 32 bytes inside the swizzled row.
        const uint64_t db = wgmma_desc_sw128(xb + (kk >> 2) * G::kXPanel + (kk & 3) * 32, 16, 1024);
#pragma unroll
        for (int v = 0; v < NW; ++v)
#pragma unroll
          for (int j = 0; j < G::kNJ; ++j) {
            if constexpr (WK) {
              // A = W^T, K-major: 64 rows n of 128 bytes, 8-row groups 1024 apart; the k16 step
              // moves 32 bytes inside the swizzled row, every 64 k to the next sub-box.
              const uint64_t da = wgmma_desc_sw128(
                  base + v * G::kNJ * G::kWPanel + (kk >> 2) * BN * 128 + j * 8192 + (kk & 3) * 32,
                  16, 1024);
              wgmma_ta_ss<T, G::kMP, 0>(acc[v][j], da, db);
            } else {
              // A = W^T, M-major, one 64-column swizzle atom wide: the k16 step is 16 rows of 128
              // bytes, its two 8-k halves 1024 bytes apart (SBO; LBO is unused at m64).
              const uint64_t da =
                  wgmma_desc_sw128(base + (v * G::kNJ + j) * G::kWPanel + kk * 2048, 1024, 1024);
              wgmma_ta_ss<T, G::kMP>(acc[v][j], da, db);
            }
          }
      }
      wgmma_commit();
      wgmma_wait<1>();  // the batch of stage it - 1 is done: release that stage
      if (it > 0 && lane == 0) mbar_arrive(&empty[(it - 1) % STAGES]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int v = 0; v < NW; ++v)
#pragma unroll
      for (int j = 0; j < G::kNJ; ++j) wgmma_fence_acc(acc[v][j]);
  }

  // ---- Partials to shared memory (the ring is idle now) ----
  __syncthreads();
  float* const part = reinterpret_cast<float*>(ring);  // [NW][kMP][kPitch]
  if (warp < 4) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int v = 0; v < NW; ++v)
#pragma unroll
      for (int j = 0; j < G::kNJ; ++j)
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              part[(v * G::kMP + 8 * i + 2 * t + e) * G::kPitch + 64 * j + 16 * warp + g + 8 * h] =
                  acc[v][j][4 * i + 2 * h + e];
  }
  if (splits > 1) {
    cluster_arrive();  // release: every CTA's partials ...
    cluster_wait();    // ... before any read below (acquire)
  } else {
    __syncthreads();
  }

  // ---- Reduction over the splits (fixed rank order) and epilogue ----
  constexpr int kGroups = BN / 8;
  const int g_lo = rank * kGroups / splits, g_hi = (rank + 1) * kGroups / splits;
  const int ng = g_hi - g_lo;
  for (int i = tid; i < ng * M; i += G::kThreads) {
    const int m = i / ng, c8 = g_lo + i % ng;
    const int n = n0 + 8 * c8;
    if (n >= N) continue;
    float y[NW][8];
#pragma unroll
    for (int v = 0; v < NW; ++v)
#pragma unroll
      for (int e = 0; e < 8; ++e) y[v][e] = 0.0f;
    float rs = 0.0f;
    for (int src = 0; src < splits; ++src) {
#pragma unroll
      for (int v = 0; v < NW; ++v) {
        const float* p = part + (v * G::kMP + m) * G::kPitch + 8 * c8;
        float4 a, b;
        if (src == rank) {
          a = *reinterpret_cast<const float4*>(p);
          b = *reinterpret_cast<const float4*>(p + 4);
        } else {
          const uint32_t ca = dsmem_map(smem_u32(p), src);
          a = dsmem_load4(ca);
          b = dsmem_load4(ca + 16);
        }
        y[v][0] += a.x, y[v][1] += a.y, y[v][2] += a.z, y[v][3] += a.w;
        y[v][4] += b.x, y[v][5] += b.y, y[v][6] += b.z, y[v][7] += b.w;
      }
      if constexpr (kRows)
        rs += src == rank ? srow[m] : dsmem_load(dsmem_map(smem_u32(&srow[m]), src));
    }
    float o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = epi(y[0][e], NW > 1 ? y[NW - 1][e] : 0.0f, m, n + e, rs);
    TO* const q = out + m * ldo + n;
#pragma unroll
    for (int e = 0; e < 8; e += Vec16<TO>::kElems) store16_f32(q + e, o + e);
  }
  if (splits > 1) {
    cluster_arrive();  // no CTA leaves while another may still read its shared memory
    cluster_wait();
  }
#else
  (void)map_x, (void)map_w0, (void)map_w1, (void)out, (void)ldo, (void)M, (void)N, (void)K;
  (void)k_chunk, (void)epi;
  __trap();
#endif
}

// ---- Host side ---------------------------------------------------------------------------------
#ifndef __CUDACC_RTC__

// Rows of K per split: a multiple of bk covering K in `splits` pieces (the last may be short or,
// for small K, empty).
inline int gemv_tma_k_chunk(int K, int splits, int bk) {
  return round_up(ceil_div(K, splits), bk);
}

// The integer preconditions of gemv_tma_kernel (pointer alignment aside); wk: W given as W^T.
inline bool gemv_tma_supported(int M, int N, int K, int mt, int64_t ldx, int64_t ldw, int64_t ldo,
                               int out_elem_bytes, bool wk = false) {
  return M >= 1 && M <= 8 * mt && N >= 8 && N % 8 == 0 && K >= 1 && ldx >= K && ldx % 8 == 0 &&
         ldw >= (wk ? K : N) && ldw % 8 == 0 && (ldo * out_elem_bytes) % 16 == 0;
}

// Raises the kernel's dynamic shared-memory limit once (before any graph capture: see
// raise_smem_limit_once); cudaErrorInvalidDeviceFunction on a device older than sm_90.
template <typename T, typename TO, int MT, int NW, int BN, int BK, int STAGES, int MIN_BLOCKS,
          class Epi, bool WK = false>
inline cudaError_t gemv_tma_prepare() {
  cudaError_t e = require_sm90();
  if (e != cudaSuccess) return e;
  constexpr auto kernel = gemv_tma_kernel<T, TO, MT, NW, BN, BK, STAGES, MIN_BLOCKS, Epi, WK>;
  return raise_smem_limit_once<kernel>(GemvTma<T, MT, NW, BN, BK, STAGES>::kSmemBytes);
}

// The launch configuration: grid (ceil(N / BN), splits), block GemvTma::kThreads, a cluster
// (1, splits, 1) when splits > 1; attr is the storage for its attributes (two: the cluster, and
// programmatic dependent launch where enabled).
template <typename T, typename TO, int MT, int NW, int BN, int BK, int STAGES, int MIN_BLOCKS,
          class Epi>
inline cudaLaunchConfig_t gemv_tma_config(int N, int splits, cudaStream_t stream,
                                          cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(ceil_div(N, BN), splits, 1);
  using G = GemvTma<T, MT, NW, BN, BK, STAGES, Epi::kRowSumSq>;
  cfg.blockDim = dim3(G::kThreads, 1, 1);
  cfg.dynamicSmemBytes = G::kSmemBytes;
  cfg.stream = stream;
  unsigned n = 0;
  if (splits > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = splits;
    attr[0].val.clusterDim.z = 1;
    n = 1;
  }
  add_pdl_attribute(attr, n);
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cfg;
}

// Encodes the tensor maps (host only, no driver state) and launches gemv_tma_kernel with
// `splits` k-splits (1 .. 8; cudaErrorInvalidValue otherwise or when the shape or strides break
// the preconditions). Returns cudaErrorInvalidDeviceFunction, without launching, on a device older
// than sm_90. No state survives between launches: launches may overlap. WK: W0, W1 are given as
// [N][K] (ldw their row stride).
template <typename T, typename TO, int MT, int NW, int BN, int BK, int STAGES, int MIN_BLOCKS = 1,
          class Epi = GemvIdentity, bool WK = false>
inline cudaError_t gemv_tma_launch(const T* X, int64_t ldx, const T* W0, const T* W1, int64_t ldw,
                                   TO* out, int64_t ldo, int M, int N, int K, int splits,
                                   cudaStream_t stream, Epi epi = Epi()) {
  if (splits < 1 || splits > 8 ||
      !gemv_tma_supported(M, N, K, MT, ldx, ldw, ldo, int(sizeof(TO)), WK))
    return cudaErrorInvalidValue;
  static_assert(!WK || !GemvXOnes<Epi>::value, "a ones row sums an N-major W");
  cudaError_t e = gemv_tma_prepare<T, TO, MT, NW, BN, BK, STAGES, MIN_BLOCKS, Epi, WK>();
  if (e != cudaSuccess) return e;
  TmaDesc mx, mw0, mw1;
  // A ones row (GemvOnesX) is never copied: its map is encoded over W0, a valid tensor.
  if constexpr (GemvXOnes<Epi>::value)
    e = tma_encode_2d(&mx, W0, 1, ldw, ldw, 8 * MT, 64, true);
  else
    e = tma_encode_2d(&mx, X, M, K, ldx, 8 * MT, 64, true);
  if (WK) {
    if (e == cudaSuccess) e = tma_encode_2d(&mw0, W0, N, K, ldw, BN, 64, true);
    if (e == cudaSuccess) e = tma_encode_2d(&mw1, NW > 1 ? W1 : W0, N, K, ldw, BN, 64, true);
  } else {
    if (e == cudaSuccess) e = tma_encode_2d(&mw0, W0, K, N, ldw, BK, 64, true);
    if (e == cudaSuccess) e = tma_encode_2d(&mw1, NW > 1 ? W1 : W0, K, N, ldw, BK, 64, true);
  }
  if (e != cudaSuccess) return e;
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg =
      gemv_tma_config<T, TO, MT, NW, BN, BK, STAGES, MIN_BLOCKS, Epi>(N, splits, stream, attr);
  return cudaLaunchKernelEx(&cfg,
                            gemv_tma_kernel<T, TO, MT, NW, BN, BK, STAGES, MIN_BLOCKS, Epi, WK>, mx,
                            mw0, mw1, out, ldo, M, N, K, gemv_tma_k_chunk(K, splits, BK), epi);
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_GEMV_TMA_CUH
