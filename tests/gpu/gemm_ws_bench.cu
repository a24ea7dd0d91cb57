// Warp-specialized GEMM measurement (a tool, not a test): times runtime/wgmma.cuh's persistent
// TMA + wgmma GEMM (WgmmaGemmWS, wgmma_ws_gemm_launch) over its knobs (stages, cluster size,
// raster group, epilogue stores) on the gated MLP (NB = 2: silu(X W1) * (X W2))
// and the plain GEMM (NB = 1) at 4096^3 and a ragged shape. Every timed configuration's output
// is checked: no NaN anywhere, and 4096 sampled elements against a float64 reference.
//
// Build and run (CUDA toolkit only):
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a tests/gpu/gemm_ws_bench.cu -o b
//   ./b [filter] [--check-only]   # configurations whose name contains filter; no timing
// Timing: medians of CUDA-graph replays of 10 calls, inputs rotating over two sets of X, W1, W2
// (3 x 32 MB each at 4096^3, more than L2).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../../runtime/kiln_runtime.cuh"

using namespace kiln::rt;

#include "gpu_timing.h"

// ---- Inputs ------------------------------------------------------------------------------------

template <typename T>
__global__ void fill_uniform(T* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 0x9E3779B1u ^ seed;
    x ^= x >> 16, x *= 0x85EBCA6Bu, x ^= x >> 13, x *= 0xC2B2AE35u, x ^= x >> 16;
    p[i] = from_f32<T>(scale * (float(x) * (2.0f / 4294967296.0f) - 1.0f));
  }
}

template <typename T>
float tofl(T x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(x);
  } else {
    return __bfloat162float(x);
  }
}

template <typename T>
struct Problem {
  int M, N, K, nb, lda, ldb, ldc;
  static constexpr int kSets = 2;
  T *X[kSets], *W0[kSets], *W1[kSets], *C;
  // Leading dimensions default to the dims; pass larger ones to pad rows.
  Problem(int m, int n, int k, int nb_, int lda_ = 0, int ldb_ = 0, int ldc_ = 0)
      : M(m),
        N(n),
        K(k),
        nb(nb_),
        lda(lda_ ? lda_ : k),
        ldb(ldb_ ? ldb_ : n),
        ldc(ldc_ ? ldc_ : n) {
    for (int s = 0; s < kSets; ++s) {
      CK(cudaMalloc(&X[s], size_t(M) * lda * sizeof(T)));
      CK(cudaMalloc(&W0[s], size_t(K) * ldb * sizeof(T)));
      CK(cudaMalloc(&W1[s], size_t(K) * ldb * sizeof(T)));
      fill_uniform<<<1024, 256>>>(X[s], size_t(M) * lda, 11u + s, 1.0f);
      fill_uniform<<<1024, 256>>>(W0[s], size_t(K) * ldb, 23u + s, 1.0f / 16);
      fill_uniform<<<1024, 256>>>(W1[s], size_t(K) * ldb, 37u + s, 1.0f / 16);
    }
    CK(cudaMalloc(&C, size_t(M) * ldc * sizeof(T)));
    CK(cudaDeviceSynchronize());
  }
  ~Problem() {
    for (int s = 0; s < kSets; ++s) cudaFree(X[s]), cudaFree(W0[s]), cudaFree(W1[s]);
    cudaFree(C);
  }
};

using Launch = std::function<cudaError_t(int set, cudaStream_t)>;

