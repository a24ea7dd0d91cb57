// The GPU harness: a standalone .cu with main() that checks a candidate's emitted kernels against
// a float64 reference of the spec and times them.
//
// The reference is deliberately naive: one generic float64 kernel per predefined op of the spec
// (a thread per output element, a register-tiled matmul), so that it shares no code path with
// what it checks. Inputs come from the documented seeded generator (codegen/kiln_rng.h), so the
// CPU interpreter can reproduce any failing case bit for bit.
//
// The checks alternate the generator's two distributions: check c (seed + c) draws uniform
// inputs when c is even and normal inputs of std 1 when c is odd, because the spec's range rule
// asks for both. The same rule exempts inputs on which the float64 reference itself leaves the
// f32 range (an intermediate beyond FLT_MAX or not finite): such a check is printed as exempt and
// neither passes nor fails.
#include <cmath>
#include <limits>
#include <set>

#include "emit_internal.h"
#include "kiln/ir/diag.h"

namespace kiln {

namespace cgen {

namespace {

int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Static device and host code of the harness (no per-graph content).
const char* kHarnessRuntime = R"cu(
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
)cu";

const char* kHarnessMain = R"cu(
using namespace kiln_harness;

static void* dev_alloc(size_t bytes) {
  void* p = nullptr;
  KILN_CK(cudaMalloc(&p, bytes < 256 ? 256 : bytes));
  return p;
}

// Input i under `seed`: the uniform generator when sd is 0, else normal of standard deviation sd.
static void gen_input(int i, void* p, uint64_t seed, float sd, cudaStream_t s) {
  const uint64_t st = kiln_rng_stream(seed, i);
  const int64_t n = kInNumel[i];
  if (sd > 0) {
    switch (kInDtype[i]) {
      case 0: gen_normal_kernel<__half><<<grid_for(n), 256, 0, s>>>((__half*)p, n, st, sd); break;
      case 1: gen_normal_kernel<__nv_bfloat16><<<grid_for(n), 256, 0, s>>>((__nv_bfloat16*)p, n, st, sd); break;
      default: gen_normal_kernel<float><<<grid_for(n), 256, 0, s>>>((float*)p, n, st, sd); break;
    }
  } else {
    switch (kInDtype[i]) {
      case 0: gen_kernel<__half><<<grid_for(n), 256, 0, s>>>((__half*)p, n, st); break;
      case 1: gen_kernel<__nv_bfloat16><<<grid_for(n), 256, 0, s>>>((__nv_bfloat16*)p, n, st); break;
      default: gen_kernel<float><<<grid_for(n), 256, 0, s>>>((float*)p, n, st); break;
    }
  }
  KILN_CK(cudaGetLastError());
}

// How the "check" lines name an input distribution: "uniform", or "normal" and the standard
// deviation ("normal1" for the range rule's std 1).
static void dist_name(double sd, char* buf, size_t n) {
  if (sd > 0) snprintf(buf, n, "normal%g", sd);
  else snprintf(buf, n, "uniform");
}

// The number of values of the last reference run that are not finite in f32: its outputs, its
// workspace (every other tensor of the spec but the inputs, which are values of their dtype,
// plus the sums that mean and rms_norm accumulate; zeroed before the run, so padding counts as
// in range) and the spec's constants. Nonzero means the run is outside the spec's range rule.
static double ref_out_of_range(double* const* rout, const double* rws, size_t rws_doubles,
                               double* acc, cudaStream_t s) {
  KILN_CK(cudaMemsetAsync(acc, 0, sizeof(double), s));
  for (int o = 0; o < kNumOut; ++o) {
    range_kernel<<<grid_for(kOutNumel[o]), 256, 0, s>>>(rout[o], kOutNumel[o], acc);
    KILN_CK(cudaGetLastError());
  }
  if (rws_doubles) {
    range_kernel<<<grid_for((int64_t)rws_doubles), 256, 0, s>>>(rws, (int64_t)rws_doubles, acc);
    KILN_CK(cudaGetLastError());
  }
  double h = 0;
  KILN_CK(cudaMemcpyAsync(&h, acc, sizeof(h), cudaMemcpyDeviceToHost, s));
  KILN_CK(cudaStreamSynchronize(s));
  return h + kRefConstOutOfRange;
}

static void widen(int dtype, const void* p, double* q, int64_t n, cudaStream_t s) {
  switch (dtype) {
    case 0: widen_kernel<__half><<<grid_for(n), 256, 0, s>>>((const __half*)p, q, n); break;
    case 1: widen_kernel<__nv_bfloat16><<<grid_for(n), 256, 0, s>>>((const __nv_bfloat16*)p, q, n); break;
    default: widen_kernel<float><<<grid_for(n), 256, 0, s>>>((const float*)p, q, n); break;
  }
  KILN_CK(cudaGetLastError());
}

static double compare(int o, const void* out, const double* ref, double* acc, cudaStream_t s,
                      double* bad_out) {
  const int64_t n = kOutNumel[o];
  KILN_CK(cudaMemsetAsync(acc, 0, 4 * sizeof(double), s));
  switch (kOutDtype[o]) {
    case 0: compare_kernel<__half><<<grid_for(n), 256, 0, s>>>((const __half*)out, ref, n, acc); break;
    case 1: compare_kernel<__nv_bfloat16><<<grid_for(n), 256, 0, s>>>((const __nv_bfloat16*)out, ref, n, acc); break;
    default: compare_kernel<float><<<grid_for(n), 256, 0, s>>>((const float*)out, ref, n, acc); break;
  }
  KILN_CK(cudaGetLastError());
  double h[4];
  KILN_CK(cudaMemcpyAsync(h, acc, sizeof(h), cudaMemcpyDeviceToHost, s));
  KILN_CK(cudaStreamSynchronize(s));
  *bad_out = h[3];
  if (h[3] > 0) return INFINITY;
  double den = h[1] > 0 ? sqrt(h[1]) : sqrt(h[2]);
  if (den == 0) return h[0] == 0 ? 0.0 : INFINITY;
  double e = sqrt(h[0]) / den;
  return isnan(e) ? INFINITY : e;
}

int main(int argc, char** argv) {
  bool check_only = false, no_check = false, kernel_only = false;
  uint64_t seed = kDefaultSeed;
  int repeats = kDefaultRepeats, checks = kDefaultChecks;
  // Negative: check c uses the uniform generator when c is even and normal std 1 when c is odd
  // (the spec's range rule); else every check uses this std (0: uniform).
  double input_std = -1;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--check-only")) check_only = true;
    else if (!strcmp(argv[i], "--no-check")) no_check = true;
    else if (!strcmp(argv[i], "--kernel-only")) kernel_only = true;
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], nullptr, 10);
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--checks") && i + 1 < argc) checks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--input-std") && i + 1 < argc) {
      char* end = nullptr;
      const char* v = argv[++i];
      input_std = strtod(v, &end);
      // Written so that NaN fails too; 1e4 keeps 6 sd (the largest value) below f16's 65504.
      if (end == v || *end != 0 || !(input_std >= 0 && input_std <= 1e4)) {
        fprintf(stderr, "%s: --input-std must be a number in [0, 1e4] (0: uniform), got %s\n", argv[0], v);
        return 2;
      }
    }
    else { fprintf(stderr, "usage: %s [--check-only] [--no-check] [--kernel-only] [--seed S] [--repeats R] [--checks C] [--input-std S]\n", argv[0]); return 2; }
  }
  cudaDeviceProp prop;
  KILN_CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s (sm_%d%d, %d SMs, L2 %d MB)\n", prop.name, prop.major, prop.minor,
         prop.multiProcessorCount, prop.l2CacheSize >> 20);
  cudaStream_t s;
  KILN_CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Kiln buffers.
  void* in[kNumIn];
  void* out[kNumOut];
  size_t in_bytes_total = 0;
  for (int i = 0; i < kNumIn; ++i) in[i] = dev_alloc(kInBytes[i]), in_bytes_total += kInBytes[i];
  for (int o = 0; o < kNumOut; ++o) out[o] = dev_alloc(kOutBytes[o]);
  const size_t ws_bytes = KILN_WS_BYTES();
  void* ws = ws_bytes ? dev_alloc(ws_bytes) : nullptr;
  // Reference buffers.
  double* rin[kNumIn];
  double* rout[kNumOut];
  for (int i = 0; i < kNumIn; ++i) rin[i] = (double*)dev_alloc(kInNumel[i] * sizeof(double));
  for (int o = 0; o < kNumOut; ++o) rout[o] = (double*)dev_alloc(kOutNumel[o] * sizeof(double));
  const size_t rws_doubles = kiln_ref_workspace_doubles();
  double* rws = rws_doubles ? (double*)dev_alloc(rws_doubles * sizeof(double)) : nullptr;
  double* acc = (double*)dev_alloc(4 * sizeof(double));

  bool ok = true;
  double max_err = 0.0;
  if (kernel_only) {
    // One call on fresh inputs and nothing else (no reference, no timing): what a memory or race
    // checker should look at.
    for (int i = 0; i < kNumIn; ++i) gen_input(i, in[i], seed, input_std > 0 ? (float)input_std : 0.0f, s);
    for (int o = 0; o < kNumOut; ++o) KILN_CK(cudaMemsetAsync(out[o], 0xff, kOutBytes[o], s));
    KILN_CK(KILN_CALL(in, out, ws, s));
    KILN_CK(cudaStreamSynchronize(s));
    KILN_CK(cudaGetLastError());
    printf("kernel-only run done\n");
    return 0;
  }
  int checks_run = 0, exempt = 0;
  if (!no_check) {
    for (int c = 0; c < checks; ++c) {
      const uint64_t cs = seed + (uint64_t)c;
      const double cstd = input_std >= 0 ? input_std : (c % 2 ? 1.0 : 0.0);
      char dist[32];
      dist_name(cstd, dist, sizeof dist);
      for (int i = 0; i < kNumIn; ++i) {
        gen_input(i, in[i], cs, (float)cstd, s);
        widen(kInDtype[i], in[i], rin[i], kInNumel[i], s);
      }
      if (rws) KILN_CK(cudaMemsetAsync(rws, 0, rws_doubles * sizeof(double), s));
      KILN_CK(kiln_ref_run((const double* const*)rin, rout, rws, s));
      KILN_CK(cudaStreamSynchronize(s));
      // The range rule: the kernel must be right where every intermediate of the float64
      // reference is finite in f32. Where one is not, the check is exempt: neither pass nor fail
      // (the kernel still runs, so a CUDA error still counts).
      const double oor = ref_out_of_range(rout, rws, rws_doubles, acc, s);
      const bool is_exempt = oor > 0;
      // Poison outputs and workspace with NaN (all-ones bytes are NaN in f16, bf16 and f32).
      for (int o = 0; o < kNumOut; ++o) KILN_CK(cudaMemsetAsync(out[o], 0xff, kOutBytes[o], s));
      if (ws) KILN_CK(cudaMemsetAsync(ws, 0xff, ws_bytes, s));
      KILN_CK(KILN_CALL(in, out, ws, s));
      KILN_CK(cudaStreamSynchronize(s));
      KILN_CK(cudaGetLastError());
      ++checks_run;
      exempt += is_exempt;
      for (int o = 0; o < kNumOut; ++o) {
        double bad = 0;
        double e = compare(o, out[o], rout[o], acc, s, &bad);
        const bool pass = e <= kOutTol[o];
        printf("check seed=%llu dist=%s output=%s err=%.3e tol=%.1e nonfinite=%.0f %s\n",
               (unsigned long long)cs, dist, kOutName[o], e, kOutTol[o], bad,
               is_exempt ? "exempt" : pass ? "ok" : "FAIL");
        if (is_exempt) continue;
        ok &= pass;
        if (e > max_err) max_err = e;
      }
      if (is_exempt)
        printf("exempt seed=%llu dist=%s: the float64 reference leaves the f32 range (%.0f values "
               "beyond FLT_MAX or not finite); this check neither passes nor fails\n",
               (unsigned long long)cs, dist, oor);
    }
    if (checks_run > 0 && exempt == checks_run)
      printf("all %d checks exempt: nothing was checked (the reference leaves the f32 range on "
             "every input)\n", checks_run);
  }
  double median_us = NAN;
  int copies = 0, calls = 0;
  if (!check_only) {
    // Input copies: enough to stream more than twice the L2 (at least 4), within memory.
    size_t l2 = (size_t)prop.l2CacheSize > kL2Bytes ? (size_t)prop.l2CacheSize : kL2Bytes;
    size_t per = in_bytes_total ? in_bytes_total : 1;
    size_t want = (2 * l2 + per - 1) / per + 1;
    size_t free_b = 0, total_b = 0;
    KILN_CK(cudaMemGetInfo(&free_b, &total_b));
    size_t cap = (free_b / 2) / per;
    copies = (int)(want < 4 ? 4 : want);
    if (copies > 1024) copies = 1024;
    if ((size_t)copies > cap) copies = (int)(cap < 1 ? 1 : cap);
    void** cin = (void**)malloc(sizeof(void*) * copies * kNumIn);
    for (int c = 0; c < copies; ++c)
      for (int i = 0; i < kNumIn; ++i) {
        cin[c * kNumIn + i] = dev_alloc(kInBytes[i]);
        gen_input(i, cin[c * kNumIn + i], seed + 1000 + c, 0.0f, s);
      }
    KILN_CK(cudaStreamSynchronize(s));
    calls = copies > kMinCalls ? copies : kMinCalls;
    // Warm up outside the graph (module load, attribute setting).
    for (int w = 0; w < 3; ++w) KILN_CK(KILN_CALL(&cin[(w % copies) * kNumIn], out, ws, s));
    KILN_CK(cudaStreamSynchronize(s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    KILN_CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    for (int r = 0; r < calls; ++r) KILN_CK(KILN_CALL(&cin[(r % copies) * kNumIn], out, ws, s));
    KILN_CK(cudaStreamEndCapture(s, &graph));
    KILN_CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    KILN_CK(cudaEventCreate(&e0));
    KILN_CK(cudaEventCreate(&e1));
    for (int w = 0; w < 3; ++w) KILN_CK(cudaGraphLaunch(exec, s));
    KILN_CK(cudaStreamSynchronize(s));
    float* t = (float*)malloc(sizeof(float) * repeats);
    for (int r = 0; r < repeats; ++r) {
      KILN_CK(cudaEventRecord(e0, s));
      KILN_CK(cudaGraphLaunch(exec, s));
      KILN_CK(cudaEventRecord(e1, s));
      KILN_CK(cudaEventSynchronize(e1));
      float ms = 0;
      KILN_CK(cudaEventElapsedTime(&ms, e0, e1));
      t[r] = ms * 1000.0f / calls;
    }
    for (int a = 1; a < repeats; ++a)
      for (int b = a; b > 0 && t[b - 1] > t[b]; --b) {
        float x = t[b];
        t[b] = t[b - 1];
        t[b - 1] = x;
      }
    median_us = repeats > 0 ? (repeats % 2 ? t[repeats / 2] : 0.5 * (t[repeats / 2 - 1] + t[repeats / 2])) : NAN;
    printf("timing: %d calls per graph, %d input copies (%.1f MB each), %d repeats, min %.2f us, median %.2f us\n",
           calls, copies, per / 1e6, repeats, repeats ? t[0] : NAN, median_us);
  }
  // err is the largest error of the checks that counted: nan when every check was exempt.
  printf("KILN_RESULT name=%s ok=%d err=%.3e us=%.2f calls=%d copies=%d checks=%d exempt=%d\n",
         kName, ok ? 1 : 0, checks_run > 0 && exempt == checks_run ? NAN : max_err, median_us,
         calls, copies, checks_run, exempt);
  return ok ? 0 : 1;
}
)cu";

