// Decode-GEMV sweep on the GPU (a measurement tool, not a test): the TMA-streamed GEMV
// (runtime/gemv_tma.cuh, gemv_tma_launch) over its configurations (columns per block BN, rows of
// K per stage BK, stages, k-splits) against the register-streamed runtime GEMV as the planner
// configures it (codegen/schedule.cpp) and a pure read-bandwidth kernel, on the suite's decode
// shapes, with the identity, fused rms_norm and two-weight silu*mul epilogues. The planner's
// choice between the two GEMVs comes from these numbers (docs/runtime.md).
//
// Build and run (CUDA toolkit only, sm_90a):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tests/gpu/gemv_tma_sweep.cu -o sweep
//   ./sweep              # all shapes;  ./sweep 0,3  only shapes 0 and 3
//   ./sweep --plan [0,3]  only the register GEMV and the TMA configuration the planner picks
//   ./sweep --kmajor ...  the TMA GEMV with K-major weights (W^T [N][K]; timed, not checked)
//
// Correctness: before timing, each configuration runs once on fresh random X and W (copy 0; W1
// too for two weights) with the output poisoned with NaN; 64 sampled columns (first, last and
// random ones, every row) are compared with a CPU float64 reference (relative L2 <= 5e-3) and the
// whole output must be free of NaN. A failing configuration is not timed.
// Timing: medians of 9 CUDA-graph replays of 20 calls, weights rotating over copies of > 200 MB
// (tests/gpu/gpu_timing.h). GB/s counts weight bytes; % is of the device-to-device copy rate.
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

static char g_current[160] = "setup";  // named in any CUDA error

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

// ---- Device helpers
// ------------------------------------------------------------------------------

// Pure read bandwidth: sums W with 16-byte streaming loads, 8 in flight per thread.
__global__ void __launch_bounds__(512)
    read_bw_kernel(const uint4* __restrict__ p, int64_t n16, uint32_t* __restrict__ sink) {
  constexpr int U = 8;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  uint32_t a = 0;
  for (; i + (U - 1) * stride < n16; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = ld_stream_128(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) a += v[u].x + v[u].y + v[u].z + v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = ld_stream_128(p + i);
    a += v.x + v.y + v.z + v.w;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  if ((threadIdx.x & 31) == 0) sink[blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5)] = a;
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// p[i] = uniform in [-1, 1) from a hash of (i, seed), rounded to f16.
__global__ void fill_random(__half* p, int64_t n, uint64_t seed) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t h = uint32_t(mix64(uint64_t(i) + seed * 0x9e3779b97f4a7c15ull) >> 32);
    p[i] = __float2half_rn(float(h >> 8) * (1.0f / 8388608.0f) - 1.0f);
  }
}
// out[c][k] = W[k][cols[c]] (as float), for the CPU reference.
__global__ void gather_cols(const __half* W, int N, int K, const int* cols, int ncols, float* out) {
  const int64_t total = int64_t(ncols) * K, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int c = int(i % ncols), k = int(i / ncols);
    out[int64_t(c) * K + k] = __half2float(W[int64_t(k) * N + cols[c]]);
  }
}

// ---- Host harness ------------------------------------------------------------------------------

enum EpiKind { kId, kRms, kSilu };
static const char* epi_name(int e) {
  return e == kId ? "id" : e == kRms ? "rms" : "silu*mul";
}

struct Shape {
  const char* name;
  int M, K, N, nw, epi;
};

static double g_copy_gbps = 0;
static int g_sms = 0;
static uint64_t g_seed = 1;
static constexpr int kSampleCols = 64;
static bool g_plan_only = false;  // --plan: the planner's TMA configuration only
// --kmajor: the TMA GEMV reads W K-major (WK, nn.Linear's layout: the same buffers taken as
// W^T [N][K]); timing only, the check's reference reads them N-major.
static bool g_kmajor = false;

struct Bufs {
  Shape s;
  int copies;
  std::vector<__half*> W;  // copy c: W0 then (nw = 2) W1, K x N each
  __half *X, *out;
  int* d_cols;
  float* d_wcols;
  uint32_t* sink;
  std::vector<int> cols;
};

