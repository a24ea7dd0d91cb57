// Kiln runtime, attention: the two-contraction chain of attention on Hopper (sm_90a), with TMA
// copies into 128-byte-swizzled shared memory and wgmma for both products.
//
// One block owns an A tile (BM x D: attention's query rows) and a key range of NK keys, walked in
// chunks of NC keys. For each chunk, with Kc (D x NC) and Vc (NC x DV) that chunk's slices:
//   S = A Kc                                 (wgmma, A and Kc from shared memory)
//   P = f(S), r_j += g_j(S) per row          (registers: f, g_j elementwise, r_j row sums)
//   O += P Vc                                (wgmma, P from registers, Vc from shared memory)
// and after the last chunk an epilogue stores the block's outputs from O and the r_j. f, the g_j
// and the epilogue are a functor (below) that the emitter writes from a block graph; attention
// without max subtraction is f = exp, g_0 = exp, out = O / r_0, or the un-normalized partials
// (O, r_0) of a key split that a second kernel combines.
//
// Block: a producer warpgroup, then WG x KS consumer warpgroups: WG row groups of 64 rows
// (consumer rows 64 rg .. 64 rg + 63), each split KS ways over the chunks (consumer ks takes
// chunks j = ks mod KS; the row group's partial sums meet in shared memory at the end, since O and
// the r_j are sums). setmaxnreg moves the producer's registers to the consumers. Copies: lane 0
// of producer warp 0 loads A once (on a_full); lane 0 of producer warp k fills ring k, STAGES
// deep, with chunks j = k mod KS (full: the chunk's bytes landed; empty: every row group is done
// reading it), so key-split consumers never wait on each other's stages. A consumer overlaps the
// tensor cores with its own elementwise work: it issues S of its next chunk before it computes f
// and the row sums of the current one, then issues O's wgmmas; wgmma_wait<1> at the top of its
// next chunk finds the previous O done, and that stage is released there (hence STAGES >= 3: the
// producer needs that stage for the chunk after next before).
//
// Shared-memory layouts (128-byte swizzle; panels of 64 16-bit columns; every panel 1024-byte
// aligned, which BM, D, NC, DV multiples of 64 guarantee):
//   A        D/64 panels of BM rows                      (K-major operand)
//   K chunk  N-major (K stored D x keys):  NC/64 panels of D rows   (wgmma imm-trans-b = 1)
//            K-major (K stored keys x D):  D/64 panels of NC rows   (imm-trans-b = 0)
//   V chunk  N-major (V stored keys x DV): DV/64 panels of NC rows  (imm-trans-b = 1)
//            K-major (V stored DV x keys): NC/64 panels of DV rows  (imm-trans-b = 0)
// The TMA maps are 2-D views (rows x cols, row stride ld) of the tensors, leading dims folded into
// rows; that is exact as long as no box straddles a leading dim, which holds when the tile
// extents divide the tensor dims (the block graph's own rule).
//
// The functor Fn (all members const, device):
//   static constexpr int kRows;                      // number of row feeds r_j (0 .. 4)
//   AttnCoords coords(int bx, int by, int bz);       // box origins of A and of chunk 0's K, V
//   float elem(float s, float (&r)[R]);              // returns f(s); r[j] += g_j(s) (R = max(1,
//   kRows)) void store2(int bx, int by, int bz, int m, int n, float o0, float o1, const float
//   (&r)[R]);
//                                                    // outputs at tile row m, columns n, n + 1
//   void store_row(int bx, int by, int bz, int m, const float (&r)[R]);   // per-row outputs
// store2 is called once per column pair of each row, store_row once per row; m < BM, n < DV.
// The row sums r passed to them are complete (summed over the block's whole key range).
#ifndef KILN_RT_ATTENTION_CUH
#define KILN_RT_ATTENTION_CUH

#ifndef KILN_RT_WGMMA_CUH
#include "wgmma.cuh"
#endif
#ifndef KILN_RT_REDUCE_CUH
#include "reduce.cuh"
#endif

