// GPU test of the Kiln runtime (runtime/*.cuh): every device piece against a CPU reference
// computed here, then timings of the decode GEMV on benchmark-suite shapes.
//
// One standalone CUDA program (only the CUDA toolkit): fresh random inputs each run (the seed is
// printed; KILN_SEED=<n> replays one), outputs poisoned with NaN before each launch, every CUDA
// call checked, results judged by relative L2 error in float64. Prints one PASS/FAIL line per
// check, then the timing table, then "N passed, M failed"; exits nonzero on any failure.
// Build and run: scripts/gpu_runtime_test.sh. KILN_SKIP_TIMING=1 skips the timing section.
#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

// Guarded so that scripts/runtime_compile_check.sh can compile this file after the inlined
// (amalgamated) runtime text, as emitted kernels see it.
#ifndef KILN_RT_KILN_RUNTIME_CUH
#include "../../runtime/kiln_runtime.cuh"
#endif

using namespace kiln::rt;

// ---- Harness -----------------------------------------------------------------------------------

static int g_passed = 0, g_failed = 0;

static void finish_and_exit(int code) {
  printf("%d passed, %d failed\n", g_passed, g_failed);
  fflush(stdout);
  exit(code);
}

// Watchdog: a wrong mbarrier protocol hangs instead of failing, so each stage of the run gets a
// time limit after which the program reports the stage and exits at once (stdout is line
// buffered, so everything printed before is out).
static const char* volatile g_stage = "startup";
static void on_alarm(int) {
  char buf[256];
  int n = snprintf(buf, sizeof buf,
                   "FAIL watchdog: %s did not finish in time (hang?)\n%d passed, %d failed\n",
                   g_stage, g_passed, g_failed + 1);
  if (n > 0) (void)!write(1, buf, size_t(n) < sizeof buf ? size_t(n) : sizeof buf - 1);
  _exit(3);
}
static void stage(const char* name, unsigned seconds = 60) {
  fflush(stdout);
  g_stage = name;
  alarm(seconds);
}

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      printf("FAIL cuda: %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
      ++g_failed;                                                                             \
      finish_and_exit(2);                                                                     \
    }                                                                                         \
  } while (0)
#define CK_LAUNCH()              \
  do {                           \
    CK(cudaGetLastError());      \
    CK(cudaDeviceSynchronize()); \
  } while (0)

static void report(const std::string& name, bool ok, const char* fmt = "", ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  printf("%s %s %s\n", ok ? "PASS" : "FAIL", name.c_str(), buf);
  fflush(stdout);
  (ok ? g_passed : g_failed)++;
}

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uni() { return (next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  float range(float lo, float hi) { return float(lo + (hi - lo) * uni()); }
};
static Rng g_rng;

template <typename T>
float h2f(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(x);
  } else {
    return __bfloat162float(x);
  }
}
template <typename T>
T f2h(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(x);
  } else {
    return __float2bfloat16_rn(x);
  }
}
template <typename T>
const char* tname() {
  return std::is_same_v<T, float> ? "f32" : std::is_same_v<T, __half> ? "f16" : "bf16";
}

// Device buffer that poisons itself (all bits set: NaN for f16, bf16 and f32).
template <typename T>
struct DBuf {
  T* p = nullptr;
  size_t n = 0;
  explicit DBuf(size_t count) : n(count) {
    CK(cudaMalloc(&p, std::max<size_t>(1, n) * sizeof(T)));
    poison();
  }
  ~DBuf() { cudaFree(p); }
  DBuf(const DBuf&) = delete;
  void poison() { CK(cudaMemset(p, 0xff, n * sizeof(T))); }
  void upload(const std::vector<T>& h) {
    CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

template <typename T>
std::vector<T> random_vec(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::vector<T> v(n);
  for (auto& x : v) x = f2h<T>(g_rng.range(lo, hi));
  return v;
}

// ||out - ref|| / ||ref||; NaN anywhere in out gives NaN, which no threshold accepts.
template <typename T>
double rel_l2(const std::vector<T>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(h2f(out[i])) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
static bool within(double err, double thr) {
  return err <= thr;
}  // false for NaN

// ---- elementwise.cuh ---------------------------------------------------------------------------

template <class Op>
__global__ void k_unary(const float* x, float* y, int n, Op op) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = op(x[i]);
}
template <class Op>
__global__ void k_binary(const float* a, const float* b, float* y, int n, Op op) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = op(a[i], b[i]);
}

template <class Op, class Ref>
void test_unary(const char* name, Op op, float lo, float hi, Ref ref) {
  const int n = 1 << 14;
  auto x = random_vec<float>(n, lo, hi);
  DBuf<float> dx(n), dy(n);
  dx.upload(x);
  k_unary<<<n / 256, 256>>>(dx.p, dy.p, n, op);
  CK_LAUNCH();
  auto y = dy.download();
  std::vector<double> r(n);
  for (int i = 0; i < n; ++i) r[i] = ref(double(x[i]));
  const double err = rel_l2(y, r);
  report(std::string("elementwise.") + name, within(err, 2e-6), "rel_l2=%.2e", err);
}
template <class Op, class Ref>
void test_binary(const char* name, Op op, Ref ref) {
  const int n = 1 << 14;
  auto a = random_vec<float>(n, -4.0f, 4.0f);
  auto b = random_vec<float>(n, -4.0f, 4.0f);
  for (auto& v : b)
    if (std::fabs(v) < 0.25f) v = v < 0 ? v - 0.25f : v + 0.25f;  // keep div well-conditioned
  DBuf<float> da(n), db(n), dy(n);
  da.upload(a), db.upload(b);
  k_binary<<<n / 256, 256>>>(da.p, db.p, dy.p, n, op);
  CK_LAUNCH();
  auto y = dy.download();
  std::vector<double> r(n);
  for (int i = 0; i < n; ++i) r[i] = ref(double(a[i]), double(b[i]));
  const double err = rel_l2(y, r);
  report(std::string("elementwise.") + name, within(err, 1e-7), "rel_l2=%.2e", err);
}

// 16-byte load -> f32 -> 16-byte store must round-trip bit-exactly; from_f32 must round like
// the host conversion; pack2/unpack2 must agree with both.
template <typename T>
__global__ void k_convert(const T* in, T* out, const float* f, T* fout, T* pout, float* uout,
                          int nvec) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nvec) return;
  constexpr int E = Vec16<T>::kElems;
  float v[E];
  load16_f32(in + i * E, v);
  store16_f32(out + i * E, v);
#pragma unroll
  for (int e = 0; e < E; ++e) fout[i * E + e] = from_f32<T>(f[i * E + e]);
  if constexpr (sizeof(T) == 2) {
#pragma unroll
    for (int e = 0; e < E; e += 2) {
      const uint32_t w = pack2<T>(f[i * E + e], f[i * E + e + 1]);
      reinterpret_cast<uint32_t*>(pout)[(i * E + e) / 2] = w;
      const float2 u = unpack2<T>(w);
      uout[i * E + e] = u.x, uout[i * E + e + 1] = u.y;
    }
  }
}

template <typename T>
void test_convert() {
  const int nvec = 1024, E = Vec16<T>::kElems, n = nvec * E;
  auto in = random_vec<T>(n, -100.0f, 100.0f);
  auto f = random_vec<float>(n, -100.0f, 100.0f);
  DBuf<T> din(n), dout(n), dfout(n), dpout(n);
  DBuf<float> df(n), duout(n);
  din.upload(in), df.upload(f);
  k_convert<T><<<nvec / 128, 128>>>(din.p, dout.p, df.p, dfout.p, dpout.p, duout.p, nvec);
  CK_LAUNCH();
  auto out = dout.download(), fout = dfout.download(), pout = dpout.download();
  auto uout = duout.download();
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    if (std::memcmp(&out[i], &in[i], sizeof(T)) != 0) ++bad;
    const T hf = f2h<T>(f[i]);
    if (std::memcmp(&fout[i], &hf, sizeof(T)) != 0) ++bad;
    if constexpr (sizeof(T) == 2) {
      if (std::memcmp(&pout[i], &hf, sizeof(T)) != 0) ++bad;
      if (uout[i] != h2f(hf)) ++bad;
    }
  }
  report(std::string("elementwise.convert_") + tname<T>(), bad == 0, "mismatches=%d of %d", bad, n);
}

static void test_elementwise() {
  const double kPi = 3.14159265358979323846;
  test_unary("neg", Neg(), -8, 8, [](double x) { return -x; });
  test_unary("exp", Exp(), -10, 10, [](double x) { return std::exp(x); });
  test_unary("log", Log(), 0.01f, 100, [](double x) { return std::log(x); });
  test_unary("sqrt", Sqrt(), 0.0f, 100, [](double x) { return std::sqrt(x); });
  test_unary("rsqrt", Rsqrt(), 0.01f, 100, [](double x) { return 1.0 / std::sqrt(x); });
  test_unary("reciprocal", Reciprocal(), 0.1f, 10, [](double x) { return 1.0 / x; });
  test_unary("reciprocal_neg", Reciprocal(), -10, -0.1f, [](double x) { return 1.0 / x; });
  test_unary("square", Square(), -8, 8, [](double x) { return x * x; });
  test_unary("tanh", Tanh(), -6, 6, [](double x) { return std::tanh(x); });
  test_unary("sigmoid", Sigmoid(), -20, 20, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  test_unary("sigmoid_far", Sigmoid(), -200, 200,
             [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  test_unary("silu", Silu(), -20, 20, [](double x) { return x / (1.0 + std::exp(-x)); });
  test_unary("relu", Relu(), -8, 8, [](double x) { return x > 0 ? x : 0.0; });
  test_unary("gelu", Gelu(), -6, 6,
             [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); });
  test_unary("gelu_tanh", GeluTanh(), -6, 6, [&](double x) {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x)));
  });
  test_unary("leaky_relu", LeakyRelu{0.2f}, -8, 8,
             [](double x) { return x >= 0 ? x : x * double(0.2f); });
  test_unary("clamp", Clamp{-0.5f, 0.75f}, -2, 2,
             [](double x) { return std::min(std::max(x, -0.5), 0.75); });
  test_unary("clamp_min_only", Clamp{-0.5f}, -2, 2, [](double x) { return std::max(x, -0.5); });
  test_unary("identity", Identity(), -8, 8, [](double x) { return x; });
  test_unary("softplus", Softplus(), -30, 30,
             [](double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); });
  test_unary("softplus_far", Softplus(), -200, 200,
             [](double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); });
  test_unary("sin", Sin(), -20, 20, [](double x) { return std::sin(x); });
  test_unary("cos", Cos(), -20, 20, [](double x) { return std::cos(x); });
  test_binary("add", Add(), [](double a, double b) { return double(float(a + b)); });
  test_binary("sub", Sub(), [](double a, double b) { return double(float(a - b)); });
  test_binary("mul", Mul(), [](double a, double b) { return double(float(a * b)); });
  test_binary("div", Div(), [](double a, double b) { return double(float(a / b)); });
  test_binary("maximum", Maximum(), [](double a, double b) { return std::max(a, b); });
  test_binary("minimum", Minimum(), [](double a, double b) { return std::min(a, b); });
  test_convert<__half>();
  test_convert<__nv_bfloat16>();
  test_convert<float>();
}

// ---- reduce.cuh --------------------------------------------------------------------------------

template <int WIDTH>
__global__ void k_warp_reduce(const float* x, float* s, float* m) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[i] = warp_sum<WIDTH>(x[i]);
  m[i] = warp_max<WIDTH>(x[i]);
}
// Every thread writes the block result it received, so a thread that got a wrong value shows.
__global__ void k_block_reduce(const float* x, int per_block, float* s, float* m) {
  __shared__ float scratch[32];
  float ls = 0.0f, lm = -INFINITY;
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) {
    const float v = x[blockIdx.x * per_block + i];
    ls += v, lm = fmaxf(lm, v);
  }
  const float bs = block_sum(ls, scratch);
  const float bm = block_max(lm, scratch);  // back to back on the same scratch
  s[blockIdx.x * blockDim.x + threadIdx.x] = bs;
  m[blockIdx.x * blockDim.x + threadIdx.x] = bm;
}

template <int WIDTH>
void test_warp_reduce() {
  const int n = 4096;
  auto x = random_vec<float>(n, -10, 10);
  DBuf<float> dx(n), ds(n), dm(n);
  dx.upload(x);
  k_warp_reduce<WIDTH><<<n / 128, 128>>>(dx.p, ds.p, dm.p);
  CK_LAUNCH();
  auto s = ds.download(), m = dm.download();
  std::vector<double> rs(n);
  int bad_max = 0;
  for (int g = 0; g < n; g += WIDTH) {
    double sum = 0;
    float mx = -INFINITY;
    for (int i = 0; i < WIDTH; ++i) sum += x[g + i], mx = std::max(mx, x[g + i]);
    for (int i = 0; i < WIDTH; ++i) {
      rs[g + i] = sum;
      if (m[g + i] != mx) ++bad_max;
    }
  }
  const double err = rel_l2(s, rs);
  report("reduce.warp_w" + std::to_string(WIDTH), within(err, 1e-6) && bad_max == 0,
         "sum rel_l2=%.2e, max mismatches=%d", err, bad_max);
}

void test_block_reduce(int threads) {
  const int blocks = 37, per_block = 3001;
  auto x = random_vec<float>(size_t(blocks) * per_block, -10, 10);
  DBuf<float> dx(x.size()), ds(blocks * threads), dm(blocks * threads);
  dx.upload(x);
  k_block_reduce<<<blocks, threads>>>(dx.p, per_block, ds.p, dm.p);
  CK_LAUNCH();
  auto s = ds.download(), m = dm.download();
  std::vector<double> rs(blocks * threads);
  int bad_max = 0;
  for (int b = 0; b < blocks; ++b) {
    double sum = 0;
    float mx = -INFINITY;
    for (int i = 0; i < per_block; ++i)
      sum += x[b * per_block + i], mx = std::max(mx, x[b * per_block + i]);
    for (int t = 0; t < threads; ++t) {
      rs[b * threads + t] = sum;
      if (m[b * threads + t] != mx) ++bad_max;
    }
  }
  const double err = rel_l2(s, rs);
  report("reduce.block_" + std::to_string(threads), within(err, 1e-6) && bad_max == 0,
         "sum rel_l2=%.2e, max mismatches=%d", err, bad_max);
}

static void test_reduce() {
  test_warp_reduce<32>();
  test_warp_reduce<4>();
  test_warp_reduce<8>();
  test_block_reduce(64);
  test_block_reduce(256);
  test_block_reduce(1024);
}

// ---- accum.cuh ---------------------------------------------------------------------------------

