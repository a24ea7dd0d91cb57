// Kiln runtime, lowrank: a low-rank chain in one launch,
//   Y[M, N] = epi(v0, v1, m, n),  v1 = ((X A) B)[m, n],  v0 = (X W)[m, n] (kHasW) or 0,
// for few rows (M <= 16 MT, MT <= 2) and a small rank (R <= 16 RT, RT <= 4): LoRA's X W + (X A) B
// and a reassociated X (A B). X is [M, K]; A is [K, R] or, kAK, given as A^T [R, K]; B is [R, N]
// or, kBK, given as B^T [N, R]; W is [K, N] or, kWK, given as W^T [N, K] (nn.Linear layouts, read
// in place).
//
// Why a kernel of its own: T = X A reduces all of K into M x R values that every output column
// needs. The generic block kernel recomputes T in every CTA (each reads all of X and A: 256 KB per
// CTA at K = 4096, 64 CTAs reading the same lines at once), or splits K over a second launch.
// Here T's K is split over the CTAs of a thread-block cluster (sm_90): each CTA computes the
// partial T of its k-range on mma.sync, the cluster exchanges the partials through distributed
// shared memory, and every CTA then has the whole T for its own NC output columns. B's (and W's)
// columns are loaded with the k-slices, in one cp.async burst at the start, so the kernel waits on
// DRAM once.
//
// Grid: ceil(N / NC) CTAs rounded up to a multiple of the cluster size `splits`; CTA b computes
// columns [NC b, NC b + NC) (none past N) and the k-range [k_chunk r, k_chunk (r + 1)) of T, r =
// b % splits its rank. 128 threads: in phase 1 warps take k-steps of 16 round-robin and sum in
// shared memory in warp order; every CTA sums the cluster's partials in rank order (all CTAs hold
// the same T). In phase 2 warp w owns NC / 4 columns: v0 on mma.sync over the whole K (X and the
// W columns staged whole), v1 = sum_r T[m][r] B[r][n] in f32 (T is never rounded to 16 bits).
//
// Cluster protocol: thread 0 initialises the exchange's mbarrier, then every thread arrives
// (relaxed) on the cluster barrier on entry and waits on it before its first remote store, so no
// CTA writes into one that has not started (or whose mbarrier is not ready). Each thread then
// pushes its float4s of the CTA's partial into every CTA's gather slot for this rank with
// st.async, which completes 16 transaction bytes on the receiving CTA's mbarrier; each CTA waits
// on its own mbarrier for splits * M_P * R_P * 4 bytes (acquire, cluster scope) and sums the
// slots in rank order. No CTA's shared memory is written after its own wait completes, so CTAs
// may exit freely. (Session 20 met at a release/acquire cluster barrier after the pushes instead:
// 0.2 us slower on lowrank; pulling the partials with remote loads cost a dependent DSMEM round
// trip per rank and element: 16.1 us at M 32, R 64 on an H200.)
//
// Latency: with 64 CTAs of 4 warps (one warp per scheduler) nothing hides a dependent chain, so
// the loops are written for independent work: the cp.async index math advances by constant steps
// (no division per copy), phase 1 runs two accumulator sets, the slot sums load every slot
// before adding, and phase 2 reads B in 4- and 8-byte pairs. Session 21 (H200, KILN_PROBE):
// lowrank went from 4.73 to 3.88 us (an empty kernel of the same grid: 0.62).
//
// Preconditions (lowrank_supported): K, R, N multiples of 8 (16-byte chunks), every pointer 16-byte
// aligned and every leading dimension a multiple of 8; 1 <= splits <= 16 (> 1 only on sm_90; more
// than 8 is a non-portable cluster size, slower on the shapes measured: the planner stays at 8);
// lowrank_smem_bytes within the device's opt-in limit. Inputs are read through cp.async.cg (L2).
#ifndef KILN_RT_LOWRANK_CUH
#define KILN_RT_LOWRANK_CUH

#ifndef KILN_RT_MMA_CUH
#include "mma.cuh"
#endif
#ifndef KILN_RT_COPY_CUH
#include "copy.cuh"
#endif

