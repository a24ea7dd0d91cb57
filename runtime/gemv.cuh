// Kiln runtime, gemv: the decode-size fast path Y[M, N] = X[M, K] W[K, N] for M <= 32 rows and a
// large row-major f16/bf16 weight W that is streamed from DRAM exactly once.
//
// The kernel is bandwidth-bound: per 16 bytes of W it must do almost nothing but keep the load
// in flight. Scalar f32 FMAs would cost M FMAs per weight (at M = 16 that is ~70% of H100's
// FP32 peak at 3 TB/s), so the arithmetic runs on the tensor cores instead, computing
// Y^T = W^T X^T with mma.m16n8k16: W^T is the A operand (16 weight columns x 16 k), X^T the B
// operand (16 k x 8 batch rows), and M pads to 8 * MT rows, which the tensor cores do for free.
//
// No shared memory is involved in the stream. mma wants pairs of consecutive k in each 32-bit
// register, W row-major gives pairs of consecutive n, so each lane loads 4 consecutive rows
// (k..k+3) of the same 8 columns (four LDG.E.128) and transposes 2 x 2 blocks of 16-bit values
// with byte permutes (PRMT). The quad of lanes t = 0..3 covers k + 4t, i.e. 16 k per step, and
// the 8 quads of a warp cover 64 consecutive columns: one warp load instruction reads 4 rows x
// 128 contiguous bytes. The k order inside a step is permuted consistently for W and X (logical
// mma k 2t+e <-> k + 4t + e, 2t+8+e <-> k + 4t + 2 + e), which a sum does not notice.
//
// Work split: a block of WARPS_N x WARPS_K warps covers 64 * WARPS_N columns; warps with the same
// wn interleave the 16-row k-steps of the block's k-range (adjacent warps read adjacent column
// slabs of the same rows), and their partials are summed through shared memory. gridDim.y splits
// K across blocks (split-K); each block publishes its partial to a float32 workspace, and the
// last block of a column block to arrive (an atomic counter) sums all splits, its warps sharing
// the reads, in a fixed order (deterministic), and runs the epilogue: one launch does everything.
// That block resets the counter, ready for the next launch.
// On sm_90, gemv_cluster_kernel (below) instead makes the splits of a column block the CTAs of one
// cluster and reduces through distributed shared memory: no workspace, counters or memset.
//
// Accumulator layout (GemvAcc, per lane; g = lane / 4, t = lane % 4): c[j][mt].x[2 h + e] is the
// sum for batch row m = 8 mt + 2t + e and column n = n_warp + 8g + 2j + h. So each lane ends
// with 8 consecutive columns of two rows per mt, stored as single 16-byte vectors.
//
// Preconditions (check with gemv_supported on the host):
//   M <= 8 * MT;  N % 8 == 0;  K % 4 == 0;  k_chunk % 16 == 0
//   W0, W1 16-byte aligned, ldw % 8 == 0;  X 8-byte aligned, ldx % 4 == 0
//   out 16-byte aligned, ldo * sizeof(TO) % 16 == 0
//   split-K (gridDim.y > 1): workspace of gemv_workspace_floats floats; counters: one int per
//   column block, zeroed once before the first launch; one launch at a time per workspace.
// X and W are read through the non-coherent path: they must not be written by the same launch.
#ifndef KILN_RT_GEMV_CUH
#define KILN_RT_GEMV_CUH

#ifndef KILN_RT_BASE_CUH
#include "base.cuh"
#endif
#ifndef KILN_RT_ELEMENTWISE_CUH
#include "elementwise.cuh"
#endif
#ifndef KILN_RT_MMA_CUH
#include "mma.cuh"
#endif
#ifndef KILN_RT_REDUCE_CUH
#include "reduce.cuh"
#endif

