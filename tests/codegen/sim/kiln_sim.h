// A CPU simulator for Kiln's emitted kernels, so that code generation can be tested on machines
// without a GPU. Each CUDA thread of a block is a fiber (ucontext) on one OS thread; the fibers of
// a block run in a shuffled order and switch only at barriers, which makes a missing barrier show
// up as a read of data that is not there yet. The device primitives the emitted code and
// runtime/cg/kiln_cg.cuh use are emulated to the letter of the PTX ISA:
//   - cp.async copies land when a cp.async.wait_group retires their group, not before;
//   - ldmatrix (x2/x4, .trans) and mma.sync.m16n8k16 exchange fragments across the 32 lanes
//     with the documented lane layouts;
//   - shuffles, __syncthreads and warp collectives deadlock-check (divergent barriers abort);
//   - shared memory starts as NaN bytes and every shared access by address is bounds-checked.
// It replaces runtime/*.cuh (whose inline PTX cannot build for the host) with equivalents of the
// functions the generated code calls, in namespace kiln::rt.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(x) alignas(x)
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
inline float2 make_float2(float a, float b) {
  return {a, b};
}

// ---- CUDA runtime API --------------------------------------------------------------------------
enum cudaError_t { cudaSuccess = 0, cudaErrorLaunchFailure = 719 };
using cudaStream_t = void*;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaMemcpyKind { cudaMemcpyDeviceToDevice = 3, cudaMemcpyHostToDevice = 1 };

namespace kiln_sim {

[[noreturn]] inline void fail(const std::string& msg) {
  std::fprintf(stderr, "SIM ERROR: %s\n", msg.c_str());
  std::fflush(stderr);
  std::exit(3);
}

struct Copy {
  unsigned char* dst;
  const unsigned char* src;
  int bytes, valid;
};

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  dim3 tid;
  int linear = 0;
  bool done = false;
  int waiting = 0;  // 1: block barrier, 2: warp barrier
  uint64_t gen = 0;
  std::vector<std::vector<Copy>> groups;
  std::vector<Copy> open;
};

struct State {
  std::vector<Fiber> fibers;
  int cur = -1;
  ucontext_t sched;
  dim3 block_idx, grid_dim, block_dim;
  std::vector<unsigned char> smem_buf;
  size_t smem_bytes = 0;
  std::function<void()> body;
  int bar_count = 0;
  uint64_t bar_gen = 0;
  std::vector<int> wcount;
  std::vector<uint64_t> wgen;
  std::vector<std::array<uint64_t, 8>> slots;  // one per thread, for warp exchanges
  std::mt19937 rng{12345};
};
inline State& S() {
  static State s;
  return s;
}
inline Fiber& me() {
  return S().fibers[S().cur];
}
inline unsigned char* smem() {
  return S().smem_buf.data();
}
inline int live_threads() {
  int n = 0;
  for (const Fiber& f : S().fibers) n += !f.done;
  return n;
}
inline int live_in_warp(int w) {
  int n = 0;
  for (const Fiber& f : S().fibers) n += !f.done && f.linear / 32 == w;
  return n;
}
inline void yield() {
  swapcontext(&me().ctx, &S().sched);
}

inline void block_barrier() {
  State& s = S();
  uint64_t g = s.bar_gen;
  if (++s.bar_count == live_threads()) {
    s.bar_count = 0;
    ++s.bar_gen;
    return;
  }
  me().waiting = 1;
  me().gen = g;
  while (s.bar_gen == g) yield();
  me().waiting = 0;
}

inline void warp_barrier() {
  State& s = S();
  int w = me().linear / 32;
  uint64_t g = s.wgen[w];
  if (++s.wcount[w] == live_in_warp(w)) {
    s.wcount[w] = 0;
    ++s.wgen[w];
    return;
  }
  me().waiting = 2;
  me().gen = g;
  while (s.wgen[w] == g) yield();
  me().waiting = 0;
}

inline std::array<uint64_t, 8>& slot(int linear) {
  return S().slots[linear];
}
inline int lane() {
  return me().linear & 31;
}
inline int warp_base() {
  return me().linear & ~31;
}

inline void entry() {
  S().body();
  Fiber& f = me();
  f.done = true;
  State& s = S();
  // Threads waiting at a barrier no longer wait for this one.
  if (s.bar_count > 0 && s.bar_count == live_threads()) {
    s.bar_count = 0;
    ++s.bar_gen;
  }
  int w = f.linear / 32;
  if (s.wcount[w] > 0 && s.wcount[w] == live_in_warp(w)) {
    s.wcount[w] = 0;
    ++s.wgen[w];
  }
  swapcontext(&f.ctx, &s.sched);
}

