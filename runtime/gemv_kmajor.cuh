// Kiln runtime, gemv_kmajor: the decode GEMV for a weight in PyTorch's nn.Linear layout,
// Y[M, N] = epi(X[M, K] W^T) with W stored [N, K] (K contiguous) and M <= 32, at any size of W;
// or epi(X W0^T, X W1^T) for two such weights.
//
// gemv.cuh streams a [K, N] weight and must transpose pairs of 16-bit values in registers to
// feed mma; the TMA GEMV (gemv_tma.cuh) reads a [N, K] weight in place but is planned only where
// the weight is large (>= 8 MB: one block per SM streaming a deep ring). This kernel covers the
// [N, K] weight of any size with the register stream: Y^T = W X^T on mma.m16n8k16, W the A
// operand (16 rows n x 16 k, row-major: K-major storage is exactly its layout) and X^T the B
// operand (X row-major [M, K] is B's column-major layout). No shuffle or permute is needed.
//
// Per 32 k a lane loads 16 bytes (8 consecutive k) of W rows g and g + 8 of each 16-row slab
// (g = lane / 4, t = lane % 4: the quad's four lanes cover k + 8t) and 16 bytes of X rows 8 mt + g.
// The k order inside a step is permuted consistently for W and X (logical mma k 2t + e <-> k + 8t
// + e, 2t + 8 + e <-> k + 8t + 2 + e for the first mma, + 4 and + 6 for the second), which a sum
// does not notice. One warp load instruction reads 8 rows x 64 contiguous bytes of W.
//
// Work split: a block of WARPS warps covers NS slabs of 16 rows of W (16 NS output columns); its
// warps interleave the 32-k steps of the block's k-range and sum through shared memory in a fixed
// order. Where the column blocks alone cannot fill the GPU, the k-range is split over the CTAs of
// a thread-block cluster (sm_90, `splits` CTAs along x, at most CL): each CTA reduces its warps,
// pushes its partial into the leader's shared memory (st.shared::cluster), and the leader (rank
// 0) sums them in rank order and stores. No workspace, no counters: launches may overlap freely.
// Cluster protocol as gemv_cluster_kernel's (gemv.cuh): relaxed arrive at the start, wait before
// the first remote store (every CTA has started), release-arrive + acquire-wait before the leader
// reads.
//
// Two weights (NW = 2, a gated pair such as SwiGLU's gate and up projections sharing X): the block
// streams the same NS slabs of both, W0's as slabs 0 .. NS - 1 and W1's as NS .. 2 NS - 1, and the
// epilogue gets both sums of an output element, epi(y0, y1, m, n, rs).
//
// Accumulators (per lane, per slab s and m-tile mt): acc[s][mt].x[h * 2 + e] is the sum for output
// column n = n0 + 16 (s mod NS) + g + 8 h and batch row m = 8 mt + 2 t + e, of weight s / NS.
//
// Preconditions (gemv_kmajor_supported): M <= 8 MT; K % 8 == 0; X and W 16-byte aligned, ldx % 8
// == 0, ldw % 8 == 0; 1 <= splits <= CL <= 8, CL > 1 only on sm_90. X and W are read through the
// non-coherent path: they must not be written by the same launch.
#ifndef KILN_RT_GEMV_KMAJOR_CUH
#define KILN_RT_GEMV_KMAJOR_CUH

#ifndef KILN_RT_GEMV_CUH
#include "gemv.cuh"
#endif
#ifndef KILN_RT_COPY_CUH
#include "copy.cuh"
#endif

