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
// Cluster protocol: every thread arrives (relaxed) on entry and waits before its first remote
// store, so no CTA writes into one that has not started; it pushes its float4s of the CTA's
// partial into every CTA's gather slot for this rank, arrives (release) and waits (acquire)
// before summing the slots. No shared memory is read or written remotely after that barrier, so
// CTAs may exit freely. (Pulling the partials instead cost a dependent DSMEM round trip per rank
// and element: 16.1 us at M 32, R 64 on an H200, session 20.)
//
// Preconditions (lowrank_supported): K, R, N multiples of 8 (16-byte chunks), every pointer 16-byte
// aligned and every leading dimension a multiple of 8; 1 <= splits <= 8 (> 1 only on sm_90);
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

// Shared-memory layout (element offsets of 16-bit tiles, pitches padded by 8 elements so that
// ldmatrix's eight 16-byte rows fall in distinct banks; f32 areas after them). Computed the same
// way on the host (launch size) and in the kernel.
struct LowrankSmem {
  int xp, ap, bp, wp;                    // pitches (elements) of the X, A, B and W tiles
  int x, a, b, w;                        // element offsets
  int part, tsum, gather, tfull, bytes;  // byte offsets of the f32 areas; total bytes
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
    bytes = tfull + te * 4;
  }
};

