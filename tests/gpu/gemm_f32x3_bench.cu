// f32 matmuls on the tensor cores (runtime/tf32.cuh, gemm_f32x3_launch): a check and a timing
// tool (not a CTest test; runtime_test.cu has the check cases). For each shape and layout
// (A stored M x K or transposed, B stored K x N or nn.Linear's N x K), on normal std-1 inputs:
// the relative L2 error against a float64 reference on 512 sampled output elements (every one
// where the output is small), against both 1e-5 and the one-pass tf32 error it must beat; then
// the median time of CUDA-graph replays, inputs rotating over two sets.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tests/gpu/gemm_f32x3_bench.cu -o b
//   ./b [--check-only] [M,N,K[,at][,bk][,sS] ...]
// Shapes on the command line replace the built-in list (`at`: A stored transposed, `bk`: B stored
// N x K, `sS`: S k-splits instead of gemm_f32x3_splits' choice, for sweeps).
// Prints `F32X3 name ok=0|1 rel_l2=.. us=..` per case; exit status 1 if any check failed.
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

#include "gpu_timing.h"

struct Case {
  int M, N, K;
  bool a_trans, b_kmajor;
  int splits = 0;  // 0: gemm_f32x3_splits
};

static int run_case(const Case& c, bool check_only) {
  const size_t na = size_t(c.M) * c.K, nb = size_t(c.K) * c.N, nc = size_t(c.M) * c.N;
  std::mt19937 gen(1234 + c.M + 7 * c.N + 13 * c.K);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> hA(na), hB(nb);
  for (auto& x : hA) x = nd(gen);
  for (auto& x : hB) x = nd(gen);
  const int sets = 2;
  float *dA[sets], *dB[sets], *dC[sets];
  void* ws[sets];
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int splits = c.splits > 0 ? c.splits : gemm_f32x3_splits(c.M, c.N, c.K, sms);
  const size_t wsb = gemm_f32x3_workspace(c.M, c.N, c.K, splits);
  for (int s = 0; s < sets; ++s) {
    CK(cudaMalloc(&dA[s], na * 4));
    CK(cudaMalloc(&dB[s], nb * 4));
    CK(cudaMalloc(&dC[s], nc * 4));
    CK(cudaMalloc(&ws[s], wsb));
    CK(cudaMemcpy(dA[s], hA.data(), na * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB[s], hB.data(), nb * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dC[s], 0xff, nc * 4));
  }
  // Element (m, k) of A and (k, n) of B in their stored layouts.
  auto a_at = [&](int m, int k) {
    return c.a_trans ? hA[size_t(k) * c.M + m] : hA[size_t(m) * c.K + k];
  };
  auto b_at = [&](int k, int n) {
    return c.b_kmajor ? hB[size_t(n) * c.K + k] : hB[size_t(k) * c.N + n];
  };
  const int64_t lda = c.a_trans ? c.M : c.K, ldb = c.b_kmajor ? c.K : c.N;
  auto call = [&](int i, cudaStream_t st) {
    const int s = i % sets;
    CK(gemm_f32x3_launch(dA[s], lda, c.a_trans, dB[s], ldb, c.b_kmajor, dC[s], int64_t(c.N), c.M,
                         c.N, c.K, splits, ws[s], WgmmaEpiIdentity(), st));
  };
  call(0, 0);
  CK(cudaDeviceSynchronize());
  std::vector<float> hC(nc);
  CK(cudaMemcpy(hC.data(), dC[0], nc * 4, cudaMemcpyDeviceToHost));
  // Sampled elements (all where small) against float64; one-pass tf32 on the same elements.
  double num = 0, den = 0, num1 = 0;
  const size_t samples = std::min<size_t>(nc, 512);
  auto tf32 = [](float x) {  // round to nearest, ties away: cvt.rna.tf32.f32
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x1000u) & 0xFFFFE000u;
    float r;
    memcpy(&r, &u, 4);
    return r;
  };
  int nan = 0;
  for (size_t e = 0; e < nc; ++e)
    if (std::isnan(hC[e])) ++nan;
  for (size_t i = 0; i < samples; ++i) {
    const size_t e = nc <= 512 ? i : (i * 2654435761u) % nc;
    const int m = int(e / c.N), n = int(e % c.N);
    double r = 0, r1 = 0;
    for (int k = 0; k < c.K; ++k) {
      r += double(a_at(m, k)) * double(b_at(k, n));
      r1 += double(tf32(a_at(m, k))) * double(tf32(b_at(k, n)));
    }
    num += (hC[e] - r) * (hC[e] - r);
    num1 += (r1 - r) * (r1 - r);
    den += r * r;
  }
  const double err = std::sqrt(num / den), err1 = std::sqrt(num1 / den);
  const bool ok = nan == 0 && err <= 1e-5 && err < err1 / 10;
  double us = 0;
  if (!check_only) us = time_us(call, 10);
  char name[128];
  snprintf(name, sizeof name, "m%d_n%d_k%d%s%s", c.M, c.N, c.K, c.a_trans ? "_at" : "",
           c.b_kmajor ? "_bk" : "");
  const double tflops = us > 0 ? 2.0 * c.M * double(c.N) * c.K / (us * 1e6) : 0;
  printf("F32X3 %s splits=%d ok=%d rel_l2=%.2e tf32_one_pass=%.2e nan=%d us=%.2f tflops=%.1f\n",
         name, splits, ok, err, err1, nan, us, tflops);
  for (int s = 0; s < sets; ++s) cudaFree(dA[s]), cudaFree(dB[s]), cudaFree(dC[s]), cudaFree(ws[s]);
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  const bool check_only = argc > 1 && strcmp(argv[1], "--check-only") == 0;
  std::vector<Case> given;
  for (int i = check_only ? 2 : 1; i < argc; ++i) {
    Case c{0, 0, 0, false, false};
    if (sscanf(argv[i], "%d,%d,%d", &c.M, &c.N, &c.K) != 3 || c.M < 1 || c.N < 1 || c.K < 1) {
      fprintf(stderr, "bad shape %s (want M,N,K[,at][,bk][,sS])\n", argv[i]);
      return 2;
    }
    c.a_trans = strstr(argv[i], ",at") != nullptr;
    c.b_kmajor = strstr(argv[i], ",bk") != nullptr;
    if (const char* sp = strstr(argv[i], ",s")) c.splits = atoi(sp + 2);
    given.push_back(c);
  }
  const std::vector<Case> builtin = {
      {2048, 2048, 2048, false, false}, {2048, 2048, 2048, false, true},
      {4096, 4096, 4096, false, false}, {128, 512, 1024, false, true},
      {300, 520, 1000, false, false},   {257, 263, 509, true, false},
      {77, 40, 522, true, true},        {1024, 4096, 64, false, false},
      {64, 8192, 8192, false, true},    {33, 100, 7, false, false},
  };
  int bad = 0;
  for (const Case& c : given.empty() ? builtin : given) bad += run_case(c, check_only);
  printf("F32X3 failed=%d\n", bad);
  return bad ? 1 : 0;
}