// ---- the float64 reference ------------------------------------------------------------------

struct RefCtx {
  const KernelGraph& g;
  Code kernels;
  Code launch;
  std::vector<int64_t> offset;  // doubles into the reference workspace, -1 if not there
  int64_t ws = 0;               // doubles of reference workspace so far
  // Places n doubles in the reference workspace (32-aligned) and returns their offset.
  int64_t place(int64_t n) {
    const int64_t at = ws;
    ws += cdiv(n, 32) * 32;
    return at;
  }
  bool is_const(int t) const {
    int p = g.producer(t);
    return p >= 0 && g.ops[p].kind == OpKind::Constant;
  }
  double cval(int t) const { return g.ops[g.producer(t)].attrs.value; }
};

// `extra`: a further argument after the output (e.g. where the kernel keeps its sums).
void ref_launch(RefCtx& x, const std::string& kernel, int64_t work, const std::vector<int>& ins,
                int outt, const std::string& extra = "") {
  std::vector<std::string> args;
  for (int t : ins)
    if (!x.is_const(t)) args.push_back(fmt::format("t{}", t));
  args.push_back(fmt::format("t{}", outt));
  if (!extra.empty()) args.push_back(extra);
  x.launch.f("kiln_ref::{}<<<kiln_harness::grid_for({}), 256, 0, stream>>>({});", kernel, work,
             fmt::join(args, ", "));
  x.launch.line("if ((err = cudaGetLastError()) != cudaSuccess) return err;");
}

}  // namespace

