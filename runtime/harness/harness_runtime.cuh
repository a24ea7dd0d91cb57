// Kiln harness text, inlined verbatim by codegen/emit_harness.cpp: the harness's static helpers
// (namespace kiln_harness): input generation on the device, the reference's reduction helpers,
// comparison and range kernels.
// Not a standalone header (it relies on what the harness emits before it); no per-graph content.
namespace kiln_harness {

#define KILN_CK(call)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(e_), __FILE__,   \
              __LINE__, cudaGetErrorString(e_));                                        \
      printf("KILN_RESULT name=%s ok=0 err=inf us=nan error=%s\n", kName,               \
             cudaGetErrorName(e_));                                                     \
      exit(2);                                                                          \
    }                                                                                   \
  } while (0)

template <typename T>
__global__ void gen_kernel(T* p, int64_t n, uint64_t stream) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    p[e] = kiln::rt::from_f32<T>(kiln_rng_value(stream, (uint64_t)e));
}

// The normal variant of the generator (standard deviation sd > 0), bit-identical to
// kiln::random_tensor(desc, seed, index, sd).
template <typename T>
__global__ void gen_normal_kernel(T* p, int64_t n, uint64_t stream, float sd) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    p[e] = kiln::rt::from_f32<T>(kiln_rng_normal(stream, (uint64_t)e, sd));
}

template <typename T>
__global__ void widen_kernel(const T* p, double* q, int64_t n) {
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    q[e] = (double)kiln::rt::to_f32(p[e]);
}

// acc[0] += sum (out - ref)^2, acc[1] += sum ref^2, acc[2] += sum out^2, acc[3] += #non-finite
template <typename T>
__global__ void compare_kernel(const T* out, const double* ref, int64_t n, double* acc) {
  double d2 = 0, r2 = 0, o2 = 0, bad = 0;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x) {
    const double o = (double)kiln::rt::to_f32(out[e]);
    const double r = ref[e];
    if (!isfinite(o)) bad += 1;
    d2 += (o - r) * (o - r);
    r2 += r * r;
    o2 += o * o;
  }
  for (int s = 16; s > 0; s >>= 1) {
    d2 += __shfl_xor_sync(0xffffffffu, d2, s);
    r2 += __shfl_xor_sync(0xffffffffu, r2, s);
    o2 += __shfl_xor_sync(0xffffffffu, o2, s);
    bad += __shfl_xor_sync(0xffffffffu, bad, s);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(acc + 0, d2);
    atomicAdd(acc + 1, r2);
    atomicAdd(acc + 2, o2);
    atomicAdd(acc + 3, bad);
  }
}

// acc[0] += the number of values that are not finite in f32: |x| > FLT_MAX (written out, as
// double, so that the harness needs no <float.h>) or NaN.
__global__ void range_kernel(const double* p, int64_t n, double* acc) {
  double bad = 0;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (int64_t)gridDim.x * blockDim.x)
    if (!(fabs(p[e]) <= 3.4028234663852886e38)) bad += 1;
  for (int s = 16; s > 0; s >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, s);
  if ((threadIdx.x & 31) == 0) atomicAdd(acc, bad);
}

// Float64 matmul for the reference: C[b] = A[b] B[b], 64 x 64 tiles, 4 x 4 per thread.
__global__ void __launch_bounds__(256) ref_matmul(const double* __restrict__ A,
                                                  const double* __restrict__ B,
                                                  double* __restrict__ C, int M, int N, int K,
                                                  int NB1, int64_t as0, int64_t as1, int64_t bs0,
                                                  int64_t bs1) {
  __shared__ double sA[16][65];
  __shared__ double sB[16][65];
  const int bz = blockIdx.z, b0 = bz / NB1, b1 = bz % NB1;
  const double* Ab = A + b0 * as0 + b1 * as1;
  const double* Bb = B + b0 * bs0 + b1 * bs1;
  double* Cb = C + (int64_t)bz * M * N;
  const int m0 = blockIdx.y * 64, n0 = blockIdx.x * 64;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  double acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int q = threadIdx.x; q < 16 * 64; q += 256) {
      const int kk = q / 64, mm = q % 64;
      const int m = m0 + mm, k = k0 + kk;
      sA[kk][mm] = (m < M && k < K) ? Ab[(int64_t)m * K + k] : 0.0;
      const int n = n0 + mm;
      sB[kk][mm] = (k < K && n < N) ? Bb[(int64_t)k * N + n] : 0.0;
    }
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < 16; ++kk) {
      double a[4], b[4];
      for (int i = 0; i < 4; ++i) a[i] = sA[kk][ty + 16 * i];
      for (int j = 0; j < 4; ++j) b[j] = sB[kk][tx + 16 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m < M && n < N) Cb[(int64_t)m * N + n] = acc[i][j];
    }
}

inline int grid_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (int)(b < 8192 ? (b < 1 ? 1 : b) : 8192);
}

}  // namespace kiln_harness
