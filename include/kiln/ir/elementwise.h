// The meaning of every elementwise op, in one place.
//
// Each op of OpClass::Unary or OpClass::Binary in KILN_OPS (ops.h) has one specialisation
// Elementwise<OpKind::X> here that says everything any layer needs to know about it:
//
//   weight                      relative cost of one application (cost model; 1 = an FMA)
//   degree                      its rule in the verifier's degree bound (DegreeRule)
//   eval(attrs, x[, y])         float semantics, for V = float and double (interpreter)
//   field(f, attrs, x[, y])     finite-field semantics over a field domain f (verifier): ring
//                               ops are exact, transcendental functions are f.opaque(...), seeded
//                               pseudo-random functions, one per op (and attrs)
//   abstract(attrs, x[, y])     abstract expression over an expression type E (Z3 pruner): the
//                               same algebra, unknown functions as E::opaque(name, args)
//   c64(attrs, x[, y])          float64 C expression over operand expressions (reference kernels)
//   cuda(attrs, x[, y])         float32 device expression (emitted kernels; the functors live in
//                               runtime/elementwise.cuh)
//
// Every dispatch over elementwise ops (with_unary, with_binary) is generated from KILN_OPS: an op
// of the class without its specialisation is a compile error (an incomplete type), and no switch
// over ops needs a `default:`. Adding a unary op is a KILN_OPS row, a specialisation here and a
// device functor (docs/architecture.md, "Where things go").
#pragma once

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kiln/ir/diag.h"
#include "kiln/ir/ops.h"