struct Cfg {
  dim3 grid, block;
  size_t smem;
  Cfg(dim3 g, dim3 b, size_t sm = 0, cudaStream_t = nullptr) : grid(g), block(b), smem(sm) {}
};

inline void run_block(const Cfg& cfg) {
  State& s = S();
  int T = cfg.block.x * cfg.block.y * cfg.block.z;
  if (T <= 0) fail("empty block");
  // The last warp may be partial (e.g. a <<<1, 1>>> fill): its collectives wait for its live
  // lanes, and its exchange slots exist for all 32 lanes (those past the block read zeros,
  // where CUDA leaves them undefined).
  const int W = (T + 31) / 32;
  // Fibers (and their stacks) are reused from block to block.
  if (static_cast<int>(s.fibers.size()) != T) {
    s.fibers.clear();
    s.fibers.resize(T);
  }
  s.smem_bytes = cfg.smem;
  s.smem_buf.assign(cfg.smem + 16, 0xff);
  s.bar_count = 0;
  s.wcount.assign(W, 0);
  s.wgen.assign(W, 0);
  s.slots.assign(W * 32, {});
  for (int i = 0; i < T; ++i) {
    Fiber& f = s.fibers[i];
    f.linear = i;
    f.done = false;
    f.waiting = 0;
    f.groups.clear();
    f.open.clear();
    f.tid = dim3(i % cfg.block.x, (i / cfg.block.x) % cfg.block.y, i / (cfg.block.x * cfg.block.y));
    if (f.stack.empty()) f.stack.resize(256 * 1024);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, entry, 0);
  }
  std::vector<int> order(T);
  for (int i = 0; i < T; ++i) order[i] = i;
  for (;;) {
    bool all_done = true, progress = false;
    std::shuffle(order.begin(), order.end(), s.rng);
    for (int i : order) {
      Fiber& f = s.fibers[i];
      if (f.done) continue;
      all_done = false;
      if (f.waiting == 1 && s.bar_gen == f.gen) continue;
      if (f.waiting == 2 && s.wgen[f.linear / 32] == f.gen) continue;
      s.cur = i;
      swapcontext(&s.sched, &f.ctx);
      progress = true;
    }
    if (all_done) break;
    if (!progress)
      fail(
          "deadlock: threads wait at different barriers (divergent __syncthreads or warp "
          "collective)");
  }
  // Trailing bytes past the requested dynamic shared memory must be untouched.
  for (size_t b = cfg.smem; b < cfg.smem + 16; ++b)
    if (s.smem_buf[b] != 0xff) fail("write past the end of dynamic shared memory");
}

inline void launch(const Cfg& cfg, std::function<void()> body) {
  State& s = S();
  s.body = std::move(body);
  s.grid_dim = cfg.grid;
  s.block_dim = cfg.block;
  for (unsigned z = 0; z < cfg.grid.z; ++z)
    for (unsigned y = 0; y < cfg.grid.y; ++y)
      for (unsigned x = 0; x < cfg.grid.x; ++x) {
        s.block_idx = dim3(x, y, z);
        run_block(cfg);
      }
}

// Offset of a shared-memory pointer (the simulator's 32-bit "shared address").
inline uint32_t smem_offset(const void* p, int bytes) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  const unsigned char* base = S().smem_buf.data();
  if (c < base || c + bytes > base + S().smem_bytes) fail("shared-memory address out of range");
  return static_cast<uint32_t>(c - base);
}
inline unsigned char* smem_at(uint32_t off, int bytes) {
  if (off + bytes > S().smem_bytes) fail("shared-memory access out of range");
  return S().smem_buf.data() + off;
}

}  // namespace kiln_sim

#define threadIdx (kiln_sim::me().tid)
#define blockIdx (kiln_sim::S().block_idx)
#define blockDim (kiln_sim::S().block_dim)
#define gridDim (kiln_sim::S().grid_dim)