static Bufs alloc_bufs(const Shape& s) {
  Bufs b;
  b.s = s;
  const size_t welems = size_t(s.K) * s.N, wbytes = s.nw * welems * sizeof(__half);
  b.copies = int(std::max<size_t>(2, (size_t(200) << 20) / wbytes + 1));
  b.W.resize(b.copies);
  for (int c = 0; c < b.copies; ++c) {
    CK(cudaMalloc(&b.W[c], wbytes));
    fill_random<<<1024, 256>>>(b.W[c], int64_t(s.nw * welems), 1000 + c);
    CK(cudaGetLastError());
  }
  CK(cudaMalloc(&b.X, size_t(s.M) * s.K * sizeof(__half)));
  CK(cudaMalloc(&b.out, size_t(s.M) * s.N * sizeof(__half)));
  std::mt19937 rng(12345u + s.N);
  std::vector<int> all(s.N);
  for (int i = 0; i < s.N; ++i) all[i] = i;
  std::shuffle(all.begin() + 1, all.end() - 1, rng);
  const int ns = std::min(kSampleCols, s.N);
  b.cols.assign(all.begin(), all.begin() + ns - 1);
  b.cols.push_back(s.N - 1);
  CK(cudaMalloc(&b.d_cols, b.cols.size() * sizeof(int)));
  CK(cudaMemcpy(b.d_cols, b.cols.data(), b.cols.size() * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&b.d_wcols, 2 * b.cols.size() * size_t(s.K) * sizeof(float)));
  CK(cudaMalloc(&b.sink, size_t(1) << 20));
  CK(cudaDeviceSynchronize());
  return b;
}

static void free_bufs(Bufs& b) {
  for (auto p : b.W) CK(cudaFree(p));
  CK(cudaFree(b.X));
  CK(cudaFree(b.out));
  CK(cudaFree(b.d_cols));
  CK(cudaFree(b.d_wcols));
  CK(cudaFree(b.sink));
}

// Fresh random X and weights of copy 0; the output poisoned with NaN (all bits set).
static void refill(Bufs& b) {
  ++g_seed;
  fill_random<<<1024, 256>>>(b.W[0], int64_t(b.s.nw) * b.s.K * b.s.N, g_seed * 7919);
  CK(cudaGetLastError());
  fill_random<<<256, 256>>>(b.X, int64_t(b.s.M) * b.s.K, g_seed * 7919 + 1);
  CK(cudaGetLastError());
  CK(cudaMemset(b.out, 0xff, size_t(b.s.M) * b.s.N * sizeof(__half)));
  CK(cudaDeviceSynchronize());
}