namespace kiln {

// The class of an op, at compile time (op_info(k).cls at run time).
constexpr OpClass op_class(OpKind k) {
  switch (k) {
#define KILN_OP_CLASS(E, N, MIN, MAX, C, L, A) \
  case OpKind::E:                              \
    return OpClass::C;
    KILN_OPS(KILN_OP_CLASS)
#undef KILN_OP_CLASS
  }
  return OpClass::Unary;  // unreachable: every enumerator has its case
}
constexpr bool is_elementwise(OpKind k) {
  return op_class(k) == OpClass::Unary || op_class(k) == OpClass::Binary;
}

template <OpKind K>
using OpTag = std::integral_constant<OpKind, K>;

// How an op moves the verifier's degree bound (verifier/degree.h). A degree is a pair (n, m):
// numerator and denominator degrees of the rational function a value is.
enum class DegreeRule : uint8_t {
  Same,         // neg: (n, m)
  Square,       // (2n, 2m)
  Swap,         // reciprocal: (m, n)
  Exp,          // exp: a homomorphism in the field model; (1, 0), its argument recorded
  Opaque,       // a pseudo-random function of its argument: (1, 0), the argument recorded
  InvOpaque,    // 1 / opaque (rsqrt): (0, 1)
  TimesOpaque,  // x * opaque(x) (silu): (n + 1, m)
  Select,       // a selection against a constant (relu, clamp): max with (0, 0)
  AddSub,       // add, sub
  Mul,
  Div,
  SelectPair,  // maximum, minimum
};

// Literals that read back exactly: float32 for device code, float64 for reference code.
inline std::string cuda_float_literal(double v) {
  if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(v)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  float f = static_cast<float>(v);
  if (std::isinf(f)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  std::string s = fmt::format("{:.9g}", f);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s + "f";
}
inline std::string cuda_double_literal(double v) {
  if (std::isnan(v)) return "__longlong_as_double(0x7ff8000000000000ll)";
  if (std::isinf(v))
    return v > 0 ? "__longlong_as_double(0x7ff0000000000000ll)"
                 : "__longlong_as_double(0xfff0000000000000ll)";
  std::string s = fmt::format("{:.17g}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// The attrs of an op that has none (binary ops), without building one per element.
inline const Attrs kNoAttrs{};

template <OpKind K>
struct Elementwise;  // specialised for every op of OpClass::Unary and OpClass::Binary below

namespace ew {
using S = const std::string&;
inline std::string functor(const char* f, S x) {
  return fmt::format("kiln::rt::{}{{}}({})", f, x);
}
inline std::string functor(const char* f, S x, S y) {
  return fmt::format("kiln::rt::{}{{}}({}, {})", f, x, y);
}
// A unary op known to the pruner only by name (and attrs that change the function).
template <class E>
E opaque(const std::string& name, E x) {
  return E::opaque(name, {x});
}
}  // namespace ew

// ---- Binary ops -------------------------------------------------------------------------------

template <>
struct Elementwise<OpKind::Add> {
  static constexpr double weight = 1;
  static constexpr DegreeRule degree = DegreeRule::AddSub;
  template <class V>
  static V eval(const Attrs&, V a, V b) {
    return a + b;
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V a, V b) {
    return f.add(a, b);
  }
  template <class E>
  static E abstract(const Attrs&, E a, E b) {
    return E::add(a, b);
  }
  static std::string c64(const Attrs&, ew::S a, ew::S b) { return fmt::format("({} + {})", a, b); }
  static std::string cuda(const Attrs&, ew::S a, ew::S b) { return fmt::format("({} + {})", a, b); }
};

template <>
struct Elementwise<OpKind::Sub> {
  static constexpr double weight = 1;
  static constexpr DegreeRule degree = DegreeRule::AddSub;
  template <class V>
  static V eval(const Attrs&, V a, V b) {
    return a - b;
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V a, V b) {
    return f.sub(a, b);
  }
  template <class E>
  static E abstract(const Attrs&, E a, E b) {
    return E::sub(a, b);
  }
  static std::string c64(const Attrs&, ew::S a, ew::S b) { return fmt::format("({} - {})", a, b); }
  static std::string cuda(const Attrs&, ew::S a, ew::S b) { return fmt::format("({} - {})", a, b); }
};

template <>
struct Elementwise<OpKind::Mul> {
  static constexpr double weight = 1;
  static constexpr DegreeRule degree = DegreeRule::Mul;
  template <class V>
  static V eval(const Attrs&, V a, V b) {
    return a * b;
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V a, V b) {
    return f.mul(a, b);
  }
  template <class E>
  static E abstract(const Attrs&, E a, E b) {
    return E::mul(a, b);
  }
  static std::string c64(const Attrs&, ew::S a, ew::S b) { return fmt::format("({} * {})", a, b); }
  static std::string cuda(const Attrs&, ew::S a, ew::S b) { return fmt::format("({} * {})", a, b); }
};

template <>
struct Elementwise<OpKind::Div> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::Div;
  template <class V>
  static V eval(const Attrs&, V a, V b) {
    return a / b;
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V a, V b) {
    return f.mul(a, f.inverse(b));
  }
  template <class E>
  static E abstract(const Attrs&, E a, E b) {
    return E::div(a, b);
  }
  static std::string c64(const Attrs&, ew::S a, ew::S b) { return fmt::format("({} / {})", a, b); }
  static std::string cuda(const Attrs&, ew::S a, ew::S b) { return fmt::format("({} / {})", a, b); }
};

// NaN-propagating, like torch.maximum and a max reduction on a GPU.
template <>
struct Elementwise<OpKind::Maximum> {
  static constexpr double weight = 1;
  static constexpr DegreeRule degree = DegreeRule::SelectPair;
  template <class V>
  static V eval(const Attrs&, V a, V b) {
    return (a > b || a != a) ? a : b;
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V a, V b) {
    return f.max(a, b);
  }
  template <class E>
  static E abstract(const Attrs&, E a, E b) {
    return E::opaque("maximum", {a, b});
  }
  static std::string c64(const Attrs&, ew::S a, ew::S b) {
    return fmt::format("fmax({}, {})", a, b);
  }
  static std::string cuda(const Attrs&, ew::S a, ew::S b) { return ew::functor("Maximum", a, b); }
};

template <>
struct Elementwise<OpKind::Minimum> {
  static constexpr double weight = 1;
  static constexpr DegreeRule degree = DegreeRule::SelectPair;
  template <class V>
  static V eval(const Attrs&, V a, V b) {
    return (a < b || a != a) ? a : b;
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V a, V b) {
    return f.min(a, b);
  }
  template <class E>
  static E abstract(const Attrs&, E a, E b) {
    return E::opaque("minimum", {a, b});
  }
  static std::string c64(const Attrs&, ew::S a, ew::S b) {
    return fmt::format("fmin({}, {})", a, b);
  }
  static std::string cuda(const Attrs&, ew::S a, ew::S b) { return ew::functor("Minimum", a, b); }
};

// ---- Unary ops --------------------------------------------------------------------------------

template <>
struct Elementwise<OpKind::Neg> {
  static constexpr double weight = 1;
  static constexpr DegreeRule degree = DegreeRule::Same;
  template <class V>
  static V eval(const Attrs&, V x) {
    return -x;
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.neg(x);
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return E::neg(x);
  }
  static std::string c64(const Attrs&, ew::S x) { return fmt::format("(-{})", x); }
  static std::string cuda(const Attrs&, ew::S x) { return fmt::format("(-{})", x); }
};

// exp is a homomorphism of the field model (verifier/field.h): exp(a + b) = exp(a) exp(b) holds
// there, which is what lets the verifier prove softmax rewrites.
template <>
struct Elementwise<OpKind::Exp> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::Exp;
  template <class V>
  static V eval(const Attrs&, V x) {
    return std::exp(x);
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.exp(x);
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return E::exp(x);
  }
  static std::string c64(const Attrs&, ew::S x) { return fmt::format("exp({})", x); }
  static std::string cuda(const Attrs&, ew::S x) { return ew::functor("Exp", x); }
};

template <>
struct Elementwise<OpKind::Log> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::Opaque;
  template <class V>
  static V eval(const Attrs&, V x) {
    return std::log(x);
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.opaque(OpKind::Log, x);
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return ew::opaque("log", x);
  }
  static std::string c64(const Attrs&, ew::S x) { return fmt::format("log({})", x); }
  static std::string cuda(const Attrs&, ew::S x) { return ew::functor("Log", x); }
};

template <>
struct Elementwise<OpKind::Sqrt> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::Opaque;
  template <class V>
  static V eval(const Attrs&, V x) {
    return std::sqrt(x);
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.opaque(OpKind::Sqrt, x);
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return ew::opaque("sqrt", x);
  }
  static std::string c64(const Attrs&, ew::S x) { return fmt::format("sqrt({})", x); }
  static std::string cuda(const Attrs&, ew::S x) { return ew::functor("Sqrt", x); }
};

