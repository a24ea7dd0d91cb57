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
// Online (Fn::kOnline): where f(s) = k exp(a s) and every g_j(s) = k_j exp(a s) with one a > 0,
// and every output is homogeneous of degree 0 in (O, r_j) jointly (out = O / r_0 is; the
// emitter's matcher proves both), the kernel keeps a running row max m of S and computes
// f(s - m), g_j(s - m), rescaling O and the r_j by exp(a (m_old - m_new)) when m grows. Every
// accumulator is then the exact one times exp(-a m) for the final m, which the outputs cancel, so
// the results are the same real numbers, but P = f(s - m) <= k: P fits a 16-bit operand whatever
// the range of S (the range rule of the spec format), where exp(s) alone overflows f16 at s > 11.
//
// Cluster key split (CL > 1, online only): the CL CTAs of a cluster (cluster dims (CL, 1, 1)) take
// one 64-row tile's chunks in floor shares (differing by at most one); at the end each CTA (its two
// key-split consumers' partials combined first, in shared memory) pushes its (m, r_j, O) into the
// CTAs that own O's column slices, through distributed shared memory stores (weights exp(a (m_c -
// max_c m_c)) applied by the owner); after one cluster barrier every CTA combines its slice from
// its own shared memory and stores it. One launch, no workspace, one barrier: this is what fills
// the SMs when there are few query tiles (decode).
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
//   static constexpr bool kOnline;                   // max-subtracted (above)
//   static constexpr float kExpScale, kPCoef;        // a and k (online only)
//   void online_feeds(float p, float (&r)[R]);       // online: r[j] += (k_j / k) p
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
          int MIN_BLOCKS = 1, int KS = 1, int CL = 1, bool MASKED = false, bool NORM = false>
struct AttnCfg {
  using T = T_;
  static constexpr int kWG = WG, kBM = 64 * WG, kD = D, kDV = DV, kNC = NC, kStages = STAGES;
  static constexpr int kKS = KS;  // consumers per row group, splitting the chunks between them
  static constexpr int kConsumers = WG * KS;
  static constexpr int kCL = CL;  // CTAs of a cluster splitting one tile's keys
  // The tile's last chunk may hold fewer than NC keys (masked; online chains only). A template
  // parameter, so that kernels without a partial chunk compile to the code they had before the
  // mask (the runtime-tested version measured 3-4% slower on gqa, on another H100 lease).
  static constexpr bool kMasked = MASKED;
  static constexpr bool kKNMajor = K_NMAJOR, kVNMajor = V_NMAJOR;
  static constexpr int kMinBlocks = MIN_BLOCKS;
  // Row norms (NORM, below) add a normalizer warpgroup after the consumers.
  static constexpr int kNormWG = NORM ? 1 : 0;
  static constexpr int kThreads = 128 * (kConsumers + 1 + kNormWG);  // producer, consumers, [norm]
  static constexpr int kABytes = kBM * D * 2;
  static constexpr int kKBytes = D * NC * 2, kVBytes = NC * DV * 2;
  static constexpr int kStageBytes = kKBytes + kVBytes;
  // Cluster key split: each CTA receives, for its share of O's n8 column blocks, every CTA's
  // partial (those blocks and one (m, r) unit) as float4 units of its 128 consumer threads.
  // Where that area does not fit beside the rings (head dim 256), the CTAs pull the partials
  // from each other's idle rings instead (two cluster barriers).
  static constexpr int kBlocksPerCta = (DV / 8 + CL - 1) / CL;
  static constexpr int kRecvUnits = kBlocksPerCta + 1;
  // Row norms of the operands (NORM: the functor's kNormA / kNormK, below): the factors of A's
  // rows and of every stage's keys, as floats after the rings.
  static constexpr bool kNorm = NORM;
  static constexpr int kNormOffset = kABytes + KS * STAGES * kStageBytes;
  static constexpr int kNormBytes = NORM ? (kBM + KS * STAGES * NC + D) * 4 : 0;  // + weights
  static constexpr int kRecvOffset = kNormOffset + kNormBytes;
  // The kernel's static shared memory (its mbarriers) counts against the same limit as the
  // dynamic bytes: an upper bound, which the planner reserves too (kAttnStaticSmem).
  static constexpr int kStaticBytes = 512;
  static_assert((3 * KS * STAGES + 2) * 8 <= kStaticBytes, "the mbarriers fit the reserve");
  static constexpr bool kPush =
      CL > 1 && kRecvOffset + CL* kRecvUnits * 128 * 16 + 1024 + kStaticBytes <= 227 * 1024;
  static constexpr int kRecvBytes = kPush ? CL * kRecvUnits * 128 * 16 : 0;
  static constexpr int kSmemBytes = kRecvOffset + kRecvBytes + 1024;  // + alignment
  // Registers: the launch bounds give every thread kEntryRegs; the producer warpgroup gives back
  // all but kProducerRegs and the consumers take them (setmaxnreg), when that is more.
  static constexpr int kEntryRegs0 = 65536 / (MIN_BLOCKS * kThreads) / 8 * 8;
  static constexpr int kEntryRegs = kEntryRegs0 > 248 ? 248 : kEntryRegs0;
  static constexpr int kProducerRegs = 40;
  static constexpr int kNormRegs = 72;  // the normalizers: 8 16-byte loads in flight
  static constexpr int kConsumerRegs0 =
      (kEntryRegs * (kConsumers + 1 + kNormWG) - kProducerRegs - kNormWG * kNormRegs) / kConsumers /
      8 * 8;
  static constexpr int kConsumerRegs = kConsumerRegs0 > 240 ? 240 : kConsumerRegs0;
  static constexpr bool kRebalance = kConsumerRegs > kEntryRegs;
  static_assert(sizeof(T) == 2, "16-bit operands");
  static_assert(WG >= 1 && WG <= 2 && KS >= 1 && KS <= 2 && WG * KS <= 2, "1 or 2 consumers");
  static_assert(D % 64 == 0 && D <= 256, "D: whole 128-byte panels, one TMA box high");
  static_assert(DV % 64 == 0 && DV <= 256, "DV: whole panels, one wgmma wide");
  static_assert(NC % 64 == 0 && NC <= 256, "NC: whole panels, one wgmma wide");
  // A consumer releases its chunk i's stage while it awaits its chunk i + 2 (STAGES per ring).
  static_assert(STAGES >= 3, "stages");
  // With a key split (in the CTA or the cluster), each consumer's partials (per thread: O's
  // DV / 2 values, up to 4 row feeds and the running max of 2 rows, in float4 units) pass
  // through its own ring once it is idle.
  static_assert(KS * CL == 1 || 128 * 16 * (DV / 8 + 3) <= STAGES * kStageBytes, "rings");
  static_assert(CL == 1 || CL == 2 || CL == 4 || CL == 8, "cluster: 1, 2, 4 or 8 CTAs");
  static_assert(CL == 1 || WG == 1, "a cluster key split has one row group per CTA");
  static_assert(kSmemBytes + kStaticBytes <= 227 * 1024, "shared memory");
};