// The output of the call just made (on X and copy 0) against a CPU float64 reference on the
// sampled columns; no NaN anywhere.
static bool check_output(Bufs& b, double* rel_err) {
  const Shape& s = b.s;
  CK(cudaDeviceSynchronize());
  const int ns = int(b.cols.size());
  for (int v = 0; v < s.nw; ++v) {
    gather_cols<<<512, 256>>>(b.W[0] + size_t(v) * s.K * s.N, s.N, s.K, b.d_cols, ns,
                              b.d_wcols + size_t(v) * ns * s.K);
    CK(cudaGetLastError());
  }
  std::vector<float> wc(size_t(s.nw) * ns * s.K);
  std::vector<__half> xh(size_t(s.M) * s.K), oh(size_t(s.M) * s.N);
  CK(cudaMemcpy(wc.data(), b.d_wcols, wc.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(xh.data(), b.X, xh.size() * sizeof(__half), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(oh.data(), b.out, oh.size() * sizeof(__half), cudaMemcpyDeviceToHost));
  for (const __half& v : oh)
    if (std::isnan(__half2float(v))) {
      *rel_err = NAN;
      return false;
    }
  std::vector<double> x(xh.size());
  for (size_t i = 0; i < xh.size(); ++i) x[i] = __half2float(xh[i]);
  double num = 0, den = 0;
  for (int m = 0; m < s.M; ++m) {
    const double* xr = x.data() + size_t(m) * s.K;
    double sumsq = 0;
    for (int k = 0; k < s.K; ++k) sumsq += xr[k] * xr[k];
    for (int c = 0; c < ns; ++c) {
      double r[2] = {0, 0};
      for (int v = 0; v < s.nw; ++v) {
        const float* w = wc.data() + (size_t(v) * ns + c) * s.K;
        for (int k = 0; k < s.K; ++k) r[v] += xr[k] * double(w[k]);
      }
      double y = r[0];
      if (s.epi == kRms) y = r[0] / std::sqrt(sumsq / s.K + 1e-6);
      if (s.epi == kSilu) y = r[0] / (1.0 + std::exp(-r[0])) * r[1];
      const double o = __half2float(oh[size_t(m) * s.N + b.cols[c]]);
      num += (o - y) * (o - y);
      den += y * y;
    }
  }
  *rel_err = std::sqrt(num / std::max(den, 1e-30));
  return *rel_err <= 5e-3;
}

struct Result {
  std::string cfg;
  double us;
};
struct ShapeResults {
  Shape s;
  double bw_us = 0, rt_us = 0;
  std::string rt_cfg;
  std::vector<Result> tma;
};

static void print_line(const char* kind, const Shape& s, const char* cfg, const char* extra,
                       bool ok, double err, double us) {
  const double wbytes = double(s.nw) * s.K * s.N * 2;
  if (us > 0) {
    const double gbps = wbytes / (us * 1e3);
    printf("%-3s %-26s %-30s %-28s %s err %.1e %8.2f us %5.0f GB/s %5.1f%%\n", kind, s.name, cfg,
           extra, ok ? "ok  " : "FAIL", err, us, gbps, 100.0 * gbps / g_copy_gbps);
  } else {
    printf("%-3s %-26s %-30s %-28s %s err %.1e   (not timed)\n", kind, s.name, cfg, extra,
           ok ? "ok  " : "FAIL", err);
  }
  fflush(stdout);
}

template <class Epi>
static Epi make_epi(const Shape& s) {
  if constexpr (std::is_same_v<Epi, GemvRmsNorm>) {
    return GemvRmsNorm{1.0f / s.K, 1e-6f};
  } else {
    return Epi();
  }
}

// One TMA configuration with `splits` k-splits: occupancy, check, time.
template <int MT, int NW, int BN, int BK, int ST, class Epi>
static void run_tma(Bufs& b, ShapeResults& res, int splits) {
  using G = GemvTma<__half, MT, NW, BN, BK, ST, Epi::kRowSumSq>;
  constexpr auto kernel = gemv_tma_kernel<__half, __half, MT, NW, BN, BK, ST, 1, Epi>;
  const Shape s = res.s;
  const int M = s.M, N = s.N, K = s.K;
  char cfg[96], extra[96];
  snprintf(cfg, sizeof cfg, "tma bn%d bk%d st%d s%d", BN, BK, ST, splits);
  snprintf(g_current, sizeof g_current, "TMA %s %s", s.name, cfg);
  CK((gemv_tma_prepare<__half, __half, MT, NW, BN, BK, ST, 1, Epi>()));
  int per_sm = 0, clusters = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, G::kThreads, G::kSmemBytes));
  const int cb = ceil_div(N, BN);
  if (splits > 1) {
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t lc =
        gemv_tma_config<__half, __half, MT, NW, BN, BK, ST, 1, Epi>(N, splits, 0, attr);
    CK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &lc));
  }
  snprintf(extra, sizeof extra, "%4d blk %3dKB %d/SM cl%-3d", cb * splits, G::kSmemBytes / 1024,
           per_sm, clusters);
  // One wave only (a second wave would idle most SMs for a whole block's time).
  if (cb * splits > per_sm * g_sms || (splits > 1 && clusters < cb)) {
    if (g_plan_only) printf("TMA %s %s %s: more than one wave, not run\n", s.name, cfg, extra);
    return;
  }
  const Epi epi = make_epi<Epi>(s);
  const size_t wsz = size_t(K) * N;
  auto call = [&](int i, cudaStream_t st) {
    const __half* w0 = b.W[i % b.copies];
    if (g_kmajor)
      CK((gemv_tma_launch<__half, __half, MT, NW, BN, BK, ST, 1, Epi, true>(
          b.X, K, w0, w0 + (NW > 1 ? wsz : 0), K, b.out, N, M, N, K, splits, st, epi)));
    else
      CK((gemv_tma_launch<__half, __half, MT, NW, BN, BK, ST, 1, Epi>(
          b.X, K, w0, w0 + (NW > 1 ? wsz : 0), N, b.out, N, M, N, K, splits, st, epi)));
  };
  refill(b);
  call(0, 0);
  CK(cudaDeviceSynchronize());
  double err = 0;
  const bool ok = g_kmajor || check_output(b, &err);
  double us = 0;
  if (ok) {
    us = time_us(call, 20, 9);
    res.tma.push_back({cfg, us});
  }
  print_line("TMA", s, cfg, extra, ok, err, us);
}