// One thread per row: softmax(x) V over L columns, walked in tiles of `tile` columns split into
// `nsplit` partial states that are merged at the end (flash-decoding). x may hold -inf (masked).
constexpr int kAccD = 4;
__global__ void k_online_softmax(const float* x, const float* V, int rows, int L, int tile,
                                 int nsplit, float* out, float* sums, float* maxes) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const float* xr = x + int64_t(row) * L;
  AccumRescale<kAccD + 1> total;
  AccumSum s;
  AccumMax mx;
  const int per_split = (L + nsplit - 1) / nsplit;
  for (int sp = 0; sp < nsplit; ++sp) {
    AccumRescale<kAccD + 1> part;
    const int end = min(L, (sp + 1) * per_split);
    for (int c0 = sp * per_split; c0 < end; c0 += tile) {
      const int c1 = min(end, c0 + tile);
      float m = -INFINITY;
      for (int c = c0; c < c1; ++c) m = fmaxf(m, xr[c]);
      float v[kAccD + 1] = {};
      if (m != -INFINITY) {
        for (int c = c0; c < c1; ++c) {
          const float p = expf(xr[c] - m);
          for (int d = 0; d < kAccD; ++d) v[d] += p * V[c * kAccD + d];
          v[kAccD] += p;
        }
      }
      part.update(v, m);
      for (int c = c0; c < c1; ++c)
        if (xr[c] != -INFINITY) s.update(xr[c]);
      AccumMax tm;
      for (int c = c0; c < c1; ++c) tm.update(xr[c]);
      mx.merge(tm);
    }
    total.merge(part);
  }
  for (int d = 0; d < kAccD; ++d) out[row * kAccD + d] = total.acc[d] / total.acc[kAccD];
  sums[row] = s.acc;
  maxes[row] = mx.acc;
}

static void test_accum() {
  const int rows = 256, L = 1000;
  std::vector<float> x(size_t(rows) * L), V(size_t(L) * kAccD);
  for (auto& v : V) v = g_rng.range(-1, 1);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < L; ++c) {
      float v = g_rng.range(-4, 4) + (r % 7) * 10.0f;        // large offsets: needs max subtraction
      if (r % 5 == 0 && c < 64) v = -INFINITY;               // first tile fully masked
      if (r % 3 == 0 && c >= 300 && c < 372) v = -INFINITY;  // a masked run inside
      x[size_t(r) * L + c] = v;
    }
  DBuf<float> dx(x.size()), dV(V.size()), dout(rows * kAccD), dsum(rows), dmax(rows);
  dx.upload(x), dV.upload(V);
  bool all = true;
  std::string detail;
  for (int cfg = 0; cfg < 3; ++cfg) {
    const int tile = cfg == 0 ? 64 : cfg == 1 ? 37 : 1000, nsplit = cfg == 0 ? 1 : cfg == 1 ? 5 : 1;
    dout.poison(), dsum.poison(), dmax.poison();
    k_online_softmax<<<rows / 64, 64>>>(dx.p, dV.p, rows, L, tile, nsplit, dout.p, dsum.p, dmax.p);
    CK_LAUNCH();
    auto out = dout.download(), sums = dsum.download(), maxes = dmax.download();
    std::vector<double> ref(rows * kAccD), rsum(rows);
    int bad_max = 0;
    for (int r = 0; r < rows; ++r) {
      double m = -INFINITY, den = 0, num[kAccD] = {}, s = 0;
      for (int c = 0; c < L; ++c) m = std::max(m, double(x[size_t(r) * L + c]));
      for (int c = 0; c < L; ++c) {
        const double xv = x[size_t(r) * L + c];
        if (xv == -INFINITY) continue;
        s += xv;
        const double p = std::exp(xv - m);
        den += p;
        for (int d = 0; d < kAccD; ++d) num[d] += p * V[c * kAccD + d];
      }
      for (int d = 0; d < kAccD; ++d) ref[r * kAccD + d] = num[d] / den;
      rsum[r] = s;
      if (maxes[r] != float(m)) ++bad_max;
    }
    const double err = rel_l2(out, ref), serr = rel_l2(sums, rsum);
    char buf[160];
    snprintf(buf, sizeof buf, "[tile %d split %d: rel_l2=%.2e sum=%.2e maxbad=%d] ", tile, nsplit,
             err, serr, bad_max);
    detail += buf;
    all = all && within(err, 1e-5) && within(serr, 1e-5) && bad_max == 0;
  }
  report("accum.online_softmax_sum_max", all, "%s", detail.c_str());
}

// ---- tile.cuh + copy.cuh -----------------------------------------------------------------------

// Copies the window at (r0, c0) of a rows x cols matrix into a shared tile, dumps the tile's
// logical contents (through tile(r, c), so the layout's mapping is tested) and writes the tile
// back at the same window of dst (copy_s2g: only in-bounds elements may change).
template <class Tile, int NT, int MODE>  // MODE 0: copy_g2s, 1: cp_async_g2s
__global__ void k_copy_window(const typename Tile::Elem* src, int rows, int cols, int ld, int r0,
                              int c0, typename Tile::Elem* dump, typename Tile::Elem* dst) {
  using T = typename Tile::Elem;
  __shared__ __align__(128) char buf[Tile::kBytes];
  Tile t(buf);
  const GmemView<const T> v{src + int64_t(r0) * ld + c0, rows - r0, cols - c0, ld};
  if constexpr (MODE == 0) {
    copy_g2s<NT>(t, v, threadIdx.x);
  } else {
    cp_async_g2s<NT>(t, v, threadIdx.x);
    cp_async_commit();
    cp_async_wait<0>();
  }
  __syncthreads();
  for (int i = threadIdx.x; i < Tile::kRows * Tile::kCols; i += NT)
    dump[i] = t(i / Tile::kCols, i % Tile::kCols);
  const GmemView<T> d{dst + int64_t(r0) * ld + c0, rows - r0, cols - c0, ld};
  copy_s2g<NT>(d, t, threadIdx.x);
}

template <class Tile, int MODE>
void test_copy_window(const char* name) {
  using T = typename Tile::Elem;
  constexpr int R = Tile::kRows, C = Tile::kCols, E = Tile::kChunkElems;
  const int rows = 3 * R + 5, cols = 2 * C + 2 * E + 3, ld = round_up(cols + 5, E);
  auto src = random_vec<T>(size_t(rows) * ld);
  DBuf<T> dsrc(src.size()), ddump(R * C), ddst(src.size());
  dsrc.upload(src);
  // Interior, right edge (partial chunk), bottom-right corner, and a window fully outside.
  const int origins[4][2] = {{R, E},
                             {R / 2, cols - C / 2 - 1 - (cols - C / 2 - 1) % E},
                             {rows - 3, ((cols - 5) / E) * E},
                             {rows + 1, 0}};
  int bad = 0;
  for (auto& o : origins) {
    const int r0 = o[0], c0 = o[1];
    ddump.poison(), ddst.poison();
    k_copy_window<Tile, 128, MODE><<<1, 128>>>(dsrc.p, rows, cols, ld, r0, c0, ddump.p, ddst.p);
    CK_LAUNCH();
    auto dump = ddump.download(), dst = ddst.download();
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        const bool in = r0 + r < rows && c0 + c < cols;
        const float want = in ? h2f(src[size_t(r0 + r) * ld + c0 + c]) : 0.0f;
        if (!(h2f(dump[r * C + c]) == want)) ++bad;
      }
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < ld; ++c) {
        const bool written = r >= r0 && r < r0 + R && c >= c0 && c < c0 + C && c < cols;
        const float got = h2f(dst[size_t(r) * ld + c]);
        if (written ? !(got == h2f(src[size_t(r) * ld + c])) : !std::isnan(got)) ++bad;
      }
  }
  report(std::string("copy.") + name, bad == 0, "bad elements=%d", bad);
}

// A 3-stage cp.async ring over the column tiles of a band of 32 rows per block; the consumer
// writes each tile where it came from (zero padding past the matrix edge included).
template <int S>
__global__ void k_cp_async_pipeline(const __half* src, int rows, int cols, int ld, __half* out,
                                    int ldo) {
  using Tile = SmemTile<__half, 32, 64, Layout::Swizzled>;
  extern __shared__ __align__(128) char smem[];
  const int r0 = blockIdx.x * 32, ntiles = ceil_div(cols, 64);
  const GmemView<const __half> band{src + int64_t(r0) * ld, rows - r0, cols, ld};
  auto stage = [&](int s) { return Tile(smem + s * Tile::kBytes); };
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < ntiles) cp_async_g2s<128>(stage(s), band.offset(0, s * 64), threadIdx.x);
    cp_async_commit();
  }
  for (int kt = 0; kt < ntiles; ++kt) {
    cp_async_wait<S - 2>();
    __syncthreads();
    const int next = kt + S - 1;
    if (next < ntiles) cp_async_g2s<128>(stage(next % S), band.offset(0, next * 64), threadIdx.x);
    cp_async_commit();
    const Tile t = stage(kt % S);
    for (int i = threadIdx.x; i < 32 * 64; i += 128) {
      const int r = i / 64, c = i % 64;
      if (r0 + r < rows) out[int64_t(r0 + r) * ldo + kt * 64 + c] = t(r, c);
    }
  }
  cp_async_wait_all();
}

static void test_cp_async_pipeline() {
  const int rows = 100, cols = 1000, ld = 1008, ldo = round_up(cols, 64);
  auto src = random_vec<__half>(size_t(rows) * ld);
  DBuf<__half> dsrc(src.size()), dout(size_t(rows) * ldo);
  dsrc.upload(src);
  constexpr int S = 3;
  const int smem = S * SmemTile<__half, 32, 64, Layout::Swizzled>::kBytes;
  k_cp_async_pipeline<S><<<ceil_div(rows, 32), 128, smem>>>(dsrc.p, rows, cols, ld, dout.p, ldo);
  CK_LAUNCH();
  auto out = dout.download();
  int bad = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < ldo; ++c) {
      const float want = c < cols ? h2f(src[size_t(r) * ld + c]) : 0.0f;
      if (!(h2f(out[size_t(r) * ldo + c]) == want)) ++bad;
    }
  report("copy.cp_async_pipeline_3stage", bad == 0, "bad elements=%d", bad);
}

// sm_90: a 2-stage ring of bulk row copies completing on mbarriers (row tiles of 16 x 64 down a
// column band per block), then a bulk store of a tile written with ordinary stores.
__global__ void k_bulk(const __half* src, int rows, int ld, __half* out, __half* out2) {
  using Tile = SmemTile<__half, 16, 64, Layout::Padded>;
  __shared__ __align__(128) char buf[2 * Tile::kBytes];
  __shared__ __align__(8) uint64_t bar[2];
  const int c0 = blockIdx.x * 64, ntiles = ceil_div(rows, 16);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  if (tid == 0) {
    mbar_init(&bar[0], 1);
    mbar_init(&bar[1], 1);
    fence_mbar_init();
  }
  __syncthreads();
  const GmemView<const __half> band{src + c0, rows, 64, ld};
  auto stage = [&](int s) { return Tile(buf + s * Tile::kBytes); };
  if (warp == 0)
    for (int t = 0; t < 2 && t < ntiles; ++t)
      bulk_g2s_rows(stage(t), band.offset(t * 16, 0), &bar[t], lane);
  for (int t = 0; t < ntiles; ++t) {
    const int s = t & 1;
    mbar_wait(&bar[s], (t >> 1) & 1);
    const Tile tile = stage(s);
    for (int i = tid; i < 16 * 64; i += blockDim.x) {
      const int r = i / 64, c = i % 64;
      if (t * 16 + r < rows) out[int64_t(t * 16 + r) * ld + c0 + c] = tile(r, c);
    }
    __syncthreads();  // everyone is done reading stage s before it is refilled
    if (warp == 0 && t + 2 < ntiles)
      bulk_g2s_rows(stage(s), band.offset((t + 2) * 16, 0), &bar[s], lane);
  }
  // Bulk store: ordinary stores into the tile, proxy fence, barrier, one thread stores rows.
  const Tile t0 = stage(0);
  for (int i = tid; i < 16 * 64; i += blockDim.x)
    t0(i / 64, i % 64) = __float2half(float(blockIdx.x * 1000 + i));
  fence_proxy_async_smem();
  __syncthreads();
  if (tid == 0) {
    for (int r = 0; r < 16; ++r)
      bulk_s2g(out2 + int64_t(blockIdx.x * 16 + r) * 64, t0.at(r, 0), 128);
    bulk_commit();
    bulk_wait<0>();
  }
}

static void test_bulk(const cudaDeviceProp& prop) {
  if (prop.major < 9) {
    printf("SKIP copy.bulk_mbarrier (needs sm_90, device is sm_%d%d)\n", prop.major, prop.minor);
    return;
  }
  const int rows = 203, cols = 320, ld = 328, bands = cols / 64;
  auto src = random_vec<__half>(size_t(rows) * ld);
  DBuf<__half> dsrc(src.size()), dout(src.size()), dout2(size_t(bands) * 16 * 64);
  dsrc.upload(src);
  k_bulk<<<bands, 128>>>(dsrc.p, rows, ld, dout.p, dout2.p);
  CK_LAUNCH();
  auto out = dout.download(), out2 = dout2.download();
  int bad = 0, bad2 = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < ld; ++c) {
      const float got = h2f(out[size_t(r) * ld + c]);
      if (c < cols ? !(got == h2f(src[size_t(r) * ld + c])) : !std::isnan(got)) ++bad;
    }
  for (int b = 0; b < bands; ++b)
    for (int i = 0; i < 16 * 64; ++i)
      if (!(h2f(out2[size_t(b) * 1024 + i]) == h2f(__float2half(float(b * 1000 + i))))) ++bad2;
  report("copy.bulk_mbarrier_2stage", bad == 0, "bad elements=%d", bad);
  report("copy.bulk_store_proxy_fence", bad2 == 0, "bad elements=%d", bad2);
}

// sm_90: 2-D tensor-map boxes of 64 x 64 f16 into a tile, 128-byte swizzled or plain, read back
// through SmemTile's logical indexing (so the Swizzled layout must equal the hardware's). Box
// origins start 8 rows above the matrix, so the top boxes are partly zero-filled.
template <bool SW>
__global__ void k_tma(const __grid_constant__ TmaDesc desc, __half* out, int ldo) {
  using Tile = SmemTile<__half, 64, 64, SW ? Layout::Swizzled : Layout::RowMajor>;
  __shared__ __align__(1024) char raw[Tile::kBytes + 1024];
  __shared__ __align__(8) uint64_t bar;
  char* base = raw + ((1024 - (smem_u32(raw) & 1023)) & 1023);
  const Tile t(base);
  if (threadIdx.x == 0) {
    tma_prefetch_desc(&desc);
    mbar_init(&bar, 1);
    fence_mbar_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(&bar, Tile::kBytes);
    tma_load_2d(base, &desc, int(blockIdx.y) * 64 - 8, int(blockIdx.x) * 64, &bar);
  }
  mbar_wait(&bar, 0);
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x)
    out[int64_t(blockIdx.y * 64 + i / 64) * ldo + blockIdx.x * 64 + i % 64] = t(i / 64, i % 64);
}