// bar.sync on named barrier `id` (1..15) among `threads` threads (a multiple of 32).
KILN_DEV void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// bar.arrive on named barrier `id`: counts toward `threads` without waiting.
KILN_DEV void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
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

// exp(a (m - mx)): the factor that moves a partial kept relative to row max m onto the row max
// mx >= m; 0 for a partial that has seen no keys (m = -inf).
KILN_DEV float attn_rescale(float m, float mx, float a) {
  return m == -KILN_INF ? 0.0f : __expf(a * (m - mx));
}

// P online partials of two rows (row maxes m, row feeds rf): the weights wt = exp(a (m_p - mx))
// that move each onto the common max mx, and the combined feeds rr = sum_p wt_p rf_p.
template <int P, int R>
KILN_DEV void attn_weigh(const float (&m)[P][2], const float (&rf)[P][2][R], float a,
                         float (&wt)[P][2], float (&mx)[2], float (&rr)[2][R]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = -KILN_INF;
#pragma unroll
    for (int p = 0; p < P; ++p) mx[h] = fmaxf(mx[h], m[p][h]);
#pragma unroll
    for (int p = 0; p < P; ++p) wt[p][h] = attn_rescale(m[p][h], mx[h], a);
#pragma unroll
    for (int q = 0; q < R; ++q) {
      rr[h][q] = 0.0f;
#pragma unroll
      for (int p = 0; p < P; ++p) rr[h][q] += wt[p][h] * rf[p][h][q];
    }
  }
}

// Row norms of the operands (optional members of Fn, with AttnCfg's NORM): kNormA / kNormK say
// that Q = A's rows / each K chunk's keys (K-major chunks only) are to be normalized, each row x
// becoming x * norm_a(ss) / x * norm_k(ss), ss its sum of squares in float32. The kernel does not
// rewrite the tiles: S = (x_q f_q) . (x_k f_k) = f_q f_k (x_q . x_k), so each consumer scales S's
// rows and columns by the factors (in float32, before the softmax), which a normalizer warpgroup
// computes from shared memory beside the products. Functors without the members normalize
// nothing. Measured on an H200 (rms-normed gqa shapes, session 22; 6.6 us without norms, 10.6 as
// three kernels): this, 8.5 us; the producer warpgroup's idle warps as the normalizers, 8.75;
// the tiles rewritten in place by them, 13.5; the consumers summing each chunk's rows themselves
// while their products ran, 8.8 (0.2 us more per chunk); the sums as the diagonal of a Gram
// matrix, one more wgmma per chunk, 9.2 (the tensor cores are the consumers' bottleneck). What
// remains is mostly the first chunks' factors: the consumers' first softmax starts 0.9 us later.
template <class...>
struct attn_void {
  using type = void;
};
template <class Fn, class = void>
struct AttnNorms {
  static constexpr bool kA = false, kK = false;
};
template <class Fn>
struct AttnNorms<Fn, typename attn_void<decltype(Fn::kNormA), decltype(Fn::kNormK)>::type> {
  static constexpr bool kA = Fn::kNormA, kK = Fn::kNormK;
};

// Column weights (optional members of Fn, with NORM: kColWeights, col_weight(d)): Q's column d is
// multiplied by col_weight(d) before the products (the norms' weights: S sums q_d w_d k_d over d,
// so a weight of either norm may multiply Q's columns). The normalizers rewrite A once, in place.
template <class Fn, class = void>
struct AttnColWeights {
  static constexpr bool kW = false;
};
template <class Fn>
struct AttnColWeights<Fn, typename attn_void<decltype(Fn::kColWeights)>::type> {
  static constexpr bool kW = Fn::kColWeights;
};

// Half-row sums of squares: for each of U rows (row[u], row index r[u] of its tile) of PANELS
// 128-byte-swizzled panels (panel_bytes apart), the squares of its even (h = 0) or odd (h = 1)
// 16-byte units; the lane pair (h = 0, 1) adds its halves by a shuffle. All U x 4 loads of a panel
// are issued before their first use (volatile: measured on an H200, ptxas otherwise kept three
// in flight at a shared-memory latency near 300 cycles beside the consumers' wgmmas). The swizzle
// permutes units within a row, which a whole-row sum does not see, so thread (r, h) visits units
// (2c + h + 2r) mod 8: the 8 lanes of a shared-memory wavefront (4 rows x 2 halves) touch distinct
// banks, where one order for every row put all lanes on the same four. Four partial sums keep the
// FMA chains short.
template <class T, int PANELS, int U>
KILN_DEV void attn_half_rows_sumsq(const char* const (&row)[U], const int (&r)[U], int h,
                                   int panel_bytes, float (&out)[U]) {
  float ss[U][4];
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int e = 0; e < 4; ++e) ss[u][e] = 0.0f;
#pragma unroll
  for (int p = 0; p < PANELS; ++p) {
    uint32_t w[U][4][4];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int c = 0; c < 4; ++c)
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(w[u][c][0]), "=r"(w[u][c][1]), "=r"(w[u][c][2]), "=r"(w[u][c][3])
                     : "r"(smem_u32(row[u] + p * panel_bytes + ((2 * c + h + 2 * r[u]) & 7) * 16)));
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int c = 0; c < 4; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = unpack2<T>(w[u][c][e]);
          ss[u][e] = fmaf(f.x, f.x, ss[u][e]);
          ss[u][e] = fmaf(f.y, f.y, ss[u][e]);
        }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    out[u] = (ss[u][0] + ss[u][1]) + (ss[u][2] + ss[u][3]);
    out[u] += __shfl_xor_sync(0xffffffffu, out[u], 1);
  }
}

