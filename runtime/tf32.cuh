// Kiln runtime, tf32: f32 matmuls on the tensor cores at f32 accuracy ("3xTF32").
//
// Each operand value splits as x = hi + lo with hi = tf32(x) and lo = tf32(x - hi), both rounded
// to nearest, so |x - hi - lo| <= 2^-22 |x|. Then A B = hi_a hi_b + hi_a lo_b + lo_a hi_b +
// lo_a lo_b, and the last term (at most 2^-22 of each product) is dropped. A product of two tf32
// values is exact in f32 and wgmma accumulates in f32, so the three-pass product's error is of the
// order of an f32 FMA GEMM's, where one tf32 pass (11 bits of each operand) is ~3e-4 relative L2
// on std-1 data at any K: beyond the spec format's 1e-4 for f32 outputs.
//
// gemm_f32x3_launch: one split pass (tf32_split_kernel) writes A as [M, 2 Kp] = [hi | lo] and B
// as B^T [N, 2 Kp] (K-major: tf32 wgmma has no transpose bits, so an N-major B is transposed
// here), Kp = K rounded up to 32 with zeros; then the warp-specialized wgmma GEMM
// (WgmmaGemmWS<float, ...>, wgmma.cuh) walks the three K segments into one accumulator and runs
// the epilogue functor on the f32 result. Any of A, B may be stored transposed; any input dtype
// (f16 and bf16 values are exact in tf32, so their lo is 0). Where the 128 x 128 tiles cannot
// fill the GPU, K is split over work units that write f32 partials, summed in order by
// splitk_epilogue_kernel, which then runs the epilogue. Workspace: gemm_f32x3_workspace bytes,
// 16-byte aligned; sm_90a only.
#ifndef KILN_RT_TF32_CUH
#define KILN_RT_TF32_CUH

#ifndef KILN_RT_WGMMA_CUH
#include "wgmma.cuh"
#endif