// 1 / sqrt: the same unknown function as sqrt, inverted, so rsqrt(x) = 1 / sqrt(x) is provable.
template <>
struct Elementwise<OpKind::Rsqrt> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::InvOpaque;
  template <class V>
  static V eval(const Attrs&, V x) {
    return V(1) / std::sqrt(x);
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.inverse(f.opaque(OpKind::Sqrt, x));
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return E::div(E::constant(1), ew::opaque("sqrt", x));
  }
  static std::string c64(const Attrs&, ew::S x) { return fmt::format("(1.0 / sqrt({}))", x); }
  static std::string cuda(const Attrs&, ew::S x) { return fmt::format("(1.0f / sqrtf({}))", x); }
};

template <>
struct Elementwise<OpKind::Reciprocal> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::Swap;
  template <class V>
  static V eval(const Attrs&, V x) {
    return V(1) / x;
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.inverse(x);
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return E::div(E::constant(1), x);
  }
  static std::string c64(const Attrs&, ew::S x) { return fmt::format("(1.0 / {})", x); }
  static std::string cuda(const Attrs&, ew::S x) { return fmt::format("(1.0f / {})", x); }
};

template <>
struct Elementwise<OpKind::Square> {
  static constexpr double weight = 1;
  static constexpr DegreeRule degree = DegreeRule::Square;
  template <class V>
  static V eval(const Attrs&, V x) {
    return x * x;
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.mul(x, x);
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return E::square(x);
  }
  static std::string c64(const Attrs&, ew::S x) { return fmt::format("({0} * {0})", x); }
  static std::string cuda(const Attrs&, ew::S x) { return fmt::format("({0} * {0})", x); }
};

