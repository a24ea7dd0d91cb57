// Private helpers of the emitters: an indenting code buffer, C++ spellings of dtypes and float
// literals, and the device expression of every elementwise op (the runtime's functors).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/codegen/schedule.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln::cgen {

// A buffer of C++ lines with the current indentation.
class Code {
 public:
  void line(const std::string& s) {
    if (s.empty()) {
      text_ += "\n";
      return;
    }
    text_.append(static_cast<size_t>(indent_) * 2, ' ');
    text_ += s;
    text_ += "\n";
  }
  template <typename... Args>
  void f(fmt::format_string<Args...> fs, Args&&... args) {
    line(fmt::format(fs, std::forward<Args>(args)...));
  }
  void open(const std::string& s) {
    line(s);
    ++indent_;
  }
  void close(const std::string& s = "}") {
    --indent_;
    line(s);
  }
  void append(const Code& other) {
    // Re-indents other's lines by this buffer's indentation.
    size_t start = 0;
    const std::string& t = other.text_;
    while (start < t.size()) {
      size_t end = t.find('\n', start);
      if (end == std::string::npos) end = t.size();
      std::string l = t.substr(start, end - start);
      if (l.empty())
        text_ += "\n";
      else
        text_ += std::string(static_cast<size_t>(indent_) * 2, ' ') + l + "\n";
      start = end + 1;
    }
  }
  void raw(const std::string& s) { text_ += s; }
  const std::string& str() const { return text_; }
  int indent() const { return indent_; }
  void set_indent(int i) { indent_ = i; }

 private:
  std::string text_;
  int indent_ = 0;
};

inline const char* ctype(DType t) {
  switch (t) {
    case DType::F16:
      return "__half";
    case DType::BF16:
      return "__nv_bfloat16";
    case DType::F32:
      return "float";
  }
  return "float";
}