template <bool SW>
static void test_tma_2d(const cudaDeviceProp& prop) {
  const char* name = SW ? "copy.tma_2d_swizzle128" : "copy.tma_2d_plain";
  if (prop.major < 9) {
    printf("SKIP %s (needs sm_90)\n", name);
    return;
  }
  const int rows = 150, cols = 200, ld = 208;
  const int gx = ceil_div(cols, 64), gy = ceil_div(rows + 8, 64), ldo = gx * 64;
  auto src = random_vec<__half>(size_t(rows) * ld);
  DBuf<__half> dsrc(src.size()), dout(size_t(gy) * 64 * ldo);
  dsrc.upload(src);
  TmaDesc desc;
  CK(tma_encode_2d(&desc, dsrc.p, rows, cols, ld, 64, 64, SW));
  k_tma<SW><<<dim3(gx, gy), 128>>>(desc, dout.p, ldo);
  CK_LAUNCH();
  auto out = dout.download();
  int bad = 0;
  for (int r = 0; r < gy * 64; ++r)
    for (int c = 0; c < ldo; ++c) {
      const int sr = r - 8;  // box origins are 8 rows up
      const float want = sr >= 0 && sr < rows && c < cols ? h2f(src[size_t(sr) * ld + c]) : 0.0f;
      if (!(h2f(out[size_t(r) * ldo + c]) == want)) ++bad;
    }
  report(name, bad == 0, "bad elements=%d", bad);
}

static void test_copy(const cudaDeviceProp& prop) {
  using H = __half;
  test_copy_window<SmemTile<H, 32, 64, Layout::Swizzled>, 0>("g2s_swizzled_32x64_f16");
  test_copy_window<SmemTile<H, 24, 40, Layout::Padded>, 0>("g2s_padded_24x40_f16");
  test_copy_window<SmemTile<H, 16, 24, Layout::RowMajor>, 0>("g2s_rowmajor_16x24_f16");
  test_copy_window<SmemTile<H, 16, 16, Layout::Swizzled>, 0>("g2s_swizzled_16x16_f16");
  test_copy_window<SmemTile<H, 16, 8, Layout::Swizzled>, 0>("g2s_swizzled_16x8_f16");
  test_copy_window<SmemTile<H, 16, 128, Layout::Swizzled>, 0>("g2s_swizzled_16x128_f16");
  test_copy_window<SmemTile<float, 16, 32, Layout::Swizzled>, 0>("g2s_swizzled_16x32_f32");
  test_copy_window<SmemTile<float, 33, 12, Layout::Padded>, 0>("g2s_padded_33x12_f32");
  test_copy_window<SmemTile<__nv_bfloat16, 32, 32, Layout::Swizzled>, 0>("g2s_swizzled_32x32_bf16");
  test_copy_window<SmemTile<H, 32, 64, Layout::Swizzled>, 1>("cp_async_swizzled_32x64_f16");
  test_copy_window<SmemTile<H, 24, 40, Layout::Padded>, 1>("cp_async_padded_24x40_f16");
  test_copy_window<SmemTile<float, 16, 32, Layout::Swizzled>, 1>("cp_async_swizzled_16x32_f32");
  test_cp_async_pipeline();
  test_bulk(prop);
  test_tma_2d<false>(prop);
  test_tma_2d<true>(prop);
}

// ---- mma.cuh -----------------------------------------------------------------------------------

// 4 warps, each a 16 x 16 piece of a 32 x 32 product with K = 32, from tiles of the given
// layouts; B stored K x N (B_NK = false) or N x K.
template <typename T, Layout LA, Layout LB, bool B_NK>
__global__ void k_warp_mma(const T* A, const T* B, float* C) {
  using TA = SmemTile<T, 32, 32, LA>;
  using TB = SmemTile<T, 32, 32, LB>;
  __shared__ __align__(128) char bufa[TA::kBytes];
  __shared__ __align__(128) char bufb[TB::kBytes];
  TA ta(bufa);
  TB tb(bufb);
  copy_g2s<128>(ta, GmemView<const T>{A, 32, 32, 32}, threadIdx.x);
  copy_g2s<128>(tb, GmemView<const T>{B, 32, 32, 32}, threadIdx.x);
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = (warp >> 1) * 16, c0 = (warp & 1) * 16;
  FragC acc[1][2];
  acc[0][0].zero(), acc[0][1].zero();
  warp_mma<1, 2, B_NK>(acc, ta, r0, tb, c0, lane);
  store_acc(GmemView<float>{C, 32, 32, 32}, acc, r0, c0, lane, [](float v, int, int) { return v; });
}

template <typename T, Layout LA, Layout LB, bool B_NK>
void test_warp_mma(const char* name) {
  auto A = random_vec<T>(32 * 32), B = random_vec<T>(32 * 32);
  DBuf<T> dA(A.size()), dB(B.size());
  DBuf<float> dC(32 * 32);
  dA.upload(A), dB.upload(B);
  k_warp_mma<T, LA, LB, B_NK><<<1, 128>>>(dA.p, dB.p, dC.p);
  CK_LAUNCH();
  auto C = dC.download();
  std::vector<double> ref(32 * 32);
  for (int m = 0; m < 32; ++m)
    for (int n = 0; n < 32; ++n) {
      double s = 0;
      for (int k = 0; k < 32; ++k)
        s += double(h2f(A[m * 32 + k])) * h2f(B_NK ? B[n * 32 + k] : B[k * 32 + n]);
      ref[m * 32 + n] = s;
    }
  const double err = rel_l2(C, ref);
  report(std::string("mma.") + name, within(err, 1e-6), "rel_l2=%.2e", err);
}

struct EpiIdentity {
  __device__ float operator()(float v, int, int) const { return v; }
};
struct EpiBiasRelu {
  const float* bias;
  __device__ float operator()(float v, int, int n) const { return fmaxf(v + bias[n], 0.0f); }
};

struct WsEpiBiasRelu {
  const float* bias;
  __device__ float operator()(float v, float, int, int n) const { return fmaxf(v + bias[n], 0.0f); }
};

// Cfg: a GemmConfig (mma.sync, KIND 0), a WgmmaGemm (KIND 1) or a WgmmaGemmWS with one weight
// (KIND 2); the last two need sm_90a.
// ldc = N + pad (pad columns must stay untouched); a WgmmaGemmWS stages 16-bit outputs through
// TMA stores when ldc is a multiple of 8 and stores directly otherwise; tune caps its persistent
// grid (max_clusters) so that each CTA walks several tiles.
template <class Cfg, typename TO, bool BIAS, int KIND = 0>
void test_gemm(int M, int N, int K, int pad = 2, WgmmaWsTuning tune = WgmmaWsTuning()) {
  constexpr bool WGMMA = KIND == 1;
  using T = typename Cfg::TileA::Elem;
  const int lda = round_up(K, 8) + 8, ldb = round_up(N, 8), ldc = N + pad;
  auto A = random_vec<T>(size_t(M) * lda), B = random_vec<T>(size_t(K) * ldb);
  auto bias = random_vec<float>(N);
  DBuf<T> dA(A.size()), dB(B.size());
  DBuf<TO> dC(size_t(M) * ldc);
  DBuf<float> dbias(N);
  dA.upload(A), dB.upload(B), dbias.upload(bias);
  // A K-major B (WgmmaGemmWS with KB) reads B^T [N][ldbt].
  bool kb = false;
  if constexpr (KIND == 2) kb = Cfg::kKB;
  const int ldbt = round_up(K, 8) + 8;
  DBuf<T> dBt(kb ? size_t(N) * ldbt : 1);
  if (kb) {
    std::vector<T> bt(dBt.n, f2h<T>(0.0f));
    for (int k = 0; k < K; ++k)
      for (int n = 0; n < N; ++n) bt[size_t(n) * ldbt + k] = B[size_t(k) * ldb + n];
    dBt.upload(bt);
  }
  const T* bop = kb ? dBt.p : dB.p;
  const int ldbop = kb ? ldbt : ldb;
  cudaError_t e;
  if constexpr (KIND == 2 && BIAS) {
    e = wgmma_ws_gemm_launch<Cfg>(dA.p, lda, bop, bop, ldbop, dC.p, ldc, M, N, K,
                                  WsEpiBiasRelu{dbias.p}, 0, tune);
  } else if constexpr (KIND == 2) {
    e = wgmma_ws_gemm_launch<Cfg>(dA.p, lda, bop, bop, ldbop, dC.p, ldc, M, N, K,
                                  WgmmaEpiIdentity(), 0, tune);
  } else if constexpr (WGMMA && BIAS) {
    e = wgmma_gemm_launch<Cfg>(dA.p, lda, dB.p, ldb, dC.p, ldc, M, N, K, EpiBiasRelu{dbias.p}, 0);
  } else if constexpr (WGMMA) {
    e = wgmma_gemm_launch<Cfg>(dA.p, lda, dB.p, ldb, dC.p, ldc, M, N, K, EpiIdentity(), 0);
  } else if constexpr (BIAS) {
    e = gemm_launch<Cfg>(dA.p, lda, dB.p, ldb, dC.p, ldc, M, N, K, EpiBiasRelu{dbias.p}, 0);
  } else {
    e = gemm_launch<Cfg>(dA.p, lda, dB.p, ldb, dC.p, ldc, M, N, K, EpiIdentity(), 0);
  }
  CK(e);
  CK_LAUNCH();
  auto C = dC.download();
  std::vector<double> ref(size_t(M) * ldc);
  std::vector<TO> Cv(size_t(M) * ldc);
  int bad_pad = 0;
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += double(h2f(A[size_t(m) * lda + k])) * h2f(B[size_t(k) * ldb + n]);
      if (BIAS) s = std::max(s + bias[n], 0.0);
      ref[size_t(m) * ldc + n] = s;
      Cv[size_t(m) * ldc + n] = C[size_t(m) * ldc + n];
    }
    for (int n = N; n < ldc; ++n) {
      if (!std::isnan(h2f(C[size_t(m) * ldc + n]))) ++bad_pad;  // must not be written
      Cv[size_t(m) * ldc + n] = f2h<TO>(0.0f), ref[size_t(m) * ldc + n] = 0;
    }
  }
  const double err = rel_l2(Cv, ref);
  const double thr = sizeof(TO) == 4 ? 1e-5 : std::is_same_v<TO, __half> ? 2e-3 : 1e-2;
  char name[160];
  char extra[64] = "";
  if constexpr (KIND == 2)
    snprintf(extra, sizeof extra, "_cl%d_ldc+%d%s%s", Cfg::kCluster, pad,
             tune.max_clusters > 0 ? "_capped" : "", kb ? "_kmajor_b" : "");
  snprintf(name, sizeof name, "%s.%s_%dx%dx%d_tile%dx%dx%d_s%d_%s%s%s",
           KIND == 2 ? "wgmma_ws"
           : WGMMA   ? "wgmma"
                     : "gemm",
           tname<T>(), M, N, K, Cfg::kBM, Cfg::kBN, Cfg::kBK, Cfg::kStages, tname<TO>(),
           BIAS ? "_bias_relu" : "", extra);
  report(name, within(err, thr) && bad_pad == 0, "rel_l2=%.2e pad_written=%d", err, bad_pad);
}

static void test_mma() {
  using H = __half;
  using BF = __nv_bfloat16;
  test_warp_mma<H, Layout::Swizzled, Layout::Swizzled, false>("warp_f16_swizzled_kn");
  test_warp_mma<H, Layout::Padded, Layout::Padded, true>("warp_f16_padded_nk");
  test_warp_mma<H, Layout::RowMajor, Layout::Swizzled, true>("warp_f16_rowmajor_swizzled_nk");
  test_warp_mma<BF, Layout::Swizzled, Layout::Padded, false>("warp_bf16_swizzled_padded_kn");
  test_gemm<GemmConfig<H, 128, 128, 32, 2, 4, 3>, H, false>(200, 136, 72);
  test_gemm<GemmConfig<H, 128, 128, 32, 2, 4, 3>, H, true>(256, 256, 256);
  test_gemm<GemmConfig<BF, 128, 128, 32, 2, 4, 3>, float, false>(130, 264, 264);
  test_gemm<GemmConfig<H, 64, 64, 32, 2, 2, 4>, float, true>(77, 40, 522);
  test_gemm<GemmConfig<BF, 64, 128, 64, 2, 2, 2>, BF, false>(65, 129, 100);
}

// Whether the device code was built with wgmma (sm_90a), asked of the device itself.
__global__ void k_has_wgmma(int* out) {
  *out = KILN_RT_WGMMA;
}
static bool device_has_wgmma(const cudaDeviceProp& prop) {
  if (prop.major != 9) return false;
  DBuf<int> flag(1);
  k_has_wgmma<<<1, 1>>>(flag.p);
  CK_LAUNCH();
  return flag.download()[0] == 1;
}