void emit_reference(const KernelGraph& g, Code& out) {
  RefCtx x{g, {}, {}, {}};
  x.launch.set_indent(1);
  const int nt = static_cast<int>(g.tensors.size());
  std::set<int> ins(g.inputs.begin(), g.inputs.end()), outs(g.outputs.begin(), g.outputs.end());
  x.offset.assign(nt, -1);
  // Every tensor of the spec but its inputs, outputs and constants lives in the workspace, so
  // the harness can see every intermediate (the range rule: ref_out_of_range).
  for (int t = 0; t < nt; ++t) {
    if (ins.count(t) || outs.count(t) || x.is_const(t)) continue;
    x.offset[t] = x.place(numel(g.tensor(t).shape));
  }
  for (size_t k = 0; k < g.ops.size(); ++k) {
    const KernelOp& op = g.ops[k];
    const OpClass cls = op_info(op.kind).cls;
    if (cls == OpClass::Constant) continue;
    KILN_ASSERT(cls != OpClass::GraphDefined, "the reference graph must be a spec");
    std::string name = fmt::format("r{}_{}", k, op.name);
    int y = op.outputs[0];
    const Shape& ys = g.tensor(y).shape;
    std::vector<std::string> params;
    for (size_t j = 0; j < op.inputs.size(); ++j)
      if (!x.is_const(op.inputs[j]))
        params.push_back(fmt::format("const double* __restrict__ a{}", j));
    params.push_back("double* __restrict__ y");
    auto operand = [&](size_t j, const std::string& off) {
      int t = op.inputs[j];
      return x.is_const(t) ? dlit(x.cval(t)) : fmt::format("a{}[{}]", j, off);
    };
    Code& c = x.kernels;
    const std::string loop =
        "for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < {}; e += "
        "(int64_t)gridDim.x * blockDim.x) {{";
    if (cls == OpClass::Matmul) {
      const Shape& a = g.tensor(op.inputs[0]).shape;
      const Shape& b = g.tensor(op.inputs[1]).shape;
      int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
      Shape ob(ys.begin(), ys.end() - 2);
      while (ob.size() < 2) ob.insert(ob.begin(), 1);
      auto bst = [&](const Shape& s) {
        Shape sb(s.begin(), s.end() - 2);
        std::vector<int64_t> st = strides_of(s), r(2, 0);
        for (size_t q = 0; q < sb.size(); ++q)
          if (sb[q] != 1) r[q + (2 - sb.size())] = st[q];
        return r;
      };
      std::vector<int64_t> as = bst(a), bs = bst(b);
      x.launch.f(
          "kiln_harness::ref_matmul<<<dim3({}, {}, {}), 256, 0, stream>>>(t{}, t{}, t{}, {}, {}, "
          "{}, {}, {}ll, {}ll, {}ll, {}ll);",
          cdiv(N, 64), cdiv(M, 64), ob[0] * ob[1], op.inputs[0], op.inputs[1], y, M, N, K, ob[1],
          as[0], as[1], bs[0], bs[1]);
      x.launch.line("if ((err = cudaGetLastError()) != cudaSuccess) return err;");
      continue;
    }
    // mean and rms_norm also keep the sum they accumulate (of x, of x²) in the workspace: an
    // intermediate of the float64 reference that no tensor of the spec holds.
    const bool keeps_sum = op.kind == OpKind::Mean || cls == OpClass::RmsNorm;
    if (keeps_sum) params.push_back("double* __restrict__ q");
    std::string extra;
    c.open(fmt::format("__global__ void {}({}) {{", name, fmt::join(params, ", ")));
    int64_t work = numel(ys);
    switch (cls) {
      case OpClass::Binary:
      case OpClass::Unary: {
        c.open(fmt::format(fmt::runtime(loop), work));
        std::vector<std::string> idx = unravel(c, "e", ys, "i", "int64_t");
        std::vector<std::string> xs;
        for (size_t j = 0; j < op.inputs.size(); ++j) {
          const Shape& s = g.tensor(op.inputs[j]).shape;
          xs.push_back(operand(j, offset_expr(bcast_index(s, ys, idx), strides_of(s))));
        }
        c.f("y[e] = {};", ew_expr_f64(op.kind, op.attrs, xs));
        c.close();
        break;
      }
      case OpClass::Transpose: {
        const Shape& s = g.tensor(op.inputs[0]).shape;
        c.open(fmt::format(fmt::runtime(loop), work));
        std::vector<std::string> idx = unravel(c, "e", ys, "i", "int64_t");
        std::vector<std::string> in_idx(idx.size());
        for (size_t d = 0; d < idx.size(); ++d) in_idx[op.attrs.perm[d]] = idx[d];
        c.f("y[e] = {};", operand(0, offset_expr(in_idx, strides_of(s))));
        c.close();
        break;
      }
      case OpClass::Reduce:
      case OpClass::Softmax:
      case OpClass::RmsNorm: {
        const Shape& s = g.tensor(op.inputs[0]).shape;
        int dim = cls == OpClass::RmsNorm ? static_cast<int>(s.size()) - 1
                                          : static_cast<int>(op.attrs.dim);
        int64_t outer = 1, R = s[dim], inner = 1;
        for (int d = 0; d < dim; ++d) outer *= s[d];
        for (size_t d = dim + 1; d < s.size(); ++d) inner *= s[d];
        work = outer * inner;
        if (keeps_sum) extra = fmt::format("ws + {}", x.place(work));
        c.open(fmt::format(fmt::runtime(loop), work));
        c.f("const int64_t ou = e / {}, in = e % {};", inner, inner);
        c.f("const double* xp = a0 + ou * {} + in;", R * inner);
        std::string at = fmt::format("xp[(int64_t)k * {}]", inner);
        if (cls == OpClass::Reduce) {
          bool mx = op.kind == OpKind::Max;
          c.f("double acc = {};", mx ? "-INFINITY" : "0.0");
          c.f("for (int k = 0; k < {}; ++k) acc = {};", R,
              mx ? "fmax(acc, " + at + ")" : "acc + " + at);
          if (op.kind == OpKind::Mean) {
            c.line("q[e] = acc;");
            c.f("acc /= {}.0;", R);
          }
          c.line("y[e] = acc;");
        } else if (cls == OpClass::Softmax) {
          c.line("double m = -INFINITY, sum = 0.0;");
          c.f("for (int k = 0; k < {}; ++k) m = fmax(m, {});", R, at);
          c.f("for (int k = 0; k < {}; ++k) sum += exp({} - m);", R, at);
          c.f("for (int k = 0; k < {}; ++k) y[ou * {} + (int64_t)k * {} + in] = exp({} - m) / sum;",
              R, R * inner, inner, at);
        } else {
          c.line("double ss = 0.0;");
          c.f("for (int k = 0; k < {}; ++k) ss += {} * {};", R, at, at);
          c.line("q[e] = ss;");
          c.f("const double r = 1.0 / sqrt(ss / {}.0 + {});", R, dlit(op.attrs.eps));
          std::string w = op.inputs.size() == 2 ? operand(1, "k") : "1.0";
          c.f("for (int k = 0; k < {}; ++k) y[e * {} + k] = {} * r * {};", R, R, at, w);
        }
        c.close();
        break;
      }
      case OpClass::Matmul:
      case OpClass::Constant:
      case OpClass::GraphDefined:
      case OpClass::Input:
      case OpClass::Output:
      case OpClass::Accum:
      case OpClass::Fused:
        KILN_ASSERT(false, "no reference kernel for {}", op_name(op.kind));
    }
    c.close();
    c.line("");
    KILN_ASSERT(keeps_sum == !extra.empty(), "{}: where its sums go", name);
    ref_launch(x, name, work, op.inputs, y, extra);
  }
  out.line("namespace kiln_ref {");
  out.append(x.kernels);
  out.line("}  // namespace kiln_ref");
  out.line("");
  out.f("static size_t kiln_ref_workspace_doubles() {{ return {}; }}", x.ws);
  out.open(
      "static cudaError_t kiln_ref_run(const double* const* in, double* const* out, double* ws, "
      "cudaStream_t stream) {");
  out.line("cudaError_t err = cudaSuccess;");
  out.line("(void)ws;");
  std::set<int> placed;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    if (placed.insert(g.inputs[i]).second)
      out.f("const double* const t{} = in[{}];", g.inputs[i], i);
  std::vector<std::string> copies;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    int t = g.outputs[i];
    if (x.is_const(t)) {
      copies.push_back(fmt::format(
          "{{ const double v = {}; if ((err = cudaMemcpyAsync(out[{}], &v, sizeof(double), "
          "cudaMemcpyHostToDevice, stream)) != cudaSuccess) return err; "
          "if ((err = cudaStreamSynchronize(stream)) != cudaSuccess) return err; }}",
          dlit(x.cval(t)), i));
      continue;
    }
    if (placed.insert(t).second)
      out.f("double* const t{} = out[{}];", t, i);
    else
      copies.push_back(
          fmt::format("if ((err = cudaMemcpyAsync(out[{}], t{}, {} * sizeof(double), "
                      "cudaMemcpyDeviceToDevice, stream)) != cudaSuccess) return err;",
                      i, t, numel(g.tensor(t).shape)));
  }
  for (int t = 0; t < nt; ++t)
    if (x.offset[t] >= 0 && placed.insert(t).second)
      out.f("double* const t{} = ws + {};", t, x.offset[t]);
  out.append(x.launch);
  for (const std::string& c : copies) out.line(c);
  out.line("return cudaSuccess;");
  out.close();
  out.line("");
}

}  // namespace cgen