namespace kiln {
namespace rt {

// The largest cluster: 16 CTAs, a non-portable size (sm_90 allows it where the kernel opts in).
enum : int { kLowrankMaxSplits = 16 };

// Shared-memory layout (element offsets of 16-bit tiles, pitches padded by 8 elements so that
// ldmatrix's eight 16-byte rows fall in distinct banks; f32 areas after them). Computed the same
// way on the host (launch size) and in the kernel.
struct LowrankSmem {
  int xp, ap, bp, wp;                         // pitches (elements) of the X, A, B and W tiles
  int x, a, b, w;                             // element offsets
  int part, tsum, gather, tfull, bar, bytes;  // byte offsets (f32 areas, mbarrier); total
  KILN_HD LowrankSmem(int MP, int RP, int NC, bool ak, bool bk, bool has_w, bool wk, int kp,
                      int k_chunk, int splits) {
    const int xc = has_w ? (kp > k_chunk * splits ? kp : k_chunk * splits) : k_chunk;
    xp = xc + 8;
    ap = ak ? k_chunk + 8 : RP + 8;
    bp = bk ? RP + 8 : NC + 8;
    wp = has_w ? (wk ? kp + 8 : NC + 8) : 0;
    x = 0;
    a = x + MP * xp;
    b = a + (ak ? RP : k_chunk) * ap;
    w = b + (bk ? NC : RP) * bp;
    const int end16 = w + (has_w ? (wk ? NC : kp) : 0) * wp;
    part = (end16 * 2 + 15) / 16 * 16;
    const int te = MP * (RP + 4);  // f32 T areas: MP rows of pitch RP + 4 (lowrank_kernel)
    tsum = part + 4 * te * 4;
    gather = tsum + te * 4;
    tfull = gather + splits * te * 4;
    bar = tfull + te * 4;  // the exchange's mbarrier (8 bytes; te * 4 is a multiple of 16)
    bytes = bar + 16;
  }
};

// Issues the cp.async copies of rows [0, rows) x columns [0, cols) (cols a multiple of 8) of the
// global matrix at g (row stride ld) into the shared tile at s (pitch elements), zero-filling
// rows >= rows_ok and columns >= cols_ok (both multiples of 8 for columns). Thread tid takes
// chunks tid, tid + 128, ... (row-major, 16 bytes each); the row and column advance by a fixed
// step, with no division per chunk: one warp per scheduler cannot hide a dependent chain per
// copy (session 21: the loads were half of the lowrank kernel's time).
template <typename T>
KILN_DEV void lowrank_stage(uint32_t s, int pitch, int rows, int cols, const T* g, int64_t ld,
                            int rows_ok, int cols_ok, int tid) {
  const int cpr = cols >> 3;  // 16-byte chunks per row
  const int total = rows * cpr;
  if (cpr <= 0 || tid >= total) return;
  const int dr = 128 / cpr, dc = 128 - dr * cpr;  // the step of 128 chunks: rows, chunks
  int r = tid / cpr, c = tid - r * cpr;
#pragma unroll 4
  for (int i = tid; i < total; i += 128) {
    const bool ok = r < rows_ok && (c << 3) < cols_ok;
    const T* const src = g + static_cast<int64_t>(r) * ld + (c << 3);
    cp_async_16(s + static_cast<uint32_t>((r * pitch + (c << 3)) * 2),
                ok ? static_cast<const void*>(src) : g, ok ? 16 : 0);
    r += dr;
    c += dc;
    if (c >= cpr) c -= cpr, ++r;
  }
}

template <typename T, typename TO, int MT, int RT, int NC, bool kAK, bool kBK, bool kHasW, bool kWK,
          class Epi>
__global__ void __launch_bounds__(128)
    lowrank_kernel(const T* __restrict__ X, int64_t ldx, const T* __restrict__ A, int64_t lda,
                   const T* __restrict__ B, int64_t ldb, const T* __restrict__ W, int64_t ldw,
                   TO* __restrict__ out, int64_t ldo, int M, int N, int K, int R, int k_chunk,
                   int splits, Epi epi) {
  pdl_entry();  // before any load or store (base.cuh)
  // Probe events (KILN_PROBE builds only, thread 0): 0 entry, 1 T's inputs landed, 2 partial T
  // summed over the warps, 3 partials pushed, 4 the cluster's partials received, 5 T summed,
  // 6 B landed, 7 products done, 8 outputs stored.
  if (threadIdx.x == 0) KILN_PROBE_AT(0);
  static_assert(MT >= 1 && MT <= 2 && RT >= 1 && RT <= 4, "M <= 32, R <= 64");
  static_assert(NC == 32 || NC == 64 || NC == 128, "32, 64 or 128 columns per CTA");
  constexpr int MP = 16 * MT, RP = 16 * RT, NT8 = NC / 32;  // n8 tiles per warp in phase 2
  // The f32 T areas have rows of pitch TP = RP + 4 floats, so that the float4 reads of phase 2
  // (8 rows per warp, one per quad) fall in distinct banks; TE elements each.
  constexpr int TP = RP + 4, TE = MP * TP;
  extern __shared__ __align__(16) unsigned char lr_smem[];
  const int kp = (K + 15) / 16 * 16;
  const LowrankSmem L(MP, RP, NC, kAK, kBK, kHasW, kWK, kp, k_chunk, splits);
  T* const sm = reinterpret_cast<T*>(lr_smem);
  const uint32_t s0 = smem_u32(lr_smem);
  float* const part = reinterpret_cast<float*>(lr_smem + L.part);
  float* const tsum = reinterpret_cast<float*>(lr_smem + L.tsum);
  float* const gather = reinterpret_cast<float*>(lr_smem + L.gather);
  float* const tfull = reinterpret_cast<float*>(lr_smem + L.tfull);
  const int tid = threadIdx.x, lane = lane_id(), warp = warp_id();
  uint64_t* const xbar = reinterpret_cast<uint64_t*>(lr_smem + L.bar);
  const bool clustered = splits > 1;  // grid-uniform
  if (clustered) {
    // The exchange's mbarrier is initialised before this CTA's arrive: other CTAs store into this
    // one only after their wait (below), so it is ready for their first transaction.
    if (tid == 0) {
      mbar_init(xbar, 1);
      fence_mbar_init();
    }
    cluster_arrive_relaxed();  // this CTA runs (waited for before any remote store)
  }
  const int rank = static_cast<int>(blockIdx.x % static_cast<unsigned>(splits));
  const int n0 = static_cast<int>(blockIdx.x) * NC;
  const int k_begin = rank * k_chunk;
  const int k_ok = K - k_begin < k_chunk ? (K - k_begin > 0 ? K - k_begin : 0) : k_chunk;

  // Group 0: what T needs (X's k-range, or all of X when v0 needs it too; A's k-range).
  if constexpr (kHasW)
    lowrank_stage(s0 + 2 * L.x, L.xp, MP, L.xp - 8, X, ldx, M, K, tid);
  else
    lowrank_stage(s0 + 2 * L.x, L.xp, MP, k_chunk, X + k_begin, ldx, M, k_ok, tid);
  if constexpr (kAK)
    lowrank_stage(s0 + 2 * L.a, L.ap, RP, k_chunk, A + k_begin, lda, R, k_ok, tid);
  else
    lowrank_stage(s0 + 2 * L.a, L.ap, k_chunk, RP, A + static_cast<int64_t>(k_begin) * lda, lda,
                  k_ok, R, tid);
  cp_async_commit();
  // Group 1: this CTA's columns of B (and W's first k chunk); groups 2 .. G: W's other k chunks,
  // so that v0's mma over a chunk starts while the next lands.
  constexpr int G = kHasW ? 4 : 1;
  const int cw = (kp / 16 + G - 1) / G * 16;  // rows of k per W chunk
  const int n_ok = N - n0 < NC ? (N - n0 > 0 ? N - n0 : 0) : NC;
  if constexpr (kBK)
    lowrank_stage(s0 + 2 * L.b, L.bp, NC, RP, B + static_cast<int64_t>(n0 < N ? n0 : 0) * ldb, ldb,
                  n_ok, R, tid);
  else
    lowrank_stage(s0 + 2 * L.b, L.bp, RP, NC, B + (n0 < N ? n0 : 0), ldb, R, n_ok, tid);
  auto stage_w = [&](int g) {
    const int k0 = g * cw, rows = kp - k0 < cw ? kp - k0 : cw;
    if (rows <= 0) return;
    const int n0c = n0 < N ? n0 : 0;
    if constexpr (kWK)
      lowrank_stage(s0 + 2 * (L.w + k0), L.wp, NC, rows, W + static_cast<int64_t>(n0c) * ldw + k0,
                    ldw, n_ok, K - k0, tid);
    else
      lowrank_stage(s0 + 2 * (L.w + k0 * L.wp), L.wp, rows, NC,
                    W + static_cast<int64_t>(k0) * ldw + n0c, ldw, K - k0, n_ok, tid);
  };
  if constexpr (kHasW) stage_w(0);
  cp_async_commit();
#pragma unroll
  for (int g = 1; g < G; ++g) {
    stage_w(g);
    cp_async_commit();
  }

  // Phase 1: this CTA's partial T over its k-range.
  cp_async_wait<G>();
  __syncthreads();
  if (tid == 0) KILN_PROBE_AT(1);
  {
    // Two accumulator sets (k-steps ks and ks + 4 of the warp's round robin): two independent
    // ldmatrix -> mma chains in flight, summed at the end.
    FragC acc[MT][2 * RT], acc2[MT][2 * RT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < 2 * RT; ++j) acc[mt][j].zero(), acc2[mt][j].zero();
    const int xk0 = kHasW ? k_begin : 0;  // X's staged columns start at k_begin without W
    // The lane's ldmatrix addresses at k-step 0 and their advance per k-step (bytes), computed
    // once: the loop body is the loads and the mma.
    const uint32_t xa = s0 + 2 * (L.x + (lane & 15) * L.xp + xk0 + ((lane >> 4) << 3));
    const uint32_t aa =
        kAK ? s0 + 2 * (L.a + ((lane & 7) + ((lane >> 4) << 3)) * L.ap + (((lane >> 3) & 1) << 3))
            : s0 + 2 * (L.a + (lane & 15) * L.ap + ((lane >> 4) << 3));
    const uint32_t a_step = kAK ? 32u : 32u * static_cast<uint32_t>(L.ap);
    const uint32_t a_rt = kAK ? 32u * static_cast<uint32_t>(L.ap) : 32u;  // per 16 ranks
    const uint32_t x_mt = 32u * static_cast<uint32_t>(L.xp);              // per 16 rows
    auto kstep = [&](int ks, FragC(&acc)[MT][2 * RT]) {
      FragA a[MT];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(a[mt].x, xa + mt * x_mt + 32u * ks);
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
        uint32_t r[4];
        if constexpr (kAK)  // A^T [R, k]: B operand rows are r, k contiguous
          ldmatrix_x4(r, aa + rt * a_rt + a_step * ks);
        else  // A [k, R]
          ldmatrix_x4_trans(r, aa + rt * a_rt + a_step * ks);
        const FragB b0{{r[0], r[1]}}, b1{{r[2], r[3]}};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(acc[mt][2 * rt], a[mt], b0);
          mma_16816<T>(acc[mt][2 * rt + 1], a[mt], b1);
        }
      }
    };
    const int nks = k_chunk / 16;
    int ks = warp;
#pragma unroll 2
    for (; ks + 4 < nks; ks += 8) {
      kstep(ks, acc);
      kstep(ks + 4, acc2);
    }
    if (ks < nks) kstep(ks, acc);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < 2 * RT; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          part[(warp * MP + 16 * mt + fragc_row(lane, i)) * TP + 8 * j + fragc_col(lane, i)] =
              acc[mt][j].x[i] + acc2[mt][j].x[i];
  }
  __syncthreads();
  // The warps' sum, 4 elements per thread and step: the same thread pushes them below.
  // (Rows' pad columns, RP .. TP - 1, are skipped: never written, never read.)
  for (int i = 4 * tid; i < TE; i += 4 * 128)
    if (i % TP < RP)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        tsum[i + e] =
            ((part[i + e] + part[TE + i + e]) + part[2 * TE + i + e]) + part[3 * TE + i + e];
  if (tid == 0) KILN_PROBE_AT(2);
  const float* t = tsum;
  if (clustered) {
    // Push: this thread's float4s of the CTA's partial into slot `rank` of every CTA's gather
    // area with st.async, each completing 16 bytes on the receiving CTA's mbarrier; every CTA
    // waits on its own mbarrier for all splits slots (no cluster-wide barrier), then sums the
    // slots in rank order, so all hold the same T. A CTA's shared memory is written only until
    // its own wait completes, so CTAs may exit freely after it.
    cluster_wait();  // every CTA of the cluster runs, its mbarrier initialised
    if (tid == 0) mbar_arrive_expect_tx(xbar, static_cast<uint32_t>(splits * MP * RP * 4));
    const uint32_t slot = smem_u32(gather + rank * TE), bar = smem_u32(xbar);
    for (int i = 4 * tid; i < TE; i += 4 * 128) {  // this thread's own sums (above)
      if (i % TP >= RP) continue;
      const float4 v = make_float4(tsum[i], tsum[i + 1], tsum[i + 2], tsum[i + 3]);
      for (int c = 0; c < splits; ++c)
        dsmem_store_async(dsmem_map(slot + 4u * i, c), v, dsmem_map(bar, c));
    }
    if (tid == 0) KILN_PROBE_AT(3);
    mbar_wait<true>(xbar, 0);
    if (tid == 0) KILN_PROBE_AT(4);
    for (int i = 4 * tid; i < TE; i += 4 * 128) {
      if (i % TP >= RP) continue;
      float4 v[kLowrankMaxSplits];  // loaded together, summed in rank order
#pragma unroll
      for (int c = 0; c < kLowrankMaxSplits; ++c)
        if (c < splits) v[c] = *reinterpret_cast<const float4*>(gather + c * TE + i);
      float4 sum = v[0];
#pragma unroll
      for (int c = 1; c < kLowrankMaxSplits; ++c)
        if (c < splits) sum.x += v[c].x, sum.y += v[c].y, sum.z += v[c].z, sum.w += v[c].w;
      *reinterpret_cast<float4*>(tfull + i) = sum;
    }
    t = tfull;
    if (tid == 0) KILN_PROBE_AT(5);
  }

