// Kiln codegen device library: the pieces generated kernels need on top of runtime/ (generic
// N-d tile copies with any stride, fragment loads through element functors, tile stores with
// dtype conversion, group reductions, batched tensor-core GEMM and the generic predefined-op
// kernels). The emitter inlines this file's text after the runtime's, so it must compile as is,
// with nothing but the CUDA toolkit and the runtime above it.
//
// Everything here is a template over compile-time shapes: the emitter knows every extent and
// stride, so index arithmetic folds into constants and shifts. Synchronization is always the
// caller's (no function here has a barrier unless its comment says so).
#ifndef KILN_CG_CUH
#define KILN_CG_CUH

#include <stdint.h>

namespace kiln {
namespace cg {

using rt::FragA;
using rt::FragB;
using rt::FragC;

// ---- Loads and stores of single elements ----------------------------------------------------

template <typename T>
KILN_DEV float ld(const T* p) {
  return rt::to_f32(*p);
}

// cp.async of 4 or 8 bytes (the .ca form; .cg only takes 16).
template <int BYTES>
KILN_DEV void cp_async_small(uint32_t saddr, const void* gptr) {
#ifdef KILN_SIM
  if (reinterpret_cast<uintptr_t>(gptr) % BYTES || saddr % BYTES)
    kiln_sim::fail("cp.async: address not aligned to the copy size");
  kiln_sim::me().open.push_back(
      {kiln_sim::smem_at(saddr, BYTES), static_cast<const unsigned char*>(gptr), BYTES, BYTES});
#else
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(saddr), "l"(gptr), "n"(BYTES)
               : "memory");
#endif
}

// ---- Tile copies -------------------------------------------------------------------------------
//
// A tile of up to 4 dims [E0, E1, E2, E3] (leading extents 1 for lower ranks), dim 3 contiguous
// in both memories. Global strides G0..G2 and shared strides S0..S2 are in elements. The tile is
// cut into chunks of VEC elements along dim 3 (E3 % VEC == 0); with VEC * sizeof(T) of 4, 8 or
// 16 bytes the chunks are cp.async copies (the caller commits and waits), otherwise plain
// element copies through registers. Thread tid of NT takes chunks tid, tid + NT, ...

template <typename T, int NT, int E0, int E1, int E2, int E3, int64_t G0, int64_t G1, int64_t G2,
          int S0, int S1, int S2, int VEC>
KILN_DEV void load_tile(T* dst, const T* __restrict__ src, int tid) {
  constexpr int CPR = E3 / VEC;
  constexpr int N = E0 * E1 * E2 * CPR;
  constexpr int ITERS = (N + NT - 1) / NT;
  constexpr int BYTES = VEC * int(sizeof(T));
  static_assert(E3 % VEC == 0, "chunks divide the row");
  auto offsets = [&](int c, int64_t& so, int& dso) {
    const int cc = c % CPR;
    int r = c / CPR;
    const int i2 = r % E2;
    r /= E2;
    const int i1 = r % E1;
    const int i0 = r / E1;
    so = i0 * G0 + i1 * G1 + i2 * G2 + cc * VEC;
    dso = i0 * S0 + i1 * S1 + i2 * S2 + cc * VEC;
  };
  // The chunk thread tid copies at its step it, or -1 past the tile.
  auto live = [&](int it) {
    const int c = tid + it * NT;
    return it < ITERS && (N % NT == 0 || c < N) ? c : -1;
  };
  if constexpr (BYTES != 16 && BYTES != 8 && BYTES != 4 && ITERS <= 32) {
    // Plain copies (rows whose alignment cp.async cannot take) of up to 32 chunks a thread: all
    // loads of a batch of 16 in flight before its stores. Measured on an H200 (session 25,
    // u25o's kernels): a [2, 3, 197] tile of 10 chunks 5.8 us against 8.4 copied one by one; a
    // [197, 197] tile of 152 chunks ran 29.5 us batched and 26.4 in the unroll-4 loop below,
    // which larger tiles keep.
    constexpr int BATCH = ITERS < 16 ? ITERS : 16;
    for (int b0 = 0; b0 < ITERS; b0 += BATCH) {
      T v[BATCH][VEC];
      int64_t so;
      int dso;
#pragma unroll
      for (int j = 0; j < BATCH; ++j)
        if (const int c = live(b0 + j); c >= 0) {
          offsets(c, so, dso);
#pragma unroll
          for (int e = 0; e < VEC; ++e) v[j][e] = src[so + e];
        }
#pragma unroll
      for (int j = 0; j < BATCH; ++j)
        if (const int c = live(b0 + j); c >= 0) {
          offsets(c, so, dso);
#pragma unroll
          for (int e = 0; e < VEC; ++e) dst[dso + e] = v[j][e];
        }
    }
  } else {
    auto one = [&](int c) {
      int64_t so;
      int dso;
      offsets(c, so, dso);
      if constexpr (BYTES == 16) {
        rt::cp_async_16(rt::smem_u32(dst + dso), src + so, 16);
      } else if constexpr (BYTES == 8 || BYTES == 4) {
        cp_async_small<BYTES>(rt::smem_u32(dst + dso), src + so);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) dst[dso + e] = src[so + e];
      }
    };
    if constexpr (ITERS <= 16) {
#pragma unroll
      for (int it = 0; it < ITERS; ++it)
        if (const int c = live(it); c >= 0) one(c);
    } else {
#pragma unroll 4
      for (int c = tid; c < N; c += NT) one(c);
    }
  }
}

