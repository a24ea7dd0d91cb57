// The floating-point value domains of the interpreter, and exact rounding to the tensor dtypes.
//
// FloatDomain<double> (F64) computes every value in double and stores without rounding: the
// spec's reference semantics. FloatDomain<float> (F32) computes in float (so matmuls and
// reductions accumulate in float, as a GPU kernel does) and rounds every stored device tensor
// to its dtype with round-to-nearest-even, as a GPU implementation would.
//
// Rounding is implemented here bit-exactly, not through a compiler's half types: f16 has 11
// significant bits, exponents -14..15 (subnormals down to 2^-24, max 65504); bf16 has 8
// significant bits and float's exponent range. Ties go to even; results beyond the largest
// finite value after rounding become infinity; NaN stays NaN.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kiln/interp/domain.h"
#include "kiln/ir/elementwise.h"

namespace kiln::interp {

// x rounded to the nearest value of dtype t (ties to even), computed exactly from the double
// (no double rounding through float).
double round_to_dtype(double x, DType t);
// The same by plain arithmetic on the double (frexp, scaling, nearbyint), without the fast path
// through round_float_to_dtype: the reference the tests hold the fast paths to.
double round_to_dtype_reference(double x, DType t);

// The same for a float argument, by bit manipulation; equals round_to_dtype(double(x), t).
inline float round_float_to_dtype(float x, DType t) {
  if (t == DType::F32) return x;
  uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = u & 0x80000000u, mag = u ^ sign;
  if (mag >= 0x7f800000u) return x;  // inf, nan
  if (t == DType::BF16) {
    // Carry into the kept bits when the dropped 16 bits exceed half, or equal it with an odd
    // kept part; a carry out of the significand bumps the exponent (up to infinity) correctly.
    u += 0x7fffu + ((u >> 16) & 1u);
    return std::bit_cast<float>(u & 0xffff0000u);
  }
  // f16.
  if (mag >= 0x477ff000u)  // >= 65520 = 65504 + half an ulp; the tie goes to the even 65536
    return std::bit_cast<float>(sign | 0x7f800000u);
  if (mag < 0x38800000u) {
    // Below 2^-14 f16 is fixed-point with quantum 2^-24. Adding 0.5 moves the value to
    // [0.5, 1), where float's quantum is exactly 2^-24, so the hardware add rounds it (RNE, and
    // 0.5 is an even multiple of the quantum); the subtraction is exact.
    float a = std::bit_cast<float>(mag);
    float r = (a + 0.5f) - 0.5f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(r));
  }
  uint32_t m = mag + 0xfffu + ((mag >> 13) & 1u);
  return std::bit_cast<float>(sign | (m & 0xffffe000u));
}

template <class F>
struct FloatDomain {
  using V = F;

  static V from_double(double x) { return static_cast<V>(x); }

  // The table's float semantics (kiln/ir/elementwise.h); k is a compile-time constant where the
  // core's element loops call these, so the dispatch folds away.
  static V binary(OpKind k, V a, V b) {
    return with_binary(
        k, [&](auto t) { return Elementwise<decltype(t)::value>::eval(kNoAttrs, a, b); });
  }

  // NaN-propagating, like torch.maximum and a max reduction on a GPU.
  static V max(V a, V b) { return (a > b || a != a) ? a : b; }

  static V unary(OpKind k, const Attrs& at, V x) {
    return with_unary(k, [&](auto t) { return Elementwise<decltype(t)::value>::eval(at, x); });
  }

  static V round_store(V x, DType t) {
    if constexpr (sizeof(V) == sizeof(float))
      return round_float_to_dtype(x, t);
    else
      return x;
  }
};

using F32Domain = FloatDomain<float>;
using F64Domain = FloatDomain<double>;
static_assert(ValueDomain<F32Domain> && ValueDomain<F64Domain>);

}  // namespace kiln::interp