namespace kiln {
namespace rt {

template <int MT>
struct GemvAcc {
  FragC c[4][MT];
  KILN_DEV void zero() {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c[j][mt].zero();
  }
};

// Streaming 16-byte load: read-only path, no L1 allocation (W is used once).
KILN_DEV uint4 ld_stream_128(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}
// 8-byte read-only load that may stay in L1 (X is reused by every warp of the column block).
KILN_DEV uint2 ld_ro_64(const void* p) {
  uint2 r;
  asm("ld.global.nc.v2.u32 {%0,%1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}

// acc[w] += X[0 .. M, k-range] * Wn[k-range, n_warp .. n_warp + 64] for w < NW (NW = 1 or 2
// weights sharing X, e.g. gate and up projections). The warp walks k-steps of 16 rows starting
// at k_begin + 16 * phase, every 16 * stride rows, while below k_end, UNROLL steps per batch of
// loads. Columns >= N and rows >= M are zero. All 32 lanes call it with warp-uniform arguments.
// With ROWSQ, rowsq[mt] also accumulates the squares of the X values the lane loaded (row
// 8 mt + lane / 4), for rms_norm(X) W = diag(1 / rms(X)) (X W); see gemv_rowsq_block.
template <typename T, int MT, int NW, int UNROLL, bool ROWSQ = false>
KILN_DEV void gemv_mainloop(GemvAcc<MT> (&acc)[NW], float (&rowsq)[MT], const T* __restrict__ X,
                            int64_t ldx, int M, const T* __restrict__ W0, const T* __restrict__ W1,
                            int64_t ldw, int N, int n_warp, int k_begin, int k_end, int phase,
                            int stride) {
  static_assert(NW == 1 || NW == 2, "one or two weights");
  const int lane = lane_id(), g = lane >> 2, t = lane & 3;
  const int n = n_warp + 8 * g;
  const bool col_ok = n < N;
  const int step = 16 * stride;
  // Pointers advance by whole batches; offsets inside a batch are loop-invariant.
  const int k0 = k_begin + 16 * phase + 4 * t;
  const T* wp0 = W0 + static_cast<int64_t>(k0) * ldw + n;
  const T* wp1 = (NW > 1 ? W1 : W0) + static_cast<int64_t>(k0) * ldw + n;
  const T* xp = X + k0;
  const int64_t w_batch = static_cast<int64_t>(step) * UNROLL * ldw;
  for (int kb = k_begin + 16 * phase; kb < k_end; kb += step * UNROLL) {
    uint4 w[UNROLL][NW][4];
    uint2 x[UNROLL][MT];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      // k_end % 4 == 0, so rows k .. k+3 are all in range or all out.
      const bool k_ok = kb + u * step + 4 * t < k_end;
#pragma unroll
      for (int v = 0; v < NW; ++v) {
        const T* p = (v == 0 ? wp0 : wp1) + static_cast<int64_t>(u * step) * ldw;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          w[u][v][i] = (k_ok && col_ok) ? ld_stream_128(p + i * ldw) : make_uint4(0u, 0u, 0u, 0u);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int m = 8 * mt + g;
        x[u][mt] = (k_ok && m < M) ? ld_ro_64(xp + m * ldx + u * step) : make_uint2(0u, 0u);
      }
    }
    wp0 += w_batch;
    wp1 += w_batch;
    xp += step * UNROLL;
    if constexpr (ROWSQ) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const float2 a = unpack2<T>(x[u][mt].x), b = unpack2<T>(x[u][mt].y);
          rowsq[mt] += a.x * a.x + a.y * a.y + b.x * b.x + b.y * b.y;
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int v = 0; v < NW; ++v) {
        const uint32_t r[4][4] = {{w[u][v][0].x, w[u][v][0].y, w[u][v][0].z, w[u][v][0].w},
                                  {w[u][v][1].x, w[u][v][1].y, w[u][v][1].z, w[u][v][1].w},
                                  {w[u][v][2].x, w[u][v][2].y, w[u][v][2].z, w[u][v][2].w},
                                  {w[u][v][3].x, w[u][v][3].y, w[u][v][3].z, w[u][v][3].w}};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          // Word j of row i holds columns n + 2j (low half) and n + 2j + 1 (high half).
          FragA a;
          a.x[0] = __byte_perm(r[0][j], r[1][j], 0x5410);  // col n+2j,   k+0, k+1
          a.x[1] = __byte_perm(r[0][j], r[1][j], 0x7632);  // col n+2j+1, k+0, k+1
          a.x[2] = __byte_perm(r[2][j], r[3][j], 0x5410);  // col n+2j,   k+2, k+3
          a.x[3] = __byte_perm(r[2][j], r[3][j], 0x7632);  // col n+2j+1, k+2, k+3
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            FragB b;
            b.x[0] = x[u][mt].x;  // X[m][k], X[m][k+1]
            b.x[1] = x[u][mt].y;  // X[m][k+2], X[m][k+3]
            mma_16816<T>(acc[v].c[j][mt], a, b);
          }
        }
      }
  }
}

// Sums the partials of the WARPS_K warps that share a column slab into the warp with wk = 0
// (warp = wk * WARPS_N + wn). smem: max(1, (WARPS_K - 1) * WARPS_N * 512) floats. Every thread of
// the block calls it.
template <int MT, int NW, int WARPS_N, int WARPS_K>
KILN_DEV void gemv_block_reduce(GemvAcc<MT> (&acc)[NW], float* smem) {
  if constexpr (WARPS_K > 1) {
    const int lane = lane_id(), warp = warp_id();
    const int wn = warp % WARPS_N, wk = warp / WARPS_N;
#pragma unroll
    for (int v = 0; v < NW; ++v)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (wk > 0) {
          float* s = smem + ((wk - 1) * WARPS_N + wn) * 512 + lane;
#pragma unroll
          for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) s[(j * 4 + i) * 32] = acc[v].c[j][mt].x[i];
        }
        __syncthreads();
        if (wk == 0) {
          for (int q = 0; q < WARPS_K - 1; ++q) {
            const float* s = smem + (q * WARPS_N + wn) * 512 + lane;
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
              for (int i = 0; i < 4; ++i) acc[v].c[j][mt].x[i] += s[(j * 4 + i) * 32];
          }
        }
        __syncthreads();
      }
  }
}