// The runtime GEMV as codegen/schedule.cpp plans it (OpClass::Matmul, "gemv"), cluster split-K.
struct RtPlan {
  int mt, warps_k, min_blocks, unroll, splits;
  bool wide, cluster;
};
static RtPlan plan_runtime(int M, int N, int K, int sms) {
  RtPlan p;
  const int64_t slabs = ceil_div(N, 64);
  p.mt = ceil_div(M, 8);
  if (p.mt == 3) p.mt = 4;
  p.wide = 2 * slabs >= 3 * int64_t(sms);
  p.warps_k = p.wide ? 8 : 4;
  p.min_blocks = p.wide || p.mt >= 4 ? 2 : 3;
  p.unroll = p.wide && p.mt >= 4 ? 1 : 2;
  int splits = p.wide ? 1 : int(std::max<int64_t>(1, 5 * int64_t(sms) / (2 * slabs)));
  splits = int(std::min<int64_t>(splits, std::max<int64_t>(1, K / (256 * p.warps_k))));
  p.cluster = splits > 1;
  if (p.cluster) splits = std::min(splits, 8);
  const int chunk = round_up(ceil_div(K, splits), 16);
  splits = ceil_div(K, chunk);
  if (splits == 1) p.cluster = false;
  p.splits = splits;
  return p;
}

template <int MT, int NW, int WK, int U, int MINB, class Epi>
static void run_runtime_inst(Bufs& b, ShapeResults& res, const RtPlan& p) {
  const Shape s = res.s;
  const int M = s.M, N = s.N, K = s.K;
  float* ws = nullptr;
  int* cnt = nullptr;
  const int cb = gemv_col_blocks(N, 1);
  if (p.splits > 1 && !p.cluster) {
    CK(cudaMalloc(&ws, gemv_workspace_floats(N, 1, p.splits, MT, NW, Epi::kRowSumSq) * 4));
    CK(cudaMalloc(&cnt, cb * sizeof(int)));
    CK(cudaMemset(cnt, 0, cb * sizeof(int)));
  }
  const Epi epi = make_epi<Epi>(s);
  const size_t wsz = size_t(K) * N;
  auto call = [&](int i, cudaStream_t st) {
    const __half* w0 = b.W[i % b.copies];
    const __half* w1 = w0 + (NW > 1 ? wsz : 0);
    if (p.cluster)
      CK((gemv_cluster_launch<__half, __half, MT, NW, 1, WK, U, MINB, Epi>(
          b.X, K, w0, w1, N, b.out, N, M, N, K, p.splits, st, epi)));
    else
      CK((gemv_launch<__half, __half, MT, NW, 1, WK, U, MINB, Epi>(
          b.X, K, w0, w1, N, b.out, N, M, N, K, p.splits, ws, cnt, st, epi)));
  };
  char cfg[96], extra[96];
  snprintf(cfg, sizeof cfg, "rt mt%d w1x%d u%d minb%d s%d%s", MT, WK, U, MINB, p.splits,
           p.cluster ? " cl" : "");
  snprintf(extra, sizeof extra, "%4d blk (planner)", cb * p.splits);
  snprintf(g_current, sizeof g_current, "RT %s %s", s.name, cfg);
  refill(b);
  call(0, 0);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  double err;
  const bool ok = check_output(b, &err);
  double us = 0;
  if (ok) {
    us = time_us(call, 20, 9);
    res.rt_us = us;
    res.rt_cfg = cfg;
  }
  print_line("RT", s, cfg, extra, ok, err, us);
  if (ws) CK(cudaFree(ws));
  if (cnt) CK(cudaFree(cnt));
}