// A float literal that reads back as float(v).
inline std::string flit(double v) {
  if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(v)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  float f = static_cast<float>(v);
  if (std::isinf(f)) return v > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  std::string s = fmt::format("{:.9g}", f);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s + "f";
}
// A double literal that reads back exactly.
inline std::string dlit(double v) {
  if (std::isnan(v)) return "__longlong_as_double(0x7ff8000000000000ll)";
  if (std::isinf(v))
    return v > 0 ? "__longlong_as_double(0x7ff0000000000000ll)"
                 : "__longlong_as_double(0xfff0000000000000ll)";
  std::string s = fmt::format("{:.17g}", v);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// The float32 device expression of an elementwise op over operand expressions.
inline std::string ew_expr(OpKind k, const Attrs& a, const std::vector<std::string>& x) {
  auto un = [&](const char* f) { return fmt::format("kiln::rt::{}{{}}({})", f, x[0]); };
  auto bin = [&](const char* f) { return fmt::format("kiln::rt::{}{{}}({}, {})", f, x[0], x[1]); };
  switch (k) {
    case OpKind::Add:
      return fmt::format("({} + {})", x[0], x[1]);
    case OpKind::Sub:
      return fmt::format("({} - {})", x[0], x[1]);
    case OpKind::Mul:
      return fmt::format("({} * {})", x[0], x[1]);
    case OpKind::Div:
      return fmt::format("({} / {})", x[0], x[1]);
    case OpKind::Maximum:
      return bin("Maximum");
    case OpKind::Minimum:
      return bin("Minimum");
    case OpKind::Constant:
      return flit(a.value);
    case OpKind::Neg:
      return fmt::format("(-{})", x[0]);
    case OpKind::Exp:
      return un("Exp");
    case OpKind::Log:
      return un("Log");
    case OpKind::Sqrt:
      return un("Sqrt");
    case OpKind::Rsqrt:
      return fmt::format("(1.0f / sqrtf({}))", x[0]);
    case OpKind::Reciprocal:
      return fmt::format("(1.0f / {})", x[0]);
    case OpKind::Square:
      return fmt::format("({0} * {0})", x[0]);
    case OpKind::Tanh:
      return un("Tanh");
    case OpKind::Sigmoid:
      return un("Sigmoid");
    case OpKind::Silu:
      return un("Silu");
    case OpKind::Relu:
      return un("Relu");
    case OpKind::Gelu:
      return a.approximate == GeluApprox::Tanh ? un("GeluTanh") : un("Gelu");
    case OpKind::LeakyRelu:
      return fmt::format("kiln::rt::LeakyRelu{{{}}}({})", flit(a.negative_slope), x[0]);
    case OpKind::Clamp:
      return fmt::format("kiln::rt::Clamp{{{}, {}}}({})",
                         a.min ? flit(*a.min) : "-__int_as_float(0x7f800000)",
                         a.max ? flit(*a.max) : "__int_as_float(0x7f800000)", x[0]);
    default:
      KILN_ASSERT(false, "ew_expr: {} is not elementwise", op_name(k));
      return {};
  }
}

// The float64 expression of an elementwise op (reference kernels).
inline std::string ew_expr_f64(OpKind k, const Attrs& a, const std::vector<std::string>& x) {
  switch (k) {
    case OpKind::Add:
      return fmt::format("({} + {})", x[0], x[1]);
    case OpKind::Sub:
      return fmt::format("({} - {})", x[0], x[1]);
    case OpKind::Mul:
      return fmt::format("({} * {})", x[0], x[1]);
    case OpKind::Div:
      return fmt::format("({} / {})", x[0], x[1]);
    case OpKind::Maximum:
      return fmt::format("fmax({}, {})", x[0], x[1]);
    case OpKind::Minimum:
      return fmt::format("fmin({}, {})", x[0], x[1]);
    case OpKind::Constant:
      return dlit(a.value);
    case OpKind::Neg:
      return fmt::format("(-{})", x[0]);
    case OpKind::Exp:
      return fmt::format("exp({})", x[0]);
    case OpKind::Log:
      return fmt::format("log({})", x[0]);
    case OpKind::Sqrt:
      return fmt::format("sqrt({})", x[0]);
    case OpKind::Rsqrt:
      return fmt::format("(1.0 / sqrt({}))", x[0]);
    case OpKind::Reciprocal:
      return fmt::format("(1.0 / {})", x[0]);
    case OpKind::Square:
      return fmt::format("({0} * {0})", x[0]);
    case OpKind::Tanh:
      return fmt::format("tanh({})", x[0]);
    case OpKind::Sigmoid:
      return fmt::format("(1.0 / (1.0 + exp(-{})))", x[0]);
    case OpKind::Silu:
      return fmt::format("({0} / (1.0 + exp(-{0})))", x[0]);
    case OpKind::Relu:
      return fmt::format("fmax({}, 0.0)", x[0]);
    case OpKind::Gelu:
      return a.approximate == GeluApprox::Tanh
                 ? fmt::format(
                       "(0.5 * {0} * (1.0 + tanh(0.79788456080286535588 * ({0} + "
                       "0.044715 * {0} * {0} * {0}))))",
                       x[0])
                 : fmt::format("(0.5 * {0} * (1.0 + erf({0} * 0.70710678118654752440)))", x[0]);
    case OpKind::LeakyRelu:
      return fmt::format("({0} >= 0.0 ? {0} : {0} * {1})", x[0], dlit(a.negative_slope));
    case OpKind::Clamp: {
      std::string v = x[0];
      if (a.min) v = fmt::format("fmax({}, {})", v, dlit(*a.min));
      if (a.max) v = fmt::format("fmin({}, {})", v, dlit(*a.max));
      return v;
    }
    default:
      KILN_ASSERT(false, "ew_expr_f64: {} is not elementwise", op_name(k));
      return {};
  }
}

// Index expressions of operand dims under NumPy broadcast from an output index.
inline std::vector<std::string> bcast_index(const Shape& operand, const Shape& out,
                                            const std::vector<std::string>& idx) {
  std::vector<std::string> r(operand.size());
  size_t lead = out.size() - operand.size();
  for (size_t k = 0; k < operand.size(); ++k) r[k] = operand[k] == 1 ? "0" : idx[k + lead];
  return r;
}

// sum_d idx[d] * strides[d] as an expression (dims with index "0" dropped).
inline std::string offset_expr(const std::vector<std::string>& idx,
                               const std::vector<int64_t>& strides) {
  std::string s;
  for (size_t d = 0; d < idx.size(); ++d) {
    if (idx[d] == "0") continue;
    std::string term = strides[d] == 1 ? idx[d] : fmt::format("({}) * {}", idx[d], strides[d]);
    s += s.empty() ? term : " + " + term;
  }
  return s.empty() ? "0" : s;
}

// Unravels flat index `flat` over `shape` into variables prefix0.. ; returns their names ("0"
// for extent-1 dims).
// Declarations `const TYPE NAME = EXPR;` held back until the code after them is known, then
// emitted only where that code (or a later kept declaration) reads NAME: the index variables of
// an element whose consumer may read none of them (an accumulator fed by its root's value), which
// nvcc would report as declared but never referenced.
class LazyDecls {
 public:
  void add(std::string type, std::string name, std::string expr) {
    decls_.push_back({std::move(type), std::move(name), std::move(expr)});
  }
  // Emits into c the declarations that `body` needs, in order, then body.
  void emit(Code& c, const Code& body) const {
    std::string needed = body.str();
    std::vector<bool> keep(decls_.size(), false);
    for (size_t i = decls_.size(); i-- > 0;)
      if (reads(needed, decls_[i].name)) {
        keep[i] = true;
        needed += "\n" + decls_[i].expr;
      }
    for (size_t i = 0; i < decls_.size(); ++i)
      if (keep[i]) c.f("const {} {} = {};", decls_[i].type, decls_[i].name, decls_[i].expr);
    c.append(body);
  }

 private:
  struct Decl {
    std::string type, name, expr;
  };
  // Whether `text` contains `name` as a whole identifier.
  static bool reads(const std::string& text, const std::string& name) {
    auto ident = [](char ch) {
      return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '_';
    };
    for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1))
      if ((at == 0 || !ident(text[at - 1])) &&
          (at + name.size() == text.size() || !ident(text[at + name.size()])))
        return true;
    return false;
  }
  std::vector<Decl> decls_;
};