// Folds the lanes' rowsq partials into per-row block totals (the block's k-range): returns, in
// thread tid < MT * 8, the sum for batch row tid (0 elsewhere). Only the wn = 0 warps count,
// since every column slab loads the same X. srow: WARPS_K * MT * 8 floats of shared memory.
// Every thread of the block calls it.
template <int MT, int WARPS_N, int WARPS_K>
KILN_DEV float gemv_rowsq_block(float (&rowsq)[MT], float* srow) {
  const int lane = lane_id(), warp = warp_id();
  const int wn = warp % WARPS_N, wk = warp / WARPS_N;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) rowsq[mt] = warp_sum<4>(rowsq[mt]);  // over the quad's k
  if (wn == 0 && (lane & 3) == 0)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) srow[(wk * MT + mt) * 8 + (lane >> 2)] = rowsq[mt];
  __syncthreads();
  float r = 0.0f;
  if (threadIdx.x < MT * 8)
    for (int q = 0; q < WARPS_K; ++q) r += srow[q * MT * 8 + threadIdx.x];
  return r;
}

// One block's share of the GEMV over rows [k_begin, k_end) of K: acc gets the block's partial
// sums (those of its WARPS_K warps folded into the wk = 0 warps, as gemv_block_reduce leaves
// them; wk = warp / WARPS_N) and, with ROWSQ, the return value in threads tid < MT * 8 is the
// block's sum of squares of X row tid (gemv_rowsq_block; 0 elsewhere and without ROWSQ). red and
// srow are those two functions' shared memory. Every thread of the block calls it; both GEMV
// kernels start with it.
template <typename T, int MT, int NW, int WARPS_N, int WARPS_K, int UNROLL, bool ROWSQ>
KILN_DEV float gemv_block_partial(GemvAcc<MT> (&acc)[NW], const T* __restrict__ X, int64_t ldx,
                                  int M, const T* __restrict__ W0, const T* __restrict__ W1,
                                  int64_t ldw, int N, int n_warp, int wk, int k_begin, int k_end,
                                  float* red, float* srow) {
  float rowsq[MT];
#pragma unroll
  for (int v = 0; v < NW; ++v) acc[v].zero();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) rowsq[mt] = 0.0f;
  gemv_mainloop<T, MT, NW, UNROLL, ROWSQ>(acc, rowsq, X, ldx, M, W0, W1, ldw, N, n_warp, k_begin,
                                          k_end, wk, WARPS_K);
  gemv_block_reduce<MT, NW, WARPS_N, WARPS_K>(acc, red);
  float row = 0.0f;
  if constexpr (ROWSQ) row = gemv_rowsq_block<MT, WARPS_N, WARPS_K>(rowsq, srow);
  return row;
}

// Split-K across the gridDim.y blocks of one column block. ws: this column block's workspace,
// splits * (WARPS_N * NW * MT * 512 + ROWS) floats; counter: its arrival counter (0 between
// launches). ROWS > 0: thread tid < ROWS also publishes `row` (gemv_rowsq_block's value) and, in
// the last block, gets back the sum over all splits.
// Returns true (block-uniform) in the last block to arrive. There every warp (wn, wk) holds the
// sum of the splits s = wk, wk + WARPS_K, ... (zero if none), so that all warps share the
// L2 round trips; gemv_block_reduce then folds them into the wk = 0 warps. The order of the
// sums is fixed, so results are deterministic. Every thread of the block calls it, after
// gemv_block_reduce (only the wk = 0 warps' values are published).
template <int MT, int NW, int WARPS_N, int WARPS_K, int ROWS = 0>
KILN_DEV bool gemv_splitk_reduce(GemvAcc<MT> (&acc)[NW], float& row, float* ws, int* counter,
                                 int split, int splits) {
  __shared__ int s_last;
  constexpr int kVec = NW * MT * 4;  // float4 per lane per split: (v, mt, j) -> c[j][mt].x[0..3]
  const int lane = lane_id(), warp = warp_id();
  const int wn = warp % WARPS_N, wk = warp / WARPS_N;
  if (wk == 0) {
    float4* p = reinterpret_cast<float4*>(ws) + (split * WARPS_N + wn) * kVec * 32 + lane;
#pragma unroll
    for (int v = 0; v < NW; ++v)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const FragC& c = acc[v].c[j][mt];
          __stcg(p + ((v * MT + mt) * 4 + j) * 32, make_float4(c.x[0], c.x[1], c.x[2], c.x[3]));
        }
  }
  float* ws_rows = ws + int64_t(splits) * WARPS_N * kVec * 32 * 4;
  if (ROWS > 0 && threadIdx.x < ROWS) __stcg(ws_rows + split * ROWS + threadIdx.x, row);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(counter, 1) == splits - 1;
  __syncthreads();
  if (!s_last) return false;
  __threadfence();
#pragma unroll
  for (int v = 0; v < NW; ++v) acc[v].zero();
  constexpr int kSplitUnroll = kVec <= 8 ? 2 : 1;  // two splits' loads in flight if regs allow