// Sampled float64 check of the output of set 0: no NaN inside [M, N], rel L2 over 4096 elements
// (every one for small problems).
template <typename T>
double check(Problem<T>& p, const Launch& launch, int* nans) {
  CK(cudaMemset(p.C, 0xff, size_t(p.M) * p.ldc * sizeof(T)));
  CK(launch(0, 0));
  CK(cudaDeviceSynchronize());
  std::vector<T> C(size_t(p.M) * p.ldc), X(size_t(p.M) * p.lda), W0(size_t(p.K) * p.ldb),
      W1(size_t(p.K) * p.ldb);
  CK(cudaMemcpy(C.data(), p.C, C.size() * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(X.data(), p.X[0], X.size() * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(W0.data(), p.W0[0], W0.size() * sizeof(T), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(W1.data(), p.W1[0], W1.size() * sizeof(T), cudaMemcpyDeviceToHost));
  *nans = 0;
  for (int m = 0; m < p.M; ++m)
    for (int n = 0; n < p.N; ++n) *nans += std::isnan(tofl(C[size_t(m) * p.ldc + n])) ? 1 : 0;
  const bool all = size_t(p.M) * p.N <= 4096 * 64;
  const int samples = all ? p.M * p.N : 4096;
  uint64_t z = 12345;
  double num = 0, den = 0;
  for (int s = 0; s < samples; ++s) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    // Half the samples in the last tile row / column, where the edges are.
    int m = int((z >> 33) % p.M), n = int((z >> 13) % p.N);
    if (s % 4 == 1) m = p.M - 1 - m % 128;
    if (s % 4 == 2) n = p.N - 1 - n % 128;
    if (all) m = s / p.N, n = s % p.N;
    double a0 = 0, a1 = 0;
    for (int k = 0; k < p.K; ++k) {
      const double x = tofl(X[size_t(m) * p.lda + k]);
      a0 += x * tofl(W0[size_t(k) * p.ldb + n]);
      a1 += x * tofl(W1[size_t(k) * p.ldb + n]);
    }
    const double ref = p.nb == 2 ? a0 / (1.0 + std::exp(-a0)) * a1 : a0;
    const double d = double(tofl(C[size_t(m) * p.ldc + n])) - ref;
    num += d * d, den += ref * ref;
  }
  return std::sqrt(num / den);
}

struct Row {
  std::string name;
  double us, tflops, err;
  int nans;
};
static std::vector<Row> g_rows;
static bool g_check_only = false;

template <typename T>
void run(const std::string& name, Problem<T>& p, const Launch& launch, const char* filter) {
  if (filter && name.find(filter) == std::string::npos) return;
  int nans = 0;
  const double err = check(p, launch, &nans);
  const double us =
      g_check_only ? 0.0 : time_us([&](int i, cudaStream_t st) { CK(launch(i % 2, st)); }, 10, 7);
  const double tf = g_check_only ? 0.0 : 2.0 * p.nb * double(p.M) * p.N * p.K / (us * 1e6);
  g_rows.push_back({name, us, tf, err, nans});
  printf("%-46s %8.1f us %6.0f TFLOP/s  rel_l2 %.2e  nan %d%s\n", name.c_str(), us, tf, err, nans,
         (err <= 5e-3 && nans == 0) ? "" : "  BAD");
  fflush(stdout);
}

// silu(v0) * v1 with fast intrinsics (a diagnostic: how much the accurate epilogue costs).
struct EpiSiluMulFast {
  __device__ float operator()(float v0, float v1, int, int) const {
    return __fdividef(v0, 1.0f + __expf(-v0)) * v1;
  }
};

// silu(v0 + bias[n]) (linear_act's epilogue).
template <typename T>
struct EpiBiasSilu {
  const T* bias;
  __device__ float operator()(float v0, float, int, int n) const {
    const float x = v0 + to_f32(bias[n]);
    return x / (1.0f + expf(-x));
  }
};

// Parts of it, and the same with fast intrinsics (diagnostics: what the epilogue's time is).
template <typename T>
struct EpiBias {
  const T* bias;
  __device__ float operator()(float v0, float, int, int n) const { return v0 + to_f32(bias[n]); }
};
struct EpiSilu {
  __device__ float operator()(float v0, float, int, int) const { return v0 / (1.0f + expf(-v0)); }
};
template <typename T>
struct EpiBiasSiluFast {
  const T* bias;
  __device__ float operator()(float v0, float, int, int n) const {
    const float x = v0 + to_f32(bias[n]);
    return __fdividef(x, 1.0f + __expf(-x));
  }
};

template <typename T, class G, class Epi2 = WgmmaEpiSiluMul>
Launch new_ws(Problem<T>& p, WgmmaWsTuning tune = WgmmaWsTuning()) {
  return [&p, tune](int s, cudaStream_t st) {
    if (p.nb == 2)
      return wgmma_ws_gemm_launch<G>(p.X[s], p.lda, p.W0[s], p.W1[s], p.ldb, p.C, p.ldc, p.M, p.N,
                                     p.K, Epi2(), st, tune);
    return wgmma_ws_gemm_launch<G>(p.X[s], p.lda, p.W0[s], p.W0[s], p.ldb, p.C, p.ldc, p.M, p.N,
                                   p.K, WgmmaEpiIdentity(), st, tune);
  };
}
static WgmmaWsTuning tuning(int group_m, bool tma_store = true, int max_clusters = 0) {
  WgmmaWsTuning t;
  t.group_m = group_m, t.tma_store = tma_store, t.max_clusters = max_clusters;
  return t;
}

// Clusters of G resident at once, as the launcher asks (printed for the record).
template <class G>
int resident_clusters() {
  constexpr auto kernel = wgmma_ws_gemm_kernel<G, __half, WgmmaEpiSiluMul>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, G::kSmemBytes));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = G::kCluster, attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.gridDim = dim3(G::kCluster), cfg.blockDim = dim3(G::kThreads);
  cfg.dynamicSmemBytes = G::kSmemBytes, cfg.attrs = attr, cfg.numAttrs = 1;
  int n = 0;
  CK(cudaOccupancyMaxActiveClusters(&n, kernel, &cfg));
  return n;
}

