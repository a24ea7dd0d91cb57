// Low-rank chain sweep on the GPU (a measurement tool, not a test): times the runtime's low-rank
// chain kernel (runtime/lowrank.cuh) over its column-block widths NC and cluster splits on the
// suite's lowrank and lora shapes (both weight layouts) and a rank-64, 32-row chain. The
// planner's rule (codegen/lowerings/contraction.cpp, lowrank_shape) comes from these numbers.
// Correctness of every configuration timed here is tests/gpu/runtime_test.cu's (lowrank.*).
//
// Build and run (CUDA toolkit only, sm_90a):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tests/gpu/lowrank_sweep.cu -o s &&
//   ./s            (or ./s --floor: the launch floor of the grids, empty kernels; ./s --load:
//                  the first phase's loads alone, cp.async against bulk copies)
//
// Timing: medians of 5 CUDA-graph replays of 20 calls rotating over 4 input copies (as
// shared/bench/torch_baselines.py does: these inputs stay in L2), tests/gpu/gpu_timing.h.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "../../runtime/kiln_runtime.cuh"
#include "gpu_timing.h"

using namespace kiln::rt;

struct EpiAdd {
  __device__ float operator()(float v0, float v1, int, int) const { return v0 + v1; }
};

struct Bufs {
  std::vector<__half*> x, a, b, w, o;
};

static Bufs alloc(int copies, int M, int N, int K, int R) {
  Bufs s;
  auto mk = [](size_t n) {
    __half* p;
    CK(cudaMalloc(&p, n * 2));
    CK(cudaMemset(p, 0x3c, n * 2));  // 1.0-ish halves: timing only
    return p;
  };
  for (int c = 0; c < copies; ++c) {
    s.x.push_back(mk(size_t(M) * K));
    s.a.push_back(mk(size_t(K) * R));
    s.b.push_back(mk(size_t(R) * N));
    s.w.push_back(mk(size_t(K) * N));
    s.o.push_back(mk(size_t(M) * N));
  }
  return s;
}

template <int MT, int RT, int NC, bool AK, bool BK, bool HW, bool WK>
static void run(const char* name, const Bufs& s, int M, int N, int K, int R, int splits) {
  auto call = [&](int i, cudaStream_t st) {
    const int c = i % int(s.x.size());
    CK((lowrank_launch<__half, __half, MT, RT, NC, AK, BK, HW, WK>(
        s.x[c], K, s.a[c], AK ? K : R, s.b[c], BK ? R : N, s.w[c], WK ? K : N, s.o[c], N, M, N, K,
        R, splits, st, EpiAdd{})));
  };
  printf("%-10s M%-3d N%-5d K%-5d R%-3d NC%-4d splits %d: %7.2f us\n", name, M, N, K, R, NC, splits,
         time_us(call, 20));
}

// The launch floor of the kernel's grid: an empty kernel (pdl_entry only) on `blocks` CTAs of 128
// threads with `smem` bytes of dynamic shared memory, in clusters of `splits`.
__global__ void __launch_bounds__(128) lowrank_empty() {
  pdl_entry();
}