std::string emit_harness(const KernelGraph& candidate, const KernelGraph& spec,
                         const HarnessOptions& opt) {
  // The two graphs must agree on the interface.
  auto sig = [](const KernelGraph& g, const std::vector<int>& ids) {
    std::vector<std::pair<Shape, DType>> v;
    for (int t : ids) v.push_back({g.tensor(t).shape, g.tensor(t).dtype});
    return v;
  };
  if (sig(candidate, candidate.inputs) != sig(spec, spec.inputs) ||
      sig(candidate, candidate.outputs) != sig(spec, spec.outputs))
    user_error(ErrorCode::Shape,
               "the μGraph {} and the spec {} differ in their inputs or outputs (shapes, dtypes "
               "or order)",
               candidate.name, spec.name);
  if (!spec.is_spec())
    user_error(ErrorCode::Unsupported,
               "the harness reference must be a spec (no graph-defined ops)");
  cgen::Code out;
  const std::string name = emitted_name(candidate, opt.emit);
  const std::string file = opt.file.empty() ? "harness_" + name + ".cu" : opt.file;
  const size_t dot = file.rfind('.');
  const std::string exe =
      dot == std::string::npos || dot == 0 ? file + ".out" : file.substr(0, dot);
  std::string kernel = emit_cuda(candidate, opt.emit);
  out.raw(fmt::format(
      "// Kiln GPU harness for {0}: checks kiln_{0} against a float64 reference of spec {1}, then\n"
      "// times it (CUDA-graph replays, inputs rotating over enough copies to defeat L2).\n"
      "// Build: {2}\n"
      "// Run:   ./{3} [--check-only | --kernel-only] [--seed S] [--repeats R]\n"
      "//        [--checks C] [--input-std S]  (checks alternate uniform and normal std-1\n"
      "//        inputs; --input-std S gives every check std S, 0: uniform)\n"
      "// Prints: KILN_RESULT name={0} ok=0|1 err=MAX_REL_ERR us=MEDIAN_US ... checks=N exempt=E;\n"
      "// exit 0 ok, 1 mismatch, 2 CUDA error.\n\n",
      name, spec.name, nvcc_command(file, exe, opt.emit.arch), exe));
  out.raw(kernel);
  out.raw("\n// ==== harness " + std::string(78, '=') + "\n\n");
  out.raw("#include <math.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\n");
  out.raw(rng_text());
  out.raw("\n");
  // Per-graph constants.
  std::vector<std::string> in_numel, in_bytes, in_dtype, out_numel, out_bytes, out_dtype, out_tol,
      out_name;
  auto dcode = [](DType d) { return d == DType::F16 ? "0" : d == DType::BF16 ? "1" : "2"; };
  for (int t : candidate.inputs) {
    const TensorDesc& d = candidate.tensor(t);
    in_numel.push_back(std::to_string(numel(d.shape)) + "ll");
    in_bytes.push_back(std::to_string(numel(d.shape) * dtype_bytes(d.dtype)) + "ull");
    in_dtype.push_back(dcode(d.dtype));
  }
  for (int t : candidate.outputs) {
    const TensorDesc& d = candidate.tensor(t);
    out_numel.push_back(std::to_string(numel(d.shape)) + "ll");
    out_bytes.push_back(std::to_string(numel(d.shape) * dtype_bytes(d.dtype)) + "ull");
    out_dtype.push_back(dcode(d.dtype));
    double tol = d.dtype == DType::F32 ? 1e-4 : d.dtype == DType::F16 ? 5e-3 : 2e-2;
    out_tol.push_back(fmt::format("{}", tol));
    out_name.push_back("\"" + d.name + "\"");
  }
  // Float64 reference matmuls are slow (tens of TFLOP/s at best): big ones get two checks, and
  // every harness at least two by default, one per input distribution (uniform, normal std 1).
  double ref_flops = 0;
  for (const KernelOp& op : spec.ops)
    if (op.kind == OpKind::MatMul) {
      const Shape& a = spec.tensor(op.inputs[0]).shape;
      ref_flops += 2.0 * double(numel(spec.tensor(op.outputs[0]).shape)) * double(a.back());
    }
  const int checks = ref_flops > 5e10 ? 2 : std::max(opt.checks, 2);
  // A constant beyond the f32 range is an intermediate no input can bring back into it.
  int const_out_of_range = 0;
  for (const KernelOp& op : spec.ops)
    if (op.kind == OpKind::Constant &&
        !(std::fabs(op.attrs.value) <= double(std::numeric_limits<float>::max())))
      ++const_out_of_range;
  out.raw(fmt::format("static const char* const kName = \"{}\";\n", name));
  out.raw(cgen::kHarnessRuntime);
  out.raw("\n");
  out.raw(fmt::format(
      "static const int kNumIn = {};\nstatic const int kNumOut = {};\n"
      "static const int64_t kInNumel[] = {{{}}};\nstatic const size_t kInBytes[] = {{{}}};\n"
      "static const int kInDtype[] = {{{}}};\n"
      "static const int64_t kOutNumel[] = {{{}}};\nstatic const size_t kOutBytes[] = {{{}}};\n"
      "static const int kOutDtype[] = {{{}}};\nstatic const double kOutTol[] = {{{}}};\n"
      "static const char* const kOutName[] = {{{}}};\n"
      "static const uint64_t kDefaultSeed = {}ull;\nstatic const int kDefaultRepeats = {};\n"
      "static const int kDefaultChecks = {};\nstatic const int kMinCalls = {};\n"
      "static const size_t kL2Bytes = {}ull;\nstatic const double kRefConstOutOfRange = {};\n\n",
      candidate.inputs.size(), candidate.outputs.size(), fmt::join(in_numel, ", "),
      fmt::join(in_bytes, ", "), fmt::join(in_dtype, ", "), fmt::join(out_numel, ", "),
      fmt::join(out_bytes, ", "), fmt::join(out_dtype, ", "), fmt::join(out_tol, ", "),
      fmt::join(out_name, ", "), opt.seed, opt.repeats, checks, opt.min_calls, opt.l2_bytes,
      const_out_of_range));
  // The call of the candidate with arrays of pointers.
  std::vector<std::string> args;
  for (size_t i = 0; i < candidate.inputs.size(); ++i) args.push_back(fmt::format("(i_)[{}]", i));
  for (size_t i = 0; i < candidate.outputs.size(); ++i) args.push_back(fmt::format("(o_)[{}]", i));
  out.raw(fmt::format("#define KILN_CALL(i_, o_, w_, s_) kiln_{}({}, (w_), (s_))\n", name,
                      fmt::join(args, ", ")));
  out.raw(fmt::format("#define KILN_WS_BYTES() kiln_{}_workspace_bytes()\n\n", name));
  cgen::emit_reference(spec, out);
  out.raw(cgen::kHarnessMain);
  return out.str();
}

}  // namespace kiln