namespace kiln {
namespace rt {

// x rounded to tf32 (10 mantissa bits, to nearest, ties away), as a float with the low 13 bits 0.
KILN_DEV float tf32_round(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}

// One operand of tf32_split_kernel: X's R x K view, element (r, k) at X[r * ld + k] (trans 0) or
// X[k * ld + r] (trans 1, X stored K x R); batch index z at X + (z / nb1) s0 + (z % nb1) s1 (0
// strides broadcast); written to Y + z R 2 Kp as Y[r][k] = hi, Y[r][Kp + k] = lo, 0 for K <= k <
// Kp.
template <typename TS>
struct Tf32SplitSide {
  const TS* x;
  float* y;
  int rows;
  int trans;
  int64_t ld, s0, s1;
};

// One 32 x 32 tile of a side, through shared memory, so that reads and writes are coalesced
// whichever way the side is stored.
template <typename TS>
KILN_DEV void tf32_split_tile(const Tf32SplitSide<TS>& sd, int K, int Kp, int nb1, int k0, int r0,
                              float (&tile)[32][33]) {
  const TS* X = sd.x + int64_t(blockIdx.z / nb1) * sd.s0 + int64_t(blockIdx.z % nb1) * sd.s1;
  float* Y = sd.y + int64_t(blockIdx.z) * sd.rows * 2 * Kp;
  const int R = sd.rows, tx = threadIdx.x, ty = threadIdx.y;
#pragma unroll
  for (int i = ty; i < 32; i += 8) {
    if (sd.trans) {  // row k0 + i of the stored K x R matrix, columns r0 + tx
      const int k = k0 + i, r = r0 + tx;
      tile[tx][i] = (k < K && r < R) ? to_f32(X[int64_t(k) * sd.ld + r]) : 0.0f;
    } else {
      const int r = r0 + i, k = k0 + tx;
      tile[i][tx] = (k < K && r < R) ? to_f32(X[int64_t(r) * sd.ld + k]) : 0.0f;
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = ty; i < 32; i += 8) {
    const int r = r0 + i;
    if (r >= R) continue;
    const float x = tile[i][tx], hi = tf32_round(x);
    float* y = Y + int64_t(r) * 2 * Kp + k0 + tx;
    y[0] = hi;
    y[Kp] = tf32_round(x - hi);
  }
}

// The hi/lo pairs of both operands in one launch: grid (Kp / 32, ceil(A rows / 32) + ceil(B rows
// / 32), batch), block (32, 8); row tiles below a_tiles are A's, the rest B's.
template <typename TA, typename TB>
__global__ void __launch_bounds__(256) tf32_split_kernel(Tf32SplitSide<TA> a, Tf32SplitSide<TB> b,
                                                         int K, int Kp, int nb1, int a_tiles) {
  pdl_entry();  // before any load or store (base.cuh)
  __shared__ float tile[32][33];
  const int k0 = blockIdx.x * 32, t = blockIdx.y;
  if (t < a_tiles) {
    tf32_split_tile(a, K, Kp, nb1, k0, 32 * t, tile);
  } else {
    tf32_split_tile(b, K, Kp, nb1, k0, 32 * (t - a_tiles), tile);
  }
}

// C[r * ldc + c] = epi(sum over s < splits of part[s * stride + r * N + c], 0, r, c), the
// splits in order. Grid-stride over M x N.
template <typename TO, class Epi>
__global__ void __launch_bounds__(256)
    splitk_epilogue_kernel(const float* __restrict__ part, int splits, int64_t stride, int M, int N,
                           TO* __restrict__ C, int64_t ldc, Epi epi) {
  pdl_entry();  // before any load or store (base.cuh)
  const int64_t count = int64_t(M) * N;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < count;
       e += int64_t(gridDim.x) * blockDim.x) {
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += part[s * stride + e];
    const int r = int(e / N), c = int(e - int64_t(r) * N);
    C[r * ldc + c] = from_f32<TO>(epi(v, 0.0f, r, c));
  }
}

// ---- f32 products with one side of at most 8 vectors (matrix-vector shapes) -------------------
//
// out(s, l) = sum over k of W(l, k) X(s, k) for s < S <= 8, l < L: W the large operand with its K
// contiguous (W[l * ldw + k]), X the small one at X[s * xs + k * xk], out at C[s * cs + l * cl].
// A warp per (row l, K split): lanes stride over k four at a time (float4 when ldw % 4 == 0 and W
// is 16-byte aligned), the S sums reduced by shuffles; W is read once, as f32 FMA (exact enough:
// no tf32). With splits > 1 the partials go to part[split * L * S + (s * cs + l * cl)] for
// splitk_epilogue_kernel (in the order of C's elements), else straight to C.
template <int S, typename TW, typename TX, typename TO>
__global__ void __launch_bounds__(256)
    f32_rowdot_kernel(const TW* __restrict__ W, int64_t ldw, const TX* __restrict__ X, int64_t xs,
                      int64_t xk, TO* __restrict__ C, int64_t cs, int64_t cl,
                      float* __restrict__ part, int L, int K, int splits) {
  pdl_entry();  // before any load or store (base.cuh)
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  const int kc = (K / splits + 3) / 4 * 4;  // a split's k range, a multiple of 4
  // Fast path: W rows and (xk == 1) X rows read as float4, four 128-k steps unrolled so that each
  // lane keeps four W loads in flight; the rest of a split's range (and any other layout) scalar.
  const bool wv4 = sizeof(TW) == 4 && ldw % 4 == 0 && (reinterpret_cast<uintptr_t>(W) & 15) == 0;
  const bool xv4 =
      sizeof(TX) == 4 && xk == 1 && xs % 4 == 0 && (reinterpret_cast<uintptr_t>(X) & 15) == 0;
  for (int64_t wi = blockIdx.x * int64_t(blockDim.x >> 5) + (threadIdx.x >> 5);
       wi < int64_t(L) * splits; wi += warps) {
    const int l = int(wi % L), sp = int(wi / L);
    const int k0 = sp * kc, k1 = sp == splits - 1 ? K : min_i(K, k0 + kc);
    const TW* w = W + l * ldw;
    float acc[S];
#pragma unroll
    for (int s = 0; s < S; ++s) acc[s] = 0.0f;
    int k = k0 + 4 * lane;
    if (wv4) {
      for (; k + 3 * 128 + 3 < k1; k += 4 * 128) {
        float4 wq[4];
#pragma unroll
        for (int u = 0; u < 4; ++u)
          wq[u] = __ldg(
              reinterpret_cast<const float4*>(reinterpret_cast<const float*>(w) + k + 128 * u));
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int ku = k + 128 * u;
#pragma unroll
          for (int s = 0; s < S; ++s) {
            float4 xq;
            if (xv4) {
              xq = __ldg(
                  reinterpret_cast<const float4*>(reinterpret_cast<const float*>(X) + s * xs + ku));
            } else {
              xq =
                  make_float4(to_f32(X[s * xs + ku * xk]), to_f32(X[s * xs + (ku + 1) * xk]),
                              to_f32(X[s * xs + (ku + 2) * xk]), to_f32(X[s * xs + (ku + 3) * xk]));
            }
            acc[s] = fmaf(wq[u].x, xq.x, acc[s]);
            acc[s] = fmaf(wq[u].y, xq.y, acc[s]);
            acc[s] = fmaf(wq[u].z, xq.z, acc[s]);
            acc[s] = fmaf(wq[u].w, xq.w, acc[s]);
          }
        }
      }
    }
    for (; k < k1; k += 128) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (k + e >= k1) break;
        const float wv = to_f32(w[k + e]);
#pragma unroll
        for (int s = 0; s < S; ++s) acc[s] = fmaf(wv, to_f32(X[s * xs + (k + e) * xk]), acc[s]);
      }
    }
#pragma unroll
    for (int s = 0; s < S; ++s) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[s] += __shfl_xor_sync(0xffffffffu, acc[s], o);
    }
    if (lane == 0) {
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const int64_t at = s * cs + l * cl;
        if (splits > 1) {
          part[int64_t(sp) * L * S + at] = acc[s];
        } else {
          C[at] = from_f32<TO>(acc[s]);
        }
      }
    }
  }
}