  // Phase 2: the CTA's columns (B and W's first chunk landed).
  cp_async_wait<G - 1>();
  __syncthreads();
  if (tid == 0) KILN_PROBE_AT(6);
  if (n0 < N) {
    const int wn = warp * (NC / 4);  // the warp's first column in the CTA's block
    FragC accw[MT][NT8];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NT8; ++j) accw[mt][j].zero();
    if constexpr (kHasW) {
      // Two accumulator sets (even and odd k-steps) halve the dependent mma chain.
      FragC acc2[MT][NT8];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NT8; ++j) acc2[mt][j].zero();
      auto kstep = [&](int ks, FragC(&acc)[MT][NT8]) {
        FragA a[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          ldmatrix_x4(a[mt].x, s0 + 2 * (L.x + (16 * mt + (lane & 15)) * L.xp + 16 * ks +
                                         ((lane >> 4) << 3)));
#pragma unroll
        for (int j = 0; j < NT8; ++j) {
          FragB b;
          if constexpr (kWK)  // W^T [NC, K]
            ldmatrix_x2(b.x, s0 + 2 * (L.w + (wn + 8 * j + (lane & 7)) * L.wp + 16 * ks +
                                       (((lane >> 3) & 1) << 3)));
          else  // W [K, NC]
            ldmatrix_x2_trans(b.x, s0 + 2 * (L.w + (16 * ks + (lane & 15)) * L.wp + wn + 8 * j));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) mma_16816<T>(acc[mt][j], a[mt], b);
        }
      };
#pragma unroll
      for (int g = 0; g < G; ++g) {
        if (g > 0) {  // chunk g landed (G - 1 - g groups may still be in flight)
          cp_async_wait_n<G - 1>(G - 1 - g);
          __syncthreads();
        }
        const int ks1 = ((g + 1) * cw < kp ? (g + 1) * cw : kp) / 16;
        for (int ks = g * cw / 16; ks < ks1; ks += 2) {
          kstep(ks, accw);
          if (ks + 1 < ks1) kstep(ks + 1, acc2);
        }
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
          for (int i = 0; i < 4; ++i) accw[mt][j].x[i] += acc2[mt][j].x[i];
    }
    // v1 = T B in f32, register-blocked: per 4 ranks, the thread's 2 MT rows of T as float4s and
    // its 2 NT8 columns of B, then every product (a thread's outputs are FragC's elements).
    float acc1[MT][NT8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NT8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc1[mt][j][i] = 0.0f;
#pragma unroll 4
    for (int r = 0; r < RP; r += 4) {
      float4 tv[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          tv[mt][h] =
              *reinterpret_cast<const float4*>(t + (16 * mt + 8 * h + (lane >> 2)) * TP + r);
#pragma unroll
      for (int j = 0; j < NT8; ++j) {
        // The thread's two adjacent columns nl, nl + 1 at ranks r .. r + 3: four 4-byte loads
        // (B [R, NC]) or two 8-byte loads (B^T [NC, R]).
        const int nl = wn + 8 * j + 2 * (lane & 3);
        float bv[2][4];
        if constexpr (kBK) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const uint2 u = *reinterpret_cast<const uint2*>(sm + L.b + (nl + c) * L.bp + r);
            T q[4];
            __builtin_memcpy(q, &u, sizeof(u));
#pragma unroll
            for (int e = 0; e < 4; ++e) bv[c][e] = to_f32(q[e]);
          }
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const uint32_t u = *reinterpret_cast<const uint32_t*>(sm + L.b + (r + e) * L.bp + nl);
            T q[2];
            __builtin_memcpy(q, &u, sizeof(u));
            bv[0][e] = to_f32(q[0]);
            bv[1][e] = to_f32(q[1]);
          }
        }
#pragma unroll
        for (int c = 0; c < 2; ++c)
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float4 q = tv[mt][h];
              float& a = acc1[mt][j][2 * h + c];
              a = fmaf(q.x, bv[c][0], a);
              a = fmaf(q.y, bv[c][1], a);
              a = fmaf(q.z, bv[c][2], a);
              a = fmaf(q.w, bv[c][3], a);
            }
      }
    }
    // Adjacent columns go out as one store (n is even, N and ldo multiples of 8, so every pair is
    // aligned). Not mma.cuh's store_acc pattern, which checks each pair's alignment at run time:
    // a two-accumulator form of it ran lowrank 3.95-3.96 us against 3.89-3.90 for this loop
    // (H200, same call, three alternations; session 21).
    if (tid == 0) KILN_PROBE_AT(7);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NT8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = 16 * mt + fragc_row(lane, 2 * h), n = n0 + wn + 8 * j + fragc_col(lane, 0);
          if (m >= M || n >= N) continue;
          const float y0 = epi(accw[mt][j].x[2 * h], acc1[mt][j][2 * h], m, n);
          const float y1 = epi(accw[mt][j].x[2 * h + 1], acc1[mt][j][2 * h + 1], m, n + 1);
          TO* const p = out + static_cast<int64_t>(m) * ldo + n;
          if constexpr (sizeof(TO) == 4)
            *reinterpret_cast<float2*>(p) = make_float2(y0, y1);
          else
            *reinterpret_cast<uint32_t*>(p) = pack2<TO>(y0, y1);
        }
    if (tid == 0) KILN_PROBE_AT(8);
  }
  cp_async_wait<0>();  // CTAs past N (and any path above) leave no copy in flight
}