#pragma unroll kSplitUnroll
  for (int s = wk; s < splits; s += WARPS_K) {
    const float4* p = reinterpret_cast<const float4*>(ws) + (s * WARPS_N + wn) * kVec * 32 + lane;
#pragma unroll
    for (int v = 0; v < NW; ++v)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float4 q = __ldcg(p + ((v * MT + mt) * 4 + j) * 32);
          FragC& c = acc[v].c[j][mt];
          c.x[0] += q.x, c.x[1] += q.y, c.x[2] += q.z, c.x[3] += q.w;
        }
  }
  if (ROWS > 0 && threadIdx.x < ROWS) {
    row = 0.0f;
    for (int s = 0; s < splits; ++s) row += __ldcg(ws_rows + s * ROWS + threadIdx.x);
  }
  if (threadIdx.x == 0) *counter = 0;
  return true;
}

// Epilogue functors: float(float v0, float v1, int m, int n, float rowsq) const, where v0 (and
// v1 for NW = 2) are the f32 sums for batch row m, column n, and rowsq is sum_k X[m][k]^2 when
// the functor sets kRowSumSq (0 otherwise; computing it costs a little, so it is opt-in).
struct GemvIdentity {
  static constexpr bool kRowSumSq = false;
  KILN_DEV float operator()(float v0, float, int, int, float) const { return v0; }
};
// (1^T W0) * scale: X is a row of ones that the TMA GEMV keeps in shared memory instead of loading
// (gemv_tma.cuh, kXOnes): the sum (scale 1) or mean (scale 1 / K) of W0's rows, a reduction over
// W0's outer dim streamed like any weight. M must be 1; X may be null.
struct GemvOnesX {
  static constexpr bool kRowSumSq = false;
  static constexpr bool kXOnes = true;
  float scale = 1.0f;
  KILN_DEV float operator()(float v0, float, int, int, float) const { return v0 * scale; }
};
// Whether an epilogue's X is the ones row (Epi::kXOnes; false where the member is absent).
template <class E, class = void>
struct GemvXOnes {
  static constexpr bool value = false;
};
template <class E>
struct GemvXOnes<E, decltype(void(E::kXOnes))> {
  static constexpr bool value = E::kXOnes;
};
// silu(X W0) * (X W1): the gated MLP.
struct GemvSiluMul {
  static constexpr bool kRowSumSq = false;
  KILN_DEV float operator()(float v0, float v1, int, int, float) const {
    return v0 / (1.0f + expf(-v0)) * v1;
  }
};
// rms_norm(X) W without weight: (X W)[m][n] / sqrt(mean_k X[m][k]^2 + eps); inv_k = 1 / K.
struct GemvRmsNorm {
  static constexpr bool kRowSumSq = true;
  float inv_k;
  float eps;
  KILN_DEV float operator()(float v0, float, int, int, float rowsq) const {
    return v0 * rsqrtf(rowsq * inv_k + eps);
  }
};

// out[m, n .. n+8) <- epi(...) for the lane's rows m < M; one 16-byte store per row (two for
// f32). Called by the warp that holds the final sums; rowsq[m] (read only if Epi::kRowSumSq)
// is the row's sum of squares. Only the m-tiles mt with bit mt of mt_mask set are stored (the
// cluster kernel stores the m-tiles its CTA owns; the default, all, folds away).
template <typename TO, int MT, int NW, class Epi>
KILN_DEV void gemv_store(const GemvAcc<MT> (&acc)[NW], TO* out, int64_t ldo, int M, int N,
                         int n_warp, const float* rowsq, const Epi& epi, uint32_t mt_mask = ~0u) {
  const int lane = lane_id(), g = lane >> 2, t = lane & 3;
  const int n = n_warp + 8 * g;
  if (n >= N) return;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    if (!((mt_mask >> mt) & 1u)) continue;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int m = 8 * mt + 2 * t + e;
      if (m >= M) continue;
      const float sq = Epi::kRowSumSq ? rowsq[m] : 0.0f;
      float y[8];
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float v1 = NW > 1 ? acc[NW - 1].c[j][mt].x[2 * h + e] : 0.0f;
          y[2 * j + h] = epi(acc[0].c[j][mt].x[2 * h + e], v1, m, n + 2 * j + h, sq);
        }
      TO* p = out + m * ldo + n;
#pragma unroll
      for (int q = 0; q < 8; q += Vec16<TO>::kElems) store16_f32(p + q, y + q);
    }
  }
}

// The whole GEMV as one kernel. grid = (gemv_col_blocks(N, WARPS_N), splits), block =
// 32 * WARPS_N * WARPS_K threads; k_chunk = rows of K per split (a multiple of 16, k_chunk *
// splits >= K). W1 is read only when NW == 2.
template <typename T, typename TO, int MT, int NW, int WARPS_N, int WARPS_K, int UNROLL,
          int MIN_BLOCKS, class Epi>
