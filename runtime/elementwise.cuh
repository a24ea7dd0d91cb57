// Kiln runtime, elementwise: f16/bf16/f32 conversions and one device functor per elementwise op of
// the spec vocabulary.
//
// All arithmetic is float32 whatever the storage type: the spec defines results in exact reals,
// kernels accumulate in float32, and a tile is converted once on load and once on store. The
// functors use the accurate libdevice forms (tanhf, erff, logf), not the approximate intrinsics,
// so a float32 output stays within the spec's 1e-4 relative tolerance; exp is the exception (see
// Exp). Each functor is a small
// struct with a const operator(), so it can be a template argument (epilogues) and carry
// attributes (leaky_relu's slope, clamp's bounds) as members.
#ifndef KILN_RT_ELEMENTWISE_CUH
#define KILN_RT_ELEMENTWISE_CUH

#ifndef KILN_RT_BASE_CUH
#include "base.cuh"
#endif

namespace kiln {
namespace rt {

// ---- Conversions -------------------------------------------------------------------------------

KILN_DEV float to_f32(float x) {
  return x;
}
KILN_DEV float to_f32(__half x) {
  return __half2float(x);
}
KILN_DEV float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// Round-to-nearest-even conversion from float32 to the storage type T.
template <typename T>
KILN_DEV T from_f32(float x);
template <>
KILN_DEV float from_f32<float>(float x) {
  return x;
}
template <>
KILN_DEV __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}
template <>
KILN_DEV __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Two 16-bit values packed in one 32-bit word (the element at the lower address in the low half,
// as in memory and in mma fragments).
template <typename T>
KILN_DEV uint32_t pack2(float lo, float hi);
template <>
KILN_DEV uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
KILN_DEV uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <typename T>
KILN_DEV float2 unpack2(uint32_t w);
template <>
KILN_DEV float2 unpack2<__half>(uint32_t w) {
  return __half22float2(*reinterpret_cast<__half2*>(&w));
}
template <>
KILN_DEV float2 unpack2<__nv_bfloat16>(uint32_t w) {
  return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&w));
}

// Elements of T in one 16-byte vector: 8 for f16/bf16, 4 for f32.
template <typename T>
struct Vec16 {
  static constexpr int kElems = 16 / sizeof(T);
};

// Loads 16 bytes (Vec16<T>::kElems elements) and widens them to float32. p must be 16-byte
// aligned. Compiles to one LDG.E.128 / LDS.128.
template <typename T>
KILN_DEV void load16_f32(const T* p, float* v) {
  uint4 u = *reinterpret_cast<const uint4*>(p);
  if constexpr (sizeof(T) == 4) {
    v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y);
    v[2] = __uint_as_float(u.z), v[3] = __uint_as_float(u.w);
  } else {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 f = unpack2<T>(w[i]);
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
}

// Narrows Vec16<T>::kElems float32 values to T and stores them as one 16-byte vector. p must be
// 16-byte aligned.
template <typename T>
KILN_DEV void store16_f32(T* p, const float* v) {
  uint4 u;
  if constexpr (sizeof(T) == 4) {
    u = make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                   __float_as_uint(v[3]));
  } else {
    u = make_uint4(pack2<T>(v[0], v[1]), pack2<T>(v[2], v[3]), pack2<T>(v[4], v[5]),
                   pack2<T>(v[6], v[7]));
  }
  *reinterpret_cast<uint4*>(p) = u;
}

// ---- Unary ops ---------------------------------------------------------------------------------

