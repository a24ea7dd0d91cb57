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
#include "kiln/ir/elementwise.h"
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
  return cuda_float_literal(v);
}
// A double literal that reads back exactly.
inline std::string dlit(double v) {
  return cuda_double_literal(v);
}

// The float32 device expression of an elementwise op (or a constant) over operand expressions:
// the table's (kiln/ir/elementwise.h).
inline std::string ew_expr(OpKind k, const Attrs& a, const std::vector<std::string>& x) {
  if (k == OpKind::Constant) return flit(a.value);
  if (op_class(k) == OpClass::Binary)
    return with_binary(
        k, [&](auto t) { return Elementwise<decltype(t)::value>::cuda(a, x[0], x[1]); });
  return with_unary(k, [&](auto t) { return Elementwise<decltype(t)::value>::cuda(a, x[0]); });
}

// The float64 expression of an elementwise op or a constant (reference kernels).
inline std::string ew_expr_f64(OpKind k, const Attrs& a, const std::vector<std::string>& x) {
  if (k == OpKind::Constant) return dlit(a.value);
  if (op_class(k) == OpClass::Binary)
    return with_binary(k,
                       [&](auto t) { return Elementwise<decltype(t)::value>::c64(a, x[0], x[1]); });
  return with_unary(k, [&](auto t) { return Elementwise<decltype(t)::value>::c64(a, x[0]); });
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