namespace kiln {
namespace rt {

// 16-byte read-only load that may stay in L1 (X is read by every warp of the column block).
KILN_DEV uint4 ld_ro_128(const void* p) {
  uint4 r;
  asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

// Sum of the squares of the 8 16-bit values in v.
template <typename T>
KILN_DEV float sumsq8(uint4 v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = unpack2<T>(w[i]);
    s = fmaf(f.x, f.x, fmaf(f.y, f.y, s));
  }
  return s;
}

template <typename T, typename TO, int MT, int NS, int WARPS, int UNROLL, int CL, class Epi,
          int NW = 1>
__global__ void __launch_bounds__(32 * WARPS)
    gemv_kmajor_kernel(const T* __restrict__ X, int64_t ldx, const T* __restrict__ W,
                       const T* __restrict__ W1, int64_t ldw, TO* __restrict__ out, int64_t ldo,
                       int M, int N, int K, int k_chunk, int splits, Epi epi) {
  pdl_entry();  // before any load or store (base.cuh)
  static_assert(CL >= 1 && CL <= 8, "cluster of 1 to 8 CTAs");
  static_assert(WARPS >= 1 && WARPS <= 16, "1 to 16 warps");
  static_assert(NW == 1 || NW == 2, "one or two weights");
  constexpr int kS = NW * NS;  // slabs streamed: NS of each weight
  constexpr int kTiles = kS * MT;
  constexpr bool kRows = Epi::kRowSumSq;
  // Static shared memory is capped at 48 KB before sm_90 (sm_90a builds take more: the sweep's
  // 2 slabs x 4 m-tiles with clusters of 8 use 56 KB); emitted files also build for sm_80, where
  // two weights at 4 m-tiles with 8 warps and clusters of 8 would not fit.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static_assert(
      16 * 32 * kTiles * ((WARPS > 1 ? WARPS - 1 : 0) + (CL > 1 ? CL - 1 : 0)) +
              (kRows ? 4 * 8 * MT * (WARPS + CL) : 0) <=
          48 * 1024,
      "static shared memory over 48 KB: fewer m-tiles, weights, warps or CTAs per cluster");
#endif
  __shared__ float4 red[WARPS > 1 ? (WARPS - 1) * kTiles * 32 : 1];
  __shared__ float4 slots[CL > 1 ? (CL - 1) * kTiles * 32 : 1];
  __shared__ float srow[kRows ? WARPS * MT * 8 : 1];
  __shared__ float srows[kRows ? CL * MT * 8 : 1];
  const bool clustered = splits > 1;  // grid-uniform
  if (clustered) cluster_arrive_relaxed();
  const int lane = lane_id(), warp = warp_id(), g = lane >> 2, t = lane & 3;
  const int rank = clustered ? static_cast<int>(blockIdx.x % splits) : 0;
  const int n0 = static_cast<int>(blockIdx.x / splits) * 16 * NS;
  const int k_begin = rank * k_chunk, k_end = min_i(K, k_begin + k_chunk);

  FragC acc[kS][MT];
#pragma unroll
  for (int s = 0; s < kS; ++s)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) acc[s][mt].zero();
  float sq[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) sq[mt] = 0.0f;

  const T* wrow[kS][2];
  bool wok[kS][2];
#pragma unroll
  for (int s = 0; s < kS; ++s)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = n0 + 16 * (s % NS) + g + 8 * h;
      wok[s][h] = n < N;
      wrow[s][h] = (s < NS ? W : W1) + static_cast<int64_t>(wok[s][h] ? n : 0) * ldw + 8 * t;
    }
  const T* xrow[MT];
  bool xok[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int m = 8 * mt + g;
    xok[mt] = m < M;
    xrow[mt] = X + static_cast<int64_t>(xok[mt] ? m : 0) * ldx + 8 * t;
  }
  constexpr int kStep = 32 * WARPS;
  for (int kb = k_begin + 32 * warp; kb < k_end; kb += kStep * UNROLL) {
    uint4 w[UNROLL][kS][2];
    uint4 x[UNROLL][MT];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int k = kb + u * kStep;
      const bool k_ok = k + 8 * t < k_end;  // k_end % 8 == 0: all 8 values in range or none
#pragma unroll
      for (int s = 0; s < kS; ++s)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          w[u][s][h] = (k_ok && wok[s][h]) ? ld_stream_128(wrow[s][h] + k) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        x[u][mt] = (k_ok && xok[mt]) ? ld_ro_128(xrow[mt] + k) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const FragB b0{{x[u][mt].x, x[u][mt].y}}, b1{{x[u][mt].z, x[u][mt].w}};
#pragma unroll
        for (int s = 0; s < kS; ++s) {
          const uint4& r0 = w[u][s][0];
          const uint4& r1 = w[u][s][1];
          mma_16816<T>(acc[s][mt], FragA{{r0.x, r1.x, r0.y, r1.y}}, b0);
          mma_16816<T>(acc[s][mt], FragA{{r0.z, r1.z, r0.w, r1.w}}, b1);
        }
        if constexpr (kRows) sq[mt] += sumsq8<T>(x[u][mt]);
      }
  }

  // The block's warps, summed in warp order by warp 0.
  if constexpr (WARPS > 1) {
    if (warp > 0) {
#pragma unroll
      for (int s = 0; s < kS; ++s)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          red[((warp - 1) * kTiles + s * MT + mt) * 32 + lane] = acc[s][mt].as_float4();
        }
    }
  }
  if constexpr (kRows) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      sq[mt] = warp_sum<4>(sq[mt]);  // over the quad's k
      if (t == 0) srow[warp * MT * 8 + mt * 8 + g] = sq[mt];
    }
  }
  __syncthreads();
  if (WARPS > 1 && warp == 0) {
    for (int w = 1; w < WARPS; ++w)
#pragma unroll
      for (int s = 0; s < kS; ++s)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          acc[s][mt].add(red[((w - 1) * kTiles + s * MT + mt) * 32 + lane]);
  }
  float row = 0.0f;  // thread tid < 8 MT: sum over this CTA's k-range of X[tid][k]^2
  if constexpr (kRows) {
    if (threadIdx.x < MT * 8)
      for (int w = 0; w < WARPS; ++w) row += srow[w * MT * 8 + threadIdx.x];
  }

  if (clustered) {
    __syncwarp();    // reconverged after the row sums' branch: the wait is .aligned
    cluster_wait();  // every CTA of the cluster has started: its shared memory may be written
    if (rank > 0 && warp == 0) {
#pragma unroll
      for (int s = 0; s < kS; ++s)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          dsmem_store(
              dsmem_map(smem_u32(slots + ((rank - 1) * kTiles + s * MT + mt) * 32 + lane), 0),
              acc[s][mt].as_float4());
    }
    if (kRows && threadIdx.x < MT * 8) {
      if (rank > 0)
        dsmem_store(dsmem_map(smem_u32(srows + rank * MT * 8 + threadIdx.x), 0), row);
      else
        srows[threadIdx.x] = row;
    }
    __syncwarp();      // the .aligned arrive below after the branches above, by the whole warp
    cluster_arrive();  // release: the stores above before ...
    cluster_wait();    // ... the leader's reads below (acquire)
    if (rank > 0) return;
    if (warp == 0) {
      for (int r = 1; r < splits; ++r)
#pragma unroll
        for (int s = 0; s < kS; ++s)
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
            acc[s][mt].add(slots[((r - 1) * kTiles + s * MT + mt) * 32 + lane]);
    }
    if (kRows && threadIdx.x < MT * 8) {
      row = 0.0f;
      for (int r = 0; r < splits; ++r) row += srows[r * MT * 8 + threadIdx.x];
    }
  }
  if constexpr (kRows) {
    __syncthreads();  // every warp is done reading srow
    if (threadIdx.x < MT * 8) srow[threadIdx.x] = row;
    __syncthreads();
  }
  if (warp != 0) return;