// out(s, n) = sum over k of X(s, k) W[k * ldw + n] for s < S <= SMAX (X(s, k) at X[s * xs + k *
// xk]), n < N: the small side times a weight stored K x N (N contiguous), streamed once on the
// CUDA cores in f32 FMA. A thread owns 4 consecutive columns (a float4 of each W row where ldw %
// 4 == 0 and W is 16-byte aligned) over a K split (blockIdx.y); X's values are the same for the
// whole warp (broadcast loads). With splits > 1 the partials go to part[(split S + s) N + n] for
// splitk_epilogue_kernel, else to C[s * ldc + n]. Grid (ceil(N / 1024), splits), block 256.
template <int SMAX, typename TW, typename TX, typename TO>
__global__ void __launch_bounds__(256)
    f32_colstream_kernel(const TW* __restrict__ W, int64_t ldw, const TX* __restrict__ X,
                         int64_t xs, int64_t xk, TO* __restrict__ C, int64_t ldc,
                         float* __restrict__ part, int S, int N, int K, int splits) {
  pdl_entry();  // before any load or store (base.cuh)
  const int n0 = (blockIdx.x * 256 + threadIdx.x) * 4, sp = blockIdx.y;
  const int kc = (K + splits - 1) / splits, k0 = sp * kc, k1 = min_i(K, k0 + kc);
  if (n0 >= N) return;  // no barrier below
  const bool v4 =
      sizeof(TW) == 4 && ldw % 4 == 0 && (reinterpret_cast<uintptr_t>(W) & 15) == 0 && n0 + 3 < N;
  float acc[SMAX][4];
#pragma unroll
  for (int s = 0; s < SMAX; ++s)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[s][e] = 0.0f;
  // Rows past S read row S - 1 (their sums are never stored), so that every load is unconditional
  // and the four k of a step issue together.
  auto xrow = [&](int s) { return X + int64_t(s < S ? s : S - 1) * xs; };
  auto wrow = [&](int k, float(&w)[4]) {
    const TW* wr = W + int64_t(k) * ldw + n0;
    if (v4) {
      const float4 q = __ldg(reinterpret_cast<const float4*>(reinterpret_cast<const float*>(wr)));
      w[0] = q.x, w[1] = q.y, w[2] = q.z, w[3] = q.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) w[e] = n0 + e < N ? to_f32(wr[e]) : 0.0f;
    }
  };
  int k = k0;
  for (; k + 3 < k1; k += 4) {
    float w[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wrow(k + kk, w[kk]);
#pragma unroll
    for (int s = 0; s < SMAX; ++s) {
      const TX* xr = xrow(s);
      float x[4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) x[kk] = to_f32(xr[int64_t(k + kk) * xk]);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[s][e] = fmaf(x[kk], w[kk][e], acc[s][e]);
    }
  }
  for (; k < k1; ++k) {
    float w[4];
    wrow(k, w);
#pragma unroll
    for (int s = 0; s < SMAX; ++s) {
      const float x = to_f32(xrow(s)[int64_t(k) * xk]);
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[s][e] = fmaf(x, w[e], acc[s][e]);
    }
  }
#pragma unroll
  for (int s = 0; s < SMAX; ++s) {
    if (s >= S) break;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (n0 + e >= N) break;
      if (splits > 1) {
        part[(int64_t(sp) * S + s) * N + n0 + e] = acc[s][e];
      } else {
        C[s * ldc + n0 + e] = from_f32<TO>(acc[s][e]);
      }
    }
  }
}