// Issues the cp.async copies of rows [0, rows) x columns [0, cols) (cols a multiple of 8) of the
// global matrix at g (row stride ld) into the shared tile at s (pitch elements), zero-filling
// rows >= rows_ok and columns >= cols_ok (both multiples of 8 for columns).
template <typename T>
KILN_DEV void lowrank_stage(uint32_t s, int pitch, int rows, int cols, const T* g, int64_t ld,
                            int rows_ok, int cols_ok, int tid) {
  const int cpr = cols >> 3;  // 16-byte chunks per row
  for (int i = tid; i < rows * cpr; i += 128) {
    const int r = i / cpr, c = (i - r * cpr) << 3;
    const bool ok = r < rows_ok && c < cols_ok;
    cp_async_16(s + static_cast<uint32_t>((r * pitch + c) * 2),
                ok ? static_cast<const void*>(g + static_cast<int64_t>(r) * ld + c) : g,
                ok ? 16 : 0);
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
  const bool clustered = splits > 1;        // grid-uniform
  if (clustered) cluster_arrive_relaxed();  // this CTA runs (waited for before any remote store)
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
  {
    FragC acc[MT][2 * RT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < 2 * RT; ++j) acc[mt][j].zero();
    const int xk0 = kHasW ? k_begin : 0;  // X's staged columns start at k_begin without W
    for (int ks = warp; ks < k_chunk / 16; ks += 4) {
      FragA a[MT];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        ldmatrix_x4(a[mt].x, s0 + 2 * (L.x + (16 * mt + (lane & 15)) * L.xp + xk0 + 16 * ks +
                                       ((lane >> 4) << 3)));
#pragma unroll
      for (int rt = 0; rt < RT; ++rt) {
        uint32_t r[4];
        if constexpr (kAK)  // A^T [R, k]: B operand rows are r, k contiguous
          ldmatrix_x4(r, s0 + 2 * (L.a + (16 * rt + (lane & 7) + ((lane >> 4) << 3)) * L.ap +
                                   16 * ks + (((lane >> 3) & 1) << 3)));
        else  // A [k, R]
          ldmatrix_x4_trans(
              r, s0 + 2 * (L.a + (16 * ks + (lane & 15)) * L.ap + 16 * rt + ((lane >> 4) << 3)));
        const FragB b0{{r[0], r[1]}}, b1{{r[2], r[3]}};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_16816<T>(acc[mt][2 * rt], a[mt], b0);
          mma_16816<T>(acc[mt][2 * rt + 1], a[mt], b1);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < 2 * RT; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          part[(warp * MP + 16 * mt + fragc_row(lane, i)) * TP + 8 * j + fragc_col(lane, i)] =
              acc[mt][j].x[i];
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
  const float* t = tsum;
  if (clustered) {
    // Push: this thread's float4s of the CTA's partial into slot `rank` of every CTA's gather
    // area (stores are not waited on one by one, unlike remote loads), then every CTA sums the
    // slots in rank order, so all hold the same T.
    cluster_wait();  // every CTA of the cluster runs
    const uint32_t slot = smem_u32(gather + rank * TE);
    for (int i = 4 * tid; i < TE; i += 4 * 128) {  // this thread's own sums (above)
      if (i % TP >= RP) continue;
      const float4 v = make_float4(tsum[i], tsum[i + 1], tsum[i + 2], tsum[i + 3]);
      for (int c = 0; c < splits; ++c) dsmem_store(dsmem_map(slot + 4u * i, c), v);
    }
    cluster_arrive();  // release: this thread's stores ...
    cluster_wait();    // ... and every other CTA's into this one (acquire)
    for (int i = tid; i < TE; i += 128) {
      if (i % TP >= RP) continue;
      float s = 0.0f;
      for (int c = 0; c < splits; ++c) s += gather[c * TE + i];
      tfull[i] = s;
    }
    t = tfull;
  }

  // Phase 2: the CTA's columns (B and W's first chunk landed).
  cp_async_wait<G - 1>();
  __syncthreads();
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
          switch (G - 1 - g) {
            case 0:
              cp_async_wait<0>();
              break;
            case 1:
              cp_async_wait<1>();
              break;
            default:
              cp_async_wait<2>();
              break;
          }
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
#pragma unroll 2
    for (int r = 0; r < RP; r += 4) {
      float4 tv[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          tv[mt][h] =
              *reinterpret_cast<const float4*>(t + (16 * mt + 8 * h + (lane >> 2)) * TP + r);
#pragma unroll
      for (int j = 0; j < NT8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int nl = wn + 8 * j + 2 * (lane & 3) + c;
          float bv[4];
#pragma unroll
          for (int e = 0; e < 4; ++e)
            bv[e] = to_f32(kBK ? sm[L.b + nl * L.bp + r + e] : sm[L.b + (r + e) * L.bp + nl]);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float4 q = tv[mt][h];
              float& a = acc1[mt][j][2 * h + c];
              a = fmaf(q.x, bv[0], a);
              a = fmaf(q.y, bv[1], a);
              a = fmaf(q.z, bv[2], a);
              a = fmaf(q.w, bv[3], a);
            }
        }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < NT8; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int m = 16 * mt + fragc_row(lane, i), n = n0 + wn + 8 * j + fragc_col(lane, i);
          if (m < M && n < N)
            out[static_cast<int64_t>(m) * ldo + n] =
                from_f32<TO>(epi(accw[mt][j].x[i], acc1[mt][j][i], m, n));
        }
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
            R % 8 == 0 && N % 8 == 0 && splits >= 1 && splits <= 8;
  for (const void* p : ptrs) ok = ok && (reinterpret_cast<uintptr_t>(p) & 15) == 0;
  for (int64_t ld : lds) ok = ok && ld % 8 == 0;
  return ok;
}

// ceil(N / NC) CTAs (rounded up to a multiple of splits) of 128 threads, in clusters of `splits`
// along x where splits > 1 (sm_90). W and ldw are ignored unless kHasW. Returns
// cudaErrorInvalidValue where the preconditions fail or the shared memory exceeds the device's
// opt-in limit.
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
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
      e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
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
  const int blocks = ceil_div(ceil_div(N, NC), splits) * splits;
  return launch(kernel, dim3(static_cast<unsigned>(blocks)), dim3(128), static_cast<size_t>(smem),
                stream, splits, X, ldx, A, lda, B, ldb, kHasW ? W : X, ldw, out, ldo, M, N, K, R,
                lowrank_k_chunk(K, splits), splits, epi);
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_LOWRANK_CUH