template <int MT, int NW, class Epi>
static void run_runtime(Bufs& b, ShapeResults& res) {
  const RtPlan p = plan_runtime(res.s.M, res.s.N, res.s.K, g_sms);
  if constexpr (NW == 2) {
    run_runtime_inst<MT, 2, 4, 1, 2, Epi>(b, res, p);  // docs/runtime.md: NW = 2 at 2 blocks/SM
  } else if (p.wide) {
    if constexpr (MT >= 4)
      run_runtime_inst<MT, 1, 8, 1, 2, Epi>(b, res, p);
    else
      run_runtime_inst<MT, 1, 8, 2, 2, Epi>(b, res, p);
  } else {
    if constexpr (MT >= 4)
      run_runtime_inst<MT, 1, 4, 2, 2, Epi>(b, res, p);
    else
      run_runtime_inst<MT, 1, 4, 2, 3, Epi>(b, res, p);
  }
}

static void run_bw(Bufs& b, ShapeResults& res) {
  const int64_t n16 = int64_t(b.s.nw) * b.s.K * b.s.N * 2 / 16;
  const int grid = g_sms * 4;
  snprintf(g_current, sizeof g_current, "BW %s", b.s.name);
  const double us = time_us(
      [&](int i, cudaStream_t st) {
        read_bw_kernel<<<grid, 512, 0, st>>>(reinterpret_cast<const uint4*>(b.W[i % b.copies]), n16,
                                             b.sink);
        CK(cudaGetLastError());
      },
      20, 9);
  print_line("BW", res.s, "read-bw 528x512 thr", "(weight bytes, no compute)", true, 0.0, us);
  res.bw_us = us;
}

// The planner's TMA configuration (codegen/schedule.cpp, plan_gemv_tma) for nw weights.
struct TmaPlan {
  int bn, bk, st, splits;
};
static TmaPlan plan_tma(int M, int N, int K, int nw) {
  const int mt = M <= 8 ? 1 : M <= 16 ? 2 : 4;
  int bn = 64;
  while (bn < 256 && ceil_div(N, bn) > g_sms) bn *= 2;
  const int cb = ceil_div(N, bn);
  const int bk = std::max(64, 16384 / (nw * bn));
  int st = 4;
  while (st > 2 && gemv_tma_smem_bytes(mt, nw, bn, bk, st) + 2048 > 232448) --st;
  const int64_t ring = int64_t(st) * nw * bn * bk * 2;
  int sp = 1;
  while (sp < 8 && cb * sp * ring < (int64_t(8) << 20) && cb * (sp + 1) <= g_sms &&
         K >= (sp + 1) * 2 * st * bk)
    ++sp;
  return {bn, bk, st, sp};
}

template <int MT, int NW, class Epi>
static void run_planned(Bufs& b, ShapeResults& res) {
  const TmaPlan p = plan_tma(res.s.M, res.s.N, res.s.K, NW);
  if constexpr (NW == 1) {
    if (p.bn == 64 && p.bk == 256 && p.st == 4)
      return run_tma<MT, 1, 64, 256, 4, Epi>(b, res, p.splits);
    if (p.bn == 128 && p.bk == 128 && p.st == 4)
      return run_tma<MT, 1, 128, 128, 4, Epi>(b, res, p.splits);
    if (p.bn == 256 && p.bk == 64 && p.st == 4)
      return run_tma<MT, 1, 256, 64, 4, Epi>(b, res, p.splits);
  } else {
    if (p.bn == 64 && p.bk == 128 && p.st == 4)
      return run_tma<MT, 2, 64, 128, 4, Epi>(b, res, p.splits);
    if (p.bn == 128 && p.bk == 64 && p.st == 4)
      return run_tma<MT, 2, 128, 64, 4, Epi>(b, res, p.splits);
  }
  printf("PLAN %s: no instance for bn%d bk%d st%d\n", res.s.name, p.bn, p.bk, p.st);
}

