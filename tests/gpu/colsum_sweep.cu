// Column-sum sweep on the GPU (a measurement tool, not a test; session 10, issue 17): how to sum
// W's rows (a [R, C] bf16 matrix over dim 0, linear_mean's rewrite) at copy speed. Variants:
//   A  blocks of 256 columns (512-byte runs), 8 warps over rows, P row splits into a workspace
//   B  blocks of 256 x 8 columns (one 16-byte vector per thread: 4 KB runs), P row splits
//   C  like B with 2 vectors per thread (8 KB runs: a whole 4096-wide row)
// each followed by a combine kernel (a thread per column sums the P partials). Times: cudaEvent
// over 200 launches, the input rotating over 4 copies (128 MB > L2).
//
// Build and run (CUDA toolkit only):
//   nvcc -std=c++17 -O3 -arch=sm_90a tests/gpu/colsum_sweep.cu -o colsum && ./colsum
// H100 (4096 x 4096, 32 MB; copy floor ~11 us): time follows the number of blocks (bytes in
// flight), not the run length: A 20.2 us at 256 blocks; B (4 KB runs) 62.0 / 34.1 / 20.9 / 16.8
// us at 64 / 128 / 256 / 512 blocks; C (8 KB runs) 22.7 at 128; a combine kernel adds ~5 us.
// None streams like the TMA GEMV (93% of copy with a 128 KB ring per SM): W's row sum is
// ones^T W, a GEMV, and that is the kernel to use (docs/benchmarks.md, session 10).
#include <cuda_bf16.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#define CK(x)                                        \
  do {                                               \
    cudaError_t e = (x);                             \
    if (e != cudaSuccess) {                          \
      printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      return 1;                                      \
    }                                                \
  } while (0)

__device__ __forceinline__ void ld8(const __nv_bfloat16* p, float* v) {
  uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
    v[2 * i] = f.x, v[2 * i + 1] = f.y;
  }
}

// B/C: NV vectors per thread along the row; block covers 256 * 8 * NV columns; grid (segs, P).
template <int NV, int U>
__global__ void __launch_bounds__(256) colsum_rows(const __nv_bfloat16* __restrict__ x,
                                                   float* __restrict__ ws, int R, int C, int rps) {
  const int seg = blockIdx.x, p = blockIdx.y;
  const int r0 = p * rps, r1 = min(R, r0 + rps);
  float acc[NV][8];
#pragma unroll
  for (int j = 0; j < NV; ++j)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[j][i] = 0.f;
  const int c0 = seg * 256 * 8 * NV + threadIdx.x * 8;
  for (int r = r0; r < r1; r += U) {
    float v[U][NV][8];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < NV; ++j)
        if (r + u < r1) ld8(x + (size_t)(r + u) * C + c0 + j * 2048, v[u][j]);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r + u < r1)
#pragma unroll
        for (int j = 0; j < NV; ++j)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[j][i] += v[u][j][i];
  }
#pragma unroll
  for (int j = 0; j < NV; ++j) {
    float* o = ws + (size_t)p * C + c0 + j * 2048;
    reinterpret_cast<float4*>(o)[0] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    reinterpret_cast<float4*>(o)[1] = make_float4(acc[j][4], acc[j][5], acc[j][6], acc[j][7]);
  }
}

// A: 256 columns per block, warps over rows.
template <int U>
__global__ void __launch_bounds__(256)
    colsum_seg(const __nv_bfloat16* __restrict__ x, float* __restrict__ ws, int R, int C, int rps) {
  __shared__ float red[8][256];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int seg = blockIdx.x, p = blockIdx.y;
  const int r0 = p * rps, r1 = min(R, r0 + rps);
  const int c0 = seg * 256 + lane * 8;
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int r = r0 + warp; r < r1; r += 8 * U) {
    float v[U][8];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r + 8 * u < r1) ld8(x + (size_t)(r + 8 * u) * C + c0, v[u]);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (r + 8 * u < r1)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] += v[u][i];
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) red[warp][lane * 8 + i] = acc[i];
  __syncthreads();
  float s = 0;
  for (int w = 0; w < 8; ++w) s += red[w][threadIdx.x];
  ws[(size_t)p * C + seg * 256 + threadIdx.x] = s;
}