template <class C, class Fn>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    attn_kernel(const __grid_constant__ TmaDesc map_a, const __grid_constant__ TmaDesc map_k,
                const __grid_constant__ TmaDesc map_v, int nchunks_tile, int last_keys, Fn fn) {
  pdl_entry();  // before any load or store (base.cuh)
  // Probe events (KILN_PROBE builds only): 0 after pdl_entry, 2 barriers ready, (row norms:
  // normalizer thread 0 has A 1, has A's factors 8, its first / last round's 10 / 15),
  // 3 / 12 consumer 0 / 1 has A, 4 / 13 its first chunk, 5 consumer 0's first softmax, 6 / 7
  // consumer 0 / 1 done with its chunks, 9 partials exchanged (after the barrier), 11 end; 14 the
  // producer's last load issued; 16 + 2 i / 17 + 2 i consumer 0 waits for / has its local chunk
  // i + 1.
  if (threadIdx.x == 0) {
    KILN_PROBE_AT(0);
    // The maps are kernel parameters: fetched while the barriers are set up, not by the first
    // TMA copy.
    tma_prefetch_desc(&map_a);
    tma_prefetch_desc(&map_k);
    tma_prefetch_desc(&map_v);
  }
  using T = typename C::T;
  constexpr int S = C::kStages, BM = C::kBM, D = C::kD, DV = C::kDV, NC = C::kNC;
  constexpr int R = Fn::kRows > 0 ? Fn::kRows : 1;
  static_assert(R <= 4, "at most 4 row feeds");
  static_assert(C::kCL == 1 || Fn::kOnline, "a cluster key split combines online partials");
  // Measured on an H100 (session 16): without the running max, a key split inside the CTA
  // returned half the row sums (tests/gpu/attention_bench.cu and an emitted chain with the row
  // sum as an output), on this runtime and the one before; the planner splits online chains only.
  static_assert(C::kKS == 1 || Fn::kOnline, "an in-CTA key split combines online partials");
  static_assert(!C::kMasked || Fn::kOnline, "a masked score maps to P = 0 only online");
  extern __shared__ __align__(1024) char attn_smem_raw[];
  constexpr int KS = C::kKS;
  // Row norms (AttnNorms): the normalizer warpgroup (the last) computes A's row factors once A
  // has landed and each K chunk's key factors as it lands, into shared memory (C::kNormOffset),
  // then arrives on a_ready / ready[ring][stage]; a consumer waits on those before its first /
  // that chunk's softmax, not before its products.
  constexpr bool kNormA = AttnNorms<Fn>::kA, kNormK = AttnNorms<Fn>::kK;
  constexpr bool kColW = AttnColWeights<Fn>::kW;  // A's columns weighted first (a_ready)
  constexpr int kNormThreads = 128;
  static_assert(!kColW || C::kNorm, "column weights need AttnCfg's NORM (their area)");
  static_assert(!kNormK || !C::kKNMajor, "keys are normalized in K-major chunks only");
  static_assert(!(kNormA || kNormK) || C::kNorm, "row norms need AttnCfg's NORM (their area)");
  // One ring of S stages per key-split consumer (ring k holds the chunks j = k mod KS), so the
  // consumers never wait for each other's stages.
  __shared__ __align__(8) uint64_t full[KS][S], empty[KS][S], a_full;
  __shared__ __align__(8) uint64_t ready[kNormK ? KS : 1][kNormK ? S : 1], a_ready;
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
        if constexpr (kNormK) mbar_init(&ready[k][s], kNormThreads);
      }
    if constexpr (kNormA || kColW) mbar_init(&a_ready, kNormThreads);
    fence_mbar_init();
  }
  __syncthreads();  // no block-wide barrier may follow: the producer warps leave early
  if (threadIdx.x == 0) KILN_PROBE_AT(2);
  // A CTA's shared memory may be written by the cluster only once that CTA runs: every thread
  // arrives here, and the consumers wait before their first remote store (long after, in
  // practice, so the wait costs nothing).
  if constexpr (C::kCL > 1) cluster_arrive_relaxed();
  // With a cluster key split, CTA c of a cluster (blockIdx.x = tile * CL + c) walks chunks
  // floor(c T / CL) .. floor((c + 1) T / CL) - 1 of its tile's T = nchunks_tile chunks (shares
  // differ by at most one where CL does not divide T).
  constexpr int CL = C::kCL;
  const int bx = blockIdx.x / CL;
  const int crank = CL > 1 ? int(blockIdx.x % CL) : 0;
  const int cbase = crank * nchunks_tile / CL;
  const int nchunks = (crank + 1) * nchunks_tile / CL - cbase;
  const AttnCoords co = fn.coords(bx, blockIdx.y, blockIdx.z);

  if (warp < 4) {
    // Producer: lane 0 of warp k fills ring k (warp 0 also loads A).
    if constexpr (C::kRebalance) setmaxnreg_dec<C::kProducerRegs>();
    const int k = warp;
    if ((tid & 31) != 0 || k >= KS) return;
    if (k == 0) {
      mbar_arrive_expect_tx(&a_full, C::kABytes);
#pragma unroll
      for (int p = 0; p < D / 64; ++p)
        tma_load_2d(smem + p * BM * 128, &map_a, co.a_row, co.a_col + 64 * p, &a_full);
    }
    char* ring = rings + k * S * C::kStageBytes;
    for (int i = 0, jl = k; jl < nchunks; ++i, jl += KS) {
      const int s = i % S, j = cbase + jl;
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
    if (k == 0) KILN_PROBE_AT(14);
    return;
  }

  if constexpr (C::kNorm) {
    if (warp >= 4 * (1 + C::kConsumers)) {
      // Normalizer thread nt, lane pair (nt & ~1, nt | 1) on one row (h = nt & 1: its half):
      // rows nt / 2, nt / 2 + 64, ... of A, then of every round of chunks, the KS chunks of a
      // round (one per ring, local chunk jl = jl0 + k of ring k) at once. A stage is refilled only
      // after its consumer's softmax has read its factors, so the normalizers never fall a phase
      // behind the copies.
      if constexpr (C::kRebalance) setmaxnreg_dec<C::kNormRegs>();
      const int nt = tid - 128 * (1 + C::kConsumers), h = nt & 1;
      float* const fa = reinterpret_cast<float*>(smem + C::kNormOffset);
      float* const wsm = fa + BM + KS * S * NC;  // the column weights
      if constexpr (kColW) {
        // Read while A is in flight.
        for (int d = nt; d < D; d += kNormThreads) wsm[d] = fn.col_weight(d);
        named_barrier(7, kNormThreads);
      }
      if constexpr (kNormA || kColW) {
        mbar_wait(&a_full, 0);
        if (nt == 0) KILN_PROBE_AT(1);
        for (int q = nt >> 1; q < BM; q += 64) {
          float fq = 1.0f;  // Q's row factor, folded into a weighted rewrite
          if constexpr (kNormA) {
            const char* const row[1] = {smem + q * 128};
            const int rr[1] = {q};
            float ss[1];
            attn_half_rows_sumsq<T, D / 64, 1>(row, rr, h, BM * 128, ss);
            fq = fn.norm_a(ss[0]);
            if (h == 0) fa[q] = fq;
          }
          if constexpr (kColW) {
            // The same units as the sum (after it): physical unit u of row q holds the row's
            // logical 16-byte unit u ^ (q mod 8) (128-byte swizzle). With Q's norm, the row is
            // rewritten normalized, x f_q w (the size of the graph's own normed Q: the raw x
            // times the weights alone could leave the 16-bit range), and S is not scaled by f_q.
#pragma unroll
            for (int p = 0; p < D / 64; ++p)
#pragma unroll
              for (int c = 0; c < 4; ++c) {
                const int u = (2 * c + h + 2 * q) & 7, col = 64 * p + 8 * (u ^ (q & 7));
                uint4* const at = reinterpret_cast<uint4*>(smem + p * BM * 128 + q * 128 + u * 16);
                const uint4 v = *at;
                uint32_t wv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                  const float2 f = unpack2<T>(wv[e]);
                  wv[e] =
                      pack2<T>(f.x * (fq * wsm[col + 2 * e]), f.y * (fq * wsm[col + 2 * e + 1]));
                }
                *at = make_uint4(wv[0], wv[1], wv[2], wv[3]);
              }
          }
        }
        // The rewritten A reaches the consumers' wgmmas (async proxy) before the arrival.
        if constexpr (kColW) fence_proxy_async_smem();
        mbar_arrive(&a_ready);
        if (nt == 0) KILN_PROBE_AT(8);
      }
      if constexpr (kNormK) {
        // A round's KS NC rows, two threads a row: U rows per thread (q = nt / 2 + 64 u).
        constexpr int U = KS * NC / 64;
        static_assert(U <= 2, "at most 8 loads in flight on kNormRegs (the planner's chunks: 64)");
        for (int jl0 = 0; jl0 < nchunks; jl0 += KS) {
          const int i = jl0 / KS, s = i % S;
#pragma unroll
          for (int k = 0; k < KS; ++k)
            if (jl0 + k < nchunks) mbar_wait(&full[k][s], (i / S) & 1);
          const char* row[U];
          int rr[U];
          float ss[U];
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int q = (nt >> 1) + 64 * u, k = q / NC;
            rr[u] = q % NC;
            // A round past the last chunk re-reads ring 0's stage instead.
            row[u] = rings + ((jl0 + k < nchunks ? k : 0) * S + s) * C::kStageBytes + rr[u] * 128;
          }
          attn_half_rows_sumsq<T, D / 64, U>(row, rr, h, NC * 128, ss);
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const int q = (nt >> 1) + 64 * u, k = q / NC;
            if (h == 0 && jl0 + k < nchunks) fa[BM + (k * S + s) * NC + rr[u]] = fn.norm_k(ss[u]);
          }
#pragma unroll
          for (int k = 0; k < KS; ++k)
            if (jl0 + k < nchunks) mbar_arrive(&ready[k][s]);
          if (nt == 0 && (jl0 == 0 || jl0 + KS >= nchunks)) KILN_PROBE_AT(jl0 == 0 ? 10 : 15);
        }
      }
      return;
    }
  }

  // Consumer cw: row group rg (rows 64 rg .. 64 rg + 63 of the tile), chunks j = ks + i KS of
  // ring ks (local index i).
  if constexpr (C::kRebalance) setmaxnreg_inc<C::kConsumerRegs>();
  const int cw = (warp >> 2) - 1, rg = cw / KS, ks = cw % KS;
  const int w = warp & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int nlocal = (nchunks - ks + KS - 1) / KS;
  const bool probe = w == 0 && lane == 0;  // the thread that records probe events
  (void)probe;
  const uint32_t a_base = smem_u32(smem) + rg * 64 * 128;
  const uint32_t ring_base = smem_u32(rings) + ks * S * C::kStageBytes;
  // O's first wgmma overwrites it (scale-d 0): no zeroing instructions inside the wgmma pipeline,
  // which would make ptxas serialize it.
  float o[DV / 2];
  float r[2][R];  // this thread's partial row feeds of rows 16w + g (h = 0) and + 8 (h = 1)
  // Online: the running max of S over the keys seen, per row (the same in the 4 lanes of a quad).
  float mrow[2] = {-KILN_INF, -KILN_INF};
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
  // P(i) = f(S(i)) as wgmma A fragments into pa, with the row feeds (online: the new row max;
  // where it moved, the row feeds are rescaled here and O's factors left in ocorr, grow_o set,
  // for when O(i - 1) has completed).
  float ocorr[2] = {1.0f, 1.0f};
  bool grow_o = false;
  // Row norms: this thread's rows' factors (read before the first softmax).
  float qf[2] = {1.0f, 1.0f};
  const float* const nfac = reinterpret_cast<const float*>(smem + C::kNormOffset);
  auto softmax = [&](float(&cur)[NC / 2], uint32_t(&pa)[NC / 16][4], int i) {
    wgmma_fence_acc(cur);
    // S of normalized rows: S_mn times Q row m's and key n's factors (the keys of a masked
    // chunk's tail get finite or NaN factors; the mask below overwrites their scores).
    if constexpr (kNormK) {
      mbar_wait(&ready[ks][i % S], (i / S) & 1);
      const float* const kf = nfac + BM + (ks * S + i % S) * NC;
#pragma unroll
      for (int n8 = 0; n8 < NC / 8; ++n8) {
        const float2 f = *reinterpret_cast<const float2*>(kf + 8 * n8 + 2 * t);
        cur[4 * n8 + 0] *= qf[0] * f.x;
        cur[4 * n8 + 1] *= qf[0] * f.y;
        cur[4 * n8 + 2] *= qf[1] * f.x;
        cur[4 * n8 + 3] *= qf[1] * f.y;
      }
    } else if constexpr (kNormA && !kColW) {
#pragma unroll
      for (int n8 = 0; n8 < NC / 8; ++n8)
#pragma unroll
        for (int e = 0; e < 4; ++e) cur[4 * n8 + e] *= qf[e / 2];
    }
    // Online, lazily: the exps are taken relative to the kept row max mrow, which moves (and O
    // and the row feeds are rescaled to it) only when some row of the warp has a key more than
    // kSlack above it: then P = f(s - m) <= k 2^kSlackL2 still fits a 16-bit operand (f16 up to
    // 65504; kSlackL2 = 0 where k > 1), and every accumulator is the exact one times exp(-a m)
    // for whichever m it was kept at, which the outputs cancel (and the key-split and cluster
    // combines rescale by). Most chunks after the first skip the quad shuffles, the rescale
    // factors and the multiplies of O (FlashAttention-4's conditional rescaling). The test is
    // per lane on its own columns, one vote for the warp; chunk 0 always takes it (m = -inf).
    float sh0 = 0.0f, sh1 = 0.0f;
    if constexpr (Fn::kOnline) {
      // The tile's last chunk may hold fewer than NC keys: the others (zeros past the tensor, or
      // the next rows of a folded view) get score -inf, so the max ignores them and P is 0.
      if constexpr (C::kMasked) {
        if (last_keys < NC && cbase + ks + i * KS == nchunks_tile - 1)
#pragma unroll
          for (int n8 = 0; n8 < NC / 8; ++n8)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (8 * n8 + 2 * t + e >= last_keys)
                cur[4 * n8 + e] = cur[4 * n8 + 2 + e] = -KILN_INF;
      }
      constexpr float kSlackL2 = Fn::kPCoef <= 1.0f ? 8.0f : 0.0f;
      constexpr float kSlack = kSlackL2 / (Fn::kExpScale * 1.4426950408889634f);
      float lm[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // A tree over the lane's NC / 4 values of row h (a short dependent chain).
        float v[NC / 8];
#pragma unroll
        for (int n8 = 0; n8 < NC / 8; ++n8)
          v[n8] = fmaxf(cur[4 * n8 + 2 * h], cur[4 * n8 + 2 * h + 1]);
#pragma unroll
        for (int w2 = NC / 16; w2 >= 1; w2 /= 2)
#pragma unroll
          for (int e = 0; e < w2; ++e) v[e] = fmaxf(v[e], v[e + w2]);
        lm[h] = v[0];
      }
      const bool grow = lm[0] > mrow[0] + kSlack || lm[1] > mrow[1] + kSlack;
      if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = fmaxf(mrow[h], lm[h]);
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float corr = attn_rescale(mrow[h], mx, Fn::kExpScale);
          mrow[h] = mx;
#pragma unroll
          for (int q = 0; q < R; ++q) r[h][q] *= corr;
          ocorr[h] = corr;
        }
        grow_o = i > 0;  // O through chunk i - 1 (in flight now) moves to the new max later
      }
      sh0 = mrow[0], sh1 = mrow[1];
    }
    // f(s - m) = k exp2(s a log2(e) - m a log2(e)): one FFMA and one MUFU.EX2 per element, and
    // g_j(s - m) = (k_j / k) f(s - m) (Fn::online_feeds).
    auto pe = [&](float v, float sh, float(&rh)[R]) {
      if constexpr (Fn::kOnline) {
        constexpr float kL2 = Fn::kExpScale * 1.4426950408889634f;
        // 2^x by the hardware (elementwise.cuh; 2^-inf = 0): x <= 0 here (s <= the row max).
        const float p = Fn::kPCoef * ex2_ftz(fmaf(v, kL2, -sh * kL2));
        fn.online_feeds(p, rh);
        return p;
      } else {
        return fn.elem(v, rh);
      }
    };