#ifndef __CUDACC_RTC__
inline int tf32_padded_k(int K) {
  return (K + 31) / 32 * 32;
}

// The split-K factor gemm_f32x3_launch uses on a GPU of `sms` SMs: 1 where the 128 x 128 tiles
// fill the SMs, else up to enough splits to fill them, each split at least 16 of the 3 Kp / 32
// k-tiles (4 where there are fewer than 32), at most 16 splits (64 where 64 f32 partials of C
// fit in 8 MB: 32 x 64 over K 16384 ran 47 us at 16, 23 at 64 on an H200). The planner calls it
// with the target's SM count to size the workspace; a launch on a GPU with another count passes
// that count's splits.
inline int gemm_f32x3_splits(int M, int N, int K, int sms, int batch = 1) {
  const int tiles = ((M + 127) / 128) * ((N + 127) / 128) * batch;
  const int ktiles = 3 * tf32_padded_k(K) / 32;
  if (tiles >= sms) return 1;
  const int per = ktiles >= 32 ? 16 : 4;
  const int cap = int64_t(M) * N * batch * 4 * 64 <= (int64_t(8) << 20) ? 64 : 16;
  int s = (sms + tiles - 1) / tiles;
  s = s < ktiles / per ? s : ktiles / per;
  s = s < cap ? s : cap;
  return s < 1 ? 1 : s;
}

// Bytes of workspace: the split operands, and the partials where splits > 1.
inline size_t gemm_f32x3_workspace(int M, int N, int K, int splits, int batch = 1) {
  const size_t split =
      size_t(batch) * (size_t(M) + size_t(N)) * 2 * size_t(tf32_padded_k(K)) * sizeof(float);
  return split + (splits > 1 ? size_t(splits) * batch * M * N * sizeof(float) : 0);
}

// The batch of a batched gemm_f32x3_launch: `batch` products, batch index z = b0 nb1 + b1 with A
// at A + b0 a_s0 + b1 a_s1 and B likewise (0 strides broadcast), C dense at C + z M ldc.
struct F32x3Batch {
  int batch = 1, nb1 = 1;
  int64_t a_s0 = 0, a_s1 = 0, b_s0 = 0, b_s1 = 0;
};

// The K split of f32_rowdot_launch: enough warps for ~32 per SM where the rows are few, each split
// at least 2048 k.
inline int f32_rowdot_splits(int L, int K, int sms) {
  const int want = (32 * sms + L - 1) / L, most = K / 2048;
  const int s = want < most ? want : most;
  return s < 1 ? 1 : (s > 32 ? 32 : s);
}