// Split counts worth trying for a configuration: one wave is checked in run_tma.
static std::vector<int> split_options(const Shape& s, int bn, int bk) {
  std::vector<int> v;
  const int cb = ceil_div(s.N, bn);
  for (int sp : {1, 2, 3, 4, 6, 8}) {
    if (sp > 1 && s.K < sp * 2 * bk) continue;    // at least two stages per split
    if (sp > 1 && cb * sp > 3 * g_sms) continue;  // far past any wave
    if (sp > 1 && cb >= g_sms) continue;          // the columns alone fill the SMs
    v.push_back(sp);
  }
  return v;
}

template <int MT, int NW, int BN, int BK, int ST, class Epi>
static void sweep_kind(Bufs& b, ShapeResults& res) {
  if constexpr (gemv_tma_smem_bytes(MT, NW, BN, BK, ST) <= 227 * 1024) {
    for (int sp : split_options(res.s, BN, BK)) run_tma<MT, NW, BN, BK, ST, Epi>(b, res, sp);
  }
}

// Rings of 64-128 KB of weight per block and the largest that fit one block per SM.
template <int MT, int NW, class Epi>
static void sweep_shape(Bufs& b, ShapeResults& res) {
  run_runtime<MT, NW, Epi>(b, res);
  if (g_plan_only) return run_planned<MT, NW, Epi>(b, res);
  sweep_kind<MT, NW, 64, 64, 8, Epi>(b, res);
  sweep_kind<MT, NW, 64, 128, 4, Epi>(b, res);
  if constexpr (NW == 1) {
    sweep_kind<MT, NW, 128, 256, 3, Epi>(b, res);  // longer runs per row of a K-major W
    sweep_kind<MT, NW, 64, 128, 8, Epi>(b, res);
    sweep_kind<MT, NW, 64, 256, 4, Epi>(b, res);
    sweep_kind<MT, NW, 128, 128, 4, Epi>(b, res);
    sweep_kind<MT, NW, 128, 128, 5, Epi>(b, res);
    sweep_kind<MT, NW, 256, 64, 6, Epi>(b, res);
  } else {
    sweep_kind<MT, NW, 64, 256, 3, Epi>(b, res);
    sweep_kind<MT, NW, 128, 128, 3, Epi>(b, res);
    sweep_kind<MT, NW, 64, 128, 6, Epi>(b, res);
    sweep_kind<MT, NW, 64, 64, 12, Epi>(b, res);
    sweep_kind<MT, NW, 128, 64, 6, Epi>(b, res);
  }
}

template <int NW, class Epi>
static void sweep_mt(Bufs& b, ShapeResults& res) {
  const int mt = ceil_div(res.s.M, 8);
  if (mt <= 1)
    sweep_shape<1, NW, Epi>(b, res);
  else if (mt <= 2)
    sweep_shape<2, NW, Epi>(b, res);
  else
    sweep_shape<4, NW, Epi>(b, res);
}

static void run_shape(ShapeResults& res) {
  const Shape s = res.s;
  printf("\n== %s: M %d K %d N %d, %d weight(s) %.1f MB, %s ==\n", s.name, s.M, s.K, s.N, s.nw,
         double(s.nw) * s.K * s.N * 2 / 1e6, epi_name(s.epi));
  fflush(stdout);
  Bufs b = alloc_bufs(s);
  run_bw(b, res);
  if (s.epi == kRms)
    sweep_mt<1, GemvRmsNorm>(b, res);
  else if (s.nw == 2)
    sweep_mt<2, GemvSiluMul>(b, res);
  else
    sweep_mt<1, GemvIdentity>(b, res);
  free_bufs(b);
}

