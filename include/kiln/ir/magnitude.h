// Magnitudes at std 1: how large a value of a spec gets on the inputs the range rule of the spec
// format names (normal inputs of std 1; the input generator's normals lie in (-6, 6)), estimated
// op by op, so that an intermediate is stored in f16 only where it stays far below 65504.
//
// Polynomial growth is what this models: sums (a matmul over K, a reduction over n) and products
// (square(X W), silu(X W1) * (X W3)). A K-term sum of centred values grows as sqrt(K), one of
// biased values (squares, activations) as K. Ops whose result cannot be bounded from their
// inputs' magnitudes alone — a division, reciprocal or rsqrt (the denominator may be near zero),
// an exp (store_unbounded_intermediates owns that rule) — give an *unknown* magnitude, as does
// everything computed from one, until an op that bounds its result by construction (tanh,
// sigmoid, softmax, rms_norm, sin, cos, a max-subtracted exp). An unknown magnitude never makes a
// tensor unsafe here: this rule only adds to the exp rule, it does not replace it.
#pragma once

#include <vector>

#include "kiln/ir/ops.h"
#include "kiln/ir/types.h"

namespace kiln {

struct Magnitude {
  bool known = true;
  double rms = 1.0;    // the values' root mean square
  double bound = 6.0;  // |value| stays below this but for a tail of ~1e-9 per element
  double mean = 0.0;   // at least |the values' mean| (at most rms): 0 for centred, symmetric data,
                       // whose sums grow as the square root of their length; biased data's as it

  static Magnitude unknown() { return {false, 0.0, 0.0, 0.0}; }
  static Magnitude input() { return {}; }  // std-1 normal (|x| < 6), or uniform in [-0.5, 0.5)
  static Magnitude constant(double v);
};

// What op `kind` gives on inputs of magnitudes `in` (in op input order). `reduced` is the extent
// a matmul or reduction sums over (a matmul's k, a reduction's input elements per output; a
// split partial's own share is fine, the full extent is an upper bound). `same_inputs`: a binary
// op whose two inputs are one tensor (mul(x, x) is square(x)). `shifted_exp`: an exp whose
// argument is x - max(x), in (0, 1].
Magnitude op_magnitude(OpKind kind, const Attrs& attrs, const std::vector<Magnitude>& in,
                       int64_t reduced, bool same_inputs, bool shifted_exp);

// What an op of `kind` sums over, for op_magnitude's `reduced`, from its first input's shape and
// its output's: a matmul's k, a reduction's input elements per output, an rms_norm's row length;
// 1 for any other op.
int64_t magnitude_extent(OpKind kind, const Shape& in, const Shape& out);

// A known magnitude that a dtype cannot hold: f16 values past 65504 overflow (bf16 and f32
// share f32's exponent range, which these estimates never approach before an exp does).
bool magnitude_overflows(const Magnitude& m, DType dtype);
// A known magnitude whose exp passes f32's range (e^88.7), the widest a kernel computes exp in.
bool exp_overflows(const Magnitude& arg);

}  // namespace kiln