static void floor_run(int blocks, int splits, int smem) {
  if (smem > 48 * 1024)
    CK(cudaFuncSetAttribute(lowrank_empty, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  auto call = [&](int, cudaStream_t st) {
    CK(launch(lowrank_empty, dim3(blocks), dim3(128), size_t(smem), st, splits));
  };
  printf("empty      %4d CTAs, cluster %d, smem %6d: %7.2f us\n", blocks, splits, smem,
         time_us(call, 20));
}

// The first phase alone (a measurement of what bounds it): 64 CTAs each load the lowrank case's
// k-range of X (16 rows of 1 KB) and A (16 KB contiguous), as 8 clusters' ranks would, and record
// the cycles from entry to all of it landed. mode 0: cp.async as lowrank_stage, THREADS threads;
// 1: bulk copies (one per X row, one for A) on an mbarrier; 2: bulk copies of 1 KB for A too;
// 3: mode 0 with each cluster starting at another chunk (the 8 clusters read the same lines at
// once otherwise); 4: mode 0 with cluster c reading input copy c % 4 (2 readers per line).
__device__ long long g_load_cycles[64];
struct ProbeIn {
  const __half* x[4];
  const __half* a[4];
};
template <int MODE, int THREADS>
__global__ void __launch_bounds__(THREADS) lowrank_load_probe(ProbeIn in) {
  extern __shared__ __align__(16) unsigned char sm[];
  __shared__ uint64_t bar;
  const long long t0 = clock64();
  const int rank = blockIdx.x % 8, tid = threadIdx.x, cl = blockIdx.x / 8;
  const int cp = MODE == 4 ? cl % 4 : 0;
  const __half* xs = in.x[cp] + rank * 512;
  const __half* as = in.a[cp] + rank * 512 * 16;
  if constexpr (MODE == 0 || MODE == 3 || MODE == 4) {
    const int rot = MODE == 3 ? cl * 128 : 0;
    for (int j = tid; j < 16 * 64; j += THREADS) {
      const int i = (j + rot) & 1023;
      const int r = i >> 6, c = (i & 63) << 3;
      cp_async_16(smem_u32(sm + (r * 520 + c) * 2), xs + r * 4096 + c, 16);
    }
    for (int j = tid; j < 512 * 2; j += THREADS) {
      const int i = (j + rot) & 1023;
      cp_async_16(smem_u32(sm + 16 * 520 * 2 + ((i >> 1) * 24 + ((i & 1) << 3)) * 2), as + i * 8,
                  16);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
  } else {
    if (tid == 0) {
      mbar_init(&bar, 1);
      fence_mbar_init();
    }
    __syncthreads();
    if (tid < 32) {
      if (tid == 0) mbar_arrive_expect_tx(&bar, 32768);
      __syncwarp();
      if (tid < 16) bulk_g2s(sm + tid * 1040, xs + tid * 4096, 1024, &bar);
      if constexpr (MODE == 1) {
        if (tid == 16) bulk_g2s(sm + 16 * 1040, as, 16384, &bar);
      } else {
        if (tid >= 16)
          bulk_g2s(sm + 16 * 1040 + (tid - 16) * 1024, as + (tid - 16) * 512, 1024, &bar);
      }
    }
    mbar_wait(&bar, 0);
    __syncthreads();
  }
  if (tid == 0) g_load_cycles[blockIdx.x] = clock64() - t0;
}

template <int MODE, int THREADS>
static void load_probe_run(const Bufs& s) {
  constexpr int smem = 64 * 1024;
  CK(cudaFuncSetAttribute(lowrank_load_probe<MODE, THREADS>,
                          cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  auto call = [&](int i, cudaStream_t st) {
    ProbeIn in;
    for (int c = 0; c < 4; ++c) {
      const int k = (i + c) % int(s.x.size());
      in.x[c] = s.x[k];
      in.a[c] = s.a[k];
    }
    lowrank_load_probe<MODE, THREADS><<<64, THREADS, smem, st>>>(in);
  };
  const double us = time_us(call, 20);
  long long cyc[64];
  CK(cudaMemcpyFromSymbol(cyc, g_load_cycles, sizeof(cyc)));
  std::sort(cyc, cyc + 64);
  printf(
      "load probe mode %d, %3d threads: %6.2f us per call; cycles to landed: median %lld, max "
      "%lld\n",
      MODE, THREADS, us, cyc[32], cyc[63]);
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--load") {
    Bufs s = alloc(4, 16, 4096, 4096, 16);
    load_probe_run<0, 128>(s);
    load_probe_run<0, 256>(s);
    load_probe_run<1, 128>(s);
    load_probe_run<2, 128>(s);
    load_probe_run<3, 128>(s);
    load_probe_run<4, 128>(s);
    load_probe_run<0, 128>(s);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "--floor") {
    for (int sp : {1, 8})
      for (int smem : {0, 64 * 1024}) floor_run(64, sp, smem);
    floor_run(128, 8, 64 * 1024);
    return 0;
  }
  {
    const int M = 16, N = 4096, K = 4096, R = 16;
    Bufs s = alloc(4, M, N, K, R);
    for (int sp : {4, 8, 16}) {
      run<1, 1, 32, false, false, false, false>("lowrank", s, M, N, K, R, sp);
      run<1, 1, 64, false, false, false, false>("lowrank", s, M, N, K, R, sp);
      run<1, 1, 128, false, false, false, false>("lowrank", s, M, N, K, R, sp);
    }
  }
  {
    const int M = 16, N = 4096, K = 256, R = 16;
    Bufs s = alloc(4, M, N, K, R);
    for (int sp : {1, 2}) {
      run<1, 1, 32, false, false, true, false>("lora", s, M, N, K, R, sp);
      run<1, 1, 64, false, false, true, false>("lora", s, M, N, K, R, sp);
      run<1, 1, 128, false, false, true, false>("lora", s, M, N, K, R, sp);
      run<1, 1, 32, true, true, true, true>("lora_nk", s, M, N, K, R, sp);
      run<1, 1, 64, true, true, true, true>("lora_nk", s, M, N, K, R, sp);
      run<1, 1, 128, true, true, true, true>("lora_nk", s, M, N, K, R, sp);
    }
  }
  {
    const int M = 32, N = 2056, K = 1024, R = 64;
    Bufs s = alloc(4, M, N, K, R);
    for (int sp : {2, 4, 8, 16}) {
      run<2, 4, 32, false, false, false, false>("m32r64", s, M, N, K, R, sp);
      run<2, 4, 64, false, false, false, false>("m32r64", s, M, N, K, R, sp);
    }
  }
  return 0;
}