// Writes a float32 shared tile (strides S0..S2, dim 3 contiguous) to global memory of type T
// (strides G0..G2, dim 3 contiguous), VEC elements per thread and store: VEC = 16 / sizeof(T)
// gives one 16-byte store (needs 16-byte aligned rows in global and S* % 4 == 0), VEC = 1 scalar.
template <typename T, int NT, int E0, int E1, int E2, int E3, int64_t G0, int64_t G1, int64_t G2,
          int S0, int S1, int S2, int VEC>
KILN_DEV void store_tile(T* __restrict__ dst, const float* src, int tid) {
  constexpr int CPR = E3 / VEC;
  constexpr int N = E0 * E1 * E2 * CPR;
  static_assert(E3 % VEC == 0, "chunks divide the row");
#pragma unroll 4
  for (int c = tid; c < N; c += NT) {
    const int cc = c % CPR;
    int r = c / CPR;
    const int i2 = r % E2;
    r /= E2;
    const int i1 = r % E1;
    const int i0 = r / E1;
    const float* s = src + i0 * S0 + i1 * S1 + i2 * S2 + cc * VEC;
    T* d = dst + i0 * G0 + i1 * G1 + i2 * G2 + cc * VEC;
    if constexpr (VEC * int(sizeof(T)) == 16) {
      float v[VEC];
#pragma unroll
      for (int q = 0; q < VEC; q += 4) {
        const float4 f = *reinterpret_cast<const float4*>(s + q);
        v[q] = f.x, v[q + 1] = f.y, v[q + 2] = f.z, v[q + 3] = f.w;
      }
      rt::store16_f32(d, v);
    } else {
#pragma unroll
      for (int q = 0; q < VEC; ++q) d[q] = rt::from_f32<T>(s[q]);
    }
  }
}

// ---- Reductions over groups of lanes --------------------------------------------------------

template <int G>
KILN_DEV float group_sum(float v) {
  if constexpr (G == 1) {
    return v;
  } else {
    return rt::warp_reduce<G>(v, rt::SumOp());
  }
}
template <int G>
KILN_DEV float group_max(float v) {
  if constexpr (G == 1) {
    return v;
  } else {
    return rt::warp_reduce<G>(v, rt::MaxOp());
  }
}