// Launches f32_rowdot_kernel<S> (S <= 8 small vectors; see there) and, with splits > 1, the sum of
// the partials (workspace: splits * L * S floats, C's elements contiguous: cs, cl describe a dense
// S x L or L x S output).
template <typename TW, typename TX, typename TO>
inline cudaError_t f32_rowdot_launch(int S, const TW* W, int64_t ldw, const TX* X, int64_t xs,
                                     int64_t xk, TO* C, int64_t cs, int64_t cl, int L, int K,
                                     int splits, float* workspace, cudaStream_t stream) {
  if (S < 1 || S > 8 || L < 1 || K < 1 || splits < 1 || (splits > 1 && workspace == nullptr))
    return cudaErrorInvalidValue;
  const int64_t warps = int64_t(L) * splits;
  const dim3 grid(unsigned(warps / 8 + 1 < 65535 ? warps / 8 + 1 : 65535)), block(256);
  cudaError_t e = cudaErrorInvalidValue;
  switch (S) {
#define KILN_RT_ROWDOT(n)                                                                         \
  case n:                                                                                         \
    e = launch(f32_rowdot_kernel<n, TW, TX, TO>, grid, block, 0, stream, 1, W, ldw, X, xs, xk, C, \
               cs, cl, workspace, L, K, splits);                                                  \
    break;
    KILN_RT_ROWDOT(1)
    KILN_RT_ROWDOT(2)
    KILN_RT_ROWDOT(3)
    KILN_RT_ROWDOT(4) KILN_RT_ROWDOT(5) KILN_RT_ROWDOT(6) KILN_RT_ROWDOT(7) KILN_RT_ROWDOT(8)
#undef KILN_RT_ROWDOT
  }
  if (e != cudaSuccess || splits == 1) return e;
  const int64_t count = int64_t(L) * S;
  const int blocks = int(count / 256 + 1 < 4096 ? count / 256 + 1 : 4096);
  // The partials are in C's element order: sum them as one dense row of `count` elements.
  return launch(splitk_epilogue_kernel<TO, WgmmaEpiIdentity>, dim3(blocks), dim3(256), 0, stream, 1,
                static_cast<const float*>(workspace), splits, count, 1, int(count), C, count,
                WgmmaEpiIdentity());
}

// The K split of f32_colstream_launch: ~16 warps per SM, each split at least 16 k, and the
// partials (splits S N floats) at most an eighth of W's K N.
inline int f32_colstream_splits(int S, int N, int K, int sms) {
  const int warps = (N + 127) / 128;
  int s = (16 * sms + warps - 1) / warps;
  const int a = K / 16, b = K / (8 * (S > 0 ? S : 1));
  s = s < a ? s : a;
  s = s < b ? s : b;
  return s < 1 ? 1 : (s > 256 ? 256 : s);
}

// Launches f32_colstream_kernel (S <= 16 rows of the small side; see there) and, with splits > 1,
// the sum of the partials (workspace: splits * S * N floats; C dense, ldc = N then).
template <typename TW, typename TX, typename TO>
inline cudaError_t f32_colstream_launch(int S, const TW* W, int64_t ldw, const TX* X, int64_t xs,
                                        int64_t xk, TO* C, int64_t ldc, int N, int K, int splits,
                                        float* workspace, cudaStream_t stream) {
  if (S < 1 || S > 16 || N < 1 || K < 1 || splits < 1 ||
      (splits > 1 && (workspace == nullptr || ldc != N)))
    return cudaErrorInvalidValue;
  const dim3 grid((N + 1023) / 1024, splits), block(256);
  cudaError_t e = S <= 4 ? launch(f32_colstream_kernel<4, TW, TX, TO>, grid, block, 0, stream, 1, W,
                                  ldw, X, xs, xk, C, ldc, workspace, S, N, K, splits)
                  : S <= 8 ? launch(f32_colstream_kernel<8, TW, TX, TO>, grid, block, 0, stream, 1,
                                    W, ldw, X, xs, xk, C, ldc, workspace, S, N, K, splits)
                           : launch(f32_colstream_kernel<16, TW, TX, TO>, grid, block, 0, stream, 1,
                                    W, ldw, X, xs, xk, C, ldc, workspace, S, N, K, splits);
  if (e != cudaSuccess || splits == 1) return e;
  const int64_t count = int64_t(S) * N;
  const int blocks = int(count / 256 + 1 < 4096 ? count / 256 + 1 : 4096);
  return launch(splitk_epilogue_kernel<TO, WgmmaEpiIdentity>, dim3(blocks), dim3(256), 0, stream, 1,
                static_cast<const float*>(workspace), splits, count, S, N, C, ldc,
                WgmmaEpiIdentity());
}

