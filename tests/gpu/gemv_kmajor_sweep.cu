// K-major decode GEMV sweep on the GPU (a measurement tool, not a test): Y = X W^T with W stored
// [N, K] (nn.Linear's layout), M <= 32, bf16 and f16. It runs the register-streamed K-major GEMV
// (runtime/gemv_kmajor.cuh) over its configurations (slabs per block NS, warps, unroll, cluster
// splits) and the TMA GEMV reading W K-major (gemv_tma.cuh, WK) at a few configurations, on
// shapes from 2 MB to 117 MB of weight, with odd sizes for the checks. The planner's rule for the
// K-major GEMV comes from these numbers (codegen/lowerings/gemv.cpp).
//
// Build and run (CUDA toolkit only, sm_90a):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tests/gpu/gemv_kmajor_sweep.cu -o s
//   ./s            # all shapes;   ./s 0,3   only shapes 0 and 3
//
// Correctness: before timing, every configuration runs once on fresh random X and W (uniform in
// [-1, 1)) with the output poisoned with NaN; 48 sampled columns (first, last and random ones,
// every row) are compared with a CPU float64 reference (relative L2 <= 5e-3, the rms_norm epilogue
// too) and the whole output must be free of NaN. A failing configuration prints FAIL and is not
// timed. Timing: medians of 9 CUDA-graph replays of 20 calls, weights rotating over copies of > 200
// MB (every call reads DRAM; tests/gpu/gpu_timing.h). GB/s counts weight bytes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "../../runtime/kiln_runtime.cuh"

using namespace kiln::rt;

static char g_current[200] = "setup";

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      fflush(stdout);                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n  while running: %s\n", __FILE__, __LINE__, #x, \
              cudaGetErrorString(e_), g_current);                                     \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

#include "gpu_timing.h"

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
template <typename T>
__global__ void fill_random(T* p, int64_t n, uint64_t seed) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t h = uint32_t(mix64(uint64_t(i) + seed * 0x9e3779b97f4a7c15ull) >> 32);
    p[i] = from_f32<T>(float(h >> 8) * (1.0f / 8388608.0f) - 1.0f);
  }
}
template <typename T>
__global__ void fill_nan(T* p, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = from_f32<T>(__int_as_float(0x7fc00000));
}