// Reduces over groups of G consecutive lanes with G a multiple of 32 (G / 32 consecutive warps):
// a warp shuffle, then one partial per warp through `scratch` (32 floats of shared memory). Every
// thread of the block must call it (two barriers; the leading one lets back-to-back calls reuse
// scratch); every lane of a group gets the result.
template <int G, class Op>
KILN_DEV float group_reduce_wide(float v, Op op, float* scratch) {
  static_assert(G % 32 == 0 && G <= 1024, "G: a multiple of 32, at most 1024");
  constexpr int kWarps = G / 32;
  v = rt::warp_reduce<32>(v, op);
  const int tid = threadIdx.x;
  __syncthreads();
  if ((tid & 31) == 0) scratch[tid >> 5] = v;
  __syncthreads();
  const int w0 = (tid >> 5) / kWarps * kWarps;
  float r = scratch[w0];
#pragma unroll
  for (int k = 1; k < kWarps; ++k) r = op(r, scratch[w0 + k]);
  return r;
}

#ifndef KILN_SIM  // the CPU simulator runs generic block kernels only, never row chains
// Reduces v over every thread of the block (C = 1) or of its thread-block cluster of C CTAs
// (C = 2, 4 or 8; sm_90, a cluster launch with cluster dims (C, 1, 1); the row chain splitting one
// row over C CTAs); every thread gets the result. W is the block's warp count (blockDim.x / 32).
// One barrier per call instead of block_reduce's two: each warp publishes its partial into
// `slot` (C x W floats of shared memory, at rank x W + warp; with C > 1 into the slot of every CTA
// of the cluster through st.shared::cluster), then one barrier (a cluster barrier, release and
// acquire, when C > 1), then every warp sums the C x W partials of its own CTA's slot. No CTA
// reads another's shared memory, so a CTA may exit once it has passed its last call.
// Contract: `slot` is written by no other call until every thread of the block (cluster) has
// passed a later call's barrier: calls of one row take distinct slots, and rows alternate
// between two sets of slots. With C > 1, a CTA's shared memory may be written only once that CTA
// runs: every thread calls rt::cluster_arrive_relaxed() once at the kernel's start, and the
// kernel's first call passes first = true to wait for every CTA's arrival (after its loads are
// issued, so the wait overlaps them). `first` is the same in every thread.
template <int W, int C, class Op>
KILN_DEV float row_reduce(float v, Op op, float* slot, bool first = false) {
  static_assert(W >= 1 && W <= 32, "W: the block's warps, 1 to 32");
  static_assert(C == 1 || C == 2 || C == 4 || C == 8, "C: 1, 2, 4 or 8 CTAs");
  v = rt::warp_reduce<32>(v, op);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if constexpr (C == 1) {
    if (lane == 0) slot[warp] = v;
    __syncthreads();
  } else {
    if (first) rt::cluster_wait();
    const uint32_t at = rt::smem_u32(slot + rt::cluster_ctarank() * W + warp);
    if (lane < C) rt::dsmem_store(rt::dsmem_map(at, lane), v);
    rt::cluster_arrive();
    rt::cluster_wait();
  }
  float r = Op::identity();
#pragma unroll
  for (int i = lane; i < C * W; i += 32) r = op(r, slot[i]);
  return rt::warp_reduce<32>(r, op);
}
#endif  // KILN_SIM

// ---- Accumulator updates ------------------------------------------------------------------------

// accum_rescale: S' = S exp(M - M') + v exp(m - M') with M' = max(M, m).
KILN_DEV void rescale_update(float& s, float& run_max, float v, float m) {
  float a, b;
  rt::online_rescale(run_max, m, a, b);
  s = s * a + v * b;
}