__global__ void __launch_bounds__(32 * WARPS_N * WARPS_K, MIN_BLOCKS)
    gemv_kernel(const T* __restrict__ X, int64_t ldx, const T* __restrict__ W0,
                const T* __restrict__ W1, int64_t ldw, TO* __restrict__ out, int64_t ldo, int M,
                int N, int K, int k_chunk, float* __restrict__ ws, int* __restrict__ counters,
                Epi epi) {
  pdl_entry();  // before any load or store (base.cuh)
  constexpr bool kRows = Epi::kRowSumSq;
  constexpr int kRowsN = kRows ? MT * 8 : 0;
  __shared__ float red[WARPS_K > 1 ? (WARPS_K - 1) * WARPS_N * 512 : 1];
  __shared__ float srow[kRows ? WARPS_K * MT * 8 : 1];
  __shared__ float srow_final[kRows ? MT * 8 : 1];
  const int warp = warp_id();
  const int wn = warp % WARPS_N, wk = warp / WARPS_N;
  const int n_warp = (blockIdx.x * WARPS_N + wn) * 64;
  const int split = blockIdx.y, splits = gridDim.y;
  const int k_begin = split * k_chunk, k_end = min_i(K, k_begin + k_chunk);

  GemvAcc<MT> acc[NW];
  float row = gemv_block_partial<T, MT, NW, WARPS_N, WARPS_K, UNROLL, kRows>(
      acc, X, ldx, M, W0, W1, ldw, N, n_warp, wk, k_begin, k_end, red, srow);
  if (splits > 1) {
    const int64_t per_split = WARPS_N * NW * MT * 512 + kRowsN;
    float* wsb = ws + static_cast<int64_t>(blockIdx.x) * splits * per_split;
    if (!gemv_splitk_reduce<MT, NW, WARPS_N, WARPS_K, kRowsN>(acc, row, wsb, counters + blockIdx.x,
                                                              split, splits))
      return;
    gemv_block_reduce<MT, NW, WARPS_N, WARPS_K>(acc, red);
  }
  if constexpr (kRows) {
    if (threadIdx.x < MT * 8) srow_final[threadIdx.x] = row;
    __syncthreads();
  }
  if (wk == 0) gemv_store<TO, MT, NW>(acc, out, ldo, M, N, n_warp, srow_final, epi);
}

// ---- Split-K across a thread-block cluster (sm_90) ---------------------------------------------
//
// gemv_kernel's split-K publishes partials to a global workspace and lets the last block to
// arrive (an atomic counter) reduce them: that needs a workspace and counters zeroed before the
// first launch (a memset node in front of each graph launch) and puts a threadfence, an atomic
// and the L2 round trips of the last block on the critical path. On sm_90 the splits of one
// column block can instead be the CTAs of one cluster (cluster dims (1, splits, 1)), which are
// co-scheduled on one GPC and can store into each other's shared memory (DSMEM): no workspace,
// no counters, no memset, and the exchange stays on the SM-to-SM network.
//
// Protocol (every thread of every CTA runs each barrier step; rank = blockIdx.y):
//   1. cluster_arrive_relaxed() at kernel start; mainloop, gemv_block_reduce, gemv_rowsq_block.
//   2. cluster_wait(): every CTA of the cluster has started, so its shared memory exists and may
//      be written (the rule for DSMEM). Started long ago in practice: this costs nothing.
//   3. The partial is cut into work units u = mt * WARPS_N + wn (one m-tile of one warp's column
//      slab: NW * 4 float4 per lane); unit u belongs to rank u % splits. Each wk = 0 warp stores
//      the units it holds that another rank owns into that owner's slot [u / splits][source]
//      (st.shared::cluster at the mapa'd address; the owner's own partial stays in registers).
//      With kRowSumSq, thread tid < MT * 8 stores its `row` into slot [rank][tid] of every rank.
//   4. cluster_arrive() (release) + cluster_wait() (acquire): the stores of step 3 happen before
//      any read after the wait, at cluster scope. No CTA exits before every CTA has arrived, so
//      no store targets the shared memory of an exited CTA; nothing remote is touched after.
//   5. Each owner sums its units over source ranks 0 .. splits-1 in that order (its own
//      registers at its own rank), so the result does not depend on arrival order, and runs the
//      epilogue for those m-tiles (gemv_store's mt_mask). Row sums likewise, in rank order.
// Dynamic shared memory: gemv_cluster_smem_bytes (below); static: as gemv_kernel (red, srow,
// srow_final).

// The cluster barrier and DSMEM wrappers are in copy.cuh.

// Dynamic shared memory of gemv_cluster_kernel, in bytes: per CTA, ceil(WARPS_N * MT / splits)
// owned units x (splits - 1) remote sources x NW * 512 floats (NW * 4 float4 x 32 lanes), plus,
// with kRowSumSq, splits x MT * 8 row sums; 0 for one split. E.g. WARPS_N = 2, NW = 1: MT = 1:
// 2 KB at 2 splits .. 14 KB at 8; MT = 2: 4 .. 14 KB; MT = 4: 8 .. 24 KB. The largest with
// WARPS_N = 2 is MT = 4, NW = 2 at 7 splits: 48 KB; WARPS_N = 4, MT = 4, NW = 2 needs up to
// 72 KB (the launcher raises the limit). The owner's own partial needs no slot (registers).
KILN_HD constexpr int gemv_cluster_smem_bytes(int warps_n, int mt, int nw, int splits,
                                              bool rowsq = false) {
  return splits > 1 ? 4 * (ceil_div(warps_n * mt, splits) * (splits - 1) * nw * 512 +
                           (rowsq ? splits * mt * 8 : 0))
                    : 0;
}
// Its largest value over the cluster sizes the kernel supports (1 .. 8).
KILN_HD constexpr int gemv_cluster_smem_bytes_max(int warps_n, int mt, int nw, bool rowsq = false) {
  int m = 0;
  for (int s = 1; s <= 8; ++s) m = max_i(m, gemv_cluster_smem_bytes(warps_n, mt, nw, s, rowsq));
  return m;
}