#ifndef __CUDACC_RTC__
// Rows of K per CTA of the cluster: whole k-steps of 16, splits * k_chunk >= K.
inline int lowrank_k_chunk(int K, int splits) {
  return (ceil_div(K, splits) + 15) / 16 * 16;
}

inline int lowrank_smem_bytes(int MT, int RT, int NC, bool ak, bool bk, bool has_w, bool wk, int K,
                              int splits) {
  return LowrankSmem(16 * MT, 16 * RT, NC, ak, bk, has_w, wk, (K + 15) / 16 * 16,
                     lowrank_k_chunk(K, splits), splits)
      .bytes;
}

inline bool lowrank_supported(int M, int N, int K, int R, int MT, int RT, int splits,
                              std::initializer_list<const void*> ptrs,
                              std::initializer_list<int64_t> lds) {
  bool ok = M >= 1 && M <= 16 * MT && R >= 1 && R <= 16 * RT && N >= 1 && K >= 8 && K % 8 == 0 &&
            R % 8 == 0 && N % 8 == 0 && splits >= 1 && splits <= kLowrankMaxSplits;
  for (const void* p : ptrs) ok = ok && (reinterpret_cast<uintptr_t>(p) & 15) == 0;
  for (int64_t ld : lds) ok = ok && ld % 8 == 0;
  return ok;
}