// ---- mma.sync fragments -------------------------------------------------------------------------
//
// The fragment layouts are those of runtime/mma.cuh (g = lane / 4, t = lane % 4):
//   A (16 x 16): x[0] = A[g][2t..], x[1] = A[g+8][2t..], x[2] = A[g][2t+8..], x[3] = A[g+8][2t+8..]
//   B (16 x 8):  x[0] = B[2t..][g], x[1] = B[2t+8..][g]
//   C (16 x 8):  x[i] = C[g + 8 (i / 2)][2t + i % 2]

// A fragment from any element source: f(r, c) returns A[m0 + r][k0 + c] as float (the functor
// does its own bounds checks and returns 0 outside).
template <typename T, class F>
KILN_DEV void load_a_fn(FragA& a, int lane, F&& f) {
  const int g = lane >> 2, t = lane & 3;
  a.x[0] = rt::pack2<T>(f(g, 2 * t), f(g, 2 * t + 1));
  a.x[1] = rt::pack2<T>(f(g + 8, 2 * t), f(g + 8, 2 * t + 1));
  a.x[2] = rt::pack2<T>(f(g, 2 * t + 8), f(g, 2 * t + 9));
  a.x[3] = rt::pack2<T>(f(g + 8, 2 * t + 8), f(g + 8, 2 * t + 9));
}
// A fragment from a row-major float32 tile (pitch LDA even, 8-byte aligned rows): one 8-byte
// shared load per register, rounded to T; rows >= M and columns >= K (K even) read as zero.
template <typename T, int M, int K, int LDA>
KILN_DEV void load_a_f32(FragA& a, const float* A, int m0, int k0, int lane) {
  const int g = lane >> 2, t = lane & 3;
  auto pair = [&](int r, int c) -> uint32_t {
    const int m = m0 + r, k = k0 + c;
    if (m >= M || k >= K) return 0u;
    const float2 v = *reinterpret_cast<const float2*>(A + m * LDA + k);
    return rt::pack2<T>(v.x, v.y);
  };
  a.x[0] = pair(g, 2 * t);
  a.x[1] = pair(g + 8, 2 * t);
  a.x[2] = pair(g, 2 * t + 8);
  a.x[3] = pair(g + 8, 2 * t + 8);
}
// B fragment: f(k, n) returns B[k0 + k][n0 + n].
template <typename T, class F>
KILN_DEV void load_b_fn(FragB& b, int lane, F&& f) {
  const int g = lane >> 2, t = lane & 3;
  b.x[0] = rt::pack2<T>(f(2 * t, g), f(2 * t + 1, g));
  b.x[1] = rt::pack2<T>(f(2 * t + 8, g), f(2 * t + 9, g));
}

// A fragment with ldmatrix from a row-major M x K 16-bit tile (row pitch LDA elements, 16-byte
// aligned rows, k0 % 8 == 0). Rows past M re-read row M - 1: they only feed accumulator rows
// that are never stored.
template <int M, int LDA, typename T>
KILN_DEV void load_a_rows(FragA& a, const T* A, int m0, int k0, int lane) {
  int r = m0 + (lane & 15);
  r = r < M ? r : M - 1;
  rt::ldmatrix_x4(a.x, rt::smem_u32(A + r * LDA + k0 + ((lane >> 4) << 3)));
}
// A fragment with ldmatrix.trans from A stored transposed: At is K x M row-major (pitch LDT),
// M % 16 == 0.
template <int LDT, typename T>
KILN_DEV void load_a_cols(FragA& a, const T* At, int m0, int k0, int lane) {
  // Matrix q = lane / 8: q & 1 selects rows m0 + 8, q >> 1 selects k0 + 8.
  const int q = lane >> 3, r = lane & 7;
  rt::ldmatrix_x4_trans(a.x,
                        rt::smem_u32(At + (k0 + ((q >> 1) << 3) + r) * LDT + m0 + ((q & 1) << 3)));
}
// One B fragment (16 x 8) from B stored K x N row-major (pitch LDB): ldmatrix.x2.trans.
template <int LDB, typename T>
KILN_DEV void load_b_kn1(FragB& b, const T* B, int k0, int n0, int lane) {
  rt::ldmatrix_x2_trans(b.x, rt::smem_u32(B + (k0 + (lane & 15)) * LDB + n0));
}
// Two B fragments (n0 and n0 + 8) from K x N row-major: ldmatrix.x4.trans.
template <int LDB, typename T>
KILN_DEV void load_b_kn2(FragB& b0, FragB& b1, const T* B, int k0, int n0, int lane) {
  uint32_t r[4];
  rt::ldmatrix_x4_trans(r, rt::smem_u32(B + (k0 + (lane & 15)) * LDB + n0 + ((lane >> 4) << 3)));
  b0.x[0] = r[0], b0.x[1] = r[1], b1.x[0] = r[2], b1.x[1] = r[3];
}
// One B fragment from B stored transposed (Bt is N x K row-major, pitch LDT): ldmatrix.x2.
template <int LDT, typename T>
KILN_DEV void load_b_nk1(FragB& b, const T* Bt, int k0, int n0, int lane) {
  rt::ldmatrix_x2(b.x, rt::smem_u32(Bt + (n0 + (lane & 7)) * LDT + k0 + (((lane >> 3) & 1) << 3)));
}