// gemv_kernel with split-K over the CTAs of a cluster (protocol above). sm_90 only (traps on
// older targets). grid = (gemv_col_blocks(N, WARPS_N), splits) with cluster dims (1, splits, 1),
// splits in [1, 8] (the portable cluster size), so a column block's splits are exactly one
// cluster and the cluster rank is blockIdx.y; dynamic shared memory gemv_cluster_smem_bytes(
// WARPS_N, MT, NW, splits, Epi::kRowSumSq). k_chunk and the other arguments as gemv_kernel; a
// split whose k-range is empty contributes zeros. Launch with gemv_cluster_launch.
template <typename T, typename TO, int MT, int NW, int WARPS_N, int WARPS_K, int UNROLL,
          int MIN_BLOCKS, class Epi>
__global__ void __launch_bounds__(32 * WARPS_N * WARPS_K, MIN_BLOCKS)
    gemv_cluster_kernel(const T* __restrict__ X, int64_t ldx, const T* __restrict__ W0,
                        const T* __restrict__ W1, int64_t ldw, TO* __restrict__ out, int64_t ldo,
                        int M, int N, int K, int k_chunk, Epi epi) {
  pdl_entry();  // before any load or store (base.cuh)
#if KILN_RT_SM90
  constexpr bool kRows = Epi::kRowSumSq;
  constexpr int kSlot = NW * 4 * 32;  // float4 per (unit, source): index ((v * 4 + j) * 32 + lane)
  __shared__ float red[WARPS_K > 1 ? (WARPS_K - 1) * WARPS_N * 512 : 1];
  __shared__ float srow[kRows ? WARPS_K * MT * 8 : 1];
  __shared__ float srow_final[kRows ? MT * 8 : 1];
  extern __shared__ float4 gemv_cluster_dsmem[];  // [owned unit][source != rank][kSlot], rows
  const int lane = lane_id(), warp = warp_id();
  const int wn = warp % WARPS_N, wk = warp / WARPS_N;
  const int n_warp = (blockIdx.x * WARPS_N + wn) * 64;
  const int rank = blockIdx.y, splits = gridDim.y;  // cluster (1, splits, 1): rank = blockIdx.y
  const bool clustered = splits > 1;                // grid-uniform
  const int k_begin = rank * k_chunk, k_end = min_i(K, k_begin + k_chunk);
  if (clustered) cluster_arrive_relaxed();

  GemvAcc<MT> acc[NW];
  float row = gemv_block_partial<T, MT, NW, WARPS_N, WARPS_K, UNROLL, kRows>(
      acc, X, ldx, M, W0, W1, ldw, N, n_warp, wk, k_begin, k_end, red, srow);

  float4* const slots = gemv_cluster_dsmem;
  const int sources = splits - 1;  // remote sources per owned unit
  float* const srows =
      reinterpret_cast<float*>(slots + ceil_div(WARPS_N * MT, splits) * sources * kSlot);
  if (clustered) {
    cluster_wait();  // every CTA of the cluster has started (step 2)
    if (wk == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int u = mt * WARPS_N + wn, owner = u % splits;
        if (owner == rank) continue;
        const int slot = (u / splits) * sources + (rank < owner ? rank : rank - 1);
        const uint32_t dst = dsmem_map(smem_u32(slots + slot * kSlot + lane), owner);
#pragma unroll
        for (int v = 0; v < NW; ++v)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const FragC& c = acc[v].c[j][mt];
            dsmem_store(dst + (v * 4 + j) * 32 * 16, make_float4(c.x[0], c.x[1], c.x[2], c.x[3]));
          }
      }
    }
    if (kRows && threadIdx.x < MT * 8) {
      const uint32_t a = smem_u32(srows + rank * MT * 8 + threadIdx.x);
      for (int r = 0; r < splits; ++r) dsmem_store(dsmem_map(a, r), row);
    }
    cluster_arrive();  // release: the stores above before ...
    cluster_wait();    // ... every read below (acquire), in every CTA of the cluster
    if (kRows && threadIdx.x < MT * 8) {
      row = 0.0f;
      for (int r = 0; r < splits; ++r) row += srows[r * MT * 8 + threadIdx.x];
    }
  }
  if constexpr (kRows) {
    if (threadIdx.x < MT * 8) srow_final[threadIdx.x] = row;
    __syncthreads();
  }
  if (wk == 0) {
    uint32_t owned = 0;  // m-tiles of this warp's slab that this CTA stores
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int u = mt * WARPS_N + wn;
      if (u % splits != rank) continue;
      owned |= 1u << mt;
      if (clustered) {
        float4 sum[NW][4];
#pragma unroll
        for (int v = 0; v < NW; ++v)
#pragma unroll
          for (int j = 0; j < 4; ++j) sum[v][j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        // Fixed order: source rank 0, 1, ... (at r == rank the slot index is only kept in range;
        // the registers are used).
        for (int r = 0; r < splits; ++r) {
          const float4* src =
              slots + ((u / splits) * sources + (r < rank ? r : max_i(r - 1, 0))) * kSlot + lane;
#pragma unroll
          for (int v = 0; v < NW; ++v)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const FragC& c = acc[v].c[j][mt];
              const float4 q =
                  r == rank ? make_float4(c.x[0], c.x[1], c.x[2], c.x[3]) : src[(v * 4 + j) * 32];
              sum[v][j].x += q.x, sum[v][j].y += q.y, sum[v][j].z += q.z, sum[v][j].w += q.w;
            }
        }
#pragma unroll
        for (int v = 0; v < NW; ++v)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            FragC& c = acc[v].c[j][mt];
            c.x[0] = sum[v][j].x, c.x[1] = sum[v][j].y, c.x[2] = sum[v][j].z, c.x[3] = sum[v][j].w;
          }
      }
    }
    gemv_store<TO, MT, NW>(acc, out, ldo, M, N, n_warp, srow_final, epi, owned);
  }