// silu(A B0) * (A B1) with the two-weight warp-specialized kernel G; ldc = N + pad (TMA-stored
// epilogue when ldc is a multiple of 8); tune as in test_gemm.
template <typename T, class G = WgmmaGemmWS<T, 2, 4>>
void test_wgmma_dual(int M, int N, int K, int pad = 0, WgmmaWsTuning tune = WgmmaWsTuning()) {
  const int lda = round_up(K, 8), ldb = round_up(N, 8), ldc = N + pad;
  auto A = random_vec<T>(size_t(M) * lda), B0 = random_vec<T>(size_t(K) * ldb),
       B1 = random_vec<T>(size_t(K) * ldb);
  DBuf<T> dA(A.size()), dB0(B0.size()), dB1(B1.size()), dC(size_t(M) * ldc);
  dA.upload(A), dB0.upload(B0), dB1.upload(B1);
  if constexpr (G::kKB) {  // the weights as B^T [N][K + 8]
    const int ldbt = lda + 8;
    std::vector<T> t0(size_t(N) * ldbt, f2h<T>(0.0f)), t1(t0);
    for (int k = 0; k < K; ++k)
      for (int n = 0; n < N; ++n) {
        t0[size_t(n) * ldbt + k] = B0[size_t(k) * ldb + n];
        t1[size_t(n) * ldbt + k] = B1[size_t(k) * ldb + n];
      }
    DBuf<T> d0(t0.size()), d1(t1.size());
    d0.upload(t0), d1.upload(t1);
    CK((wgmma_ws_gemm_launch<G>(dA.p, lda, d0.p, d1.p, ldbt, dC.p, ldc, M, N, K, WgmmaEpiSiluMul(),
                                0, tune)));
    CK(cudaDeviceSynchronize());
  } else {
    CK((wgmma_ws_gemm_launch<G>(dA.p, lda, dB0.p, dB1.p, ldb, dC.p, ldc, M, N, K, WgmmaEpiSiluMul(),
                                0, tune)));
  }
  CK_LAUNCH();
  auto C = dC.download();
  std::vector<double> ref(size_t(M) * ldc), r0(N), r1(N);
  int bad_pad = 0;
  for (int m = 0; m < M; ++m) {
    std::fill(r0.begin(), r0.end(), 0.0), std::fill(r1.begin(), r1.end(), 0.0);
    for (int k = 0; k < K; ++k) {
      const double a = h2f(A[size_t(m) * lda + k]);
      for (int n = 0; n < N; ++n) {
        r0[n] += a * h2f(B0[size_t(k) * ldb + n]);
        r1[n] += a * h2f(B1[size_t(k) * ldb + n]);
      }
    }
    for (int n = 0; n < N; ++n) ref[size_t(m) * ldc + n] = r0[n] / (1.0 + std::exp(-r0[n])) * r1[n];
    for (int n = N; n < ldc; ++n) {
      if (!std::isnan(h2f(C[size_t(m) * ldc + n]))) ++bad_pad;  // must not be written
      C[size_t(m) * ldc + n] = f2h<T>(0.0f);
    }
  }
  const double err = rel_l2(C, ref);
  const double thr = std::is_same_v<T, __half> ? 2e-3 : 1e-2;
  char name[160];
  snprintf(name, sizeof name, "wgmma_ws.dual_silu_mul_%s_%dx%dx%d_s%d_cl%d_ldc+%d%s%s", tname<T>(),
           M, N, K, G::kStages, G::kCluster, pad, tune.max_clusters > 0 ? "_capped" : "",
           G::kKB ? "_kmajor_b" : "");
  report(name, within(err, thr) && bad_pad == 0, "rel_l2=%.2e pad_written=%d", err, bad_pad);
}

// gemm16_staged_launch (wgmma.cuh): 16-bit operands whose rows TMA cannot address (N or K not a
// multiple of 8, an odd lda), B stored K x N or as B^T [N, K], against float64; C unpadded
// (ldc = N, so its rows are unaligned where N is) with a canary past the last row.
template <typename T>
static void test_staged16(int M, int N, int K, bool b_kmajor, int lda_extra = 0) {
  const int lda = K + lda_extra, ldb = b_kmajor ? K : N;
  auto A = random_vec<T>(size_t(M) * lda), B = random_vec<T>(size_t(K) * N);
  DBuf<T> dA(A.size()), dB(B.size()), dC(size_t(M) * N + 8);
  DBuf<char> ws(gemm16_staged_workspace(M, N, K));
  dA.upload(A), dB.upload(B);
  CK(cudaMemset(dC.p, 0xff, (size_t(M) * N + 8) * sizeof(T)));  // NaN canaries
  // Three calls back to back (programmatic dependent launch overlaps them): a K of 7 passed to
  // the GEMM as is had hung in repeated calls.
  for (int rep = 0; rep < 3; ++rep)
    CK((gemm16_staged_launch<T>(dA.p, lda, dB.p, ldb, b_kmajor, dC.p, N, M, N, K, ws.p,
                                WgmmaEpiIdentity(), 0)));
  CK_LAUNCH();
  auto C = dC.download();
  std::vector<double> ref(size_t(M) * N + 8, 0.0);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k)
        acc += double(h2f(A[size_t(m) * lda + k])) *
               double(h2f(b_kmajor ? B[size_t(n) * K + k] : B[size_t(k) * N + n]));
      ref[size_t(m) * N + n] = acc;
    }
  int bad_tail = 0;
  for (size_t i = size_t(M) * N; i < C.size(); ++i) {
    if (!std::isnan(h2f(C[i]))) ++bad_tail;
    C[i] = f2h<T>(0.0f);
  }
  const double err = rel_l2(C, ref);
  char name[160];
  snprintf(name, sizeof name, "gemm16_staged_%s_m%d_n%d_k%d%s_lda%d", tname<T>(), M, N, K,
           b_kmajor ? "_bk" : "", lda);
  report(name, within(err, std::is_same_v<T, __half> ? 2e-3 : 1e-2) && bad_tail == 0,
         "rel_l2=%.2e tail_written=%d", err, bad_tail);
}

// tf32.cuh: f32 A (M x K, or stored transposed) times B (K x N, or nn.Linear's N x K) through the
// three-pass tf32 GEMM with split-K as planned for this GPU, bias + relu epilogue, against float64.
// 1e-5 is 30x under one tf32 pass's error (~3e-4), so a dropped pass or a wrong split fails.
static void test_f32x3(const cudaDeviceProp& prop, int M, int N, int K, bool a_trans, bool b_kmajor,
                       int splits = 0) {
  auto A = random_vec<float>(size_t(M) * K), B = random_vec<float>(size_t(K) * N);
  auto bias = random_vec<float>(N);
  if (splits == 0) splits = gemm_f32x3_splits(M, N, K, prop.multiProcessorCount);
  const int ldc = N + 3;
  DBuf<float> dA(A.size()), dB(B.size()), dC(size_t(M) * ldc), dbias(N);
  DBuf<char> ws(gemm_f32x3_workspace(M, N, K, splits));
  dA.upload(A), dB.upload(B), dbias.upload(bias);
  CK(gemm_f32x3_launch(dA.p, a_trans ? M : K, a_trans, dB.p, b_kmajor ? K : N, b_kmajor, dC.p, ldc,
                       M, N, K, splits, ws.p, WsEpiBiasRelu{dbias.p}, 0));
  CK_LAUNCH();
  auto C = dC.download();
  std::vector<double> ref(C.size(), 0.0);
  int bad_pad = 0;
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k)
        acc += double(a_trans ? A[size_t(k) * M + m] : A[size_t(m) * K + k]) *
               double(b_kmajor ? B[size_t(n) * K + k] : B[size_t(k) * N + n]);
      ref[size_t(m) * ldc + n] = std::max(acc + bias[n], 0.0);
    }
    for (int n = N; n < ldc; ++n) {
      if (!std::isnan(C[size_t(m) * ldc + n])) ++bad_pad;
      C[size_t(m) * ldc + n] = 0.0f;
    }
  }
  const double err = rel_l2(C, ref);
  char name[160];
  snprintf(name, sizeof name, "gemm_f32x3_m%d_n%d_k%d%s%s_splits%d", M, N, K, a_trans ? "_at" : "",
           b_kmajor ? "_bk" : "", splits);
  report(name, within(err, 1e-5) && bad_pad == 0, "rel_l2=%.2e pad_written=%d", err, bad_pad);
}

// Batched tf32x3 (F32x3Batch): nb0 x nb1 products of M x K by K x N, A broadcast over b1 where
// a_bcast; M not a multiple of 128, so a tile's rows past M must read zeros, not the next batch.
static void test_f32x3_batched(const cudaDeviceProp& prop, int nb0, int nb1, int M, int N, int K,
                               bool a_bcast, bool b_kmajor, int splits = 0) {
  const int batch = nb0 * nb1;
  const int64_t a_s1 = a_bcast ? 0 : int64_t(M) * K, a_s0 = a_bcast ? int64_t(M) * K : a_s1 * nb1;
  const int64_t b_s1 = int64_t(K) * N, b_s0 = b_s1 * nb1;
  auto A = random_vec<float>(size_t(a_bcast ? nb0 : batch) * M * K);
  auto B = random_vec<float>(size_t(batch) * K * N);
  if (splits == 0) splits = gemm_f32x3_splits(M, N, K, prop.multiProcessorCount, batch);
  DBuf<float> dA(A.size()), dB(B.size()), dC(size_t(batch) * M * N);
  DBuf<char> ws(gemm_f32x3_workspace(M, N, K, splits, batch));
  dA.upload(A), dB.upload(B);
  F32x3Batch bt;
  bt.batch = batch, bt.nb1 = nb1, bt.a_s0 = a_s0, bt.a_s1 = a_s1, bt.b_s0 = b_s0, bt.b_s1 = b_s1;
  CK(gemm_f32x3_launch(dA.p, K, false, dB.p, b_kmajor ? K : N, b_kmajor, dC.p, N, M, N, K, splits,
                       ws.p, WgmmaEpiIdentity(), 0, bt));
  CK_LAUNCH();
  auto C = dC.download();
  std::vector<double> ref(C.size());
  for (int z = 0; z < batch; ++z) {
    const float* a = A.data() + (z / nb1) * a_s0 + (z % nb1) * a_s1;
    const float* b = B.data() + (z / nb1) * b_s0 + (z % nb1) * b_s1;
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k)
          acc += double(a[size_t(m) * K + k]) *
                 double(b_kmajor ? b[size_t(n) * K + k] : b[size_t(k) * N + n]);
        ref[(size_t(z) * M + m) * N + n] = acc;
      }
  }
  const double err = rel_l2(C, ref);
  char name[160];
  snprintf(name, sizeof name, "gemm_f32x3_batch%dx%d_m%d_n%d_k%d%s%s_splits%d", nb0, nb1, M, N, K,
           a_bcast ? "_abcast" : "", b_kmajor ? "_bk" : "", splits);
  report(name, within(err, 1e-5), "rel_l2=%.2e", err);
}

// f32_rowdot (tf32.cuh): S <= 8 vectors against a K-contiguous W of L rows, both output layouts
// (out(s, l) at C[s * cs + l * cl]), X by rows or columns, ragged K, with and without k-splits.
static void test_f32_rowdot(int S, int L, int K, bool x_rows, bool out_sl, int splits) {
  auto W = random_vec<float>(size_t(L) * K), X = random_vec<float>(size_t(S) * K);
  const int64_t xs = x_rows ? K : 1, xk = x_rows ? 1 : S;
  const int64_t cs = out_sl ? L : 1, cl = out_sl ? 1 : S;
  DBuf<float> dW(W.size()), dX(X.size()), dC(size_t(S) * L), ws(size_t(splits) * S * L);
  dW.upload(W), dX.upload(X);
  CK(f32_rowdot_launch(S, dW.p, K, dX.p, xs, xk, dC.p, cs, cl, L, K, splits, ws.p, 0));
  CK_LAUNCH();
  auto C = dC.download();
  std::vector<double> ref(C.size());
  for (int s = 0; s < S; ++s)
    for (int l = 0; l < L; ++l) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += double(W[size_t(l) * K + k]) * X[s * xs + k * xk];
      ref[s * cs + l * cl] = acc;
    }
  char name[160];
  snprintf(name, sizeof name, "f32_rowdot_s%d_l%d_k%d%s%s_splits%d", S, L, K,
           x_rows ? "" : "_xcols", out_sl ? "" : "_outls", splits);
  const double err = rel_l2(C, ref);
  report(name, within(err, 1e-5), "rel_l2=%.2e", err);
}

// f32_colstream (tf32.cuh): S <= 16 rows of X (by rows or transposed) times W [K, N], ragged N
// (scalar tail columns), unaligned ldw, with and without k-splits.
static void test_f32_colstream(int S, int N, int K, int ldw, bool x_rows, int splits) {
  auto W = random_vec<float>(size_t(K) * ldw), X = random_vec<float>(size_t(S) * K);
  const int64_t xs = x_rows ? K : 1, xk = x_rows ? 1 : S;
  DBuf<float> dW(W.size()), dX(X.size()), dC(size_t(S) * N), ws(size_t(splits) * S * N);
  dW.upload(W), dX.upload(X);
  CK(f32_colstream_launch(S, dW.p, ldw, dX.p, xs, xk, dC.p, N, N, K, splits, ws.p, 0));
  CK_LAUNCH();
  auto C = dC.download();
  std::vector<double> ref(C.size());
  for (int s = 0; s < S; ++s)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += double(X[s * xs + k * xk]) * W[size_t(k) * ldw + n];
      ref[size_t(s) * N + n] = acc;
    }
  char name[160];
  snprintf(name, sizeof name, "f32_colstream_s%d_n%d_k%d_ldw%d%s_splits%d", S, N, K, ldw,
           x_rows ? "" : "_xcols", splits);
  const double err = rel_l2(C, ref);
  report(name, within(err, 1e-5), "rel_l2=%.2e", err);
}