inline void __syncthreads() {
  kiln_sim::block_barrier();
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  kiln_sim::warp_barrier();
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline float __int_as_float(unsigned i) {
  return __int_as_float(static_cast<int>(i));
}
inline float __uint_as_float(unsigned i) {
  return __int_as_float(static_cast<int>(i));
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float atomicAdd(float* p, float v) {
  float o = *p;
  *p = o + v;
  return o;
}
inline float __shfl_xor_sync(unsigned, float v, int o) {
  using namespace kiln_sim;
  slot(me().linear)[0] = __float_as_uint(v);
  warp_barrier();
  float r = __uint_as_float(static_cast<unsigned>(slot(warp_base() + (lane() ^ o))[0]));
  warp_barrier();
  return r;
}

inline double __shfl_xor_sync(unsigned, double v, int o) {
  using namespace kiln_sim;
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  slot(me().linear)[0] = bits;
  warp_barrier();
  bits = slot(warp_base() + (lane() ^ o))[0];
  warp_barrier();
  double r;
  std::memcpy(&r, &bits, 8);
  return r;
}
inline double atomicAdd(double* p, double v) {
  double o = *p;
  *p = o + v;
  return o;
}
inline const char* cudaGetErrorName(cudaError_t) {
  return "cudaError";
}
inline const char* cudaGetErrorString(cudaError_t) {
  return "simulated error";
}

inline cudaError_t cudaGetLastError() {
  return cudaSuccess;
}
template <typename F>
inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) {
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t = nullptr) {
  std::memset(p, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind,
                                   cudaStream_t = nullptr) {
  std::memmove(d, s, n);
  return cudaSuccess;
}

// ---- 16-bit float types ------------------------------------------------------------------------
struct __half {
  uint16_t x;
};
struct __nv_bfloat16 {
  uint16_t x;
};

namespace kiln_sim {
inline float half_to_float(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v;
  if (e == 0)
    v = std::ldexp(static_cast<float>(m), -24);
  else if (e == 31)
    v = m ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(m + 1024), e - 25);
  return s ? -v : v;
}
inline uint16_t float_to_half(float f) {
  if (std::isnan(f)) return 0x7e00;
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);                  // a = m * 2^e, m in [0.5, 1)
  int q = std::max(e - 1, -14) - 10;  // quantum exponent
  double r = std::nearbyint(std::ldexp(a, -q));
  double v = std::ldexp(r, q);
  if (v > 65504.0) return sign | 0x7c00;
  // Encode v.
  if (v < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::ldexp(v, 24));
  int ve;
  double vm = std::frexp(v, &ve);  // v = vm * 2^ve
  int exp = ve - 1 + 15;
  int man = static_cast<int>(std::ldexp(vm * 2 - 1, 10));
  return sign | static_cast<uint16_t>(exp << 10) | static_cast<uint16_t>(man);
}
inline float bf16_to_float(uint16_t b) {
  return __uint_as_float(static_cast<unsigned>(b) << 16);
}
inline uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  unsigned u = __float_as_uint(f);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
}  // namespace kiln_sim

// ---- the runtime, emulated ---------------------------------------------------------------------
#define KILN_DEV inline
#define KILN_HD inline