template <>
struct Elementwise<OpKind::Tanh> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::Opaque;
  template <class V>
  static V eval(const Attrs&, V x) {
    return std::tanh(x);
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.opaque(OpKind::Tanh, x);
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return ew::opaque("tanh", x);
  }
  static std::string c64(const Attrs&, ew::S x) { return fmt::format("tanh({})", x); }
  static std::string cuda(const Attrs&, ew::S x) { return ew::functor("Tanh", x); }
};

template <>
struct Elementwise<OpKind::Sigmoid> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::Opaque;
  template <class V>
  static V eval(const Attrs&, V x) {
    return V(1) / (V(1) + std::exp(-x));
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.opaque(OpKind::Sigmoid, x);
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return ew::opaque("sigmoid", x);
  }
  static std::string c64(const Attrs&, ew::S x) {
    return fmt::format("(1.0 / (1.0 + exp(-{})))", x);
  }
  static std::string cuda(const Attrs&, ew::S x) { return ew::functor("Sigmoid", x); }
};

// x * sigmoid(x), with sigmoid's unknown function, so silu(x) = x * sigmoid(x) is provable.
template <>
struct Elementwise<OpKind::Silu> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::TimesOpaque;
  template <class V>
  static V eval(const Attrs&, V x) {
    return x / (V(1) + std::exp(-x));
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.mul(x, f.opaque(OpKind::Sigmoid, x));
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return E::mul(x, ew::opaque("sigmoid", x));
  }
  static std::string c64(const Attrs&, ew::S x) {
    return fmt::format("({0} / (1.0 + exp(-{0})))", x);
  }
  static std::string cuda(const Attrs&, ew::S x) { return ew::functor("Silu", x); }
};

template <>
struct Elementwise<OpKind::Relu> {
  static constexpr double weight = 1;
  static constexpr DegreeRule degree = DegreeRule::Select;
  template <class V>
  static V eval(const Attrs&, V x) {
    return x > V(0) ? x : (x != x ? x : V(0));
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.max(x, f.from_double(0.0));
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return ew::opaque("relu", x);
  }
  static std::string c64(const Attrs&, ew::S x) { return fmt::format("fmax({}, 0.0)", x); }
  static std::string cuda(const Attrs&, ew::S x) { return ew::functor("Relu", x); }
};

template <>
struct Elementwise<OpKind::Gelu> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::Opaque;
  template <class V>
  static V eval(const Attrs& a, V x) {
    if (a.approximate == GeluApprox::Tanh) {
      const V c = static_cast<V>(0.79788456080286535588);  // sqrt(2/pi)
      return V(0.5) * x * (V(1) + std::tanh(c * (x + static_cast<V>(0.044715) * x * x * x)));
    }
    return V(0.5) * x * (V(1) + std::erf(x * static_cast<V>(0.70710678118654752440)));
  }
  template <class F, class V>
  static V field(const F& f, const Attrs& a, V x) {
    return f.opaque(OpKind::Gelu, x, static_cast<uint64_t>(a.approximate));
  }
  template <class E>
  static E abstract(const Attrs& a, E x) {
    return ew::opaque(a.approximate == GeluApprox::Tanh ? "gelu_tanh" : "gelu", x);
  }
  static std::string c64(const Attrs& a, ew::S x) {
    return a.approximate == GeluApprox::Tanh
               ? fmt::format(
                     "(0.5 * {0} * (1.0 + tanh(0.79788456080286535588 * ({0} + "
                     "0.044715 * {0} * {0} * {0}))))",
                     x)
               : fmt::format("(0.5 * {0} * (1.0 + erf({0} * 0.70710678118654752440)))", x);
  }
  static std::string cuda(const Attrs& a, ew::S x) {
    return ew::functor(a.approximate == GeluApprox::Tanh ? "GeluTanh" : "Gelu", x);
  }
};