static void test_wgmma(const cudaDeviceProp& prop) {
  if (!device_has_wgmma(prop)) {
    printf("SKIP wgmma (needs an sm_90 device and a build for sm_90a)\n");
    return;
  }
  using H = __half;
  using BF = __nv_bfloat16;
  test_gemm<WgmmaGemm<H, 2, 4>, H, false, 1>(256, 256, 256);
  test_gemm<WgmmaGemm<H, 2, 4>, H, true, 1>(200, 136, 72);
  test_gemm<WgmmaGemm<BF, 2, 4>, float, false, 1>(130, 264, 264);
  test_gemm<WgmmaGemm<H, 1, 3>, float, true, 1>(77, 40, 522);
  test_gemm<WgmmaGemm<BF, 1, 2>, BF, false, 1>(65, 136, 1000);
  // Warp-specialized: k-tiles well past the ring depth, so stages are reused many times; capped
  // persistent grids (each CTA walks several tiles, the ring running on across them), odd tile
  // rows (a cluster's second tile row past M), TMA-stored (ldc % 8 == 0) and direct epilogues.
  WgmmaWsTuning cap1, cap2;
  cap1.max_clusters = 1, cap2.max_clusters = 2, cap2.group_m = 1;
  test_gemm<WgmmaGemmWS<H, 1, 4, 2>, H, false, 2>(256, 256, 1024);
  test_gemm<WgmmaGemmWS<H, 1, 4>, H, true, 2>(200, 136, 72);
  test_gemm<WgmmaGemmWS<BF, 1, 3, 2>, float, true, 2>(300, 392, 1000);
  test_gemm<WgmmaGemmWS<H, 1, 2, 2>, float, false, 2>(77, 40, 522);
  test_gemm<WgmmaGemmWS<H, 1, 4, 2>, H, true, 2>(200, 136, 72, 8);
  test_gemm<WgmmaGemmWS<H, 1, 4, 1>, H, false, 2>(300, 392, 1000, 8, cap2);
  test_gemm<WgmmaGemmWS<H, 1, 6, 2>, H, false, 2>(300, 392, 1000, 8, cap2);
  test_gemm<WgmmaGemmWS<BF, 1, 5, 2>, BF, true, 2>(520, 264, 136, 8, cap1);
  test_gemm<WgmmaGemmWS<BF, 1, 4, 1>, BF, false, 2>(129, 520, 200, 2, cap1);
  test_wgmma_dual<H, WgmmaGemmWS<H, 2, 4, 2>>(260, 264, 1030);
  test_wgmma_dual<BF>(128, 128, 64);
  test_wgmma_dual<H, WgmmaGemmWS<H, 2, 3, 2>>(260, 264, 1030, 2);
  test_wgmma_dual<H, WgmmaGemmWS<H, 2, 4, 1>>(300, 136, 520, 8, cap2);
  test_wgmma_dual<H, WgmmaGemmWS<H, 2, 4, 2>>(520, 392, 1000, 0, cap1);
  test_wgmma_dual<H>(520, 392, 1000, 0, cap1);
  test_wgmma_dual<BF, WgmmaGemmWS<BF, 2, 3, 1>>(77, 40, 522, 0, cap1);
  test_wgmma_dual<BF, WgmmaGemmWS<BF, 2, 4, 2>>(390, 264, 200, 8, cap2);
  // K-major B (nn.Linear weights, B^T [N][K]): one and two weights, clusters of 1 and 2,
  // ragged edges, capped persistent grids, both epilogue paths.
  test_gemm<WgmmaGemmWS<H, 1, 6, 1, true>, H, false, 2>(256, 256, 1024);
  test_gemm<WgmmaGemmWS<BF, 1, 6, 1, true>, BF, true, 2>(300, 392, 1000, 8, cap2);
  test_gemm<WgmmaGemmWS<BF, 1, 4, 2, true>, float, true, 2>(520, 264, 136, 8, cap1);
  test_gemm<WgmmaGemmWS<H, 1, 4, 2, true>, H, false, 2>(77, 40, 522);
  // Ping-pong (whole tiles per consumer warpgroup, alternating): both layouts, clusters of 1 and
  // 2, capped grids (each warpgroup walks several tiles, the ring order alternating them), odd
  // tile rows, f32 outputs (direct stores) and the staged epilogue.
  test_gemm<WgmmaGemmWS<BF, 1, 6, 1, true, true>, BF, true, 2>(300, 392, 1000, 8, cap2);
  test_gemm<WgmmaGemmWS<H, 1, 6, 1, false, true>, H, false, 2>(520, 264, 1024, 8, cap1);
  test_gemm<WgmmaGemmWS<H, 1, 4, 2, true, true>, H, true, 2>(390, 520, 200, 8, cap2);
  test_gemm<WgmmaGemmWS<BF, 1, 5, 2, false, true>, float, true, 2>(77, 40, 522, 2);
  test_gemm<WgmmaGemmWS<BF, 1, 6, 1, true, true>, BF, false, 2>(256, 256, 1024, 2);
  test_wgmma_dual<BF, WgmmaGemmWS<BF, 2, 4, 2, true>>(260, 264, 1030);
  test_wgmma_dual<H, WgmmaGemmWS<H, 2, 4, 1, true>>(300, 136, 520, 8, cap2);
  test_wgmma_dual<BF, WgmmaGemmWS<BF, 2, 3, 2, true>>(390, 264, 200, 8, cap2);
  // 16-bit operands TMA cannot address: staged copies, then the K-major GEMM.
  test_staged16<H>(61, 1531, 3072, false);   // N prime, B K x N
  test_staged16<BF>(127, 509, 2048, true);   // B^T aligned (read in place), N prime
  test_staged16<BF>(200, 300, 1001, true);   // K odd: A and B^T staged
  test_staged16<H>(130, 77, 263, false, 1);  // K prime, B K x N, lda 264 (A copied: K odd)
  test_staged16<H>(2000, 513, 7, false);     // K 7: the GEMM reads K rounded to 8
  test_staged16<BF>(300, 77, 256, true, 3);  // lda 259 (A copied), B^T read in place
  test_staged16<H>(5, 1021, 64, false);      // few rows
  // f32 operands through three tf32 passes: every layout, ragged and tiny K, split-K from 1 to
  // uneven splits of the k-tiles, K long enough for the accumulator promotion to matter.
  test_f32x3(prop, 256, 256, 1024, false, false);
  test_f32x3(prop, 300, 392, 1000, false, true);
  test_f32x3(prop, 77, 40, 522, true, false);
  test_f32x3(prop, 129, 136, 7, true, true);
  test_f32x3(prop, 260, 264, 1030, false, false, 1);
  test_f32x3(prop, 260, 264, 1030, false, true, 5);
  test_f32x3(prop, 64, 128, 4100, false, false, 3);
  test_f32x3(prop, 131, 509, 257, false, false);  // small K: splits of 4 k-tiles
  test_f32x3(prop, 40, 72, 33, true, true);       // 6 k-tiles: one split
  test_f32x3_batched(prop, 1, 8, 256, 384, 512, false, false);
  test_f32x3_batched(prop, 2, 3, 77, 136, 200, true, false, 1);
  test_f32x3_batched(prop, 3, 2, 130, 40, 1030, false, true, 4);
  test_f32_colstream(4, 4096, 4096, 4096, true, 66);
  test_f32_colstream(3, 1001, 1000, 1001, true, 41);
  test_f32_colstream(16, 520, 300, 523, false, 1);
  test_f32_colstream(9, 64, 2048, 64, false, 7);
  test_f32_rowdot(1, 2048, 8192, false, false, 2);
  test_f32_rowdot(4, 1000, 4099, true, true, 1);
  test_f32_rowdot(8, 77, 10000, false, false, 4);
  test_f32_rowdot(3, 513, 64, true, true, 1);
}

// ---- gemv.cuh ----------------------------------------------------------------------------------

struct GemvEpiCoords {  // checks the (m, n) the epilogue is handed
  static constexpr bool kRowSumSq = false;
  const float* row_scale;
  __device__ float operator()(float v0, float, int m, int n, float) const {
    return v0 * row_scale[m] + 0.001f * float(n % 97);
  }
};

// Runs `launch` (which enqueues one GEMV Y = epi(X W0 [, X W1]) on the given buffers) `repeats`
// times on fresh random inputs with the output poisoned, and reports the worst relative L2 error
// against a float64 CPU reference; the padding columns of out (N .. ldo) must stay NaN.
template <typename T, typename TO, int NW, class Epi, class Launch>
void check_gemv(const std::string& name, int M, int N, int K, int ldx, int ldw, int ldo,
                const Launch& launch, const float* h_row_scale, int repeats, int ldwt = 0) {
  DBuf<T> dX(size_t(M) * ldx), dW0(size_t(K) * ldw), dW1(size_t(K) * ldw);
  // ldwt > 0: the launch reads the weights K-major, as W^T [N][ldwt] copies of W0, W1.
  DBuf<T> dW0t(ldwt > 0 ? size_t(N) * ldwt : 1), dW1t(ldwt > 0 ? size_t(N) * ldwt : 1);
  DBuf<TO> dout(size_t(M) * ldo);
  double worst = 0;
  int bad_pad = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    auto X = random_vec<T>(dX.n), W0 = random_vec<T>(dW0.n), W1 = random_vec<T>(dW1.n);
    dX.upload(X), dW0.upload(W0), dW1.upload(W1);
    if (ldwt > 0) {
      std::vector<T> t0(dW0t.n, f2h<T>(0.0f)), t1(dW1t.n, f2h<T>(0.0f));
      for (int k = 0; k < K; ++k)
        for (int n = 0; n < N; ++n) {
          t0[size_t(n) * ldwt + k] = W0[size_t(k) * ldw + n];
          t1[size_t(n) * ldwt + k] = W1[size_t(k) * ldw + n];
        }
      dW0t.upload(t0), dW1t.upload(t1);
    }
    dout.poison();
    CK(ldwt > 0 ? launch(dX.p, dW0t.p, dW1t.p, dout.p) : launch(dX.p, dW0.p, dW1.p, dout.p));
    CK_LAUNCH();
    auto out = dout.download();
    std::vector<double> ref(out.size(), 0.0);
    std::vector<double> acc0(N), acc1(N);
    for (int m = 0; m < M; ++m) {
      std::fill(acc0.begin(), acc0.end(), 0.0), std::fill(acc1.begin(), acc1.end(), 0.0);
      double sumsq = 0;
      for (int k = 0; k < K; ++k) {
        const double xv = h2f(X[size_t(m) * ldx + k]);
        sumsq += xv * xv;
        const T* w0 = &W0[size_t(k) * ldw];
        const T* w1 = &W1[size_t(k) * ldw];
        for (int n = 0; n < N; ++n) acc0[n] += xv * h2f(w0[n]);
        if (NW > 1)
          for (int n = 0; n < N; ++n) acc1[n] += xv * h2f(w1[n]);
      }
      for (int n = 0; n < N; ++n) {
        double y = acc0[n];
        if constexpr (std::is_same_v<Epi, GemvSiluMul>) y = y / (1.0 + std::exp(-y)) * acc1[n];
        if constexpr (std::is_same_v<Epi, GemvEpiCoords>)
          y = y * h_row_scale[m] + double(0.001f * float(n % 97));
        if constexpr (std::is_same_v<Epi, GemvRmsNorm>) y = y / std::sqrt(sumsq / K + 1e-6);
        ref[size_t(m) * ldo + n] = y;
      }
      for (int n = N; n < ldo; ++n) {
        if (!std::isnan(h2f(out[size_t(m) * ldo + n]))) ++bad_pad;
        out[size_t(m) * ldo + n] = f2h<TO>(0.0f);
      }
    }
    worst = std::max(worst, rel_l2(out, ref));
    if (std::isnan(rel_l2(out, ref))) worst = NAN;
  }
  const double thr = sizeof(TO) == 4 ? 1e-5 : std::is_same_v<TO, __half> ? 2e-3 : 1e-2;
  report(name, within(worst, thr) && bad_pad == 0, "rel_l2=%.2e pad_written=%d", worst, bad_pad);
}

// CLUSTER: gemv_cluster_launch (sm_90) with exactly `splits` CTAs per cluster, empty k-ranges
// included; otherwise gemv_launch with the splits that are not empty.
template <typename T, typename TO, int MT, int NW, int WN, int WK, int U, bool CLUSTER = false,
          class Epi>
void test_gemv(int M, int N, int K, int splits, Epi epi, const char* epi_name,
               const float* h_row_scale = nullptr, int repeats = 2) {
  const int ldx = K + 4, ldw = N + 8, ldo = N + 8;
  const int k_chunk = gemv_k_chunk(K, splits);
  const int real_splits = CLUSTER ? splits : ceil_div(K, k_chunk);
  const int64_t wsf = gemv_workspace_floats(N, WN, real_splits, MT, NW, Epi::kRowSumSq);
  DBuf<float> dws(std::max<int64_t>(wsf, 1));
  DBuf<int> dcnt(gemv_col_blocks(N, WN));
  CK(cudaMemset(dcnt.p, 0, dcnt.n * sizeof(int)));
  // Repeated launches with fresh inputs: the split-K counters must have reset themselves.
  auto launch = [&](const T* X, const T* W0, const T* W1, TO* out) {
    if constexpr (CLUSTER) {
      return gemv_cluster_launch<T, TO, MT, NW, WN, WK, U, 1, Epi>(X, ldx, W0, W1, ldw, out, ldo, M,
                                                                   N, K, splits, 0, epi);
    } else {
      return gemv_launch<T, TO, MT, NW, WN, WK, U, 1, Epi>(X, ldx, W0, W1, ldw, out, ldo, M, N, K,
                                                           real_splits, dws.p, dcnt.p, 0, epi);
    }
  };
  char name[200];
  snprintf(name, sizeof name, "%s.%s_m%d_n%d_k%d_mt%d_nw%d_w%dx%d_u%d_splits%d_%s_%s",
           CLUSTER ? "gemv_cluster" : "gemv", tname<T>(), M, N, K, MT, NW, WN, WK, U, real_splits,
           tname<TO>(), epi_name);
  check_gemv<T, TO, NW, Epi>(name, M, N, K, ldx, ldw, ldo, launch, h_row_scale, repeats);
}

static void test_gemv_all() {
  using H = __half;
  using BF = __nv_bfloat16;
  const GemvIdentity id;
  // Edge shapes: N not a multiple of 64, K not a multiple of 16, M below the tile.
  test_gemv<H, H, 1, 1, 2, 4, 2>(1, 4104, 4100, 1, id, "id");
  test_gemv<H, H, 1, 1, 2, 4, 2>(2, 4104, 4100, 5, id, "id");
  test_gemv<H, H, 2, 1, 2, 4, 2>(3, 520, 1028, 3, id, "id");
  test_gemv<H, H, 2, 1, 1, 8, 4>(16, 1024, 2048, 1, id, "id");
  test_gemv<H, H, 2, 1, 4, 2, 2>(16, 1000, 2048, 4, id, "id");
  test_gemv<H, H, 4, 1, 2, 4, 2>(32, 512, 516, 2, id, "id");
  test_gemv<H, H, 4, 1, 2, 4, 1>(27, 392, 4096, 7, id, "id");
  test_gemv<BF, BF, 1, 1, 2, 4, 2>(8, 776, 1500, 3, id, "id");
  test_gemv<BF, float, 2, 1, 2, 4, 2>(11, 256, 2000, 2, id, "id");
  test_gemv<H, H, 1, 2, 2, 4, 1>(1, 1032, 2048, 4, GemvSiluMul(), "silu_mul");
  test_gemv<H, H, 2, 2, 2, 4, 1>(5, 1032, 1024, 1, GemvSiluMul(), "silu_mul");
  test_gemv<BF, BF, 2, 2, 2, 4, 1>(16, 264, 1024, 3, GemvSiluMul(), "silu_mul");
  std::vector<float> scale(32);
  for (auto& s : scale) s = g_rng.range(0.5f, 2.0f);
  DBuf<float> dscale(32);
  dscale.upload(scale);
  test_gemv<H, float, 2, 1, 2, 4, 2>(13, 328, 1024, 3, GemvEpiCoords{dscale.p}, "coords",
                                     scale.data());
  test_gemv<H, float, 4, 1, 1, 8, 2>(30, 200, 512, 1, GemvEpiCoords{dscale.p}, "coords",
                                     scale.data());
  // rms_norm(X) W fused: row sums of squares gathered in the stream, across warps and splits.
  test_gemv<H, H, 1, 1, 2, 4, 2>(2, 1032, 4096, 1, GemvRmsNorm{1.0f / 4096, 1e-6f}, "rmsnorm");
  test_gemv<H, H, 1, 1, 2, 4, 2>(2, 1032, 4096, 6, GemvRmsNorm{1.0f / 4096, 1e-6f}, "rmsnorm");
  test_gemv<H, float, 4, 1, 2, 4, 1>(32, 264, 4100, 5, GemvRmsNorm{1.0f / 4100, 1e-6f}, "rmsnorm");
  test_gemv<BF, BF, 2, 1, 4, 2, 2>(9, 520, 2048, 3, GemvRmsNorm{1.0f / 2048, 1e-6f}, "rmsnorm");
}