namespace kiln {
namespace rt {

// runtime/base.cuh's kernel entry and launcher: one simulated launch after another, nothing to
// overlap (a cluster launch is not simulated: row chains, the only generated kernels that ask
// for one, are lowerings the simulator's plans never use).
inline void pdl_entry(bool = false) {}
template <class K, class... A>
inline cudaError_t launch(K kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          int cluster, A&&... args) {
  if (cluster != 1) kiln_sim::fail("cluster launches are not simulated");
  kiln_sim::launch(kiln_sim::Cfg(grid, block, smem, stream), [&] { kernel(args...); });
  return cudaSuccess;
}

// runtime/base.cuh's launch helper; the simulator has no shared-memory limit to raise.
template <auto Kernel>
inline cudaError_t raise_smem_limit_once(int bytes) {
  return cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

inline constexpr int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}
inline constexpr int min_i(int a, int b) {
  return a < b ? a : b;
}
inline constexpr int max_i(int a, int b) {
  return a > b ? a : b;
}
inline int lane_id() {
  return kiln_sim::lane();
}
inline int warp_id() {
  return kiln_sim::me().linear >> 5;
}
inline uint32_t smem_u32(const void* p) {
  return kiln_sim::smem_offset(p, 0);
}

inline float to_f32(float x) {
  return x;
}
inline float to_f32(__half x) {
  return kiln_sim::half_to_float(x.x);
}
inline float to_f32(__nv_bfloat16 x) {
  return kiln_sim::bf16_to_float(x.x);
}
template <typename T>
inline T from_f32(float x);
template <>
inline float from_f32<float>(float x) {
  return x;
}
template <>
inline __half from_f32<__half>(float x) {
  return __half{kiln_sim::float_to_half(x)};
}
template <>
inline __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __nv_bfloat16{kiln_sim::float_to_bf16(x)};
}
template <typename T>
inline uint32_t pack2(float lo, float hi) {
  return static_cast<uint32_t>(from_f32<T>(lo).x) |
         (static_cast<uint32_t>(from_f32<T>(hi).x) << 16);
}
template <typename T>
struct Vec16 {
  static constexpr int kElems = 16 / sizeof(T);
};
template <typename T>
inline void load16_f32(const T* p, float* v) {
  if (reinterpret_cast<uintptr_t>(p) % 16) kiln_sim::fail("load16_f32: unaligned");
  for (int i = 0; i < Vec16<T>::kElems; ++i) v[i] = to_f32(p[i]);
}
template <typename T>
inline void store16_f32(T* p, const float* v) {
  if (reinterpret_cast<uintptr_t>(p) % 16) kiln_sim::fail("store16_f32: unaligned");
  for (int i = 0; i < Vec16<T>::kElems; ++i) p[i] = from_f32<T>(v[i]);
}

struct Identity {
  float operator()(float x) const { return x; }
};
struct Neg {
  float operator()(float x) const { return -x; }
};
struct Exp {
  float operator()(float x) const { return expf(x); }
};
struct Log {
  float operator()(float x) const { return logf(x); }
};
struct Sqrt {
  float operator()(float x) const { return sqrtf(x); }
};
struct Rsqrt {
  float operator()(float x) const { return 1.0f / sqrtf(x); }
};
struct Reciprocal {
  float operator()(float x) const { return 1.0f / x; }
};
struct Square {
  float operator()(float x) const { return x * x; }
};
struct Tanh {
  float operator()(float x) const { return tanhf(x); }
};
struct Sigmoid {
  float operator()(float x) const { return 1.0f / (1.0f + expf(-x)); }
};
struct Silu {
  float operator()(float x) const { return x / (1.0f + expf(-x)); }
};
struct Relu {
  float operator()(float x) const { return fmaxf(x, 0.0f); }
};
struct Gelu {
  float operator()(float x) const { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
};
struct GeluTanh {
  float operator()(float x) const {
    const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
  }
};
struct LeakyRelu {
  float negative_slope = 0.01f;
  float operator()(float x) const { return x >= 0.0f ? x : x * negative_slope; }
};
struct Clamp {
  float lo = -__builtin_huge_valf();
  float hi = __builtin_huge_valf();
  float operator()(float x) const { return fminf(fmaxf(x, lo), hi); }
};
struct Softplus {
  float operator()(float x) const { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }
};
struct Sin {
  float operator()(float x) const { return sinf(x); }
};
struct Cos {
  float operator()(float x) const { return cosf(x); }
};
struct Add {
  float operator()(float a, float b) const { return a + b; }
};
struct Sub {
  float operator()(float a, float b) const { return a - b; }
};
struct Mul {
  float operator()(float a, float b) const { return a * b; }
};
struct Div {
  float operator()(float a, float b) const { return a / b; }
};
struct Maximum {
  float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Minimum {
  float operator()(float a, float b) const { return fminf(a, b); }
};

struct SumOp {
  float operator()(float a, float b) const { return a + b; }
  static float identity() { return 0.0f; }
};
struct MaxOp {
  float operator()(float a, float b) const { return fmaxf(a, b); }
  static float identity() { return -__builtin_huge_valf(); }
};
template <int WIDTH = 32, class Op>
inline float warp_reduce(float v, Op op) {
  for (int o = WIDTH / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <class Op>
inline float block_reduce(float v, Op op, float* scratch) {
  const int tid = threadIdx.x;
  const int nwarps = blockDim.x >> 5;
  v = warp_reduce<32>(v, op);
  __syncthreads();
  if ((tid & 31) == 0) scratch[tid >> 5] = v;
  __syncthreads();
  float r = (tid & 31) < nwarps ? scratch[tid & 31] : Op::identity();
  return warp_reduce<32>(r, op);
}

inline float rescale_factor(float m_from, float m_to) {
  return m_from == -__builtin_huge_valf() ? 0.0f : expf(m_from - m_to);
}
inline void online_rescale(float& m_run, float m_tile, float& a, float& b) {
  const float m_new = fmaxf(m_run, m_tile);
  a = rescale_factor(m_run, m_new);
  b = rescale_factor(m_tile, m_new);
  m_run = m_new;
}

// ---- cp.async ----
inline void cp_async_16(uint32_t saddr, const void* gptr, int src_bytes) {
  if (saddr % 16) kiln_sim::fail("cp.async 16: shared address not 16-byte aligned");
  if (src_bytes > 0 && reinterpret_cast<uintptr_t>(gptr) % 16)
    kiln_sim::fail("cp.async 16: global address not 16-byte aligned");
  kiln_sim::me().open.push_back(
      {kiln_sim::smem_at(saddr, 16), static_cast<const unsigned char*>(gptr), 16, src_bytes});
}
inline void cp_async_commit() {
  kiln_sim::Fiber& f = kiln_sim::me();
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}
inline void retire_groups(size_t keep) {
  kiln_sim::Fiber& f = kiln_sim::me();
  while (f.groups.size() > keep) {
    for (const kiln_sim::Copy& c : f.groups.front()) {
      std::memcpy(c.dst, c.src, c.valid);
      std::memset(c.dst + c.valid, 0, c.bytes - c.valid);
    }
    f.groups.erase(f.groups.begin());
  }
}
template <int N>
inline void cp_async_wait() {
  retire_groups(N);
}
// As the runtime's: n > N waits for all but N.
template <int N = 7>
inline void cp_async_wait_n(int n) {
  retire_groups(n > N ? N : n);
}
inline void cp_async_wait_all() {
  kiln_sim::Fiber& f = kiln_sim::me();
  if (!f.open.empty()) cp_async_commit();
  retire_groups(0);
}

// ---- fragments ----
struct FragA {
  uint32_t x[4];
};
struct FragB {
  uint32_t x[2];
};
struct FragC {
  float x[4];
  void zero() { x[0] = x[1] = x[2] = x[3] = 0.0f; }
};
inline int fragc_row(int lane, int i) {
  return (lane >> 2) + ((i >> 1) << 3);
}
inline int fragc_col(int lane, int i) {
  return ((lane & 3) << 1) + (i & 1);
}

// ldmatrix: lane l supplies the address of row (l % 8) of matrix (l / 8).
template <int NMAT>
inline void ldmatrix_emul(uint32_t* r, uint32_t addr, bool trans) {
  using namespace kiln_sim;
  slot(me().linear)[1] = addr;
  warp_barrier();
  const int l = lane(), base = warp_base();
  for (int i = 0; i < NMAT; ++i) {
    auto elem = [&](int row, int col) -> uint32_t {
      uint32_t a = static_cast<uint32_t>(slot(base + 8 * i + row)[1]);
      if (a % 16) fail("ldmatrix: row address not 16-byte aligned");
      uint16_t v;
      std::memcpy(&v, smem_at(a + 2 * col, 2), 2);
      return v;
    };
    uint32_t lo, hi;
    if (!trans) {
      lo = elem(l / 4, 2 * (l % 4));
      hi = elem(l / 4, 2 * (l % 4) + 1);
    } else {
      lo = elem(2 * (l % 4), l / 4);
      hi = elem(2 * (l % 4) + 1, l / 4);
    }
    r[i] = lo | (hi << 16);
  }
  warp_barrier();
}
inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  ldmatrix_emul<4>(r, addr, false);
}
inline void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr) {
  ldmatrix_emul<2>(r, addr, false);
}
inline void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  ldmatrix_emul<4>(r, addr, true);
}
inline void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr) {
  ldmatrix_emul<2>(r, addr, true);
}

template <typename T>
inline float half_bits_to_f32(uint32_t bits16) {
  T t;
  t.x = static_cast<uint16_t>(bits16);
  return to_f32(t);
}

// d += a * b over the warp, m16n8k16, with the PTX fragment layouts.
template <typename T>
inline void mma_16816(FragC& d, const FragA& a, const FragB& b) {
  using namespace kiln_sim;
  auto& s = slot(me().linear);
  for (int i = 0; i < 4; ++i) s[i] = a.x[i];
  s[4] = b.x[0];
  s[5] = b.x[1];
  warp_barrier();
  const int base = warp_base(), l = lane();
  auto A = [&](int r, int k) {
    int reg = (r >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    int ln = (r % 8) * 4 + (k % 8) / 2;
    uint32_t w = static_cast<uint32_t>(slot(base + ln)[reg]);
    return half_bits_to_f32<T>((k % 2) ? (w >> 16) : (w & 0xffff));
  };
  auto B = [&](int k, int n) {
    int reg = k >= 8 ? 1 : 0;
    int ln = n * 4 + (k % 8) / 2;
    uint32_t w = static_cast<uint32_t>(slot(base + ln)[4 + reg]);
    return half_bits_to_f32<T>((k % 2) ? (w >> 16) : (w & 0xffff));
  };
  float out[4];
  for (int i = 0; i < 4; ++i) {
    int r = fragc_row(l, i), n = fragc_col(l, i);
    float acc = d.x[i];
    for (int k = 0; k < 16; ++k) acc = fmaf(A(r, k), B(k, n), acc);
    out[i] = acc;
  }
  warp_barrier();
  for (int i = 0; i < 4; ++i) d.x[i] = out[i];
}

// ---- predefined-op library pieces ----
template <typename T, int BM, int BN, int BK, int WARPS_M, int WARPS_N, int STAGES>
struct GemmConfig {
  using Elem = T;
  static constexpr int kBM = BM, kBN = BN, kBK = BK, kStages = STAGES;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int kSmemBytes = 0;
};

struct GemvIdentity {
  static constexpr bool kRowSumSq = false;
  float operator()(float v0, float, int, int, float) const { return v0; }
};
struct GemvRmsNorm {
  static constexpr bool kRowSumSq = true;
  float inv_k;
  float eps;
  float operator()(float v0, float, int, int, float rowsq) const {
    return v0 / std::sqrt(rowsq * inv_k + eps);
  }
};

// Y = epi(X W) with W read at W0[k * sk + n * sn] (N-major: sk = ldw, sn = 1; K-major: W given
// as W^T, sk = 1, sn = ldw).
template <typename T, typename TO, class Epi>
inline void gemv_ref(const T* X, int64_t ldx, const T* W0, int64_t sk, int64_t sn, TO* out,
                     int64_t ldo, int M, int N, int K, Epi epi, const T* W1 = nullptr) {
  for (int m = 0; m < M; ++m) {
    float rowsq = 0.0f;
    if (Epi::kRowSumSq)
      for (int k = 0; k < K; ++k) rowsq += to_f32(X[m * ldx + k]) * to_f32(X[m * ldx + k]);
    for (int n = 0; n < N; ++n) {
      float acc = 0.0f, acc1 = 0.0f;
      for (int k = 0; k < K; ++k) acc += to_f32(X[m * ldx + k]) * to_f32(W0[k * sk + n * sn]);
      if (W1)
        for (int k = 0; k < K; ++k) acc1 += to_f32(X[m * ldx + k]) * to_f32(W1[k * sk + n * sn]);
      out[m * ldo + n] = from_f32<TO>(epi(acc, acc1, m, n, rowsq));
    }
  }
}

template <typename T, typename TO, int MT, int NW, int WARPS_N, int WARPS_K, int UNROLL,
          int MIN_BLOCKS = 1, class Epi = GemvIdentity>
inline cudaError_t gemv_launch(const T* X, int64_t ldx, const T* W0, const T*, int64_t ldw, TO* out,
                               int64_t ldo, int M, int N, int K, int, float*, int*, cudaStream_t,
                               Epi epi = Epi()) {
  if (M > 8 * MT) kiln_sim::fail("gemv: M > 8 MT");
  gemv_ref(X, ldx, W0, ldw, 1, out, ldo, M, N, K, epi);
  return cudaSuccess;
}

template <typename T, typename TO, int MT, int NW, int WARPS_N, int WARPS_K, int UNROLL,
          int MIN_BLOCKS = 1, class Epi = GemvIdentity>
inline cudaError_t gemv_cluster_launch(const T* X, int64_t ldx, const T* W0, const T* W1,
                                       int64_t ldw, TO* out, int64_t ldo, int M, int N, int K,
                                       int splits, cudaStream_t stream, Epi epi = Epi()) {
  if (splits < 1 || splits > 8) kiln_sim::fail("gemv_cluster: splits outside 1..8");
  return gemv_launch<T, TO, MT, NW, WARPS_N, WARPS_K, UNROLL, MIN_BLOCKS, Epi>(
      X, ldx, W0, W1, ldw, out, ldo, M, N, K, splits, nullptr, nullptr, stream, epi);
}

// The TMA-streamed GEMV computes the same function (its own k order, as any tiling).
// WK: W0 is given as W^T [N][K] (ldw its row stride).
template <typename T, typename TO, int MT, int NW, int BN, int BK, int STAGES, int MIN_BLOCKS = 1,
          class Epi = GemvIdentity, bool WK = false>
inline cudaError_t gemv_tma_launch(const T* X, int64_t ldx, const T* W0, const T*, int64_t ldw,
                                   TO* out, int64_t ldo, int M, int N, int K, int splits,
                                   cudaStream_t, Epi epi = Epi()) {
  if (splits < 1 || splits > 8) kiln_sim::fail("gemv_tma: splits outside 1..8");
  if (MT != 1 && MT != 2 && MT != 4) kiln_sim::fail("gemv_tma: MT not in {1, 2, 4}");
  if (ldx % 8 != 0 || ldw % 8 != 0 || N % 8 != 0) kiln_sim::fail("gemv_tma: TMA strides");
  if (M > 8 * MT) kiln_sim::fail("gemv_tma: M > 8 MT");
  if (ldw < (WK ? K : N)) kiln_sim::fail("gemv_tma: ldw below the row length");
  gemv_ref(X, ldx, W0, WK ? 1 : ldw, WK ? ldw : 1, out, ldo, M, N, K, epi);
  return cudaSuccess;
}

// The K-major register GEMV: W given as W^T [N][K] (ldw its row stride); the preconditions of
// gemv_kmajor_supported (runtime/gemv_kmajor.cuh) are checked as the GPU launcher checks them.
template <typename T, typename TO, int MT, int NS, int WARPS, int UNROLL, int CL, class Epi,
          int NW = 1>
inline cudaError_t gemv_kmajor_launch(const T* X, int64_t ldx, const T* W, const T* W1, int64_t ldw,
                                      TO* out, int64_t ldo, int M, int N, int K, int splits,
                                      cudaStream_t, Epi epi) {
  if (M < 1 || M > 8 * MT) kiln_sim::fail("gemv_kmajor: M outside 1..8 MT");
  if (K % 8 != 0 || ldx % 8 != 0 || ldw % 8 != 0 || ldx < K || ldw < K)
    kiln_sim::fail("gemv_kmajor: K, ldx, ldw must be multiples of 8, at least K");
  if (splits < 1 || splits > CL || CL > 8) kiln_sim::fail("gemv_kmajor: splits outside 1..CL");
  if ((reinterpret_cast<uintptr_t>(X) & 15) || (reinterpret_cast<uintptr_t>(W) & 15))
    kiln_sim::fail("gemv_kmajor: X, W not 16-byte aligned");
  if (NW > 1 && (W1 == nullptr || (reinterpret_cast<uintptr_t>(W1) & 15)))
    kiln_sim::fail("gemv_kmajor: W1 missing or not 16-byte aligned");
  gemv_ref(X, ldx, W, 1, ldw, out, ldo, M, N, K, epi, NW > 1 ? W1 : nullptr);
  return cudaSuccess;
}

// The low-rank chain (runtime/lowrank.cuh): T = X A kept in f32, v1 = T B, v0 = X W (kHasW) or 0;
// lowrank_supported's preconditions are checked as the GPU launcher checks them.
template <typename T, typename TO, int MT, int RT, int NC, bool kAK, bool kBK, bool kHasW, bool kWK,
          class Epi>
inline cudaError_t lowrank_launch(const T* X, int64_t ldx, const T* A, int64_t lda, const T* B,
                                  int64_t ldb, const T* W, int64_t ldw, TO* out, int64_t ldo, int M,
                                  int N, int K, int R, int splits, cudaStream_t, Epi epi) {
  static_assert(MT >= 1 && MT <= 2 && RT >= 1 && RT <= 4, "M <= 32, R <= 64");
  static_assert(NC == 32 || NC == 64 || NC == 128, "32, 64 or 128 columns per CTA");
  if (M < 1 || M > 16 * MT || R < 1 || R > 16 * RT) kiln_sim::fail("lowrank: M or R out of range");
  if (N < 1 || K < 8 || K % 8 || R % 8 || N % 8)
    kiln_sim::fail("lowrank: K, R, N not multiples of 8");
  if (splits < 1 || splits > 8) kiln_sim::fail("lowrank: splits outside 1..8");
  if (ldx % 8 || lda % 8 || ldb % 8 || (kHasW && ldw % 8))
    kiln_sim::fail("lowrank: leading dimensions not multiples of 8");
  for (const void* p : {static_cast<const void*>(X), static_cast<const void*>(A),
                        static_cast<const void*>(B), static_cast<const void*>(kHasW ? W : X)})
    if (reinterpret_cast<uintptr_t>(p) & 15) kiln_sim::fail("lowrank: pointer not 16-byte aligned");
  if (ldx < K || lda < (kAK ? K : R) || ldb < (kBK ? R : N) || (kHasW && ldw < (kWK ? K : N)))
    kiln_sim::fail("lowrank: leading dimension below the row length");
  std::vector<float> t(static_cast<size_t>(M) * R, 0.0f);
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
      for (int k = 0; k < K; ++k)
        s += to_f32(X[m * ldx + k]) *
             to_f32(kAK ? A[int64_t(r) * lda + k] : A[int64_t(k) * lda + r]);
      t[size_t(m) * R + r] = s;
    }
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float v0 = 0.0f, v1 = 0.0f;
      if (kHasW)
        for (int k = 0; k < K; ++k)
          v0 += to_f32(X[m * ldx + k]) *
                to_f32(kWK ? W[int64_t(n) * ldw + k] : W[int64_t(k) * ldw + n]);
      for (int r = 0; r < R; ++r)
        v1 +=
            t[size_t(m) * R + r] * to_f32(kBK ? B[int64_t(n) * ldb + r] : B[int64_t(r) * ldb + n]);
      out[m * ldo + n] = from_f32<TO>(epi(v0, v1, m, n));
    }
  return cudaSuccess;
}