#else
  __trap();
#endif
}

// ---- Host-side planning ------------------------------------------------------------------------
#ifndef __CUDACC_RTC__

inline int gemv_col_blocks(int N, int warps_n) {
  return ceil_div(N, 64 * warps_n);
}

// Float32 workspace for split-K (0 when splits == 1): per column block and split, the partial
// sums (warps_n * nw * mt * 512 floats) and, when the epilogue sets kRowSumSq, mt * 8 row sums.
inline int64_t gemv_workspace_floats(int N, int warps_n, int splits, int mt, int nw,
                                     bool rowsq = false) {
  return splits > 1 ? int64_t(gemv_col_blocks(N, warps_n)) * splits *
                          (warps_n * nw * mt * 512 + (rowsq ? mt * 8 : 0))
                    : 0;
}

// Rows of K per split for a given split count: a multiple of 16 covering K.
inline int gemv_k_chunk(int K, int splits) {
  return round_up(ceil_div(K, splits), 16);
}

// A split count that gives at most target_blocks blocks in all (SM count x resident blocks per
// SM, from cudaOccupancyMaxActiveBlocksPerMultiprocessor: one wave, so no block waits for a
// second round), keeping at least min_k_per_warp rows of K per warp so that each warp
// streams enough to amortize the reductions. Returns the count after rounding, so that no split
// is empty.
inline int gemv_pick_splits(int N, int K, int warps_n, int warps_k, int target_blocks,
                            int min_k_per_warp = 128) {
  const int cb = gemv_col_blocks(N, warps_n);
  int splits = max_i(1, target_blocks / cb);  // never more blocks than one wave
  const int max_splits = max_i(1, K / (min_k_per_warp * warps_k));
  splits = min_i(splits, max_splits);
  const int chunk = gemv_k_chunk(K, splits);
  return ceil_div(K, chunk);
}

// The divisibility and size preconditions of gemv_kernel (pointer alignment aside).
inline bool gemv_supported(int M, int N, int K, int mt, int64_t ldx, int64_t ldw, int64_t ldo,
                           int out_elem_bytes) {
  return M >= 1 && M <= 8 * mt && N % 8 == 0 && K % 4 == 0 && ldx % 4 == 0 && ldw % 8 == 0 &&
         (ldo * out_elem_bytes) % 16 == 0;
}

// Launches gemv_kernel with `splits` k-splits. ws / counters may be null when splits == 1.
template <typename T, typename TO, int MT, int NW, int WARPS_N, int WARPS_K, int UNROLL,
          int MIN_BLOCKS = 1, class Epi = GemvIdentity>
inline cudaError_t gemv_launch(const T* X, int64_t ldx, const T* W0, const T* W1, int64_t ldw,
                               TO* out, int64_t ldo, int M, int N, int K, int splits, float* ws,
                               int* counters, cudaStream_t stream, Epi epi = Epi()) {
  const int k_chunk = gemv_k_chunk(K, splits);
  dim3 grid(gemv_col_blocks(N, WARPS_N), splits);
  return launch(gemv_kernel<T, TO, MT, NW, WARPS_N, WARPS_K, UNROLL, MIN_BLOCKS, Epi>, grid,
                dim3(32 * WARPS_N * WARPS_K), 0, stream, 1, X, ldx, W0, W1, ldw, out, ldo, M, N, K,
                k_chunk, ws, counters, epi);
}

// ---- Cluster split-K (sm_90): planning and launch ----------------------------------------------