// Split-K over the CTAs of a cluster, reduced through DSMEM: every cluster size 1 .. 8, units
// (m-tile x warp slab) fewer than, equal to and more than the splits (ranks owning none, one,
// several), empty k-ranges (K = 516 at 8 splits: chunks of 80), and the epilogues that need the
// right rows m (coords) and the cluster-wide row sums (rms_norm).
static void test_gemv_cluster(const cudaDeviceProp& prop) {
  if (prop.major < 9) {
    printf("SKIP gemv_cluster (needs sm_90, device is sm_%d%d)\n", prop.major, prop.minor);
    return;
  }
  using H = __half;
  using BF = __nv_bfloat16;
  const GemvIdentity id;
  for (int s = 1; s <= 8; ++s) test_gemv<H, H, 1, 1, 2, 4, 2, true>(1, 4104, 4100, s, id, "id");
  test_gemv<H, H, 1, 1, 2, 4, 2, true>(5, 1032, 2052, 3, id, "id");
  for (int s : {2, 5, 8}) test_gemv<H, H, 2, 1, 4, 2, 2, true>(16, 1000, 2048, s, id, "id");
  for (int s : {1, 4, 7, 8}) test_gemv<H, H, 4, 1, 2, 4, 1, true>(32, 520, 4100, s, id, "id");
  test_gemv<H, H, 4, 1, 2, 4, 1, true>(27, 392, 516, 8, id, "id");
  test_gemv<BF, BF, 1, 1, 2, 4, 2, true>(8, 776, 1500, 6, id, "id");
  test_gemv<BF, float, 2, 1, 2, 4, 2, true>(11, 256, 2000, 2, id, "id");
  test_gemv<H, H, 1, 2, 2, 4, 1, true>(1, 1032, 2048, 4, GemvSiluMul(), "silu_mul");
  test_gemv<H, H, 1, 2, 2, 4, 1, true>(5, 1032, 1028, 8, GemvSiluMul(), "silu_mul");
  test_gemv<H, H, 2, 2, 2, 4, 1, true>(16, 1032, 1024, 5, GemvSiluMul(), "silu_mul");
  test_gemv<BF, BF, 2, 2, 2, 4, 1, true>(16, 264, 1024, 3, GemvSiluMul(), "silu_mul");
  test_gemv<BF, BF, 2, 2, 2, 4, 1, true>(13, 264, 1540, 7, GemvSiluMul(), "silu_mul");
  // 16 units, 72 KB (7 splits) and 56 KB (8) of dynamic shared memory: the raised limit.
  test_gemv<H, H, 4, 2, 4, 2, 1, true>(32, 1032, 2048, 7, GemvSiluMul(), "silu_mul");
  test_gemv<H, H, 4, 2, 4, 2, 1, true>(29, 1032, 2048, 8, GemvSiluMul(), "silu_mul");
  std::vector<float> scale(32);
  for (auto& s : scale) s = g_rng.range(0.5f, 2.0f);
  DBuf<float> dscale(32);
  dscale.upload(scale);
  test_gemv<H, float, 2, 1, 2, 4, 2, true>(13, 328, 1024, 3, GemvEpiCoords{dscale.p}, "coords",
                                           scale.data());
  test_gemv<H, float, 4, 1, 1, 8, 2, true>(30, 200, 512, 7, GemvEpiCoords{dscale.p}, "coords",
                                           scale.data());
  test_gemv<H, H, 1, 1, 2, 4, 2, true>(2, 1032, 4096, 1, GemvRmsNorm{1.0f / 4096, 1e-6f},
                                       "rmsnorm");
  test_gemv<H, H, 1, 1, 2, 4, 2, true>(2, 1032, 4096, 6, GemvRmsNorm{1.0f / 4096, 1e-6f},
                                       "rmsnorm");
  test_gemv<H, float, 4, 1, 2, 4, 1, true>(32, 264, 4100, 5, GemvRmsNorm{1.0f / 4100, 1e-6f},
                                           "rmsnorm");
  test_gemv<H, H, 4, 1, 2, 4, 1, true>(32, 264, 4100, 8, GemvRmsNorm{1.0f / 4100, 1e-6f},
                                       "rmsnorm");
  test_gemv<BF, BF, 2, 1, 4, 2, 2, true>(9, 520, 2048, 8, GemvRmsNorm{1.0f / 2048, 1e-6f},
                                         "rmsnorm");
}

// ---- gemv_tma.cuh ------------------------------------------------------------------------------

// gemv_tma_launch with exactly `splits` CTAs per cluster (empty k-ranges included); WK: the
// weights given K-major (W^T [N][K + 8], nn.Linear's layout).
template <typename T, typename TO, int MT, int NW, int BN, int BK, int ST, class Epi,
          bool WK = false>
void test_gemv_tma(int M, int N, int K, int splits, Epi epi, const char* epi_name,
                   const float* h_row_scale = nullptr, int repeats = 2) {
  const int ldx = K + 8, ldw = N + 8, ldo = N + 8, ldwt = K + 8;
  auto launch = [&](const T* X, const T* W0, const T* W1, TO* out) {
    return gemv_tma_launch<T, TO, MT, NW, BN, BK, ST, 1, Epi, WK>(
        X, ldx, W0, W1, WK ? ldwt : ldw, out, ldo, M, N, K, splits, 0, epi);
  };
  char name[200];
  snprintf(name, sizeof name, "gemv_tma.%s_m%d_n%d_k%d_mt%d_nw%d_bn%d_bk%d_st%d_splits%d_%s_%s%s",
           tname<T>(), M, N, K, MT, NW, BN, BK, ST, splits, tname<TO>(), epi_name,
           WK ? "_kmajor" : "");
  check_gemv<T, TO, NW, Epi>(name, M, N, K, ldx, ldw, ldo, launch, h_row_scale, repeats,
                             WK ? ldwt : 0);
}

// The TMA-streamed GEMV: every cluster size, ragged N (not a multiple of BN) and K (not a multiple
// of BK), M from 1 to 32, each column-block width and stage depth the planner uses, k-loops many
// times the ring, empty k-ranges, bf16, f32 output, two weights, epilogue coordinates and the
// fused rms_norm (row sums of squares across the CTAs of a cluster); launches that break the
// preconditions are refused.
static void test_gemv_tma_all(const cudaDeviceProp& prop) {
  if (!device_has_wgmma(prop)) {
    printf("SKIP gemv_tma (needs an sm_90 device and a build for sm_90a)\n");
    return;
  }
  using H = __half;
  using BF = __nv_bfloat16;
  const GemvIdentity id;
  for (int s = 1; s <= 8; ++s) test_gemv_tma<H, H, 1, 1, 64, 64, 4>(1, 4104, 4104, s, id, "id");
  test_gemv_tma<H, H, 1, 1, 64, 64, 8>(5, 1032, 2056, 3, id, "id");
  for (int s : {1, 2, 5, 8}) test_gemv_tma<H, H, 2, 1, 128, 64, 4>(16, 1000, 2048, s, id, "id");
  for (int s : {1, 4, 7, 8}) test_gemv_tma<H, H, 4, 1, 64, 128, 4>(32, 520, 4104, s, id, "id");
  test_gemv_tma<H, H, 4, 1, 128, 128, 4>(24, 1160, 3000, 1, id, "id");
  test_gemv_tma<H, H, 4, 1, 256, 64, 4>(20, 1288, 3000, 2, id, "id");
  test_gemv_tma<H, H, 2, 1, 64, 64, 2>(9, 200, 8200, 1, id, "id");  // 129 k-tiles, 2 stages
  test_gemv_tma<H, H, 4, 1, 64, 64, 4>(27, 392, 520, 8, id, "id");  // 3 empty k-ranges
  test_gemv_tma<BF, BF, 1, 1, 64, 64, 8>(8, 776, 1504, 6, id, "id");
  test_gemv_tma<BF, float, 2, 1, 128, 64, 4>(11, 256, 2000, 2, id, "id");
  test_gemv_tma<H, float, 1, 1, 64, 128, 4>(3, 136, 3072, 3, id, "id");
  test_gemv_tma<H, H, 1, 2, 64, 64, 4>(1, 1032, 2048, 4, GemvSiluMul(), "silu_mul");
  test_gemv_tma<H, H, 1, 2, 64, 64, 8>(5, 1032, 1032, 8, GemvSiluMul(), "silu_mul");
  test_gemv_tma<H, H, 2, 2, 128, 64, 4>(16, 1032, 1024, 5, GemvSiluMul(), "silu_mul");
  test_gemv_tma<BF, BF, 2, 2, 64, 128, 4>(16, 264, 1024, 3, GemvSiluMul(), "silu_mul");
  test_gemv_tma<BF, BF, 2, 2, 64, 64, 4>(13, 264, 1544, 7, GemvSiluMul(), "silu_mul");
  test_gemv_tma<H, H, 4, 2, 128, 64, 4>(32, 1032, 2048, 7, GemvSiluMul(), "silu_mul");
  test_gemv_tma<H, float, 4, 2, 64, 64, 4>(29, 1032, 2048, 1, GemvSiluMul(), "silu_mul");
  std::vector<float> scale(32);
  for (auto& s : scale) s = g_rng.range(0.5f, 2.0f);
  DBuf<float> dscale(32);
  dscale.upload(scale);
  test_gemv_tma<H, float, 2, 1, 64, 64, 4>(13, 328, 1024, 3, GemvEpiCoords{dscale.p}, "coords",
                                           scale.data());
  test_gemv_tma<H, float, 4, 1, 128, 64, 4>(30, 200, 512, 4, GemvEpiCoords{dscale.p}, "coords",
                                            scale.data());
  test_gemv_tma<H, H, 1, 1, 64, 64, 8>(2, 1032, 4096, 1, GemvRmsNorm{1.0f / 4096, 1e-6f},
                                       "rmsnorm");
  test_gemv_tma<H, H, 1, 1, 64, 64, 8>(2, 1032, 4096, 6, GemvRmsNorm{1.0f / 4096, 1e-6f},
                                       "rmsnorm");
  test_gemv_tma<H, float, 4, 1, 64, 64, 4>(32, 264, 4104, 5, GemvRmsNorm{1.0f / 4104, 1e-6f},
                                           "rmsnorm");
  test_gemv_tma<H, H, 4, 1, 64, 128, 4>(32, 264, 4104, 8, GemvRmsNorm{1.0f / 4104, 1e-6f},
                                        "rmsnorm");
  test_gemv_tma<BF, BF, 2, 1, 128, 64, 4>(9, 520, 2048, 8, GemvRmsNorm{1.0f / 2048, 1e-6f},
                                          "rmsnorm");
  test_gemv_tma<H, H, 4, 1, 128, 128, 4>(17, 392, 1000, 2, GemvRmsNorm{1.0f / 1000, 1e-6f},
                                         "rmsnorm");
  test_gemv_tma<H, H, 4, 1, 64, 64, 8>(32, 6144, 4096, 1, GemvRmsNorm{1.0f / 4096, 1e-6f},
                                       "rmsnorm", nullptr, 1);
  // K-major weights (W^T [N][K]): every column-block width, ragged N and K, splits, two weights,
  // bf16, the row-sum epilogue.
  test_gemv_tma<BF, BF, 1, 1, 64, 64, 4, GemvIdentity, true>(1, 4104, 4104, 3, id, "id");
  test_gemv_tma<H, H, 2, 1, 128, 128, 4, GemvIdentity, true>(16, 1000, 2056, 5, id, "id");
  test_gemv_tma<BF, float, 4, 1, 256, 64, 4, GemvIdentity, true>(27, 1288, 3000, 2, id, "id");
  test_gemv_tma<H, H, 1, 1, 64, 256, 2, GemvIdentity, true>(8, 200, 8200, 8, id, "id");
  test_gemv_tma<BF, BF, 2, 2, 128, 64, 4, GemvSiluMul, true>(16, 1032, 1024, 5, GemvSiluMul(),
                                                             "silu_mul");
  test_gemv_tma<H, H, 1, 2, 64, 128, 4, GemvSiluMul, true>(1, 1032, 2056, 1, GemvSiluMul(),
                                                           "silu_mul");
  test_gemv_tma<BF, BF, 4, 1, 128, 64, 4, GemvRmsNorm, true>(
      32, 264, 4104, 5, GemvRmsNorm{1.0f / 4104, 1e-6f}, "rmsnorm");
  {
    DBuf<H> x(64 * 1032), w(1032 * 64), o(64 * 64);
    const cudaError_t e9 =
        gemv_tma_launch<H, H, 1, 1, 64, 64, 4>(x.p, 1032, w.p, w.p, 64, o.p, 64, 8, 64, 1024, 9, 0);
    const cudaError_t eld =
        gemv_tma_launch<H, H, 1, 1, 64, 64, 4>(x.p, 1028, w.p, w.p, 64, o.p, 64, 8, 64, 1024, 1, 0);
    const cudaError_t em =
        gemv_tma_launch<H, H, 1, 1, 64, 64, 4>(x.p, 1032, w.p, w.p, 64, o.p, 64, 9, 64, 1024, 1, 0);
    CK(cudaGetLastError());
    report(
        "gemv_tma.refuses_bad_launches",
        e9 == cudaErrorInvalidValue && eld == cudaErrorInvalidValue && em == cudaErrorInvalidValue,
        "splits 9: %d, ldx 1028: %d, M 9 > 8 MT: %d", int(e9), int(eld), int(em));
  }
}

// ---- gemv_kmajor.cuh ---------------------------------------------------------------------------

// gemv_kmajor_launch (8 warps, unroll 4, clusters of up to 8 CTAs) on W^T [N][K + 8] (NW = 2: a
// second such weight, epi(y0, y1)), with `splits` CTAs per cluster (empty k-ranges included).
template <typename T, typename TO, int MT, class Epi, int NW = 1>
void test_gemv_kmajor(int M, int N, int K, int splits, Epi epi, const char* epi_name,
                      const float* h_row_scale = nullptr) {
  const int ldx = K + 8, ldw = N + 8, ldo = N + 8, ldwt = K + 8;
  auto launch = [&](const T* X, const T* W0, const T* W1, TO* out) {
    return gemv_kmajor_launch<T, TO, MT, 1, 8, 4, 8, Epi, NW>(X, ldx, W0, W1, ldwt, out, ldo, M, N,
                                                              K, splits, 0, epi);
  };
  char name[200];
  snprintf(name, sizeof name, "gemv_kmajor.%s_m%d_n%d_k%d_mt%d_nw%d_splits%d_%s_%s", tname<T>(), M,
           N, K, MT, NW, splits, tname<TO>(), epi_name);
  check_gemv<T, TO, NW, Epi>(name, M, N, K, ldx, ldw, ldo, launch, h_row_scale, 2, ldwt);
}