// C [M, N] (row stride ldc) = epi(A B) in f32 accuracy on the tensor cores. A is M x K: A[m * lda +
// k], or with a_trans A[k * lda + m]; B is K x N: B[k * ldb + n], or with b_kmajor (nn.Linear's
// weight layout, B^T stored [N, K]) B[n * ldb + k]. Epi as wgmma_ws_gemm_launch's (one weight:
// epi(v, 0, m, n)). `splits` from gemm_f32x3_splits; workspace of gemm_f32x3_workspace bytes.
template <typename TA, typename TB, typename TO, class Epi>
inline cudaError_t gemm_f32x3_launch(const TA* A, int64_t lda, bool a_trans, const TB* B,
                                     int64_t ldb, bool b_kmajor, TO* C, int64_t ldc, int M, int N,
                                     int K, int splits, void* workspace, Epi epi,
                                     cudaStream_t stream, const F32x3Batch& bt = F32x3Batch()) {
  if (M < 1 || N < 1 || K < 1 || splits < 1 || workspace == nullptr || bt.batch < 1 || bt.nb1 < 1 ||
      bt.batch % bt.nb1 != 0 || (bt.batch > 1 && ldc != N))
    return cudaErrorInvalidValue;
  const int Kp = tf32_padded_k(K);
  float* a2 = static_cast<float*>(workspace);
  float* b2 = a2 + size_t(bt.batch) * M * 2 * Kp;
  float* part = b2 + size_t(bt.batch) * N * 2 * Kp;
  // Both operands' hi/lo pairs in one launch, K-major (B^T [N, 2 Kp]: B stored K x N is read
  // transposed).
  const Tf32SplitSide<TA> sa{A, a2, M, a_trans ? 1 : 0, lda, bt.a_s0, bt.a_s1};
  const Tf32SplitSide<TB> sb{B, b2, N, b_kmajor ? 0 : 1, ldb, bt.b_s0, bt.b_s1};
  const int a_tiles = (M + 31) / 32;
  cudaError_t e =
      launch(tf32_split_kernel<TA, TB>, dim3(Kp / 32, a_tiles + (N + 31) / 32, bt.batch),
             dim3(32, 8), 0, stream, 1, sa, sb, K, Kp, bt.nb1, a_tiles);
  if (e != cudaSuccess) return e;
  // 32 KB a stage (A 128 x 32 and B^T 128 x 32 floats), both consumers on each tile (the
  // accumulator promotion needs the registers ping-pong would hold a second tile in).
  using G = WgmmaGemmWS<float, 1, 6, 1, true, false>;
  WgmmaWsTuning tune;
  tune.batch = bt.batch;
  if (splits == 1)
    return wgmma_ws_gemm_launch<G, TO, Epi>(a2, 2 * int64_t(Kp), b2, b2, 2 * int64_t(Kp), C, ldc, M,
                                            N, Kp, epi, stream, tune);
  tune.splits = splits;
  tune.split_stride = int64_t(bt.batch) * M * N;
  e = wgmma_ws_gemm_launch<G, float, WgmmaEpiIdentity>(a2, 2 * int64_t(Kp), b2, b2, 2 * int64_t(Kp),
                                                       part, N, M, N, Kp, WgmmaEpiIdentity(),
                                                       stream, tune);
  if (e != cudaSuccess) return e;
  // The partials and C are [batch M, N]: one sum over the folded rows.
  const int64_t count = int64_t(bt.batch) * M * N;
  const int blocks = int(count / 256 + 1 < 4096 ? count / 256 + 1 : 4096);
  return launch(splitk_epilogue_kernel<TO, Epi>, dim3(blocks), dim3(256), 0, stream, 1, part,
                splits, tune.split_stride, bt.batch * M, N, C, ldc, epi);
}
#endif  // __CUDACC_RTC__

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_TF32_CUH