template <>
struct Elementwise<OpKind::LeakyRelu> {
  static constexpr double weight = 1;
  static constexpr DegreeRule degree = DegreeRule::Opaque;
  template <class V>
  static V eval(const Attrs& a, V x) {
    return x >= V(0) ? x : static_cast<V>(a.negative_slope) * x;
  }
  template <class F, class V>
  static V field(const F& f, const Attrs& a, V x) {
    return f.opaque(OpKind::LeakyRelu, x, F::mix(std::bit_cast<uint64_t>(a.negative_slope)));
  }
  template <class E>
  static E abstract(const Attrs& a, E x) {
    return ew::opaque(fmt::format("leaky_relu[{}]", a.negative_slope), x);
  }
  static std::string c64(const Attrs& a, ew::S x) {
    return fmt::format("({0} >= 0.0 ? {0} : {0} * {1})", x, cuda_double_literal(a.negative_slope));
  }
  static std::string cuda(const Attrs& a, ew::S x) {
    return fmt::format("kiln::rt::LeakyRelu{{{}}}({})", cuda_float_literal(a.negative_slope), x);
  }
};

// clamp(x, min, max); an absent bound does not clamp.
template <>
struct Elementwise<OpKind::Clamp> {
  static constexpr double weight = 1;
  static constexpr DegreeRule degree = DegreeRule::Select;
  template <class V>
  static V eval(const Attrs& a, V x) {
    if (a.min && x < static_cast<V>(*a.min)) x = static_cast<V>(*a.min);
    if (a.max && x > static_cast<V>(*a.max)) x = static_cast<V>(*a.max);
    return x;
  }
  template <class F, class V>
  static V field(const F& f, const Attrs& a, V x) {
    if (a.min) x = f.max(x, f.from_double(*a.min));
    if (a.max) x = f.min(x, f.from_double(*a.max));
    return x;
  }
  template <class E>
  static E abstract(const Attrs& a, E x) {
    return ew::opaque(fmt::format("clamp[{},{}]", a.min ? fmt::format("{}", *a.min) : "",
                                  a.max ? fmt::format("{}", *a.max) : ""),
                      x);
  }
  static std::string c64(const Attrs& a, ew::S x) {
    std::string v = x;
    if (a.min) v = fmt::format("fmax({}, {})", v, cuda_double_literal(*a.min));
    if (a.max) v = fmt::format("fmin({}, {})", v, cuda_double_literal(*a.max));
    return v;
  }
  static std::string cuda(const Attrs& a, ew::S x) {
    return fmt::format("kiln::rt::Clamp{{{}, {}}}({})",
                       a.min ? cuda_float_literal(*a.min) : "-__int_as_float(0x7f800000)",
                       a.max ? cuda_float_literal(*a.max) : "__int_as_float(0x7f800000)", x);
  }
};