static float host_f(__half v) {
  return __half2float(v);
}
static float host_f(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

struct Shape {
  int M, N, K;
  bool bf16;
  bool rms;  // epilogue rms_norm(X) W^T (GemvRmsNorm) instead of the identity
};

static std::vector<Shape> shapes() {
  return {
      {8, 3072, 1024, true, false},    // 0: 6 MB, the session-13 unseen spec's nn.Linear
      {1, 3072, 1024, true, false},    // 1
      {32, 3072, 1024, true, false},   // 2
      {8, 1024, 1024, true, false},    // 3: 2 MB
      {8, 4096, 4096, true, false},    // 4: 32 MB
      {16, 11008, 4096, true, false},  // 5: 90 MB
      {1, 1024, 8192, true, false},    // 6: small N, long K (splits)
      {4, 512, 4096, false, false},    // 7: 4 MB f16, few columns
      {5, 1001, 1000, true, false},    // 8: odd M, N, K (checks)
      {8, 2048, 2048, true, true},     // 9: rms_norm epilogue
      {27, 777, 4104, false, true},    // 10: odd sizes, rms_norm, f16
      {1, 4096, 14336, true, false},   // 11: 117 MB
  };
}

struct Bufs {
  Shape s;
  int copies = 0;
  std::vector<void*> W;
  void *X = nullptr, *out = nullptr;
  std::vector<int> cols;
  std::vector<double> ref;  // [m][c]
};

template <typename T>
static Bufs make_bufs(const Shape& s) {
  Bufs b;
  b.s = s;
  const size_t wbytes = size_t(s.N) * s.K * sizeof(T);
  b.copies = int(std::max<size_t>(2, (size_t(200) << 20) / wbytes + 1));
  for (int c = 0; c < b.copies; ++c) {
    void* p;
    CK(cudaMalloc(&p, wbytes));
    fill_random<T><<<1024, 256>>>(static_cast<T*>(p), int64_t(s.N) * s.K, 1000 + c);
    b.W.push_back(p);
  }
  CK(cudaMalloc(&b.X, size_t(s.M) * s.K * sizeof(T)));
  fill_random<T><<<64, 256>>>(static_cast<T*>(b.X), int64_t(s.M) * s.K, 7);
  CK(cudaMalloc(&b.out, size_t(s.M) * s.N * sizeof(T)));
  CK(cudaDeviceSynchronize());
  // Reference columns of copy 0.
  std::mt19937 rng(11);
  b.cols = {0, s.N - 1};
  while (b.cols.size() < 48) b.cols.push_back(int(rng() % s.N));
  std::vector<T> x(size_t(s.M) * s.K), wr(s.K);
  CK(cudaMemcpy(x.data(), b.X, x.size() * sizeof(T), cudaMemcpyDeviceToHost));
  b.ref.assign(size_t(s.M) * b.cols.size(), 0.0);
  for (size_t c = 0; c < b.cols.size(); ++c) {
    CK(cudaMemcpy(wr.data(), static_cast<T*>(b.W[0]) + size_t(b.cols[c]) * s.K, s.K * sizeof(T),
                  cudaMemcpyDeviceToHost));
    for (int m = 0; m < s.M; ++m) {
      double acc = 0, sq = 0;
      for (int k = 0; k < s.K; ++k) {
        const double xv = host_f(x[size_t(m) * s.K + k]);
        acc += xv * host_f(wr[k]);
        sq += xv * xv;
      }
      if (s.rms) acc /= std::sqrt(sq / s.K + 1e-5);
      b.ref[size_t(m) * b.cols.size() + c] = acc;
    }
  }
  return b;
}

static void free_bufs(Bufs& b) {
  for (void* p : b.W) cudaFree(p);
  cudaFree(b.X), cudaFree(b.out);
}

// Checks copy 0's output against the reference: NaN-free and relative L2 <= 5e-3.
template <typename T>
static bool check(const Bufs& b, double* rel) {
  const Shape& s = b.s;
  std::vector<T> o(size_t(s.M) * s.N);
  CK(cudaMemcpy(o.data(), b.out, o.size() * sizeof(T), cudaMemcpyDeviceToHost));
  for (const T& v : o)
    if (std::isnan(host_f(v))) {
      *rel = NAN;
      return false;
    }
  double num = 0, den = 0;
  for (int m = 0; m < s.M; ++m)
    for (size_t c = 0; c < b.cols.size(); ++c) {
      const double r = b.ref[size_t(m) * b.cols.size() + c];
      const double d = host_f(o[size_t(m) * s.N + b.cols[c]]) - r;
      num += d * d, den += r * r;
    }
  *rel = std::sqrt(num / std::max(den, 1e-30));
  return *rel <= 5e-3;
}

struct Result {
  std::string cfg;
  double us;
};

// Runs one configuration: check, then time. `call(W, stream)` launches on weight W.
template <typename T>
static void run_one(Bufs& b, const std::string& cfg,
                    const std::function<cudaError_t(const void*, cudaStream_t)>& call,
                    std::vector<Result>& results) {
  const Shape& s = b.s;
  snprintf(g_current, sizeof g_current, "M%d N%d K%d %s", s.M, s.N, s.K, cfg.c_str());
  fill_nan<T><<<64, 256>>>(static_cast<T*>(b.out), int64_t(s.M) * s.N);
  cudaError_t e = call(b.W[0], 0);
  if (e != cudaSuccess) {
    printf("  %-34s  launch refused (%s)\n", cfg.c_str(), cudaGetErrorString(e));
    cudaGetLastError();
    return;
  }
  CK(cudaDeviceSynchronize());
  double rel;
  if (!check<T>(b, &rel)) {
    printf("  %-34s  FAIL rel %.3g\n", cfg.c_str(), rel);
    return;
  }
  const double us =
      time_us([&](int i, cudaStream_t st) { CK(call(b.W[i % b.copies], st)); }, 20, 9);
  const double gbs = double(s.N) * s.K * sizeof(T) / (us * 1e3);
  printf("  %-34s  %8.2f us  %7.0f GB/s  rel %.1e\n", cfg.c_str(), us, gbs, rel);
  results.push_back({cfg, us});
}

template <typename T, int MT, int NS, int WARPS, int UNROLL, class Epi>
static void kmajor_cfgs(Bufs& b, Epi epi, std::vector<Result>& res) {
  const Shape& s = b.s;
  const int col_blocks = ceil_div(s.N, 16 * NS);
  for (int splits : {1, 2, 4, 8}) {
    if (splits > 1 && col_blocks * splits > 8 * 132) break;
    if (splits > 1 && gemv_kmajor_k_chunk(s.K, splits) < 32 * WARPS) break;
    char cfg[96];
    snprintf(cfg, sizeof cfg, "kmajor ns%d w%d u%d c%d (%d CTAs)", NS, WARPS, UNROLL, splits,
             col_blocks * splits);
    run_one<T>(
        b, cfg,
        [&](const void* W, cudaStream_t st) {
          return gemv_kmajor_launch<T, T, MT, NS, WARPS, UNROLL, 8, Epi>(
              static_cast<const T*>(b.X), s.K, static_cast<const T*>(W), nullptr, s.K,
              static_cast<T*>(b.out), s.N, s.M, s.N, s.K, splits, st, epi);
        },
        res);
  }
}

template <typename T, int MT, int BN, int BK, int ST, class Epi>
static void tma_cfgs(Bufs& b, Epi epi, std::vector<Result>& res) {
  const Shape& s = b.s;
  for (int splits : {1, 2, 4}) {
    char cfg[96];
    snprintf(cfg, sizeof cfg, "tma-kmajor %dx%d s%d split %d", BN, BK, ST, splits);
    run_one<T>(
        b, cfg,
        [&](const void* W, cudaStream_t st) {
          return gemv_tma_launch<T, T, MT, 1, BN, BK, ST, 1, Epi, true>(
              static_cast<const T*>(b.X), s.K, static_cast<const T*>(W), static_cast<const T*>(W),
              s.K, static_cast<T*>(b.out), s.N, s.M, s.N, s.K, splits, st, epi);
        },
        res);
  }
}

template <typename T, int MT, class Epi>
static void all_cfgs(Bufs& b, Epi epi, std::vector<Result>& res) {
  kmajor_cfgs<T, MT, 1, 4, 4>(b, epi, res);
  kmajor_cfgs<T, MT, 1, 8, 2>(b, epi, res);
  kmajor_cfgs<T, MT, 1, 8, 4>(b, epi, res);
  kmajor_cfgs<T, MT, 2, 4, 2>(b, epi, res);
  kmajor_cfgs<T, MT, 2, 4, 4>(b, epi, res);
  kmajor_cfgs<T, MT, 2, 8, 2>(b, epi, res);
  if constexpr (MT == 1) kmajor_cfgs<T, MT, 4, 4, 2>(b, epi, res);
  if (b.s.K % 8 == 0 && b.s.N % 8 == 0) {
    tma_cfgs<T, MT, 64, 256, 4>(b, epi, res);
    tma_cfgs<T, MT, 64, 128, 4>(b, epi, res);
  }
}

template <typename T, class Epi>
static void by_mt(Bufs& b, Epi epi, std::vector<Result>& res) {
  if (b.s.M <= 8)
    all_cfgs<T, 1>(b, epi, res);
  else if (b.s.M <= 16)
    all_cfgs<T, 2>(b, epi, res);
  else
    all_cfgs<T, 4>(b, epi, res);
}

template <typename T>
static void run_shape(const Shape& s) {
  printf("M%d N%d K%d %s%s (%.1f MB of weight)\n", s.M, s.N, s.K, s.bf16 ? "bf16" : "f16",
         s.rms ? " rms_norm" : "", double(s.N) * s.K * sizeof(T) / 1e6);
  Bufs b = make_bufs<T>(s);
  std::vector<Result> res;
  if (s.rms)
    by_mt<T>(b, GemvRmsNorm{1.0f / float(s.K), 1e-5f}, res);
  else
    by_mt<T>(b, GemvIdentity{}, res);
  std::sort(res.begin(), res.end(), [](const Result& a, const Result& c) { return a.us < c.us; });
  if (!res.empty()) printf("  best: %s %.2f us\n", res[0].cfg.c_str(), res[0].us);
  free_bufs(b);
}

int main(int argc, char** argv) {
  std::vector<Shape> all = shapes();
  std::vector<int> pick;
  if (argc > 1)
    for (char* p = strtok(argv[1], ","); p; p = strtok(nullptr, ",")) pick.push_back(atoi(p));
  else
    for (int i = 0; i < int(all.size()); ++i) pick.push_back(i);
  for (int i : pick) {
    if (i < 0 || i >= int(all.size())) continue;
    if (all[i].bf16)
      run_shape<__nv_bfloat16>(all[i]);
    else
      run_shape<__half>(all[i]);
    fflush(stdout);
  }
  return 0;
}
