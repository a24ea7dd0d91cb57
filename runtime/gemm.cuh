// Kiln runtime, gemm: the block-tiled tensor-core matmul for large m (C[M, N] = A[M, K] B[K, N],
// all row-major, f16/bf16 in, f32 accumulate), built from copy.cuh and mma.cuh.
//
// Each block computes a BM x BN tile of C. Its WARPS_M x WARPS_N warps each hold a
// (BM / WARPS_M) x (BN / WARPS_N) sub-tile in FragC registers. K is walked in BK slices through
// a STAGES-deep ring of swizzled shared-memory tiles filled by cp.async (zero-filled past the
// matrix edges), so M, N and K need not be multiples of the tile. gemm_mainloop leaves the
// accumulators in registers for the emitter's epilogue; gemm_kernel is the plain
// C = epi(A B) kernel built on it.
//
// Preconditions: A, B 16-byte aligned; lda and ldb multiples of 8 elements; the block has
// exactly Cfg::kThreads threads and Cfg::kSmemBytes of dynamic shared memory (raise the limit
// with cudaFuncSetAttribute past 48 KB).
#ifndef KILN_RT_GEMM_CUH
#define KILN_RT_GEMM_CUH

#ifndef KILN_RT_COPY_CUH
#include "copy.cuh"
#endif
#ifndef KILN_RT_MMA_CUH
#include "mma.cuh"
#endif

namespace kiln {
namespace rt {

template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
struct GemmConfig {
  using Elem = T;
  using TileA = SmemTile<T, BM, BK, Layout::Swizzled>;
  using TileB = SmemTile<T, BK, BN, Layout::Swizzled>;
  static constexpr int kBM = BM, kBN = BN, kBK = BK, kStages = STAGES;
  static constexpr int kWarpsM = WARPS_M, kWarpsN = WARPS_N;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int kWarpM = BM / WARPS_M, kWarpN = BN / WARPS_N;
  static constexpr int kMI = kWarpM / 16, kNI = kWarpN / 8;
  static constexpr int kSmemBytes = STAGES * (TileA::kBytes + TileB::kBytes);
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tile: multiples of 16");
  static_assert(BK % 16 == 0 && STAGES >= 2, "BK multiple of 16, at least 2 stages");
};

// acc += A[0 .. BM, 0 .. K] * B[0 .. K, 0 .. BN] where A is the view of the block's rows (origin
// at row m0, column 0; rows = M - m0, cols = K) and B the view of its columns (origin at row 0,
// column n0; rows = K, cols = N - n0). Warp w = (wm, wn), wm = w / WARPS_N, owns rows
// wm * kWarpM .. and columns wn * kWarpN .. of the block tile. smem: Cfg::kSmemBytes, 128-byte
// aligned. Ends with a barrier, so smem may be reused at once.
template <class Cfg, typename GT>
KILN_DEV void gemm_mainloop(FragC (&acc)[Cfg::kMI][Cfg::kNI], const GmemView<GT>& A,
                            const GmemView<GT>& B, int K, char* smem) {
  using TileA = typename Cfg::TileA;
  using TileB = typename Cfg::TileB;
  constexpr int S = Cfg::kStages, BK = Cfg::kBK;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / Cfg::kWarpsN, wn = warp % Cfg::kWarpsN;
  auto tile_a = [&](int s) { return TileA(smem + s * (TileA::kBytes + TileB::kBytes)); };
  auto tile_b = [&](int s) {
    return TileB(smem + s * (TileA::kBytes + TileB::kBytes) + TileA::kBytes);
  };
  auto load_stage = [&](int s, int kt) {
    cp_async_g2s<Cfg::kThreads>(tile_a(s), A.offset(0, kt * BK), tid);
    cp_async_g2s<Cfg::kThreads>(tile_b(s), B.offset(kt * BK, 0), tid);
  };

  const int ktiles = ceil_div(K, BK);
  // Prologue: S - 1 stages in flight. Empty groups keep the group count uniform.
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<S - 2>();  // stage kt has landed (for this thread's copies) ...
    __syncthreads();         // ... for every thread's, and stage kt-1 is no longer being read
    const int next = kt + S - 1;
    if (next < ktiles) load_stage(next % S, next);
    cp_async_commit();
    warp_mma<Cfg::kMI, Cfg::kNI>(acc, tile_a(kt % S), wm * Cfg::kWarpM, tile_b(kt % S),
                                 wn * Cfg::kWarpN, lane);
  }
  cp_async_wait_all();
  __syncthreads();
}

// C[m, n] = epi(sum_k A[m, k] B[k, n], m, n) for an M x N output; grid (ceil(N / BN),
// ceil(M / BM)). Epi: float(float v, int m, int n) const. Output pairs are stored 4 or 8 bytes
// wide when ldc is even.
template <class Cfg, typename TO, class Epi>
__global__ void __launch_bounds__(Cfg::kThreads)
    gemm_kernel(const typename Cfg::Elem* A, int64_t lda, const typename Cfg::Elem* B, int64_t ldb,
                TO* C, int64_t ldc, int M, int N, int K, Epi epi) {
  pdl_entry();  // before any load or store (base.cuh)
  extern __shared__ __align__(128) char gemm_smem[];
  using T = typename Cfg::Elem;
  const int m0 = blockIdx.y * Cfg::kBM, n0 = blockIdx.x * Cfg::kBN;
  FragC acc[Cfg::kMI][Cfg::kNI];
#pragma unroll
  for (int i = 0; i < Cfg::kMI; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kNI; ++j) acc[i][j].zero();
  const GmemView<const T> a{A + m0 * lda, M - m0, K, lda};
  const GmemView<const T> b{B + n0, K, N - n0, ldb};
  gemm_mainloop<Cfg>(acc, a, b, K, gemm_smem);
  const int warp = threadIdx.x >> 5;
  const int r0 = (warp / Cfg::kWarpsN) * Cfg::kWarpM, c0 = (warp % Cfg::kWarpsN) * Cfg::kWarpN;
  const GmemView<TO> c{C + m0 * ldc + n0, M - m0, N - n0, ldc};
  store_acc(c, acc, r0, c0, threadIdx.x & 31,
            [&](float v, int r, int col) { return epi(v, m0 + r, n0 + col); });
}

#ifndef __CUDACC_RTC__
// Launches gemm_kernel (sets the dynamic shared-memory limit on first use).
template <class Cfg, typename TO, class Epi>
inline cudaError_t gemm_launch(const typename Cfg::Elem* A, int64_t lda,
                               const typename Cfg::Elem* B, int64_t ldb, TO* C, int64_t ldc, int M,
                               int N, int K, Epi epi, cudaStream_t stream) {
  constexpr auto kernel = gemm_kernel<Cfg, TO, Epi>;
  const cudaError_t e = raise_smem_limit_once<kernel>(Cfg::kSmemBytes);
  if (e != cudaSuccess) return e;
  dim3 grid(ceil_div(N, Cfg::kBN), ceil_div(M, Cfg::kBM));
  return launch(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, 1, A, lda, B, ldb, C,
                ldc, M, N, K, epi);
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_GEMM_CUH