#pragma unroll
    for (int kk = 0; kk < NC / 16; ++kk)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int n8 = 2 * kk + e;  // n8 block n8 holds columns 8 n8 + 2t, 8 n8 + 2t + 1
        const float p0 = pe(cur[4 * n8 + 0], sh0, r[0]);
        const float p1 = pe(cur[4 * n8 + 1], sh0, r[0]);
        const float p2 = pe(cur[4 * n8 + 2], sh1, r[1]);
        const float p3 = pe(cur[4 * n8 + 3], sh1, r[1]);
        pa[kk][2 * e + 0] = pack2<T>(p0, p1);
        pa[kk][2 * e + 1] = pack2<T>(p2, p3);
      }
  };
  // O += P(i) Vc(i) (scale-d 0 on chunk 0's first k step: it overwrites o).
  auto issue_o = [&](uint32_t(&pa)[NC / 16][4], int i) {
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
  // O(i) has completed: chunk i's stage goes back to the producer, and O moves to the row max of
  // the softmax that ran meanwhile (rarely, online: see above).
  auto o_done = [&](int i) {
    wgmma_fence_acc(o);
    if (w == 0 && lane == 0) mbar_arrive(&empty[ks][i % S]);
    if constexpr (Fn::kOnline)
      if (grow_o) {
#pragma unroll
        for (int n8 = 0; n8 < DV / 8; ++n8)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            o[4 * n8 + 2 * h] *= ocorr[h];
            o[4 * n8 + 2 * h + 1] *= ocorr[h];
          }
        grow_o = false;
      }
  };
  // Local chunk i with a successor, P(i) in pc (FlashAttention-3's intra-warpgroup pipelining):
  // S(i + 1) and O(i) go to the tensor cores together, and the softmax of S(i + 1) runs while
  // O(i) does, so each chunk costs about the longer of the two instead of their sum. Two S and
  // two P buffers alternate (P(i) is read by the O(i) in flight while P(i + 1) is written). The
  // groups in flight are the same on every path (ptxas serializes the wgmmas when it cannot
  // prove that a wait retired the ones whose registers are touched next).
  //
  // With two key-split consumers the tensor cores take their turns (FlashAttention-3's ping-pong
  // scheduling): consumer c issues a chunk's wgmmas only after the other has issued its own
  // (named barrier 3 + c, then it signals 3 + (1 - c)), so one's softmax runs while the other's
  // products do, instead of both contending for the MUFU and then the tensor cores. Consumer 1
  // opens the first turn and skips its last signal; both take nlocal turns, so only where they
  // walk as many chunks (nchunks even, at least 2).
  const bool pingpong = KS == 2 && nchunks >= 2 && nchunks % 2 == 0;
  auto turn_begin = [&]() {
    if (pingpong) named_barrier(3 + ks, 256);
  };
  auto turn_end = [&](bool final_turn) {
    if (pingpong && !(final_turn && ks == 1)) named_barrier_arrive(3 + (1 - ks), 256);
  };
  auto step = [&](float(&nxt)[NC / 2], uint32_t(&pc)[NC / 16][4], uint32_t(&pn)[NC / 16][4],
                  int i) {
    if (probe && ks == 0) KILN_PROBE_AT(16 + 2 * i);
    mbar_wait(&full[ks][(i + 1) % S], ((i + 1) / S) & 1);
    if (probe && ks == 0) KILN_PROBE_AT(17 + 2 * i);
    turn_begin();
    issue_s(nxt, i + 1);
    issue_o(pc, i);
    turn_end(false);
    wgmma_wait<1>();  // S(i + 1) is done; O(i) may still run
    softmax(nxt, pn, i + 1);
    wgmma_wait<0>();
    o_done(i);
  };
  auto last = [&](uint32_t(&pc)[NC / 16][4], int i) {
    turn_begin();
    issue_o(pc, i);
    turn_end(true);
    wgmma_wait<0>();
    o_done(i);
  };

  float s0[NC / 2], s1[NC / 2];
  uint32_t p0[NC / 16][4], p1[NC / 16][4];
  mbar_wait(&a_full, 0);
  if (probe) KILN_PROBE_AT(ks == 0 ? 3 : 12);
  if (pingpong && ks == 1) named_barrier_arrive(3, 256);  // consumer 0 takes the first turn
  if (nlocal > 0) {
    mbar_wait(&full[ks][0], 0);
    if (probe) KILN_PROBE_AT(ks == 0 ? 4 : 13);
    if constexpr (kColW) mbar_wait(&a_ready, 0);  // A's columns weighted
    issue_s(s0, 0);
    wgmma_wait<0>();
    if constexpr (kNormA && !kColW) {  // (with weights, A's rows were rewritten normalized)
      mbar_wait(&a_ready, 0);
      qf[0] = nfac[64 * rg + 16 * w + g];
      qf[1] = nfac[64 * rg + 16 * w + g + 8];
    }
    softmax(s0, p0, 0);
    if (probe && ks == 0) KILN_PROBE_AT(5);
    int i = 0;
    for (; i + 2 < nlocal; i += 2) {
      step(s1, p0, p1, i);
      step(s0, p1, p0, i + 1);
    }
    // One or two chunks left, the first one's P in p0.
    if (i + 1 < nlocal) {
      step(s1, p0, p1, i);
      last(p1, i + 1);
    } else {
      last(p0, i);
    }
  } else {
#pragma unroll
    for (int q = 0; q < DV / 2; ++q) o[q] = 0.0f;  // no chunk for this consumer
  }

  if (probe) KILN_PROBE_AT(ks == 0 ? 6 : 7);

    // Each row's feed is spread over the 4 lanes of a quad (their columns 2t, 2t + 1 of every n8
    // block); sums regroup exactly, so the quad sum runs once, here.
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int q = 0; q < R; ++q) r[h][q] = warp_sum<4>(r[h][q]);
  const int m0 = 64 * rg + 16 * w + g;
  const int tw = tid & 127;

  if constexpr (KS * CL == 1) {
    // One partial per row: this consumer's own results are the tile's.
#pragma unroll
    for (int i = 0; i < DV / 8; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        fn.store2(bx, blockIdx.y, blockIdx.z, m0 + 8 * h, 8 * i + 2 * t, o[4 * i + 2 * h],
                  o[4 * i + 2 * h + 1], r[h]);
    if (t == 0)
#pragma unroll
      for (int h = 0; h < 2; ++h) fn.store_row(bx, blockIdx.y, blockIdx.z, m0 + 8 * h, r[h]);
    if (probe) KILN_PROBE_AT(11);
  } else {
    // KS x CL online partials per row (the key-split consumers of the CL CTAs of a cluster), as
    // float4 units of the consumer threads: unit i < DV / 8 is O's n8 block i (rows h = 0, 1:
    // o[4 i] .. o[4 i + 3]), unit DV / 8 is (m_0, m_1, r_0[0], r_1[0]) (the same in the 4 lanes
    // of a quad), and units after it the other feeds (row 0's r_0[1..], then row 1's, four to a
    // unit). Partials combine rescaled to their common max (weights exp(a (m_p - max_p m_p))),
    // summed in a fixed order, so the results are deterministic.
    //   CL = 1 (two consumers): each consumer publishes its partial in its own ring (idle: its
    //   wgmmas and copies are done), unit u of thread tw at (u * 128 + tw) * 16 bytes; after the
    //   consumers' barrier each combines both partials for half of the n8 blocks and stores them.
    //   CL > 1: the CTA's own partial (with two consumers, first combined through their rings,
    //   each consumer half the blocks) is pushed, block by block, into the receive area of the
    //   CTA that owns the block (CTA q owns blocks [q kBlocksPerCta, (q + 1) kBlocksPerCta)),
    //   and its (m, r) unit into every owner's (by one lane per quad), with 16-byte distributed
    //   shared memory stores; one cluster barrier (release / acquire) makes them visible, and
    //   every CTA combines its blocks from its own shared memory. No CTA reads another's shared
    //   memory: no second barrier, no exit hazard. Measured on gqa bs 1, H100 (session 17):
    //   pulling the partials through distributed shared memory instead (loads, two barriers)
    //   took 1.3 us for 8 partials of 4 KB per CTA, 2.4-2.9 us for 16.
    constexpr int kBlocks = DV / 8, kMR = DV / 8;
    constexpr int kRowUnits = 1 + (R > 1 ? (2 * (R - 1) + 3) / 4 : 0);
    static_assert(CL == 1 || R == 1, "a cluster key split carries one row feed");
    auto slot = [&](int k) {
      return reinterpret_cast<float4*>(rings + k * S * C::kStageBytes) + tw;
    };
    // Packs (m, r) (and the other feeds) into units.
    auto pack_rows = [&](const float(&m)[2], const float(&rf)[2][R], float4(&u)[kRowUnits]) {
      u[0] = make_float4(m[0], m[1], rf[0][0], rf[1][0]);
      if constexpr (R > 1) {
        float extra[(kRowUnits - 1) * 4] = {};
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int q = 1; q < R; ++q) extra[h * (R - 1) + q - 1] = rf[h][q];
#pragma unroll
        for (int j = 1; j < kRowUnits; ++j)
          u[j] =
              make_float4(extra[4 * j - 4], extra[4 * j - 3], extra[4 * j - 2], extra[4 * j - 1]);
      }
    };
    // Unpacks units into (m, r).
    auto get_rows = [&](const float4(&u)[kRowUnits], float(&m)[2], float(&rf)[2][R]) {
      m[0] = u[0].x, m[1] = u[0].y, rf[0][0] = u[0].z, rf[1][0] = u[0].w;
      if constexpr (R > 1) {
        float extra[(kRowUnits - 1) * 4];
#pragma unroll
        for (int j = 1; j < kRowUnits; ++j) {
          extra[4 * j - 4] = u[j].x, extra[4 * j - 3] = u[j].y;
          extra[4 * j - 2] = u[j].z, extra[4 * j - 1] = u[j].w;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int q = 1; q < R; ++q) rf[h][q] = extra[h * (R - 1) + q - 1];
      }
    };
    // v += w x, rows h = 0, 1 weighted apart.
    auto mix = [&](float4& v, float w0, float w1, const float4& x) {
      v.x += w0 * x.x, v.y += w0 * x.y, v.z += w1 * x.z, v.w += w1 * x.w;
    };
    auto store_block = [&](int i, const float4& v, const float(&rr)[2][R]) {
      fn.store2(bx, blockIdx.y, blockIdx.z, m0, 8 * i + 2 * t, v.x, v.y, rr[0]);
      fn.store2(bx, blockIdx.y, blockIdx.z, m0 + 8, 8 * i + 2 * t, v.z, v.w, rr[1]);
    };
    auto store_rows = [&](const float(&rr)[2][R]) {
      if (t == 0)
#pragma unroll
        for (int h = 0; h < 2; ++h) fn.store_row(bx, blockIdx.y, blockIdx.z, m0 + 8 * h, rr[h]);
    };
    float4 own[kRowUnits];
    pack_rows(mrow, r, own);
    // The two consumers' partials of one CTA, through their rings: weights wk[k][h] and the
    // combined rows; the blocks are read by the caller.
    float wk[KS][2], mk[2], rk[2][R];
    auto combine_rows_in_cta = [&]() {
      float4* mine = slot(ks);
#pragma unroll
      for (int i = 0; i < kBlocks; ++i)
        mine[i * 128] = make_float4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]);