__global__ void combine(const float* __restrict__ ws, float* __restrict__ y, int C, int P) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0;
  for (int p = 0; p < P; ++p) s += ws[(size_t)p * C + c];
  y[c] = s;
}

int main() {
  const int R = 4096, C = 4096, copies = 4;
  std::vector<__nv_bfloat16> h((size_t)R * C);
  for (size_t i = 0; i < h.size(); ++i)
    h[i] = __float2bfloat16(float((i * 2654435761u) % 1000) / 1000.f - 0.5f);
  __nv_bfloat16* x;
  CK(cudaMalloc(&x, h.size() * 2 * copies));
  for (int k = 0; k < copies; ++k)
    CK(cudaMemcpy(x + (size_t)k * R * C, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  std::vector<double> ref(C, 0);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) ref[c] += __bfloat162float(h[(size_t)r * C + c]);
  float *ws, *y;
  CK(cudaMalloc(&ws, (size_t)256 * C * 4));
  CK(cudaMalloc(&y, C * 4));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto run = [&](const char* name, auto launch, int P, bool with_combine) {
    for (int i = 0; i < 5; ++i) {
      launch(x, P);
      if (with_combine) combine<<<C / 256, 256>>>(ws, y, C, P);
    }
    cudaEventRecord(e0);
    const int n = 200;
    for (int i = 0; i < n; ++i) {
      launch(x + (size_t)(i % copies) * R * C, P);
      if (with_combine) combine<<<C / 256, 256>>>(ws, y, C, P);
    }
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    combine<<<C / 256, 256>>>(ws, y, C, P);
    std::vector<float> hy(C);
    cudaMemcpy(hy.data(), y, C * 4, cudaMemcpyDeviceToHost);
    double err = 0;
    for (int c = 0; c < C; ++c) err = fmax(err, fabs(hy[c] - ref[c]) / (1 + fabs(ref[c])));
    printf("%-28s P %3d %s: %7.2f us  %5.2f TB/s  err %.1e  %s\n", name, P,
           with_combine ? "+combine" : "        ", ms * 1e3 / n,
           (double)R * C * 2 / (ms * 1e-3 / n) / 1e12, err, cudaGetErrorString(cudaGetLastError()));
  };
  for (int P : {8, 16, 32}) {
    auto a = [&](const __nv_bfloat16* xx, int P) {
      colsum_seg<8><<<dim3(C / 256, P), 256>>>(xx, ws, R, C, R / P);
    };
    run("A 256 cols, warps on rows", a, P, false);
  }
  for (int P : {32, 64, 128, 256}) {
    auto b = [&](const __nv_bfloat16* xx, int P) {
      colsum_rows<1, 8><<<dim3(C / 2048, P), 256>>>(xx, ws, R, C, R / P);
    };
    run("B 2048 cols (4 KB runs) U8", b, P, false);
    auto b4 = [&](const __nv_bfloat16* xx, int P) {
      colsum_rows<1, 4><<<dim3(C / 2048, P), 256>>>(xx, ws, R, C, R / P);
    };
    run("B 2048 cols (4 KB runs) U4", b4, P, false);
  }
  for (int P : {32, 64, 128}) {
    auto c = [&](const __nv_bfloat16* xx, int P) {
      colsum_rows<2, 4><<<dim3(C / 4096, P), 256>>>(xx, ws, R, C, R / P);
    };
    run("C 4096 cols (8 KB runs) U4", c, P, false);
  }
  for (int P : {64, 128}) {
    auto b = [&](const __nv_bfloat16* xx, int P) {
      colsum_rows<1, 8><<<dim3(C / 2048, P), 256>>>(xx, ws, R, C, R / P);
    };
    run("B 2048 cols U8", b, P, true);
  }
  return 0;
}