int main(int argc, char** argv) {
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  g_sms = prop.multiProcessorCount;
  printf("device %s, sm_%d%d, %d SMs, L2 %d MB\n", prop.name, prop.major, prop.minor, g_sms,
         prop.l2CacheSize >> 20);
  if (prop.major != 9) {
    fprintf(stderr, "needs an sm_90 GPU (built for sm_90a)\n");
    return 1;
  }
  {
    const size_t bytes = size_t(1) << 30;
    char *a, *c;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&c, bytes));
    CK(cudaMemset(a, 1, bytes));
    const double us = time_us(
        [&](int, cudaStream_t st) {
          CK(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice, st));
        },
        5, 7);
    g_copy_gbps = 2.0 * bytes / (us * 1e3);
    printf("copy (cudaMemcpy D2D 1 GiB, read + write): %.0f GB/s\n", g_copy_gbps);
    CK(cudaFree(a));
    CK(cudaFree(c));
  }
  const std::vector<Shape> shapes = {
      {"rmsnorm_linear_bs16", 32, 4096, 6144, 1, kRms},
      {"rmsnorm_linear_bs8", 16, 4096, 6144, 1, kRms},
      {"rmsnorm_linear_bs1", 2, 4096, 6144, 1, kRms},
      {"gemv m32 k4096 n6144", 32, 4096, 6144, 1, kId},
      {"skinny m1 k6656 n16384", 1, 6656, 16384, 1, kId},
      {"skinny m8 k6656 n16384", 8, 6656, 16384, 1, kId},
      {"skinny m16 k6656 n16384", 16, 6656, 16384, 1, kId},
      {"skinny m32 k6656 n16384", 32, 6656, 16384, 1, kId},
      {"skinny m1 k16384 n13312", 1, 16384, 13312, 1, kId},
      {"skinny m16 k16384 n13312", 16, 16384, 13312, 1, kId},
      {"skinny m32 k16384 n13312", 32, 16384, 13312, 1, kId},
      {"skinny m1 k16384 n2304", 1, 16384, 2304, 1, kId},
      {"skinny m32 k16384 n2304", 32, 16384, 2304, 1, kId},
      {"gated_mlp m1", 1, 4096, 4096, 2, kSilu},
      {"gated_mlp m8", 8, 4096, 4096, 2, kSilu},
      {"gated_mlp m16", 16, 4096, 4096, 2, kSilu},
      // Shapes outside the suite, to check that a rule fitted on the ones above carries over.
      {"gemv m16 k4096 n6144", 16, 4096, 6144, 1, kId},
      {"gated_mlp m32", 32, 4096, 4096, 2, kSilu},
      {"gemv m4 k4096 n11008", 4, 4096, 11008, 1, kId},
      {"gemv m1 k11008 n4096", 1, 11008, 4096, 1, kId},
      {"gemv m24 k5120 n5120", 24, 5120, 5120, 1, kId},
      {"gemv m8 k8192 n8192", 8, 8192, 8192, 1, kId},
      {"gemv m16 k2048 n2048", 16, 2048, 2048, 1, kId},
      {"gemv m32 k14336 n4096", 32, 14336, 4096, 1, kId},
      {"gemv m1 k4096 n32000", 1, 4096, 32000, 1, kId},
      {"rms m8 k8192 n3072", 8, 8192, 3072, 1, kRms},
      {"linear_mean m16 k4096 n4096", 16, 4096, 4096, 1, kId},
      {"colsum (ones row) m1 k4096 n4096", 1, 4096, 4096, 1, kId},
  };
  if (argc >= 2 && std::string(argv[1]) == "--kmajor") {
    g_kmajor = true;
    --argc, ++argv;
  }
  if (argc >= 2 && std::string(argv[1]) == "--plan") {
    g_plan_only = true;
    --argc, ++argv;
  }
  std::vector<bool> want(shapes.size(), argc < 2);
  if (argc >= 2) {
    std::string arg = argv[1];
    size_t pos = 0;
    for (;;) {
      const size_t e = arg.find(',', pos);
      const int i =
          atoi(arg.substr(pos, e == std::string::npos ? std::string::npos : e - pos).c_str());
      if (i >= 0 && i < int(shapes.size())) want[i] = true;
      if (e == std::string::npos) break;
      pos = e + 1;
    }
  }
  std::vector<ShapeResults> all;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (!want[i]) continue;
    ShapeResults r;
    r.s = shapes[i];
    run_shape(r);
    all.push_back(r);
  }
  printf("\n== Summary (us) ==\n");
  for (const ShapeResults& r : all) {
    const Result* best = nullptr;
    for (const Result& t : r.tma)
      if (!best || t.us < best->us) best = &t;
    printf("SUMMARY %-26s read-bw %7.2f  runtime %7.2f  best-tma %7.2f (%-22s) tma/rt %.3f\n",
           r.s.name, r.bw_us, r.rt_us, best ? best->us : 0.0, best ? best->cfg.c_str() : "none",
           best && r.rt_us > 0 ? best->us / r.rt_us : 0.0);
  }
  return 0;
}