namespace kiln {
namespace rt {

// Box origins (row, col of the 2-D views) of a block's A tile and of its first K and V chunks.
// Chunk j adds j * NC to the key coordinate: K's col (N-major) or row (K-major), V's row
// (N-major) or col (K-major).
struct AttnCoords {
  int a_row, a_col, k_row, k_col, v_row, v_col;
};

template <typename T_, int WG, int D, int DV, int NC, int STAGES, bool K_NMAJOR, bool V_NMAJOR,
          int MIN_BLOCKS = 1, int KS = 1>
struct AttnCfg {
  using T = T_;
  static constexpr int kWG = WG, kBM = 64 * WG, kD = D, kDV = DV, kNC = NC, kStages = STAGES;
  static constexpr int kKS = KS;  // consumers per row group, splitting the chunks between them
  static constexpr int kConsumers = WG * KS;
  static constexpr bool kKNMajor = K_NMAJOR, kVNMajor = V_NMAJOR;
  static constexpr int kMinBlocks = MIN_BLOCKS;
  static constexpr int kThreads = 128 * (kConsumers + 1);  // the producer, then the consumers
  static constexpr int kABytes = kBM * D * 2;
  static constexpr int kKBytes = D * NC * 2, kVBytes = NC * DV * 2;
  static constexpr int kStageBytes = kKBytes + kVBytes;
  static constexpr int kSmemBytes = kABytes + KS * STAGES * kStageBytes + 1024;  // + alignment
  // Registers: the launch bounds give every thread kEntryRegs; the producer warpgroup gives back
  // all but kProducerRegs and the consumers take them (setmaxnreg), when that is more.
  static constexpr int kEntryRegs0 = 65536 / (MIN_BLOCKS * kThreads) / 8 * 8;
  static constexpr int kEntryRegs = kEntryRegs0 > 248 ? 248 : kEntryRegs0;
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs0 =
      (kEntryRegs * (kConsumers + 1) - kProducerRegs) / kConsumers / 8 * 8;
  static constexpr int kConsumerRegs = kConsumerRegs0 > 240 ? 240 : kConsumerRegs0;
  static constexpr bool kRebalance = kConsumerRegs > kEntryRegs;
  static_assert(sizeof(T) == 2, "16-bit operands");
  static_assert(WG >= 1 && WG <= 2 && KS >= 1 && KS <= 2 && WG * KS <= 2, "1 or 2 consumers");
  static_assert(D % 64 == 0 && D <= 256, "D: whole 128-byte panels, one TMA box high");
  static_assert(DV % 64 == 0 && DV <= 256, "DV: whole panels, one wgmma wide");
  static_assert(NC % 64 == 0 && NC <= 256, "NC: whole panels, one wgmma wide");
  // A consumer releases its chunk i's stage while it awaits its chunk i + 2 (STAGES per ring).
  static_assert(STAGES >= 3, "stages");
  // With a key split, the other consumers' partials (O and up to 4 row feeds per thread) pass
  // through the ring once it is idle.
  static_assert(KS == 1 || WG * (KS - 1) * 128 * (DV / 2 + 8) * 4 <= KS * STAGES * kStageBytes,
                "rings");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// bar.sync on named barrier `id` (1..15) among `threads` threads (a multiple of 32).
KILN_DEV void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int N>
KILN_DEV void setmaxnreg_inc() {
#if KILN_RT_WGMMA
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N) : "memory");
#endif
}
template <int N>
KILN_DEV void setmaxnreg_dec() {
#if KILN_RT_WGMMA
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N) : "memory");
#endif
}