int main(int argc, char** argv) {
  const char* filter = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--check-only") == 0) {
      g_check_only = true;
    } else {
      filter = argv[i];
    }
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf(
      "device %s, %d SMs, L2 %d MB; resident clusters: cl1 s4 %d, cl2 s4 (NB 2) %d, cl2 s4 "
      "(NB 1) %d\n",
      prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
      resident_clusters<WgmmaGemmWS<__half, 2, 4, 1>>(),
      resident_clusters<WgmmaGemmWS<__half, 2, 4, 2>>(),
      resident_clusters<WgmmaGemmWS<__half, 1, 4, 2>>());
  using H = __half;
  using BF = __nv_bfloat16;
  {
    // Small ragged problems (checked in full; for compute-sanitizer): odd tile rows, capped grids.
    Problem<H> p(520, 392, 1000, 2), q(300, 136, 520, 1, 0, 0, 144);
    run("small mlp2 new cl1 s4", p, new_ws<H, WgmmaGemmWS<H, 2, 4, 1>>(p), filter);
    run("small mlp2 new cl2 s4", p, new_ws<H, WgmmaGemmWS<H, 2, 4, 2>>(p), filter);
    run("small mlp2 new cl2 s3 capped", p,
        new_ws<H, WgmmaGemmWS<H, 2, 3, 2>>(p, tuning(1, true, 1)), filter);
    run("small mlp2 new cl1 s4 capped direct", p,
        new_ws<H, WgmmaGemmWS<H, 2, 4, 1>>(p, tuning(2, false, 3)), filter);
    run("small mm1 new cl1 s4", q, new_ws<H, WgmmaGemmWS<H, 1, 4, 1>>(q), filter);
    run("small mm1 new cl2 s6 capped", q, new_ws<H, WgmmaGemmWS<H, 1, 6, 2>>(q, tuning(1, true, 1)),
        filter);
  }
  {
    Problem<H> p(4096, 4096, 4096, 2);
    using C1 = WgmmaGemmWS<H, 2, 4, 1>;
    using C2 = WgmmaGemmWS<H, 2, 4, 2>;
    run("mlp2 4096 f16 new cl1 s3", p, new_ws<H, WgmmaGemmWS<H, 2, 3, 1>>(p), filter);
    run("mlp2 4096 f16 new cl1 s4", p, new_ws<H, C1>(p), filter);
    run("mlp2 4096 f16 new cl1 s4 g4", p, new_ws<H, C1>(p, tuning(4)), filter);
    run("mlp2 4096 f16 new cl1 s4 g16", p, new_ws<H, C1>(p, tuning(16)), filter);
    run("mlp2 4096 f16 new cl1 s4 g32", p, new_ws<H, C1>(p, tuning(32)), filter);
    run("mlp2 4096 f16 new cl1 s4 direct-store", p, new_ws<H, C1>(p, tuning(8, false)), filter);
    run("mlp2 4096 f16 new cl1 s4 fast-epi", p, new_ws<H, C1, EpiSiluMulFast>(p), filter);
    run("mlp2 4096 f16 new cl2 s3", p, new_ws<H, WgmmaGemmWS<H, 2, 3, 2>>(p), filter);
    run("mlp2 4096 f16 new cl2 s4", p, new_ws<H, C2>(p), filter);
    run("mlp2 4096 f16 new cl2 s4 g2", p, new_ws<H, C2>(p, tuning(2)), filter);
    run("mlp2 4096 f16 new cl2 s4 g4", p, new_ws<H, C2>(p, tuning(4)), filter);
    run("mlp2 4096 f16 new cl2 s4 g16", p, new_ws<H, C2>(p, tuning(16)), filter);
    run("mlp2 4096 f16 new cl2 s4 direct-store", p, new_ws<H, C2>(p, tuning(8, false)), filter);
    run("mlp2 4096 f16 new cl2 s4 fast-epi", p, new_ws<H, C2, EpiSiluMulFast>(p), filter);
    run("mlp2 4096 f16 new cl1 s4 (again)", p, new_ws<H, C1>(p), filter);
    run("mlp2 4096 f16 new cl2 s4 (again)", p, new_ws<H, C2>(p), filter);
  }
  {
    Problem<H> p(4096, 4096, 4096, 1);
    run("mm1 4096 f16 new cl1 s4", p, new_ws<H, WgmmaGemmWS<H, 1, 4, 1>>(p), filter);
    run("mm1 4096 f16 new cl1 s6", p, new_ws<H, WgmmaGemmWS<H, 1, 6, 1>>(p), filter);
    run("mm1 4096 f16 new cl2 s4", p, new_ws<H, WgmmaGemmWS<H, 1, 4, 2>>(p), filter);
    run("mm1 4096 f16 new cl2 s6", p, new_ws<H, WgmmaGemmWS<H, 1, 6, 2>>(p), filter);
    run("mm1 4096 f16 new cl1 s6 pp", p, new_ws<H, WgmmaGemmWS<H, 1, 6, 1, false, true>>(p),
        filter);
  }
  {
    Problem<BF> p(4096, 4096, 4096, 2);
    run("mlp2 4096 bf16 new cl1 s4", p, new_ws<BF, WgmmaGemmWS<BF, 2, 4, 1>>(p), filter);
    run("mlp2 4096 bf16 new cl2 s4", p, new_ws<BF, WgmmaGemmWS<BF, 2, 4, 2>>(p), filter);
  }
  {
    Problem<H> p(4000, 4040, 4000, 2);
    run("mlp2 4000x4040x4000 f16 new cl1 s4", p, new_ws<H, WgmmaGemmWS<H, 2, 4, 1>>(p), filter);
    run("mlp2 4000x4040x4000 f16 new cl2 s4", p, new_ws<H, WgmmaGemmWS<H, 2, 4, 2>>(p), filter);
  }
  {
    // The same dims with 128-byte aligned rows (ld 4032, 4096, 4096): isolates misaligned rows.
    Problem<H> p(4000, 4040, 4000, 2, 4032, 4096, 4096);
    run("mlp2 4000x4040x4000 ld128B f16 new cl1 s4", p, new_ws<H, WgmmaGemmWS<H, 2, 4, 1>>(p),
        filter);
    run("mlp2 4000x4040x4000 ld128B f16 new cl2 s4", p, new_ws<H, WgmmaGemmWS<H, 2, 4, 2>>(p),
        filter);
  }
  {
    Problem<H> p(4000, 4040, 4000, 1);
    run("mm1 4000x4040x4000 f16 new cl1 s4", p, new_ws<H, WgmmaGemmWS<H, 1, 4, 1>>(p), filter);
    run("mm1 4000x4040x4000 f16 new cl2 s4", p, new_ws<H, WgmmaGemmWS<H, 1, 4, 2>>(p), filter);
  }
  {
    // nn.Linear shapes (linear_act: X [M, 4096] W^T, W [14336, 4096] bf16): the weight read
    // N-major (W^T stored) or K-major (W stored, KB), with the identity or a bias + silu epilogue.
    // Timing only where the layout is K-major (the check reads the buffers N-major: its error
    // is meaningless there).
    for (int m : {4096, 512}) {
      Problem<BF> p(m, 14336, 4096, 1);
      BF* bias = p.W1[0];  // any 14336 values
      const std::string tag = "linear m" + std::to_string(m);
      run(tag + " bf16 N-major s6", p, new_ws<BF, WgmmaGemmWS<BF, 1, 6, 1>>(p), filter);
      run(tag + " bf16 N-major s4", p, new_ws<BF, WgmmaGemmWS<BF, 1, 4, 1>>(p), filter);
      run(tag + " bf16 N-major s4 cl2", p, new_ws<BF, WgmmaGemmWS<BF, 1, 4, 2>>(p), filter);
      auto kmaj = [&p, bias](auto g, bool epi, WgmmaWsTuning tune) -> Launch {
        using G = decltype(g);
        return [&p, bias, epi, tune](int s, cudaStream_t st) {
          if (epi)
            return wgmma_ws_gemm_launch<G>(p.X[s], p.lda, p.W0[s], p.W0[s], p.K, p.C, p.ldc, p.M,
                                           p.N, p.K, EpiBiasSilu<BF>{bias}, st, tune);
          return wgmma_ws_gemm_launch<G>(p.X[s], p.lda, p.W0[s], p.W0[s], p.K, p.C, p.ldc, p.M, p.N,
                                         p.K, WgmmaEpiIdentity(), st, tune);
        };
      };
      run(tag + " bf16 K-major s6 (err n/a)", p,
          kmaj(WgmmaGemmWS<BF, 1, 6, 1, true>(), false, tuning(8)), filter);
      run(tag + " bf16 K-major s6 bias-silu (err n/a)", p,
          kmaj(WgmmaGemmWS<BF, 1, 6, 1, true>(), true, tuning(8)), filter);
      auto kmaj_epi = [&p](auto g, auto epi) -> Launch {
        using G = decltype(g);
        return [&p, epi](int s, cudaStream_t st) {
          return wgmma_ws_gemm_launch<G>(p.X[s], p.lda, p.W0[s], p.W0[s], p.K, p.C, p.ldc, p.M, p.N,
                                         p.K, epi, st);
        };
      };
      using K6 = WgmmaGemmWS<BF, 1, 6, 1, true>;
      run(tag + " bf16 K-major s6 bias (err n/a)", p, kmaj_epi(K6(), EpiBias<BF>{bias}), filter);
      run(tag + " bf16 K-major s6 silu (err n/a)", p, kmaj_epi(K6(), EpiSilu()), filter);
      run(tag + " bf16 K-major s6 bias-silu-fast (err n/a)", p,
          kmaj_epi(K6(), EpiBiasSiluFast<BF>{bias}), filter);
      using P6 = WgmmaGemmWS<BF, 1, 6, 1, true, true>;
      run(tag + " bf16 K-major s6 pp (err n/a)", p, kmaj(P6(), false, tuning(8)), filter);
      run(tag + " bf16 K-major s6 pp bias-silu (err n/a)", p, kmaj(P6(), true, tuning(8)), filter);
      run(tag + " bf16 K-major s6 pp bias-silu-fast (err n/a)", p,
          kmaj_epi(P6(), EpiBiasSiluFast<BF>{bias}), filter);
      run(tag + " bf16 K-major s4 pp cl2 (err n/a)", p,
          kmaj(WgmmaGemmWS<BF, 1, 4, 2, true, true>(), false, tuning(8)), filter);
      run(tag + " bf16 K-major s4 (err n/a)", p,
          kmaj(WgmmaGemmWS<BF, 1, 4, 1, true>(), false, tuning(8)), filter);
      run(tag + " bf16 K-major s4 cl2 (err n/a)", p,
          kmaj(WgmmaGemmWS<BF, 1, 4, 2, true>(), false, tuning(8)), filter);
      run(tag + " bf16 K-major s6 g4 (err n/a)", p,
          kmaj(WgmmaGemmWS<BF, 1, 6, 1, true>(), false, tuning(4)), filter);
      run(tag + " bf16 K-major s6 g16 (err n/a)", p,
          kmaj(WgmmaGemmWS<BF, 1, 6, 1, true>(), false, tuning(16)), filter);
    }
  }
  printf("\n%-46s %9s %8s %9s\n", "configuration", "us", "TFLOP/s", "rel_l2");
  bool ok = true;
  for (const Row& r : g_rows) {
    printf("%-46s %9.1f %8.0f %9.1e%s\n", r.name.c_str(), r.us, r.tflops, r.err,
           (r.err <= 5e-3 && r.nans == 0) ? "" : " BAD");
    ok = ok && r.err <= 5e-3 && r.nans == 0;
  }
  return ok ? 0 : 1;
}