// A split count for gemv_cluster_kernel: as gemv_pick_splits (one wave of target_blocks blocks,
// at least min_k_per_warp rows of K per warp, no empty split), capped at the portable cluster
// size 8. One wave of blocks need not be one wave of clusters (a cluster must fit in one GPC):
// check with gemv_cluster_active_clusters where it matters.
inline int gemv_cluster_pick_splits(int N, int K, int warps_n, int warps_k, int target_blocks,
                                    int min_k_per_warp = 128) {
  const int splits =
      min_i(8, gemv_pick_splits(N, K, warps_n, warps_k, target_blocks, min_k_per_warp));
  return ceil_div(K, gemv_k_chunk(K, splits));
}

// Raises the kernel's dynamic shared-memory limit once, to its largest size over all cluster
// sizes, when that exceeds the 48 KB default (before any graph capture: see raise_smem_limit_once).
template <typename T, typename TO, int MT, int NW, int WARPS_N, int WARPS_K, int UNROLL,
          int MIN_BLOCKS, class Epi>
inline cudaError_t gemv_cluster_prepare() {
  constexpr int kMax = gemv_cluster_smem_bytes_max(WARPS_N, MT, NW, Epi::kRowSumSq);
  if constexpr (kMax > 48 * 1024) {
    constexpr auto kernel =
        gemv_cluster_kernel<T, TO, MT, NW, WARPS_N, WARPS_K, UNROLL, MIN_BLOCKS, Epi>;
    return raise_smem_limit_once<kernel>(kMax);
  } else {
    return cudaSuccess;
  }
}

// The launch configuration of gemv_cluster_launch; attr is the storage for its attributes (two:
// the cluster, and programmatic dependent launch where enabled).
template <typename T, typename TO, int MT, int NW, int WARPS_N, int WARPS_K, int UNROLL,
          int MIN_BLOCKS, class Epi>
inline cudaLaunchConfig_t gemv_cluster_config(int N, int splits, cudaStream_t stream,
                                              cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(gemv_col_blocks(N, WARPS_N), splits, 1);
  cfg.blockDim = dim3(32 * WARPS_N * WARPS_K, 1, 1);
  cfg.dynamicSmemBytes = gemv_cluster_smem_bytes(WARPS_N, MT, NW, splits, Epi::kRowSumSq);
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = splits;
  attr[0].val.clusterDim.z = 1;
  unsigned n = 1;
  add_pdl_attribute(attr, n);
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cfg;
}

// How many clusters of `splits` CTAs can be resident at once (cudaOccupancyMaxActiveClusters);
// gemv_col_blocks(N, WARPS_N) clusters or fewer run in one wave.
template <typename T, typename TO, int MT, int NW, int WARPS_N, int WARPS_K, int UNROLL,
          int MIN_BLOCKS, class Epi>
inline cudaError_t gemv_cluster_active_clusters(int N, int splits, int* clusters) {
  cudaError_t e = gemv_cluster_prepare<T, TO, MT, NW, WARPS_N, WARPS_K, UNROLL, MIN_BLOCKS, Epi>();
  if (e != cudaSuccess) return e;
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg =
      gemv_cluster_config<T, TO, MT, NW, WARPS_N, WARPS_K, UNROLL, MIN_BLOCKS, Epi>(N, splits, 0,
                                                                                    attr);
  return cudaOccupancyMaxActiveClusters(
      clusters, gemv_cluster_kernel<T, TO, MT, NW, WARPS_N, WARPS_K, UNROLL, MIN_BLOCKS, Epi>,
      &cfg);
}

// Launches gemv_cluster_kernel with `splits` k-splits (1 .. 8; cudaErrorInvalidValue otherwise)
// as clusters of (1, splits, 1). Needs an sm_90 device; the preconditions of gemv_kernel without
// the workspace ones. No state survives between launches, so launches may overlap freely.
template <typename T, typename TO, int MT, int NW, int WARPS_N, int WARPS_K, int UNROLL,
          int MIN_BLOCKS = 1, class Epi = GemvIdentity>
inline cudaError_t gemv_cluster_launch(const T* X, int64_t ldx, const T* W0, const T* W1,
                                       int64_t ldw, TO* out, int64_t ldo, int M, int N, int K,
                                       int splits, cudaStream_t stream, Epi epi = Epi()) {
  if (splits < 1 || splits > 8) return cudaErrorInvalidValue;
  const cudaError_t e =
      gemv_cluster_prepare<T, TO, MT, NW, WARPS_N, WARPS_K, UNROLL, MIN_BLOCKS, Epi>();
  if (e != cudaSuccess) return e;
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t cfg =
      gemv_cluster_config<T, TO, MT, NW, WARPS_N, WARPS_K, UNROLL, MIN_BLOCKS, Epi>(N, splits,
                                                                                    stream, attr);
  const int k_chunk = gemv_k_chunk(K, splits);
  return cudaLaunchKernelEx(
      &cfg, gemv_cluster_kernel<T, TO, MT, NW, WARPS_N, WARPS_K, UNROLL, MIN_BLOCKS, Epi>, X, ldx,
      W0, W1, ldw, out, ldo, M, N, K, k_chunk, epi);
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_GEMV_CUH