// KB: B0 is given as B^T [N][K] (ldb its row stride); CLUSTER and PP (ping-pong) change only how
// the GPU kernel is scheduled.
template <typename T, int NB, int STAGES, int CLUSTER = (NB == 2 ? 2 : 1), bool KB = false,
          bool PP = false>
struct WgmmaGemmWS {
  using Elem = T;
  static constexpr bool kKB = KB;
};
struct WgmmaEpiIdentity {
  float operator()(float v0, float, int, int) const { return v0; }
};
template <class G, typename TO, class Epi>
inline cudaError_t wgmma_ws_gemm_launch(const typename G::Elem* A, int64_t lda,
                                        const typename G::Elem* B0, const typename G::Elem*,
                                        int64_t ldb, TO* C, int64_t ldc, int M, int N, int K,
                                        Epi epi, cudaStream_t) {
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int k = 0; k < K; ++k)
        acc += to_f32(A[m * lda + k]) *
               to_f32(G::kKB ? B0[int64_t(n) * ldb + k] : B0[int64_t(k) * ldb + n]);
      C[m * ldc + n] = from_f32<TO>(epi(acc, 0.0f, m, n));
    }
  return cudaSuccess;
}

}  // namespace rt
}  // namespace kiln

namespace kiln {
namespace cg {
// The tensor-core GEMM of the predefined matmul, as a plain product (one thread per block).
template <class Cfg, typename TO>
void gemm_batched_kernel(const typename Cfg::Elem* A, const typename Cfg::Elem* B, TO* C, int M,
                         int N, int K, int NB, int NB1, int64_t a_s0, int64_t a_s1, int64_t b_s0,
                         int64_t b_s1, int k_chunk, float* partial) {
  if (threadIdx.x != 0) return;
  const int bz = blockIdx.z % NB, split = blockIdx.z / NB, b0 = bz / NB1, b1 = bz % NB1;
  const int k0 = split * k_chunk, k1 = std::min(K, k0 + k_chunk);
  const auto* Ab = A + b0 * a_s0 + b1 * a_s1;
  const auto* Bb = B + b0 * b_s0 + b1 * b_s1;
  const int m0 = blockIdx.y * Cfg::kBM, n0 = blockIdx.x * Cfg::kBN;
  for (int m = m0; m < std::min(M, m0 + Cfg::kBM); ++m)
    for (int n = n0; n < std::min(N, n0 + Cfg::kBN); ++n) {
      float acc = 0.0f;
      for (int k = k0; k < k1; ++k)
        acc += rt::to_f32(Ab[int64_t(m) * K + k]) * rt::to_f32(Bb[int64_t(k) * N + n]);
      if (partial)
        partial[(int64_t(split) * NB + bz) * M * N + int64_t(m) * N + n] = acc;
      else
        C[int64_t(bz) * M * N + int64_t(m) * N + n] = rt::from_f32<TO>(acc);
    }
}
}  // namespace cg
}  // namespace kiln