template <class C, class Fn>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    attn_kernel(const __grid_constant__ TmaDesc map_a, const __grid_constant__ TmaDesc map_k,
                const __grid_constant__ TmaDesc map_v, int nchunks, Fn fn) {
  using T = typename C::T;
  constexpr int S = C::kStages, BM = C::kBM, D = C::kD, DV = C::kDV, NC = C::kNC;
  constexpr int R = Fn::kRows > 0 ? Fn::kRows : 1;
  extern __shared__ __align__(1024) char attn_smem_raw[];
  constexpr int KS = C::kKS;
  // One ring of S stages per key-split consumer (ring k holds the chunks j = k mod KS), so the
  // consumers never wait for each other's stages.
  __shared__ __align__(8) uint64_t full[KS][S], empty[KS][S], a_full;
  // The swizzle pattern is anchored to 1024-byte aligned shared addresses.
  char* smem = attn_smem_raw + ((1024 - (smem_u32(attn_smem_raw) & 1023)) & 1023);
  char* rings = smem + C::kABytes;
  const int tid = threadIdx.x, warp = tid >> 5;
  if (tid == 0) {
    mbar_init(&a_full, 1);
#pragma unroll
    for (int k = 0; k < KS; ++k)
#pragma unroll
      for (int s = 0; s < S; ++s) {
        mbar_init(&full[k][s], 1);
        mbar_init(&empty[k][s], C::kWG);  // one arrival per row group
      }
    fence_mbar_init();
  }
  __syncthreads();  // no block-wide barrier may follow: the producer warps leave early
  const AttnCoords co = fn.coords(blockIdx.x, blockIdx.y, blockIdx.z);

  if (warp < 4) {
    // Producer: lane 0 of warp k fills ring k (warp 0 also loads A).
    if constexpr (C::kRebalance) setmaxnreg_dec<C::kProducerRegs>();
    const int k = warp;
    if ((tid & 31) != 0 || k >= KS) return;
    if (k == 0) {
      tma_prefetch_desc(&map_a);
      tma_prefetch_desc(&map_k);
      tma_prefetch_desc(&map_v);
      mbar_arrive_expect_tx(&a_full, C::kABytes);
#pragma unroll
      for (int p = 0; p < D / 64; ++p)
        tma_load_2d(smem + p * BM * 128, &map_a, co.a_row, co.a_col + 64 * p, &a_full);
    }
    char* ring = rings + k * S * C::kStageBytes;
    for (int i = 0, j = k; j < nchunks; ++i, j += KS) {
      const int s = i % S;
      if (i >= S) mbar_wait(&empty[k][s], ((i / S) - 1) & 1);
      char* sk = ring + s * C::kStageBytes;
      char* sv = sk + C::kKBytes;
      uint64_t* bar = &full[k][s];
      mbar_arrive_expect_tx(bar, C::kStageBytes);
      if constexpr (C::kKNMajor) {
#pragma unroll
        for (int p = 0; p < NC / 64; ++p)
          tma_load_2d(sk + p * D * 128, &map_k, co.k_row, co.k_col + j * NC + 64 * p, bar);
      } else {
#pragma unroll
        for (int p = 0; p < D / 64; ++p)
          tma_load_2d(sk + p * NC * 128, &map_k, co.k_row + j * NC, co.k_col + 64 * p, bar);
      }
      if constexpr (C::kVNMajor) {
#pragma unroll
        for (int p = 0; p < DV / 64; ++p)
          tma_load_2d(sv + p * NC * 128, &map_v, co.v_row + j * NC, co.v_col + 64 * p, bar);
      } else {
#pragma unroll
        for (int p = 0; p < NC / 64; ++p)
          tma_load_2d(sv + p * DV * 128, &map_v, co.v_row, co.v_col + j * NC + 64 * p, bar);
      }
    }
    return;
  }

  // Consumer cw: row group rg (rows 64 rg .. 64 rg + 63 of the tile), chunks j = ks + i KS of
  // ring ks (local index i).
  if constexpr (C::kRebalance) setmaxnreg_inc<C::kConsumerRegs>();
  const int cw = (warp >> 2) - 1, rg = cw / KS, ks = cw % KS;
  const int w = warp & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int nlocal = (nchunks - ks + KS - 1) / KS;
  const uint32_t a_base = smem_u32(smem) + rg * 64 * 128;
  const uint32_t ring_base = smem_u32(rings) + ks * S * C::kStageBytes;
  // O's first wgmma overwrites it (scale-d 0): no zeroing instructions inside the wgmma pipeline,
  // which would make ptxas serialize it.
  float o[DV / 2];
  float r[2][R];  // this thread's partial row feeds of rows 16w + g (h = 0) and + 8 (h = 1)
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int q = 0; q < R; ++q) r[h][q] = 0.0f;

  // S(i) = A Kc(i), overwriting sacc (scale-d 0 on the first k step).
  auto issue_s = [&](float(&sacc)[NC / 2], int i) {
    const uint32_t kb = ring_base + (i % S) * C::kStageBytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t da = wgmma_desc_sw128(a_base + (kk / 4) * BM * 128 + (kk % 4) * 32, 16, 1024);
      uint64_t db;
      if constexpr (C::kKNMajor)
        db = wgmma_desc_sw128(kb + kk * 2048, D * 128, 1024);
      else
        db = wgmma_desc_sw128(kb + (kk / 4) * NC * 128 + (kk % 4) * 32, 16, 1024);
      wgmma_ss<T, NC, C::kKNMajor ? 1 : 0>(sacc, da, db, kk > 0);
    }
    wgmma_commit();
  };
  // f(S(i)) in cur -> P as wgmma A fragments, with the row feeds; then O += P Vc(i).
  auto finish = [&](float(&cur)[NC / 2], int i) {
    wgmma_fence_acc(cur);
    wgmma_fence_acc(o);
    if (i > 0 && w == 0 && lane == 0) mbar_arrive(&empty[ks][(i - 1) % S]);  // O(i - 1) is done
    uint32_t pa[NC / 16][4];
#pragma unroll
    for (int kk = 0; kk < NC / 16; ++kk)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int n8 = 2 * kk + e;  // n8 block n8 holds columns 8 n8 + 2t, 8 n8 + 2t + 1
        const float p0 = fn.elem(cur[4 * n8 + 0], r[0]);
        const float p1 = fn.elem(cur[4 * n8 + 1], r[0]);
        const float p2 = fn.elem(cur[4 * n8 + 2], r[1]);
        const float p3 = fn.elem(cur[4 * n8 + 3], r[1]);
        pa[kk][2 * e + 0] = pack2<T>(p0, p1);
        pa[kk][2 * e + 1] = pack2<T>(p2, p3);
      }
    const uint32_t vb = ring_base + (i % S) * C::kStageBytes + C::kKBytes;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < NC / 16; ++kk) {
      uint64_t db;
      if constexpr (C::kVNMajor)
        db = wgmma_desc_sw128(vb + kk * 2048, NC * 128, 1024);
      else
        db = wgmma_desc_sw128(vb + (kk / 4) * DV * 128 + (kk % 4) * 32, 16, 1024);
      wgmma_rs<T, DV, C::kVNMajor ? 1 : 0>(o, pa[kk], db, i > 0 || kk > 0);
    }
    wgmma_commit();
  };
  // Local chunk i with a successor: S(i) is in cur; S(i + 1) goes to nxt before f runs on cur.
  // The groups in flight are the same on every path here (ptxas serializes the wgmmas when it
  // cannot prove that wait_group<1> retired the ones whose registers are read next).
  auto step = [&](float(&cur)[NC / 2], float(&nxt)[NC / 2], int i) {
    mbar_wait(&full[ks][(i + 1) % S], ((i + 1) / S) & 1);
    issue_s(nxt, i + 1);
    wgmma_wait<1>();  // all but S(i + 1): S(i) and O(i - 1) are done
    finish(cur, i);
  };

  float s0[NC / 2], s1[NC / 2];
  mbar_wait(&a_full, 0);
  if (nlocal > 0) {
    mbar_wait(&full[ks][0], 0);
    issue_s(s0, 0);
    int i = 0;
    for (; i + 2 < nlocal; i += 2) {
      step(s0, s1, i);
      step(s1, s0, i + 1);
    }
    // One or two chunks left, the first one's S in s0.
    if (i + 1 < nlocal) {
      step(s0, s1, i);
      wgmma_wait<0>();
      finish(s1, i + 1);
    } else {
      wgmma_wait<0>();
      finish(s0, i);
    }
    wgmma_wait<0>();
    wgmma_fence_acc(o);
  } else {
#pragma unroll
    for (int q = 0; q < DV / 2; ++q) o[q] = 0.0f;  // no chunk for this consumer
  }

  if constexpr (KS > 1) {
    // The row group's other consumers hand their partials to consumer ks = 0 through the ring,
    // idle once every consumer has waited for its last wgmma (the first barrier); summed in a
    // fixed order, so results are deterministic.
    constexpr int kVals = DV / 2 + 2 * R;
    float* scratch = reinterpret_cast<float*>(rings);
    const int tw = tid & 127;
    named_barrier(1, C::kConsumers * 128);
    if (ks > 0) {
      float* p = scratch + (rg * (KS - 1) + ks - 1) * kVals * 128 + tw;
#pragma unroll
      for (int i = 0; i < DV / 2; ++i) p[i * 128] = o[i];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < R; ++q) p[(DV / 2 + h * R + q) * 128] = r[h][q];
    }
    named_barrier(1, C::kConsumers * 128);
    if (ks > 0) return;
    for (int k = 1; k < KS; ++k) {
      const float* p = scratch + (rg * (KS - 1) + k - 1) * kVals * 128 + tw;
#pragma unroll
      for (int i = 0; i < DV / 2; ++i) o[i] += p[i * 128];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < R; ++q) r[h][q] += p[(DV / 2 + h * R + q) * 128];
    }
  }

  // Each row's feed is spread over the 4 lanes of a quad (their columns 2t, 2t + 1 of every n8
  // block); sums regroup exactly, so the quad sum runs once, here.
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int q = 0; q < R; ++q) r[h][q] = warp_sum<4>(r[h][q]);
  const int m0 = 64 * rg + 16 * w + g;