// The K-major register GEMV: every cluster size, N of any residue (scalar stores), K not a
// multiple of a k-step, M from 1 to 32, bf16 and f16, f32 output, epilogue coordinates and the
// fused rms_norm (row sums across a cluster); launches that break the preconditions are refused.
static void test_gemv_kmajor_all(const cudaDeviceProp& prop) {
  if (!device_has_wgmma(prop)) {
    printf("SKIP gemv_kmajor (clusters need an sm_90 device and a build for sm_90a)\n");
    return;
  }
  using H = __half;
  using BF = __nv_bfloat16;
  const GemvIdentity id;
  for (int s = 1; s <= 8; ++s) test_gemv_kmajor<BF, BF, 1>(1, 1001, 4104, s, id, "id");
  test_gemv_kmajor<H, H, 1>(8, 3072, 1024, 1, id, "id");
  test_gemv_kmajor<H, H, 2>(13, 777, 2000, 3, id, "id");
  test_gemv_kmajor<BF, float, 4>(32, 515, 4096, 8, id, "id");
  test_gemv_kmajor<H, H, 4>(27, 40, 8200, 7, id, "id");  // 8200 = 256 k-steps + 8
  test_gemv_kmajor<BF, BF, 1>(5, 17, 264, 8, id, "id");  // empty k-ranges
  std::vector<float> scale(32);
  for (auto& v : scale) v = g_rng.range(0.5f, 2.0f);
  DBuf<float> dscale(32);
  dscale.upload(scale);
  test_gemv_kmajor<H, float, 2>(11, 203, 1024, 2, GemvEpiCoords{dscale.p}, "coords", scale.data());
  test_gemv_kmajor<BF, BF, 4>(27, 777, 4104, 4, GemvRmsNorm{1.0f / 4104, 1e-6f}, "rmsnorm");
  test_gemv_kmajor<H, H, 1>(3, 1024, 2048, 1, GemvRmsNorm{1.0f / 2048, 1e-6f}, "rmsnorm");
  // Two weights (a gated pair): silu(X W0^T) * (X W1^T), odd N, clusters, M up to 32.
  test_gemv_kmajor<BF, BF, 1, GemvSiluMul, 2>(4, 2816, 1024, 1, GemvSiluMul(), "silu_mul");
  test_gemv_kmajor<H, H, 2, GemvSiluMul, 2>(13, 777, 2000, 4, GemvSiluMul(), "silu_mul");
  test_gemv_kmajor<BF, float, 2, GemvSiluMul, 2>(16, 203, 4104, 8, GemvSiluMul(), "silu_mul");
  {
    DBuf<H> x(64 * 1032), w(1032 * 64), o(64 * 64);
    const cudaError_t e9 = gemv_kmajor_launch<H, H, 1, 1, 8, 4, 8, GemvIdentity>(
        x.p, 1032, w.p, nullptr, 1032, o.p, 64, 8, 64, 1024, 9, 0, id);
    const cudaError_t eld = gemv_kmajor_launch<H, H, 1, 1, 8, 4, 8, GemvIdentity>(
        x.p, 1028, w.p, nullptr, 1032, o.p, 64, 8, 64, 1024, 1, 0, id);
    const cudaError_t em = gemv_kmajor_launch<H, H, 1, 1, 8, 4, 8, GemvIdentity>(
        x.p, 1032, w.p, nullptr, 1032, o.p, 64, 9, 64, 1024, 1, 0, id);
    const cudaError_t ek = gemv_kmajor_launch<H, H, 1, 1, 8, 4, 8, GemvIdentity>(
        x.p, 1032, w.p, nullptr, 1032, o.p, 64, 8, 64, 1020, 1, 0, id);
    const cudaError_t ew1 = gemv_kmajor_launch<H, H, 1, 1, 8, 4, 8, GemvSiluMul, 2>(
        x.p, 1032, w.p, nullptr, 1032, o.p, 64, 8, 64, 1024, 1, 0, GemvSiluMul());
    CK(cudaGetLastError());
    report("gemv_kmajor.refuses_bad_launches",
           e9 == cudaErrorInvalidValue && eld == cudaErrorInvalidValue &&
               em == cudaErrorInvalidValue && ek == cudaErrorInvalidValue &&
               ew1 == cudaErrorInvalidValue,
           "splits 9: %d, ldx 1028: %d, M 9 > 8 MT: %d, K 1020: %d, no W1: %d", int(e9), int(eld),
           int(em), int(ek), int(ew1));
  }
}

// ---- Timing ------------------------------------------------------------------------------------

#include "gpu_timing.h"

static double g_copy_gbps = 0;

static void time_copy() {
  const size_t bytes = size_t(512) << 20;
  char *a, *b;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  const double us = time_us(
      [&](int, cudaStream_t s) { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); },
      10);
  g_copy_gbps = 2.0 * bytes / (us * 1e3);
  printf("TIME copy d2d 512MB: %.1f us, %.0f GB/s (read + write)\n", us, g_copy_gbps);
  cudaFree(a), cudaFree(b);
}

struct GemvShape {
  const char* name;
  int M, N, K, nw;
  bool rmsnorm = false;  // also time the fused rms_norm epilogue
};

// One TIME line: the configuration, the median time and the bandwidth it implies (weights, X and
// the output, once each) against 3.0 TB/s and the measured copy.
static void report_gemv_time(const GemvShape& s, const char* tag, const char* variant, int mt,
                             int nw, int wn, int wk, int u, int minb, int col_blocks, int splits,
                             int per_sm, double us) {
  const double bytes = double(nw) * s.K * s.N * 2 + double(s.M) * s.K * 2 + double(s.M) * s.N * 2;
  const double gbps = bytes / (us * 1e3);
  printf(
      "TIME gemv %-36s%s%s mt%d w%dx%d u%d minb%d grid %4dx%-3d (%d/SM) %8.1f us %6.0f GB/s "
      "%5.1f%% of 3.0 TB/s %5.1f%% of copy\n",
      s.name, tag, variant, mt, wn, wk, u, minb, col_blocks, splits, per_sm, us, gbps,
      100.0 * gbps / 3000.0, 100.0 * gbps / g_copy_gbps);
}

template <int MT, int NW, int WN, int WK, int U, int MINB, class Epi>
void time_gemv_cfg(const GemvShape& s, const cudaDeviceProp& prop, int copies, __half* X,
                   __half* const* W, __half* out, float* ws, int* cnt, double wave_mult,
                   Epi epi = Epi(), const char* tag = "") {
  auto kernel = gemv_kernel<__half, __half, MT, NW, WN, WK, U, MINB, Epi>;
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * WN * WK, 0));
  const int target = int(prop.multiProcessorCount * per_sm * wave_mult);
  const int splits = gemv_pick_splits(s.N, s.K, WN, WK, target, 128);
  const int64_t need = gemv_workspace_floats(s.N, WN, splits, MT, NW, Epi::kRowSumSq);
  if (need > int64_t(64) << 20) {
    printf("TIME %s: workspace too large, skipped\n", s.name);
    return;
  }
  CK(cudaMemset(cnt, 0, 4096 * sizeof(int)));
  const size_t wsz = size_t(s.K) * s.N;
  auto call = [&](int i, cudaStream_t st) {
    const int c = i % copies;
    const __half* w0 = W[c];
    const __half* w1 = NW > 1 ? W[c] + wsz : W[c];
    CK((gemv_launch<__half, __half, MT, NW, WN, WK, U, MINB, Epi>(
        X, s.K, w0, w1, s.N, out, s.N, s.M, s.N, s.K, splits, ws, cnt, st, epi)));
  };
  report_gemv_time(s, tag, "", MT, NW, WN, WK, U, MINB, gemv_col_blocks(s.N, WN), splits, per_sm,
                   time_us(call, 20));
}

// The cluster variant of time_gemv_cfg (sm_90): splits from gemv_cluster_pick_splits for one
// wave of blocks, lowered until one wave of clusters fits (cudaOccupancyMaxActiveClusters).
template <int MT, int NW, int WN, int WK, int U, int MINB, class Epi>
void time_gemv_cluster_cfg(const GemvShape& s, const cudaDeviceProp& prop, int copies, __half* X,
                           __half* const* W, __half* out, Epi epi = Epi(), const char* tag = "") {
  auto kernel = gemv_cluster_kernel<__half, __half, MT, NW, WN, WK, U, MINB, Epi>;
  CK((gemv_cluster_prepare<__half, __half, MT, NW, WN, WK, U, MINB, Epi>()));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, kernel, 32 * WN * WK, gemv_cluster_smem_bytes_max(WN, MT, NW, Epi::kRowSumSq)));
  const int cb = gemv_col_blocks(s.N, WN);
  int splits = gemv_cluster_pick_splits(s.N, s.K, WN, WK, prop.multiProcessorCount * per_sm, 128);
  for (;;) {
    int clusters = 0;
    CK((gemv_cluster_active_clusters<__half, __half, MT, NW, WN, WK, U, MINB, Epi>(s.N, splits,
                                                                                   &clusters)));
    if (clusters >= cb || splits == 1) break;
    splits = ceil_div(s.K, gemv_k_chunk(s.K, splits - 1));
  }
  const size_t wsz = size_t(s.K) * s.N;
  auto call = [&](int i, cudaStream_t st) {
    const int c = i % copies;
    const __half* w0 = W[c];
    const __half* w1 = NW > 1 ? W[c] + wsz : W[c];
    CK((gemv_cluster_launch<__half, __half, MT, NW, WN, WK, U, MINB, Epi>(
        X, s.K, w0, w1, s.N, out, s.N, s.M, s.N, s.K, splits, st, epi)));
  };
  report_gemv_time(s, tag, " cluster", MT, NW, WN, WK, U, MINB, cb, splits, per_sm,
                   time_us(call, 20));
}

template <int MT, int NW>
void time_gemv_shape(const GemvShape& s, const cudaDeviceProp& prop) {
  const size_t wbytes = size_t(s.nw) * s.K * s.N * sizeof(__half);
  const int copies = int(std::max<size_t>(2, (size_t(200) << 20) / wbytes + 1));
  std::vector<__half*> W(copies);
  for (auto& p : W) {
    CK(cudaMalloc(&p, wbytes));
    // Random-ish nonzero bits on the device: fill with a small pattern via memset of 0x3c (1.0).
    CK(cudaMemset(p, 0x33, wbytes));
  }
  __half *X, *out;
  CK(cudaMalloc(&X, size_t(s.M) * s.K * sizeof(__half)));
  CK(cudaMemset(X, 0x2c, size_t(s.M) * s.K * sizeof(__half)));
  CK(cudaMalloc(&out, size_t(s.M) * s.N * sizeof(__half)));
  float* ws;
  int* cnt;
  CK(cudaMalloc(&ws, size_t(64) << 22));
  CK(cudaMalloc(&cnt, 4096 * sizeof(int)));
  // Configurations (warps_n, warps_k, unroll, min blocks/SM) that compile without spills.
  if constexpr (NW == 1 && MT <= 2) {
    time_gemv_cfg<MT, 1, 2, 4, 2, 2, GemvIdentity>(s, prop, copies, X, W.data(), out, ws, cnt, 1.0);
    time_gemv_cfg<MT, 1, 2, 4, 2, 2, GemvIdentity>(s, prop, copies, X, W.data(), out, ws, cnt, 2.0);
    time_gemv_cfg<MT, 1, 1, 8, 2, 2, GemvIdentity>(s, prop, copies, X, W.data(), out, ws, cnt, 1.0);
    time_gemv_cfg<MT, 1, 4, 2, 2, 2, GemvIdentity>(s, prop, copies, X, W.data(), out, ws, cnt, 1.0);
    time_gemv_cfg<MT, 1, 2, 4, 4, 1, GemvIdentity>(s, prop, copies, X, W.data(), out, ws, cnt, 1.0);
    if (s.rmsnorm)
      time_gemv_cfg<MT, 1, 2, 4, 2, 2>(s, prop, copies, X, W.data(), out, ws, cnt, 1.0,
                                       GemvRmsNorm{1.0f / s.K, 1e-6f}, " +rms");
  } else if constexpr (NW == 1) {
    time_gemv_cfg<MT, 1, 2, 4, 1, 2, GemvIdentity>(s, prop, copies, X, W.data(), out, ws, cnt, 1.0);
    time_gemv_cfg<MT, 1, 2, 4, 1, 2, GemvIdentity>(s, prop, copies, X, W.data(), out, ws, cnt, 2.0);
    time_gemv_cfg<MT, 1, 1, 8, 1, 2, GemvIdentity>(s, prop, copies, X, W.data(), out, ws, cnt, 1.0);
    time_gemv_cfg<MT, 1, 2, 4, 2, 1, GemvIdentity>(s, prop, copies, X, W.data(), out, ws, cnt, 1.0);
    if (s.rmsnorm)
      time_gemv_cfg<MT, 1, 2, 4, 1, 2>(s, prop, copies, X, W.data(), out, ws, cnt, 1.0,
                                       GemvRmsNorm{1.0f / s.K, 1e-6f}, " +rms");
  } else {
    time_gemv_cfg<MT, 2, 2, 4, 1, 2, GemvSiluMul>(s, prop, copies, X, W.data(), out, ws, cnt, 1.0);
    time_gemv_cfg<MT, 2, 2, 4, 1, 2, GemvSiluMul>(s, prop, copies, X, W.data(), out, ws, cnt, 2.0);
    time_gemv_cfg<MT, 2, 2, 4, 2, 1, GemvSiluMul>(s, prop, copies, X, W.data(), out, ws, cnt, 1.0);
  }
  // The same default configurations with split-K over a cluster (no workspace, no counters).
  if (prop.major >= 9) {
    if constexpr (NW == 1) {
      constexpr int kU = MT <= 2 ? 2 : 1;
      time_gemv_cluster_cfg<MT, 1, 2, 4, kU, 2, GemvIdentity>(s, prop, copies, X, W.data(), out);
      if (s.rmsnorm)
        time_gemv_cluster_cfg<MT, 1, 2, 4, kU, 2>(s, prop, copies, X, W.data(), out,
                                                  GemvRmsNorm{1.0f / s.K, 1e-6f}, " +rms");
    } else {
      time_gemv_cluster_cfg<MT, 2, 2, 4, 1, 2, GemvSiluMul>(s, prop, copies, X, W.data(), out);
    }
  }
  for (auto p : W) cudaFree(p);
  cudaFree(X), cudaFree(out), cudaFree(ws), cudaFree(cnt);
}

