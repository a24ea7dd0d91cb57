#include "kiln/ir/magnitude.h"

#include <algorithm>
#include <cmath>

namespace kiln {

namespace {

constexpr double kTail = 6.0;  // a Gaussian's 1e-9 tail, in standard deviations

// A sum of n terms of magnitude t: their mean n times plus the central limit theorem's spread,
// kTail * sqrt(n) * rms, but never below one term's own bound (heavy-tailed terms, such as
// products of normals, with few of them) nor above n of them.
Magnitude sum_of(const Magnitude& t, int64_t n) {
  const double dn = double(std::max<int64_t>(1, n)), root = std::sqrt(dn);
  Magnitude m;
  m.mean = dn * t.mean;
  m.rms = std::sqrt(dn * dn * t.mean * t.mean + dn * t.rms * t.rms);
  m.bound = std::min(dn * t.bound, std::max(t.bound, m.mean + kTail * root * t.rms));
  return m;
}

// The product of independent values. Both at their 1e-9 tails at once is far rarer than 1e-9:
// the product of two normals reaches ~19 sigma_a sigma_b there, not 36, so one factor's bound
// times 3.2 of the other's rms, never more than both bounds.
Magnitude product_of(const Magnitude& a, const Magnitude& b) {
  const double tail = 3.2 * std::max(a.bound * b.rms, a.rms * b.bound);
  return {true, a.rms * b.rms, std::min(a.bound * b.bound, tail), a.mean * b.mean};
}

// A normal's square: mean sigma^2, rms sqrt(3) sigma^2, and its bound is the bound squared.
Magnitude square_of(const Magnitude& a) {
  return {true, std::sqrt(3.0) * a.rms * a.rms, a.bound * a.bound, a.rms * a.rms};
}

// What an op that keeps |x| <= b gives, centred or not.
Magnitude bounded(double b, bool centred) {
  return {true, b, b, centred ? 0.0 : b};
}

// A value no larger than a, of unknown bias (an activation, a clamp): |mean| <= rms.
Magnitude biased(double rms, double bound) {
  return {true, rms, bound, rms};
}

}  // namespace

Magnitude Magnitude::constant(double v) {
  return {true, std::fabs(v), std::fabs(v), std::fabs(v)};
}

Magnitude op_magnitude(OpKind kind, const Attrs& attrs, const std::vector<Magnitude>& in,
                       int64_t reduced, bool same_inputs, bool shifted_exp) {
  // Ops that bound their result whatever their first input holds; every other op's magnitude
  // needs its inputs' (an rms_norm's weight included).
  const bool bounds_input = kind == OpKind::Clamp || kind == OpKind::Log || kind == OpKind::Tanh ||
                            kind == OpKind::Sigmoid || kind == OpKind::Sin || kind == OpKind::Cos ||
                            kind == OpKind::Softmax || kind == OpKind::RmsNorm ||
                            (kind == OpKind::Exp && shifted_exp);
  for (size_t i = bounds_input ? 1 : 0; i < in.size(); ++i)
    if (!in[i].known) return Magnitude::unknown();
  const Magnitude a = in.empty() ? Magnitude::unknown() : in[0];
  switch (kind) {
    case OpKind::Input:
      return Magnitude::input();
    case OpKind::Constant:
      return Magnitude::constant(attrs.value);
    case OpKind::Transpose:
    case OpKind::Neg:
      return a;
    case OpKind::Add:
    case OpKind::Sub: {
      const Magnitude& b = in[1];
      Magnitude m;
      m.rms = same_inputs ? 2 * a.rms : std::sqrt(a.rms * a.rms + b.rms * b.rms);
      m.bound = a.bound + b.bound;
      m.mean = a.mean + b.mean;
      return m;
    }
    case OpKind::Mul:
      return same_inputs ? square_of(a) : product_of(a, in[1]);
    case OpKind::Square:
      return square_of(a);
    case OpKind::Maximum:
    case OpKind::Minimum: {
      const Magnitude& b = in[1];
      return biased(std::max(a.rms, b.rms), std::max(a.bound, b.bound));
    }
    case OpKind::Div:
    case OpKind::Reciprocal:
    case OpKind::Rsqrt:
      return Magnitude::unknown();  // a denominator near zero is not modeled
    case OpKind::Exp:
      return shifted_exp ? bounded(1.0, false) : Magnitude::unknown();
    case OpKind::Log:
      return bounded(104.0, false);  // |ln x| of any positive f32 (down to 1.4e-45)
    case OpKind::Sqrt:
      return biased(std::sqrt(a.rms), std::sqrt(a.bound));
    case OpKind::Tanh:
    case OpKind::Sin:
      return bounded(1.0, a.known && a.mean == 0.0);  // odd: centred data stays centred
    case OpKind::Sigmoid:
    case OpKind::Cos:
    case OpKind::Softmax:
      return bounded(1.0, false);
    case OpKind::Silu:
    case OpKind::Gelu:
    case OpKind::Relu:
      return biased(a.rms, a.bound);
    case OpKind::Softplus:
      return biased(a.rms + 0.7, a.bound + 0.7);
    case OpKind::LeakyRelu: {
      const double s = std::max(1.0, std::fabs(attrs.negative_slope));
      return biased(a.rms * s, a.bound * s);
    }
    case OpKind::Clamp: {
      if (attrs.min && attrs.max)
        return bounded(std::max(std::fabs(*attrs.min), std::fabs(*attrs.max)), false);
      if (!a.known) return Magnitude::unknown();
      const double edge = std::fabs(attrs.min ? *attrs.min : attrs.max ? *attrs.max : 0.0);
      return biased(std::max(a.rms, edge), std::max(a.bound, edge));
    }
    case OpKind::MatMul:
      return sum_of(product_of(a, in[1]), reduced);
    case OpKind::Sum:
      return sum_of(a, reduced);
    case OpKind::Mean: {
      const double n = double(attrs.count > 0 ? attrs.count : std::max<int64_t>(1, reduced));
      Magnitude m = sum_of(a, reduced);
      m.rms /= n;
      m.bound /= n;
      m.mean /= n;
      return m;
    }
    case OpKind::Max:
      return bounded(a.bound, false);
    case OpKind::RmsNorm: {
      // |x / rms(x)| <= sqrt(n) (all of the row's energy in one element), and for a known x its
      // own bound over rms (6 for normal rows); rms 1; times the weight.
      const Magnitude w = in.size() > 1 ? in[1] : bounded(1.0, false);
      double r = std::sqrt(double(std::max<int64_t>(1, reduced)));
      if (a.known && a.rms > 0) r = std::min(r, std::max(kTail, a.bound / a.rms));
      return biased(w.rms, r * w.bound);
    }
    case OpKind::GraphDefined:
    case OpKind::Output:
    case OpKind::AccumSum:
    case OpKind::AccumMax:
    case OpKind::AccumRescale:
    case OpKind::Fused:
      return Magnitude::unknown();
  }
  return Magnitude::unknown();
}

int64_t magnitude_extent(OpKind kind, const Shape& in, const Shape& out) {
  switch (op_info(kind).cls) {
    case OpClass::Matmul:
    case OpClass::RmsNorm:
      return in.empty() ? 1 : in.back();
    case OpClass::Reduce:
      return std::max<int64_t>(1, numel(in) / std::max<int64_t>(1, numel(out)));
    default:
      return 1;
  }
}

bool magnitude_overflows(const Magnitude& m, DType dtype) {
  return m.known && dtype == DType::F16 && m.bound > 65504.0;
}

bool exp_overflows(const Magnitude& arg) {
  return arg.known && arg.bound > 88.0;
}

}  // namespace kiln