#pragma unroll
      for (int j = 0; j < kRowUnits; ++j) mine[(kMR + j) * 128] = own[j];
      named_barrier(1, C::kConsumers * 128);
      float m[KS][2], rf[KS][2][R];
#pragma unroll
      for (int k = 0; k < KS; ++k) {
        float4 u[kRowUnits];
#pragma unroll
        for (int j = 0; j < kRowUnits; ++j) u[j] = slot(k)[(kMR + j) * 128];
        get_rows(u, m[k], rf[k]);
      }
      attn_weigh(m, rf, Fn::kExpScale, wk, mk, rk);
    };

    if constexpr (CL == 1) {
      combine_rows_in_cta();
      if (probe) KILN_PROBE_AT(9);
      constexpr int kMine = (kBlocks + KS - 1) / KS;
      float4 x[kMine][KS];
#pragma unroll
      for (int j = 0; j < kMine; ++j)
#pragma unroll
        for (int k = 0; k < KS; ++k)
          x[j][k] = ks + j * KS < kBlocks ? slot(k)[(ks + j * KS) * 128]
                                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int j = 0; j < kMine; ++j) {
        const int i = ks + j * KS;
        if (i >= kBlocks) break;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int k = 0; k < KS; ++k) mix(v, wk[k][0], wk[k][1], x[j][k]);
        store_block(i, v, rk);
      }
      if (ks == 0) store_rows(rk);
    } else if constexpr (!C::kPush) {
      // Pull (the receive area does not fit beside the rings): every CTA publishes its partial
      // in its idle ring 0 (with two consumers, their combination: a CTA slot after consumer 0's
      // own), one cluster barrier, then every CTA reads its blocks of every CTA's partial
      // through distributed shared memory (16-byte loads, all issued before their first use;
      // (m, r) by the quad's first lane, shuffled), and a second barrier, arrived at once the
      // loads are done, keeps every CTA's shared memory alive until the others have read it.
      constexpr int kPer = C::kBlocksPerCta;
      constexpr int kSlotBytes = (kMR + kRowUnits) * 128 * 16;
      static_assert(kSlotBytes * (KS > 1 ? 2 : 1) <= S * C::kStageBytes, "partials fit a ring");
      float4* const cta_slot = reinterpret_cast<float4*>(rings + kSlotBytes) + tw;
      if constexpr (KS == 1) {
        float4* mine = slot(0);
#pragma unroll
        for (int i = 0; i < kBlocks; ++i)
          mine[i * 128] = make_float4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]);
        mine[kMR * 128] = own[0];
      } else {
        combine_rows_in_cta();
        for (int i = ks; i < kBlocks; i += KS) {
          float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
          for (int k = 0; k < KS; ++k) mix(v, wk[k][0], wk[k][1], slot(k)[i * 128]);
          cta_slot[i * 128] = v;
        }
        if (ks == 0) {
          float4 u[1];
          pack_rows(mk, rk, u);
          cta_slot[kMR * 128] = u[0];
        }
      }
      const float4* const pub = KS == 1 ? slot(0) : cta_slot;
      cluster_wait();  // the arrival at the kernel's start
      cluster_arrive();
      cluster_wait();
      if (probe) KILN_PROBE_AT(9);
      auto part = [&](int p, int u) { return dsmem_load4(dsmem_map(smem_u32(pub + u * 128), p)); };
      constexpr int kMine = (kPer + KS - 1) / KS;
      const int b0 = crank * kPer, b1 = min_i(kBlocks, b0 + kPer);
      const bool rows_here = crank == 0 && ks == 0;  // the row outputs' CTA and consumer
      if (b0 + ks < b1 || rows_here) {
        float4 u[CL][1];
#pragma unroll
        for (int p = 0; p < CL; ++p)
          u[p][0] = t == 0 ? part(p, kMR) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float4 ov[kMine][CL];
#pragma unroll
        for (int j = 0; j < kMine; ++j) {
          const int i = b0 + ks + j * KS;
#pragma unroll
          for (int p = 0; p < CL; ++p)
            ov[j][p] = i < b1 ? part(p, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        float m[CL][2], rf[CL][2][R], wt[CL][2], mx[2], rr[2][R];
#pragma unroll
        for (int p = 0; p < CL; ++p) {
          get_rows(u[p], m[p], rf[p]);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            m[p][h] = __shfl_sync(0xffffffffu, m[p][h], lane & ~3);
#pragma unroll
            for (int q = 0; q < R; ++q)
              rf[p][h][q] = __shfl_sync(0xffffffffu, rf[p][h][q], lane & ~3);
          }
        }
        // Release: every load above is done before any CTA of the cluster may leave.
        cluster_arrive();
        attn_weigh(m, rf, Fn::kExpScale, wt, mx, rr);
#pragma unroll
        for (int j = 0; j < kMine; ++j) {
          const int i = b0 + ks + j * KS;
          if (i >= b1) break;
          float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
          for (int p = 0; p < CL; ++p) mix(v, wt[p][0], wt[p][1], ov[j][p]);
          store_block(i, v, rr);
        }
        if (rows_here) store_rows(rr);
      } else {
        cluster_arrive();  // nothing to combine here
      }
      cluster_wait();
    } else {
      constexpr int kPer = C::kBlocksPerCta, kRecvUnits = C::kRecvUnits;
      float4* const recv = reinterpret_cast<float4*>(smem + C::kRecvOffset) + tw;
      // Unit u of partial (cluster CTA) p in this CTA's receive area.
      auto recv_unit = [&](int p, int u) { return recv + (p * kRecvUnits + u) * 128; };
      auto push = [&](int q, int u, const float4& v) {
        dsmem_store(dsmem_map(smem_u32(recv_unit(crank, u)), q), v);
      };
      cluster_wait();  // every CTA of the cluster runs (the arrival at the kernel's start)
      auto push_rows = [&](const float4& u) {
        if (t == 0)
#pragma unroll
          for (int q = 0; q < CL; ++q)
            if (q * kPer < kBlocks) push(q, kPer, u);
      };
      if constexpr (KS == 1) {
#pragma unroll
        for (int i = 0; i < kBlocks; ++i)
          push(i / kPer, i % kPer, make_float4(o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]));
        push_rows(own[0]);
      } else {
        combine_rows_in_cta();
        for (int i = ks; i < kBlocks; i += KS) {
          float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
          for (int k = 0; k < KS; ++k) mix(v, wk[k][0], wk[k][1], slot(k)[i * 128]);
          push(i / kPer, i % kPer, v);
        }
        if (ks == 0) {
          float4 u[1];
          pack_rows(mk, rk, u);
          push_rows(u[0]);
        }
      }
      // Release / acquire: every CTA's pushes are visible in their owners' shared memory.
      cluster_arrive();
      cluster_wait();
      if (probe) KILN_PROBE_AT(9);
      // This CTA's blocks [b0, b1), dealt to its consumers in turn (consumer ks: b0 + ks, b0 + ks +
      // KS, ...); each partial's (m, r) unit was written by the quad's first lane.
      constexpr int kMine = (kPer + KS - 1) / KS;
      const int b0 = crank * kPer, b1 = min_i(kBlocks, b0 + kPer);
      const bool rows_here = crank == 0 && ks == 0;  // the row outputs' CTA and consumer
      if (b0 + ks < b1 || rows_here) {
        float m[CL][2], rf[CL][2][R], wt[CL][2], mx[2], rr[2][R];
#pragma unroll
        for (int p = 0; p < CL; ++p) {
          const float4 u[1] = {recv_unit(p, kPer)[-(tw & 3)]};
          get_rows(u, m[p], rf[p]);
        }
        attn_weigh(m, rf, Fn::kExpScale, wt, mx, rr);
#pragma unroll
        for (int j = 0; j < kMine; ++j) {
          const int i = b0 + ks + j * KS;
          if (i >= b1) break;
          float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
          for (int p = 0; p < CL; ++p) mix(v, wt[p][0], wt[p][1], recv_unit(p, i - b0)[0]);
          store_block(i, v, rr);
        }
        if (rows_here) store_rows(rr);
      }
    }
    if (probe) KILN_PROBE_AT(11);
  }
}