static void time_gemm(const cudaDeviceProp& prop) {
  using Cfg = GemmConfig<__half, 128, 128, 32, 2, 4, 3>;
  const int M = 4096, N = 4096, K = 4096;
  __half *A, *B, *C;
  CK(cudaMalloc(&A, size_t(M) * K * 2));
  CK(cudaMalloc(&B, size_t(K) * N * 2));
  CK(cudaMalloc(&C, size_t(M) * N * 2));
  CK(cudaMemset(A, 0x33, size_t(M) * K * 2));
  CK(cudaMemset(B, 0x33, size_t(K) * N * 2));
  const double us = time_us(
      [&](int, cudaStream_t st) {
        CK(gemm_launch<Cfg>(A, K, B, N, C, N, M, N, K, EpiIdentity(), st));
      },
      10);
  printf("TIME gemm mma.sync 4096x4096x4096 f16 tile 128x128x32 s3: %.1f us, %.0f TFLOP/s\n", us,
         2.0 * M * N * K / (us * 1e6));
  if (device_has_wgmma(prop)) {
    using G = WgmmaGemm<__half, 2, 4>;
    const double us2 = time_us(
        [&](int, cudaStream_t st) {
          CK(wgmma_gemm_launch<G>(A, K, B, N, C, N, M, N, K, EpiIdentity(), st));
        },
        10);
    printf("TIME gemm wgmma 4096x4096x4096 f16 tile 128x128x64 s4: %.1f us, %.0f TFLOP/s\n", us2,
           2.0 * M * N * K / (us2 * 1e6));
    using WS = WgmmaGemmWS<__half, 1, 6>;  // the emitter's configurations (CLUSTER 1 and 2)
    const double us3 = time_us(
        [&](int, cudaStream_t st) {
          CK(wgmma_ws_gemm_launch<WS>(A, K, B, B, N, C, N, M, N, K, WgmmaEpiIdentity(), st));
        },
        10);
    printf("TIME gemm wgmma_ws 4096x4096x4096 f16 tile 128x128x64 s6: %.1f us, %.0f TFLOP/s\n", us3,
           2.0 * M * N * K / (us3 * 1e6));
    // gated_mlp m = 4096: silu(X W1) * (X W2), X 4096 x 4096, W1 and W2 4096 x 4096 (two
    // matmuls' FLOPs). B1 is a second buffer so that both weights are really read.
    __half* B1;
    CK(cudaMalloc(&B1, size_t(K) * N * 2));
    CK(cudaMemset(B1, 0x32, size_t(K) * N * 2));
    using WS2 = WgmmaGemmWS<__half, 2, 4>;
    const double us4 = time_us(
        [&](int, cudaStream_t st) {
          CK(wgmma_ws_gemm_launch<WS2>(A, K, B, B1, N, C, N, M, N, K, WgmmaEpiSiluMul(), st));
        },
        10);
    printf(
        "TIME gated_mlp m4096 wgmma_ws dual s4 cluster 2: %.1f us, %.0f TFLOP/s (PyTorch: 403 "
        "us)\n",
        us4, 4.0 * M * N * K / (us4 * 1e6));
    cudaFree(B1);
  }
  cudaFree(A), cudaFree(B), cudaFree(C);
}

static void timing(const cudaDeviceProp& prop) {
  time_copy();
  // Benchmark-suite shapes (benchmarks.md): rmsnorm_linear (m = 2 bs), gated_mlp, skinny_gemm.
  time_gemv_shape<1, 1>({"rmsnorm_linear bs1 2x4096*4096x6144", 2, 6144, 4096, 1, true}, prop);
  time_gemv_shape<2, 1>({"rmsnorm_linear bs8 16x4096*4096x6144", 16, 6144, 4096, 1, true}, prop);
  time_gemv_shape<4, 1>({"rmsnorm_linear bs16 32x4096*4096x6144", 32, 6144, 4096, 1, true}, prop);
  time_gemv_shape<1, 2>({"gated_mlp m1 1x4096*2x4096x4096", 1, 4096, 4096, 2}, prop);
  time_gemv_shape<2, 2>({"gated_mlp m16 16x4096*2x4096x4096", 16, 4096, 4096, 2}, prop);
  time_gemv_shape<1, 1>({"skinny m1 1x16384*16384x2304", 1, 2304, 16384, 1}, prop);
  time_gemv_shape<2, 1>({"skinny m16 16x16384*16384x13312", 16, 13312, 16384, 1}, prop);
  time_gemv_shape<4, 1>({"skinny m32 32x16384*16384x13312", 32, 13312, 16384, 1}, prop);
  time_gemv_shape<2, 1>({"skinny m16 16x6656*6656x16384", 16, 16384, 6656, 1}, prop);
  time_gemm(prop);
}

// ---- lowrank.cuh -------------------------------------------------------------------------------

// An epilogue that needs both values and the right coordinates: v0 + 0.5 v1 + 0.001 (n % 97) -
// 0.01 m.
struct LowrankEpiCoords {
  __device__ float operator()(float v0, float v1, int m, int n) const {
    return v0 + 0.5f * v1 + 0.001f * float(n % 97) - 0.01f * float(m);
  }
};

// lowrank_launch in every layout (AK: A given as A^T [R][K]; BK: B as B^T [N][R]; WK: W as
// W^T [N][K]), padded leading dimensions, against a float64 reference of
// (X W)[m, n] (HAS_W) + 0.5 ((X A) B)[m, n] + coordinates.
template <typename T, typename TO, int MT, int RT, int NC, bool AK, bool BK, bool HAS_W, bool WK>
void test_lowrank(int M, int N, int K, int R, int splits, int repeats = 2) {
  const int ldx = K + 8, lda = AK ? K + 8 : R + 8, ldb = BK ? R + 8 : N + 8,
            ldw = WK ? K + 8 : N + 8, ldo = N + 8;
  DBuf<T> dX(size_t(M) * ldx), dA(size_t(AK ? R : K) * lda), dB(size_t(BK ? N : R) * ldb),
      dW(HAS_W ? size_t(WK ? N : K) * ldw : 8);
  DBuf<TO> dout(size_t(M) * ldo);
  double worst = 0;
  int bad_pad = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    auto X = random_vec<T>(dX.n), A = random_vec<T>(dA.n), B = random_vec<T>(dB.n),
         W = random_vec<T>(dW.n);
    dX.upload(X), dA.upload(A), dB.upload(B), dW.upload(W);
    dout.poison();
    CK((lowrank_launch<T, TO, MT, RT, NC, AK, BK, HAS_W, WK>(dX.p, ldx, dA.p, lda, dB.p, ldb, dW.p,
                                                             ldw, dout.p, ldo, M, N, K, R, splits,
                                                             0, LowrankEpiCoords{})));
    CK_LAUNCH();
    auto out = dout.download();
    std::vector<double> ref(out.size(), 0.0), t(static_cast<size_t>(R), 0.0);
    for (int m = 0; m < M; ++m) {
      for (int r = 0; r < R; ++r) {
        double s = 0;
        for (int k = 0; k < K; ++k)
          s += double(h2f(X[size_t(m) * ldx + k])) *
               h2f(AK ? A[size_t(r) * lda + k] : A[size_t(k) * lda + r]);
        t[r] = s;
      }
      for (int n = 0; n < N; ++n) {
        double v0 = 0, v1 = 0;
        if (HAS_W)
          for (int k = 0; k < K; ++k)
            v0 += double(h2f(X[size_t(m) * ldx + k])) *
                  h2f(WK ? W[size_t(n) * ldw + k] : W[size_t(k) * ldw + n]);
        for (int r = 0; r < R; ++r)
          v1 += t[r] * h2f(BK ? B[size_t(n) * ldb + r] : B[size_t(r) * ldb + n]);
        ref[size_t(m) * ldo + n] = v0 + 0.5 * v1 + double(0.001f * float(n % 97)) - 0.01 * m;
      }
      for (int n = N; n < ldo; ++n) {
        if (!std::isnan(h2f(out[size_t(m) * ldo + n]))) ++bad_pad;
        out[size_t(m) * ldo + n] = f2h<TO>(0.0f);
      }
    }
    worst = std::max(worst, rel_l2(out, ref));
    if (std::isnan(rel_l2(out, ref))) worst = NAN;
  }
  char name[200];
  snprintf(name, sizeof name, "lowrank.%s_m%d_n%d_k%d_r%d_mt%d_rt%d_nc%d_splits%d_%s%s%s%s%s",
           tname<T>(), M, N, K, R, MT, RT, NC, splits, tname<TO>(), AK ? "_ak" : "",
           BK ? "_bk" : "", HAS_W ? "_w" : "", WK ? "_wk" : "");
  const double thr = sizeof(TO) == 4 ? 1e-5 : std::is_same_v<TO, __half> ? 2e-3 : 1e-2;
  report(name, within(worst, thr) && bad_pad == 0, "rel_l2=%.2e pad_written=%d", worst, bad_pad);
}

// The low-rank chain: every cluster size, empty k-ranges (K = 264 at 8 splits), CTAs past N
// (N = 8 at 4 splits), ragged last column blocks, M 1..32, R 8..64, every layout, with and without
// the full-rank term W, bf16 and f32 output; bad launches refused.
static void test_lowrank_all(const cudaDeviceProp& prop) {
  if (!device_has_wgmma(prop)) {
    printf("SKIP lowrank (clusters need an sm_90 device and a build for sm_90a)\n");
    return;
  }
  using H = __half;
  using BF = __nv_bfloat16;
  for (int s = 1; s <= 8; ++s)
    test_lowrank<H, H, 1, 1, 32, false, false, false, false>(16, 1024, 1024, 16, s);
  // Non-portable cluster sizes (up to 16), an empty k-range at 12 (K 1032 = 11 chunks of 96).
  for (int s : {12, 16})
    test_lowrank<H, H, 1, 1, 32, false, false, false, false>(16, 1024, 1032, 16, s);
  test_lowrank<H, H, 1, 1, 64, false, false, false, false>(16, 4096, 4096, 16, 16);
  test_lowrank<BF, BF, 2, 4, 32, true, true, false, false>(32, 2056, 1024, 64, 16);
  test_lowrank<H, H, 1, 1, 32, false, false, false, false>(16, 4096, 4096, 16, 8);  // lowrank
  test_lowrank<H, H, 1, 1, 32, false, false, true, false>(16, 4096, 256, 16, 1);    // lora
  test_lowrank<BF, BF, 1, 1, 64, true, true, true, true>(16, 1032, 256, 16, 2);
  test_lowrank<H, H, 1, 4, 64, false, true, false, false>(1, 520, 4104, 64, 8);
  test_lowrank<H, H, 2, 4, 32, false, false, false, false>(32, 2056, 1024, 64, 4);
  test_lowrank<BF, float, 2, 2, 128, true, false, false, false>(27, 1000, 2000, 24, 5);
  test_lowrank<H, H, 2, 1, 32, false, false, true, true>(32, 200, 264, 8, 8);  // empty k-ranges
  test_lowrank<BF, BF, 1, 2, 32, true, true, false, false>(5, 8, 520, 32, 4);  // CTAs past N
  test_lowrank<H, float, 2, 3, 128, false, false, true, false>(17, 264, 128, 40, 1);
  test_lowrank<BF, BF, 1, 1, 32, false, false, true, false>(9, 264, 40, 16, 1);  // an empty W chunk
  test_lowrank<H, H, 1, 1, 32, true, true, true, true>(16, 4096, 256, 16, 1);    // lora, nn.Linear
  test_lowrank<BF, BF, 1, 1, 128, false, true, false, false>(3, 4104, 1032, 8, 8);
  {
    DBuf<H> x(64 * 1032), a(1032 * 64), b(64 * 1032), o(64 * 1032);
    const cudaError_t e9 = lowrank_launch<H, H, 1, 1, 32, false, false, false, false>(
        x.p, 1032, a.p, 16, b.p, 1024, a.p, 16, o.p, 1024, 16, 1024, 1024, 16, 17, 0,
        LowrankEpiCoords{});
    const cudaError_t em = lowrank_launch<H, H, 1, 1, 32, false, false, false, false>(
        x.p, 1032, a.p, 16, b.p, 1024, a.p, 16, o.p, 1024, 17, 1024, 1024, 16, 1, 0,
        LowrankEpiCoords{});
    const cudaError_t er = lowrank_launch<H, H, 1, 1, 32, false, false, false, false>(
        x.p, 1032, a.p, 16, b.p, 1024, a.p, 16, o.p, 1024, 16, 1024, 1024, 12, 1, 0,
        LowrankEpiCoords{});
    // K 65536 without a split: 2 MB of X and A per CTA, over any device's shared memory.
    const cudaError_t ek = lowrank_launch<H, H, 1, 1, 32, false, false, false, false>(
        x.p, 65536, a.p, 16, b.p, 1024, a.p, 16, o.p, 1024, 16, 1024, 65536, 16, 1, 0,
        LowrankEpiCoords{});
    CK(cudaGetLastError());
    report("lowrank.refuses_oversized_shared_memory", ek == cudaErrorInvalidValue, "K 65536: %d",
           int(ek));
    report(
        "lowrank.refuses_bad_launches",
        e9 == cudaErrorInvalidValue && em == cudaErrorInvalidValue && er == cudaErrorInvalidValue,
        "splits 17: %d, M 17 > 16 MT: %d, R 12 not a multiple of 8: %d", int(e9), int(em), int(er));
  }
}

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  signal(SIGALRM, on_alarm);
  stage("startup");
  uint64_t seed = uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  if (const char* s = getenv("KILN_SEED")) seed = strtoull(s, nullptr, 10);
  g_rng.s = seed;
  int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("device: %s sm_%d%d, %d SMs, L2 %d MB; seed %llu\n", prop.name, prop.major, prop.minor,
         prop.multiProcessorCount, prop.l2CacheSize >> 20, (unsigned long long)seed);
  stage("elementwise");
  test_elementwise();
  stage("reduce");
  test_reduce();
  stage("accum");
  test_accum();
  stage("copy");
  test_copy(prop);
  stage("mma");
  test_mma();
  stage("wgmma");
  test_wgmma(prop);
  stage("gemv");
  test_gemv_all();
  stage("gemv_cluster");
  test_gemv_cluster(prop);
  stage("gemv_tma");
  test_gemv_tma_all(prop);
  test_gemv_kmajor_all(prop);
  test_lowrank_all(prop);
  if (!getenv("KILN_SKIP_TIMING")) {
    stage("timing", 120);
    timing(prop);
  }
  alarm(0);
  finish_and_exit(g_failed == 0 ? 0 : 1);
}