// log(1 + exp(x)), evaluated as max(x, 0) + log1p(exp(-|x|)): the same real number, without
// exp's overflow for large x or log's cancellation near 0.
template <>
struct Elementwise<OpKind::Softplus> {
  static constexpr double weight = 8;  // two transcendental functions
  static constexpr DegreeRule degree = DegreeRule::Opaque;
  template <class V>
  static V eval(const Attrs&, V x) {
    return (x > V(0) ? x : V(0)) + std::log1p(std::exp(-std::fabs(x)));
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.opaque(OpKind::Softplus, x);
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return ew::opaque("softplus", x);
  }
  static std::string c64(const Attrs&, ew::S x) {
    return fmt::format("(fmax({0}, 0.0) + log1p(exp(-fabs({0}))))", x);
  }
  static std::string cuda(const Attrs&, ew::S x) { return ew::functor("Softplus", x); }
};

template <>
struct Elementwise<OpKind::Sin> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::Opaque;
  template <class V>
  static V eval(const Attrs&, V x) {
    return std::sin(x);
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.opaque(OpKind::Sin, x);
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return ew::opaque("sin", x);
  }
  static std::string c64(const Attrs&, ew::S x) { return fmt::format("sin({})", x); }
  static std::string cuda(const Attrs&, ew::S x) { return ew::functor("Sin", x); }
};

template <>
struct Elementwise<OpKind::Cos> {
  static constexpr double weight = 4;
  static constexpr DegreeRule degree = DegreeRule::Opaque;
  template <class V>
  static V eval(const Attrs&, V x) {
    return std::cos(x);
  }
  template <class F, class V>
  static V field(const F& f, const Attrs&, V x) {
    return f.opaque(OpKind::Cos, x);
  }
  template <class E>
  static E abstract(const Attrs&, E x) {
    return ew::opaque("cos", x);
  }
  static std::string c64(const Attrs&, ew::S x) { return fmt::format("cos({})", x); }
  static std::string cuda(const Attrs&, ew::S x) { return ew::functor("Cos", x); }
};

// ---- Dispatch ---------------------------------------------------------------------------------

// Calls f(OpTag<K>{}) for the runtime kind k of OpClass::Unary (resp. Binary), so that element
// loops are instantiated once per op with the kind a compile-time constant. Generated from
// KILN_OPS: every enumerator has its case. Throws InternalError for an op of another class.
template <class F>
decltype(auto) with_unary(OpKind k, F&& f) {
  switch (k) {
#define KILN_UNARY_CASE(E, N, MIN, MAX, C, L, A)                              \
  case OpKind::E:                                                             \
    if constexpr (OpClass::C == OpClass::Unary) return f(OpTag<OpKind::E>{}); \
    break;
    KILN_OPS(KILN_UNARY_CASE)
#undef KILN_UNARY_CASE
  }
  throw InternalError(fmt::format("{} is not a unary op", op_name(k)));
}

template <class F>
decltype(auto) with_binary(OpKind k, F&& f) {
  switch (k) {
#define KILN_BINARY_CASE(E, N, MIN, MAX, C, L, A)                              \
  case OpKind::E:                                                              \
    if constexpr (OpClass::C == OpClass::Binary) return f(OpTag<OpKind::E>{}); \
    break;
    KILN_OPS(KILN_BINARY_CASE)
#undef KILN_BINARY_CASE
  }
  throw InternalError(fmt::format("{} is not a binary op", op_name(k)));
}

// The table's scalar columns at run time, for any op: elementwise ops give their row; other ops
// cost 1 (constants 0) and have no degree rule.
inline double op_weight(OpKind k) {
  if (op_class(k) == OpClass::Unary)
    return with_unary(k, [](auto t) { return Elementwise<decltype(t)::value>::weight; });
  if (op_class(k) == OpClass::Binary)
    return with_binary(k, [](auto t) { return Elementwise<decltype(t)::value>::weight; });
  return op_class(k) == OpClass::Constant ? 0 : 1;
}
inline DegreeRule degree_rule(OpKind k) {
  if (op_class(k) == OpClass::Binary)
    return with_binary(k, [](auto t) { return Elementwise<decltype(t)::value>::degree; });
  return with_unary(k, [](auto t) { return Elementwise<decltype(t)::value>::degree; });
}

}  // namespace kiln