// ---- host-side buffers with guard zones --------------------------------------------------------
namespace kiln_sim {
struct Buffer {
  std::vector<unsigned char> bytes;
  size_t n;
  static constexpr size_t kGuard = 256;
  explicit Buffer(size_t size) : bytes(size + 2 * kGuard + 256, 0xa5), n(size) {}
  unsigned char* data() {
    uintptr_t p = reinterpret_cast<uintptr_t>(bytes.data()) + kGuard;
    p = (p + 255) & ~uintptr_t(255);
    return reinterpret_cast<unsigned char*>(p);
  }
  void check(const char* what) {
    unsigned char* d = data();
    for (unsigned char* p = bytes.data(); p < d; ++p)
      if (*p != 0xa5) fail(std::string("write before the start of ") + what);
    for (unsigned char* p = d + n; p < bytes.data() + bytes.size(); ++p)
      if (*p != 0xa5) fail(std::string("write past the end of ") + what);
  }
};
}  // namespace kiln_sim

// ---- file I/O for the simulator's main() --------------------------------------------------------
namespace kiln_sim {
template <typename T>
inline void read_input(const char* path, T* dst, size_t n) {
  std::FILE* f = std::fopen(path, "rb");
  if (!f) fail(std::string("cannot open ") + path);
  std::vector<float> v(n);
  if (std::fread(v.data(), sizeof(float), n, f) != n) fail(std::string("short read ") + path);
  std::fclose(f);
  for (size_t i = 0; i < n; ++i) dst[i] = kiln::rt::from_f32<T>(v[i]);
}
template <typename T>
inline void write_output(const char* path, const T* src, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = kiln::rt::to_f32(src[i]);
  std::FILE* f = std::fopen(path, "wb");
  if (!f) fail(std::string("cannot write ") + path);
  std::fwrite(v.data(), sizeof(float), n, f);
  std::fclose(f);
}
}  // namespace kiln_sim