// The index of element `flat` of a row-major tensor of `shape`: an expression per dim ("0" for
// extent 1), declared as const TYPE variables PREFIX<d> by `declare(type, name, expr)`.
template <class Declare>
std::vector<std::string> unravel_with(const std::string& flat, const Shape& shape,
                                      const std::string& prefix, const char* type,
                                      Declare&& declare) {
  std::vector<std::string> idx(shape.size());
  int64_t inner = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) {
      idx[d] = "0";
    } else {
      std::string name = fmt::format("{}{}", prefix, d);
      std::string e = inner == 1 ? flat : fmt::format("({} / {})", flat, inner);
      bool outer = true;
      for (int q = 0; q < d; ++q) outer &= shape[q] == 1;
      if (!outer) e = fmt::format("{} % {}", e, shape[d]);
      declare(type, name, e);
      idx[d] = name;
    }
    inner *= shape[d];
  }
  return idx;
}
inline std::vector<std::string> unravel(Code& c, const std::string& flat, const Shape& shape,
                                        const std::string& prefix, const char* type = "int") {
  return unravel_with(flat, shape, prefix, type,
                      [&](const char* t, const std::string& name, const std::string& e) {
                        c.f("const {} {} = {};", t, name, e);
                      });
}
// The same, with the declarations held in `lazy`.
inline std::vector<std::string> unravel(LazyDecls& lazy, const std::string& flat,
                                        const Shape& shape, const std::string& prefix,
                                        const char* type = "int") {
  return unravel_with(
      flat, shape, prefix, type,
      [&](const char* t, const std::string& name, const std::string& e) { lazy.add(t, name, e); });
}

}  // namespace kiln::cgen