#pragma unroll
  for (int i = 0; i < DV / 8; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      fn.store2(blockIdx.x, blockIdx.y, blockIdx.z, m0 + 8 * h, 8 * i + 2 * t, o[4 * i + 2 * h],
                o[4 * i + 2 * h + 1], r[h]);
  if (t == 0)
#pragma unroll
    for (int h = 0; h < 2; ++h) fn.store_row(blockIdx.x, blockIdx.y, blockIdx.z, m0 + 8 * h, r[h]);
}

#ifndef __CUDACC_RTC__
// The 2-D view a TMA map covers: rows x cols elements, row stride ld elements.
struct AttnView {
  int64_t rows, cols, ld;
};

// Encodes the three tensor maps and launches attn_kernel<C, Fn> on `grid` blocks, each walking
// nchunks chunks of C::kNC keys. sm_90a only (cudaErrorInvalidDeviceFunction on an older device);
// a, k, v 16-byte aligned, ld * 2 bytes multiples of
// 16. Returns the first error (an invalid map included).
template <class C, class Fn>
inline cudaError_t attn_launch(const typename C::T* a, AttnView av, const typename C::T* k,
                               AttnView kv, const typename C::T* v, AttnView vv, dim3 grid,
                               int nchunks, const Fn& fn, cudaStream_t stream) {
  cudaError_t e = require_sm90();
  if (e != cudaSuccess) return e;
  TmaDesc ma, mk, mv;
  e = tma_encode_2d(&ma, a, av.rows, av.cols, av.ld, C::kBM, 64, true);
  if (e == cudaSuccess)
    e = tma_encode_2d(&mk, k, kv.rows, kv.cols, kv.ld, C::kKNMajor ? C::kD : C::kNC, 64, true);
  if (e == cudaSuccess)
    e = tma_encode_2d(&mv, v, vv.rows, vv.cols, vv.ld, C::kVNMajor ? C::kNC : C::kDV, 64, true);
  if (e != cudaSuccess) return e;
  constexpr auto kernel = attn_kernel<C, Fn>;
  e = raise_smem_limit_once<kernel>(C::kSmemBytes);
  if (e != cudaSuccess) return e;
  kernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(ma, mk, mv, nchunks, fn);
  return cudaGetLastError();
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_ATTENTION_CUH