// ---- Predefined-op kernels ------------------------------------------------------------------
//
// Shapes of predefined ops are passed as Shape4 (rank <= 4, leading extents 1). Broadcast reads
// use per-operand strides with 0 on broadcast dims.

struct Idx4 {
  int64_t i[4];
};
KILN_HD Idx4 unravel4(int64_t e, int64_t d1, int64_t d2, int64_t d3) {
  Idx4 r;
  r.i[3] = e % d3;
  e /= d3;
  r.i[2] = e % d2;
  e /= d2;
  r.i[1] = e % d1;
  r.i[0] = e / d1;
  return r;
}

#ifndef KILN_SIM  // the simulator has its own
// C[b][M][N] = A[b][M][K] * B[b][K][N] on tensor cores, with up to two batch dims that may
// broadcast: batch index b = (b0, b1) over extents (NB0, NB1), and operand X's batch offset is
// b0 * X_s0 + b1 * X_s1 (0 strides broadcast). grid = (ceil(N / BN), ceil(M / BM), NB * splits):
// with splits > 1, split s covers K rows [s * k_chunk, (s + 1) * k_chunk) and writes float32
// partials to partial[(s * NB + b) * M * N ...] for splitk_sum_kernel to add up.
template <class Cfg, typename TO>
__global__ void __launch_bounds__(Cfg::kThreads)
    gemm_batched_kernel(const typename Cfg::Elem* __restrict__ A,
                        const typename Cfg::Elem* __restrict__ B, TO* __restrict__ C, int M, int N,
                        int K, int NB, int NB1, int64_t a_s0, int64_t a_s1, int64_t b_s0,
                        int64_t b_s1, int k_chunk, float* __restrict__ partial) {
  rt::pdl_entry();  // before any load or store (base.cuh)
  extern __shared__ __align__(128) char gemm_smem[];
  using T = typename Cfg::Elem;
  const int bz = blockIdx.z % NB, split = blockIdx.z / NB, b0 = bz / NB1, b1 = bz % NB1;
  const int k0 = split * k_chunk;
  const int kc = K - k0 < k_chunk ? K - k0 : k_chunk;
  const T* Ab = A + b0 * a_s0 + b1 * a_s1 + k0;
  const T* Bb = B + b0 * b_s0 + b1 * b_s1 + int64_t(k0) * N;
  const int m0 = blockIdx.y * Cfg::kBM, n0 = blockIdx.x * Cfg::kBN;
  FragC acc[Cfg::kMI][Cfg::kNI];
#pragma unroll
  for (int i = 0; i < Cfg::kMI; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kNI; ++j) acc[i][j].zero();
  const rt::GmemView<const T> a{Ab + int64_t(m0) * K, M - m0, kc, K};
  const rt::GmemView<const T> b{Bb + n0, kc, N - n0, N};
  rt::gemm_mainloop<Cfg>(acc, a, b, kc, gemm_smem);
  const int warp = threadIdx.x >> 5;
  const int r0 = (warp / Cfg::kWarpsN) * Cfg::kWarpM, c0 = (warp % Cfg::kWarpsN) * Cfg::kWarpN;
  if (partial == nullptr) {
    TO* Cb = C + int64_t(bz) * M * N;
    const rt::GmemView<TO> c{Cb + int64_t(m0) * N + n0, M - m0, N - n0, N};
    rt::store_acc(c, acc, r0, c0, threadIdx.x & 31, [](float v, int, int) { return v; });
  } else {
    float* Pb = partial + (int64_t(split) * NB + bz) * M * N;
    const rt::GmemView<float> c{Pb + int64_t(m0) * N + n0, M - m0, N - n0, N};
    rt::store_acc(c, acc, r0, c0, threadIdx.x & 31, [](float v, int, int) { return v; });
  }
}
#endif  // KILN_SIM