#pragma unroll
  for (int s = 0; s < NS; ++s)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        // acc holds Y^T: the fragment's row is the column n, its column the row m.
        const int n = n0 + 16 * s + fragc_row(lane, i), m = 8 * mt + fragc_col(lane, i);
        if (n < N && m < M)
          out[static_cast<int64_t>(m) * ldo + n] =
              from_f32<TO>(epi(acc[s][mt].x[i], NW > 1 ? acc[(NW - 1) * NS + s][mt].x[i] : 0.0f, m,
                               n, kRows ? srow[m] : 0.0f));
      }
}

#ifndef __CUDACC_RTC__
// Rows of K per split: a multiple of 32 (whole k-steps), splits * k_chunk >= K.
inline int gemv_kmajor_k_chunk(int K, int splits) {
  return (ceil_div(K, splits) + 31) / 32 * 32;
}

inline bool gemv_kmajor_supported(int M, int N, int K, int mt, int splits, int cl, const void* X,
                                  int64_t ldx, const void* W, int64_t ldw) {
  return M >= 1 && M <= 8 * mt && N >= 1 && K >= 8 && K % 8 == 0 && ldx % 8 == 0 && ldw % 8 == 0 &&
         ldx >= K && ldw >= K && splits >= 1 && splits <= cl &&
         (reinterpret_cast<uintptr_t>(X) & 15) == 0 && (reinterpret_cast<uintptr_t>(W) & 15) == 0;
}

// grid = ceil(N / (16 NS)) * splits CTAs of 32 WARPS threads, in clusters of `splits` along x
// where splits > 1 (sm_90). W1 (NW = 2: a second [N, K] weight, same ldw) is read only when NW is
// 2. Returns cudaErrorInvalidValue where the preconditions fail.
template <typename T, typename TO, int MT, int NS, int WARPS, int UNROLL, int CL, class Epi,
          int NW = 1>
inline cudaError_t gemv_kmajor_launch(const T* X, int64_t ldx, const T* W, const T* W1, int64_t ldw,
                                      TO* out, int64_t ldo, int M, int N, int K, int splits,
                                      cudaStream_t stream, Epi epi) {
  if (!gemv_kmajor_supported(M, N, K, MT, splits, CL, X, ldx, W, ldw)) return cudaErrorInvalidValue;
  if (NW > 1 && (W1 == nullptr || (reinterpret_cast<uintptr_t>(W1) & 15) != 0))
    return cudaErrorInvalidValue;
  const int k_chunk = gemv_kmajor_k_chunk(K, splits);
  const int col_blocks = ceil_div(N, 16 * NS);
  return launch(gemv_kmajor_kernel<T, TO, MT, NS, WARPS, UNROLL, CL, Epi, NW>,
                dim3(static_cast<unsigned>(col_blocks * splits)), dim3(32 * WARPS), 0, stream,
                splits, X, ldx, W, NW > 1 ? W1 : W, ldw, out, ldo, M, N, K, k_chunk, splits, epi);
}

#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_GEMV_KMAJOR_CUH