// ceil(N / NC) CTAs (rounded up to a multiple of splits) of 128 threads, in clusters of `splits`
// along x where splits > 1 (sm_90; 16 is a non-portable size, which the launcher opts into and
// the launch itself may refuse where the device cannot co-schedule it). W and ldw are ignored
// unless kHasW. Returns cudaErrorInvalidValue where the preconditions fail or the shared memory
// exceeds the device's opt-in limit.
template <typename T, typename TO, int MT, int RT, int NC, bool kAK, bool kBK, bool kHasW, bool kWK,
          class Epi>
inline cudaError_t lowrank_launch(const T* X, int64_t ldx, const T* A, int64_t lda, const T* B,
                                  int64_t ldb, const T* W, int64_t ldw, TO* out, int64_t ldo, int M,
                                  int N, int K, int R, int splits, cudaStream_t stream, Epi epi) {
  if (!lowrank_supported(M, N, K, R, MT, RT, splits, {X, A, B, kHasW ? W : X},
                         {ldx, lda, ldb, kHasW ? ldw : ldx}))
    return cudaErrorInvalidValue;
  if (ldx < K || lda < (kAK ? K : R) || ldb < (kBK ? R : N) || (kHasW && ldw < (kWK ? K : N)))
    return cudaErrorInvalidValue;
  if (splits > 1) {  // clusters: sm_90
    const cudaError_t e = require_sm90();
    if (e != cudaSuccess) return e;
  }
  const int smem = lowrank_smem_bytes(MT, RT, NC, kAK, kBK, kHasW, kWK, K, splits);
  constexpr auto kernel = lowrank_kernel<T, TO, MT, RT, NC, kAK, kBK, kHasW, kWK, Epi>;
  // The limit is raised once per kernel, to the device's opt-in maximum rather than this call's
  // size: a later call of the same instantiation with a larger K needs more.
  static int optin = -1;  // one GPU per process assumed (as raise_smem_limit_once)
  if (optin < 0) {
    const cudaError_t e = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, optin);
    if (e != cudaSuccess) {
      optin = -1;
      return e;
    }
  }
  if (smem > optin) return cudaErrorInvalidValue;
  if (smem > 48 * 1024) {
    const cudaError_t e = raise_smem_limit_once<kernel>(optin);
    if (e != cudaSuccess) return e;
  }
  if (splits > 8) {  // a non-portable cluster size: the kernel opts in once
    static bool nonportable = false;
    if (!nonportable) {
      const cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
      if (e != cudaSuccess) return e;
      nonportable = true;
    }
  }
  const int blocks = ceil_div(ceil_div(N, NC), splits) * splits;
  return launch(kernel, dim3(static_cast<unsigned>(blocks)), dim3(128), static_cast<size_t>(smem),
                stream, splits, X, ldx, A, lda, B, ldb, kHasW ? W : X, ldw, out, ldo, M, N, K, R,
                lowrank_k_chunk(K, splits), splits, epi);
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_LOWRANK_CUH
