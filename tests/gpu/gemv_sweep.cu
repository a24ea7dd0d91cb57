// GEMV configuration sweep on the GPU (a measurement tool, not a test): for each decode shape of
// the benchmark suite, times runtime/gemv.cuh over block shapes, unroll, split counts, and with or
// without the per-call counter memset that emitted split-K launches add as a graph node. The
// planner in codegen/schedule.cpp takes its rules from these numbers (docs/runtime.md).
//
// Build and run (CUDA toolkit only):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tests/gpu/gemv_sweep.cu -o sweep
//   ./sweep            # one line per (shape, config): us, GB/s, % of measured copy bandwidth
// Timing: medians of CUDA-graph replays of 20 calls, weights rotating over > 200 MB.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "../../runtime/kiln_runtime.cuh"

using namespace kiln::rt;

#include "gpu_timing.h"

struct Bufs {
  std::vector<__half*> W;
  __half *X, *out;
  float* ws;
  int* cnt;
  int copies;
};

// Weights (copies rotating over > 200 MB, so L2 does not serve them), X, out, a split-K workspace
// and counters for one shape; filled with constant nonzero bytes (timing only).
static Bufs alloc_bufs(int M, int N, int K) {
  Bufs b;
  const size_t wbytes = size_t(K) * N * sizeof(__half);
  b.copies = int(std::max<size_t>(2, (size_t(200) << 20) / wbytes + 1));
  b.W.resize(b.copies);
  for (auto& p : b.W) {
    CK(cudaMalloc(&p, wbytes));
    CK(cudaMemset(p, 0x33, wbytes));
  }
  CK(cudaMalloc(&b.X, size_t(M) * K * sizeof(__half)));
  CK(cudaMemset(b.X, 0x2c, size_t(M) * K * sizeof(__half)));
  CK(cudaMalloc(&b.out, size_t(M) * N * sizeof(__half)));
  CK(cudaMalloc(&b.ws, size_t(64) << 22));
  CK(cudaMalloc(&b.cnt, 4096 * sizeof(int)));
  return b;
}

static void free_bufs(Bufs& b) {
  for (auto p : b.W) cudaFree(p);
  cudaFree(b.X), cudaFree(b.out), cudaFree(b.ws), cudaFree(b.cnt);
}

static double g_copy = 0;

// A producer kernel standing in for the op before a GEMV in a multi-kernel graph (rms_norm of X):
// rewrites X in place from itself, so the GEMV depends on it.
__global__ void touch_x(__half* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __float2half(__half2float(x[i]) * 1.0f);
}

template <int MT, int WN, int WK, int U, int MINB>
void run_cfg(const char* name, int M, int N, int K, Bufs& b, int splits, bool memset_node,
             bool producer, bool cluster = false) {
  auto kernel = gemv_kernel<__half, __half, MT, 1, WN, WK, U, MINB, GemvIdentity>;
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * WN * WK, 0));
  const int cb = gemv_col_blocks(N, WN);
  const int chunk = gemv_k_chunk(K, splits);
  splits = (K + chunk - 1) / chunk;
  CK(cudaMemset(b.cnt, 0, 4096 * sizeof(int)));
  const size_t wsz = size_t(K) * N;
  auto call = [&](int i, cudaStream_t st) {
    const __half* w0 = b.W[i % b.copies];
    if (producer) touch_x<<<(M * K + 255) / 256, 256, 0, st>>>(b.X, M * K);
    if (memset_node && splits > 1) CK(cudaMemsetAsync(b.cnt, 0, cb * sizeof(int), st));
    if (cluster)
      CK((gemv_cluster_launch<__half, __half, MT, 1, WN, WK, U, MINB, GemvIdentity>(
          b.X, K, w0, w0, N, b.out, N, M, N, K, splits, st)));
    else
      CK((gemv_launch<__half, __half, MT, 1, WN, WK, U, MINB, GemvIdentity>(
          b.X, K, w0, w0, N, b.out, N, M, N, K, splits, b.ws, b.cnt, st)));
  };
  const double us = time_us(call, 20, 7);
  const double bytes = double(wsz) * 2 + double(M) * K * 2 + double(M) * N * 2;
  const double gbps = bytes / (us * 1e3);
  printf(
      "SWEEP %-22s m%-2d w%dx%d u%d minb%d grid %3dx%-2d (%4d blk, %d/SM)%s%s %8.2f us %5.0f GB/s "
      "%5.1f%% copy\n",
      name, M, WN, WK, U, MINB, cb, splits, cb * splits, per_sm,
      cluster       ? " cluster"
      : memset_node ? " memset"
                    : "",
      producer ? " +producer" : "", us, gbps, 100.0 * gbps / g_copy);
}

template <int MT, int WN, int WK, int U, int MINB>
void sweep_splits(const char* name, int M, int N, int K, Bufs& b, const std::vector<int>& splits) {
  for (int s : splits) {
    if (K / s < 256) continue;
    run_cfg<MT, WN, WK, U, MINB>(name, M, N, K, b, s, false, false);
  }
}