// Generic FMA matmul for any dtypes and shapes: 32 x 32 output tiles, 256 threads, 4 outputs
// per thread, K in slices of 32 through shared memory. Same batch convention as above.
template <typename TA, typename TB, typename TO>
__global__ void __launch_bounds__(256)
    matmul_fma_kernel(const TA* __restrict__ A, const TB* __restrict__ B, TO* __restrict__ C, int M,
                      int N, int K, int NB1, int64_t a_s0, int64_t a_s1, int64_t b_s0,
                      int64_t b_s1) {
  rt::pdl_entry();  // before any load or store (base.cuh)
  __shared__ float sA[32][33];
  __shared__ float sB[32][33];
  const int bz = blockIdx.z, b0 = bz / NB1, b1 = bz % NB1;
  const TA* Ab = A + b0 * a_s0 + b1 * a_s1;
  const TB* Bb = B + b0 * b_s0 + b1 * b_s1;
  TO* Cb = C + int64_t(bz) * M * N;
  const int m0 = blockIdx.y * 32, n0 = blockIdx.x * 32;
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;  // ty in 0..7: rows ty, ty+8, ...
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int k0 = 0; k0 < K; k0 += 32) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = ty + 8 * q;
      sA[r][tx] = (m0 + r < M && k0 + tx < K) ? ld(Ab + int64_t(m0 + r) * K + k0 + tx) : 0.f;
      sB[r][tx] = (k0 + r < K && n0 + tx < N) ? ld(Bb + int64_t(k0 + r) * N + n0 + tx) : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < 32; ++k) {
      const float b = sB[k][tx];
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[q] = fmaf(sA[ty + 8 * q][k], b, acc[q]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int r = m0 + ty + 8 * q, c = n0 + tx;
    if (r < M && c < N) Cb[int64_t(r) * N + c] = rt::from_f32<TO>(acc[q]);
  }
}

// C[e] = sum over s of partial[s * count + e], in split order.
template <typename TO>
__global__ void __launch_bounds__(256)
    splitk_sum_kernel(const float* __restrict__ partial, TO* __restrict__ C, int splits,
                      int64_t count) {
  rt::pdl_entry();  // before any load or store (base.cuh)
  for (int64_t e = (int64_t)blockIdx.x * 256 + threadIdx.x; e < count;
       e += (int64_t)gridDim.x * 256) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) acc += partial[s * count + e];
    C[e] = rt::from_f32<TO>(acc);
  }
}

// Writes a float32 scalar (materialized constants).
__global__ void fill_scalar_kernel(float* p, float v) {
  rt::pdl_entry();  // before any load or store (base.cuh)
  *p = v;
}

}  // namespace cg
}  // namespace kiln

#endif  // KILN_CG_CUH