#ifndef __CUDACC_RTC__
// The 2-D view a TMA map covers: rows x cols elements, row stride ld elements.
struct AttnView {
  int64_t rows, cols, ld;
};

// Encodes the three tensor maps and launches attn_kernel<C, Fn> on `grid` tiles, each walking
// nchunks chunks of C::kNC keys (as C::kCL CTAs of a cluster, about nchunks / kCL chunks each:
// grid.x times kCL CTAs; nchunks >= kCL), the last of which holds last_keys keys (1 .. kNC; fewer
// than kNC only for online chains: the rest are masked). sm_90a only
// (cudaErrorInvalidDeviceFunction on an older device); a, k, v 16-byte aligned, ld * 2 bytes
// multiples of 16. Returns the first error (an invalid map included).
template <class C, class Fn>
inline cudaError_t attn_launch(const typename C::T* a, AttnView av, const typename C::T* k,
                               AttnView kv, const typename C::T* v, AttnView vv, dim3 grid,
                               int nchunks, const Fn& fn, cudaStream_t stream,
                               int last_keys = C::kNC) {
  cudaError_t e = require_sm90();
  if (e != cudaSuccess) return e;
  if (last_keys < 1 || last_keys > C::kNC || (last_keys < C::kNC && !C::kMasked))
    return cudaErrorInvalidValue;
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
  if constexpr (C::kCL == 1) {
    return launch(kernel, grid, dim3(C::kThreads), C::kSmemBytes, stream, 1, ma, mk, mv, nchunks,
                  last_keys, fn);
  } else {
    if (nchunks < C::kCL) return cudaErrorInvalidValue;
    return launch(kernel, dim3(grid.x * C::kCL, grid.y, grid.z), dim3(C::kThreads), C::kSmemBytes,
                  stream, C::kCL, ma, mk, mv, nchunks, last_keys, fn);
  }
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_ATTENTION_CUH