struct Identity {
  KILN_DEV float operator()(float x) const { return x; }
};
struct Neg {
  KILN_DEV float operator()(float x) const { return -x; }
};
// exp through the hardware ex2 (__expf: one FMUL and one MUFU.EX2). Its error, 2 + 1.173 |x|
// ulp (CUDA C Programming Guide, intrinsic functions), is below 1e-5 relative wherever exp does
// not overflow, ten times inside the tightest tolerance (1e-4, f32 outputs); results below
// FLT_MIN flush to 0. The accurate expf is ~15 instructions, which made attention (exp of every
// score, between two matmuls) issue-bound on the H100.
struct Exp {
  KILN_DEV float operator()(float x) const { return __expf(x); }
};
struct Log {
  KILN_DEV float operator()(float x) const { return logf(x); }
};
struct Sqrt {
  KILN_DEV float operator()(float x) const { return sqrtf(x); }
};
struct Rsqrt {
  KILN_DEV float operator()(float x) const { return rsqrtf(x); }
};
struct Reciprocal {
  KILN_DEV float operator()(float x) const { return __frcp_rn(x); }
};
struct Square {
  KILN_DEV float operator()(float x) const { return x * x; }
};
struct Tanh {
  KILN_DEV float operator()(float x) const { return tanhf(x); }
};
// The hardware's ex2 and reciprocal with subnormal inputs and results flushed to zero: one MUFU
// instruction each, where the non-flushing forms (__expf's ex2.approx.f32, __fdividef) add range
// checks and rescaling around it.
KILN_DEV float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
KILN_DEV float rcp_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// e^-x as 2^(-x log2 e): the error of Exp (below 1e-5 relative, within the tolerances); e^-x
// overflows to +inf for x < -88.7.
KILN_DEV float exp_neg_ftz(float x) {
  return ex2_ftz(x * -1.4426950408889634f);
}
// 1 / (1 + e^-x), the reciprocal approximate (1 ulp); where e^-x overflows the reciprocal is
// exactly 0, and where 1 + e^-x passes 2^126 (x < -87.3) it flushes to 0 (sigmoid x < 1e-38).
struct Sigmoid {
  KILN_DEV float operator()(float x) const { return rcp_ftz(1.0f + exp_neg_ftz(x)); }
};
// x / (1 + e^-x) as x times Sigmoid: about 1e-5 relative at worst (e^-x as in Exp), and 0 where
// 1 + e^-x passes 2^126 (x < -87.3, where |silu x| < 1e-36). A GEMM epilogue runs between tiles
// on the tensor cores' critical path, and a GEMM at full rate is power-bound (an H200 at 700 W
// ran it at 1.2-1.3 GHz of 1.98), so its instructions cost time even where ping-pong hides their
// latency. Measured: on the H100 (tests/gpu/gemm_ws_bench.cu) silu(x + bias) after a 4096 x 14336
// x 4096 bf16 GEMM took 903 us with expf and the IEEE divide, 761 with __expf and __fdividef,
// 680 without an epilogue; on an H200 (session 23, ping-pong, three alternations) this form took
// 767-786 us against 779-824 with __expf and __fdividef, and the gated pair's silu(x) y of a
// 2048 x 14336 x 4096 MLP 692-721 against 730-763.
struct Silu {
  KILN_DEV float operator()(float x) const { return x * rcp_ftz(1.0f + exp_neg_ftz(x)); }
};
struct Relu {
  KILN_DEV float operator()(float x) const { return fmaxf(x, 0.0f); }
};
// gelu with approximate="none": x/2 * (1 + erf(x/sqrt 2)).
struct Gelu {
  KILN_DEV float operator()(float x) const {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  }
};
// gelu with approximate="tanh": x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))).
struct GeluTanh {
  KILN_DEV float operator()(float x) const {
    const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
  }
};
struct LeakyRelu {
  float negative_slope = 0.01f;
  KILN_DEV float operator()(float x) const { return x >= 0.0f ? x : x * negative_slope; }
};
// clamp(x, lo, hi); an absent bound is -inf / +inf.
struct Clamp {
  float lo = -KILN_INF;
  float hi = KILN_INF;
  KILN_DEV float operator()(float x) const { return fminf(fmaxf(x, lo), hi); }
};

// log(1 + e^x) as max(x, 0) + log1p(e^-|x|): no overflow for large x, no cancellation near 0;
// e^-|x| is in (0, 1], where __expf's relative error is below 1e-6.
struct Softplus {
  KILN_DEV float operator()(float x) const { return fmaxf(x, 0.0f) + log1pf(__expf(-fabsf(x))); }
};
// The accurate sinf/cosf (the __sinf intrinsic loses accuracy away from [-pi, pi]).
struct Sin {
  KILN_DEV float operator()(float x) const { return sinf(x); }
};
struct Cos {
  KILN_DEV float operator()(float x) const { return cosf(x); }
};

// ---- Binary ops --------------------------------------------------------------------------------

struct Add {
  KILN_DEV float operator()(float a, float b) const { return a + b; }
};
struct Sub {
  KILN_DEV float operator()(float a, float b) const { return a - b; }
};
struct Mul {
  KILN_DEV float operator()(float a, float b) const { return a * b; }
};
struct Div {
  KILN_DEV float operator()(float a, float b) const { return a / b; }
};
struct Maximum {
  KILN_DEV float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Minimum {
  KILN_DEV float operator()(float a, float b) const { return fminf(a, b); }
};

}  // namespace rt
}  // namespace kiln

#endif  // KILN_RT_ELEMENTWISE_CUH