template <int MT>
void shape(const char* name, int M, int N, int K) {
  Bufs b = alloc_bufs(M, N, K);
  const std::vector<int> S = {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24};
  constexpr int U = MT >= 4 ? 1 : 2;
  sweep_splits<MT, 2, 4, U, 2>(name, M, N, K, b, S);
  sweep_splits<MT, 1, 8, U, 2>(name, M, N, K, b, S);
  sweep_splits<MT, 1, 4, U, 3>(name, M, N, K, b, S);
  sweep_splits<MT, 4, 2, U, 2>(name, M, N, K, b, S);
  if constexpr (MT <= 2) sweep_splits<MT, 1, 8, 4, 1>(name, M, N, K, b, S);
  // Split-K across a cluster (no workspace, no memset node), splits <= 8.
  for (int sp = 2; sp <= 8; ++sp) {
    if (K / sp < 256) continue;
    run_cfg<MT, 1, 4, U, 3>(name, M, N, K, b, sp, false, false, true);
    run_cfg<MT, 1, 8, U, 2>(name, M, N, K, b, sp, false, false, true);
  }
  // The emitted configuration with its memset node, and behind a producer kernel.
  {
    const int cb = gemv_col_blocks(N, 1);
    int s = std::max(1, 396 / cb);  // plan_schedule: 3 blocks per SM on 132 SMs
    s = std::min(s, std::max(1, K / 1024));
    run_cfg<MT, 1, 4, U, 3>(name, M, N, K, b, s, true, false);
    run_cfg<MT, 1, 4, U, 3>(name, M, N, K, b, s, false, true);
    run_cfg<MT, 1, 4, U, 3>(name, M, N, K, b, s, true, true);
    run_cfg<MT, 1, 4, U, 3>(name, M, N, K, b, std::min(s, 8), false, true, true);
  }
  free_bufs(b);
}

// Four m-tiles (M = 25..32) hold 64 accumulator floats per lane; which block shape, unroll and
// occupancy streams best then.
template <int MT>
void shape_mt4(const char* name, int M, int N, int K) {
  Bufs b = alloc_bufs(M, N, K);
  const std::vector<int> S = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 16};
  sweep_splits<MT, 1, 4, 2, 2>(name, M, N, K, b, S);
  sweep_splits<MT, 1, 4, 2, 1>(name, M, N, K, b, S);
  sweep_splits<MT, 1, 8, 2, 1>(name, M, N, K, b, S);
  sweep_splits<MT, 1, 2, 1, 6>(name, M, N, K, b, S);
  sweep_splits<MT, 1, 4, 1, 4>(name, M, N, K, b, S);
  sweep_splits<MT, 1, 4, 1, 3>(name, M, N, K, b, S);
  for (int sp = 2; sp <= 8; ++sp) {
    run_cfg<MT, 1, 4, 1, 3>(name, M, N, K, b, sp, false, false, true);
    run_cfg<MT, 1, 4, 2, 2>(name, M, N, K, b, sp, false, false, true);
  }
  free_bufs(b);
}

int main(int argc, char** argv) {
  const bool mt4_only = argc > 1 && std::string(argv[1]) == "mt4";
  {
    const size_t bytes = size_t(512) << 20;
    char *a, *c;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&c, bytes));
    CK(cudaMemset(a, 1, bytes));
    const double us = time_us(
        [&](int, cudaStream_t s) { CK(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice, s)); },
        10);
    g_copy = 2.0 * bytes / (us * 1e3);
    printf("SWEEP copy %.0f GB/s\n", g_copy);
    cudaFree(a), cudaFree(c);
    // Empty-kernel replay: the per-launch cost inside a graph.
    const double e =
        time_us([&](int, cudaStream_t s) { touch_x<<<1, 32, 0, s>>>(nullptr, 0); }, 20);
    printf("SWEEP empty kernel in graph %.2f us\n", e);
  }
  if (mt4_only) {
    shape_mt4<4>("N6144 K4096", 32, 6144, 4096);
    shape_mt4<4>("N2304 K16384", 32, 2304, 16384);
    shape_mt4<4>("N16384 K6656", 32, 16384, 6656);
    return 0;
  }
  shape<1>("N2304 K16384", 1, 2304, 16384);
  shape<2>("N2304 K16384", 16, 2304, 16384);
  shape<4>("N2304 K16384", 32, 2304, 16384);
  shape<1>("N6144 K4096", 2, 6144, 4096);
  shape<2>("N6144 K4096", 16, 6144, 4096);
  shape<4>("N6144 K4096", 32, 6144, 4096);
  shape<1>("N16384 K6656", 1, 16384, 6656);
  shape<2>("N16384 K6656", 16, 16384, 6656);
  shape<4>("N16384 K6656", 32, 16384, 6656);
  shape<4>("N13312 K16384", 32, 13312, 16384);
  return 0;
}
