// Exact round-to-nearest-even from double to each tensor dtype (see float_domain.h).
#include <cmath>
#include <limits>

#include "kiln/interp/float_domain.h"

namespace kiln::interp {

double round_to_dtype(double x, DType t) {
  if (t == DType::F32) return static_cast<double>(static_cast<float>(x));  // IEEE RNE
  // Fast path: a double that is exactly a float (every input Kiln generates) rounds the same
  // through the float routine (the tests check the two agree).
  const float f = static_cast<float>(x);
  if (static_cast<double>(f) == x) return round_float_to_dtype(f, t);
  return round_to_dtype_reference(x, t);
}

double round_to_dtype_reference(double x, DType t) {
  if (t == DType::F32) return static_cast<double>(static_cast<float>(x));
  if (!std::isfinite(x) || x == 0.0) return x;
  // Significant bits, least normal exponent and largest finite value of the format.
  const int bits = t == DType::F16 ? 11 : 8;
  const int emin = t == DType::F16 ? -14 : -126;
  const double max_finite = t == DType::F16 ? 65504.0 : 0x1.fep127;
  const double a = std::fabs(x);
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e with f in [0.5, 1): the leading bit has weight 2^(e-1)
  // The quantum (weight of the last kept bit): fixed at 2^(emin - bits + 1) for subnormals.
  const int q = std::max(e - 1, emin) - (bits - 1);
  // Scaling by powers of two is exact here, and nearbyint rounds ties to even (the default
  // rounding mode, which Kiln never changes).
  double r = std::ldexp(std::nearbyint(std::ldexp(a, -q)), q);
  if (r > max_finite) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, x);
}

}  // namespace kiln::interp
