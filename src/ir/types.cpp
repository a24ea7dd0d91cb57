// Element types and shape helpers.
#include "kiln/ir/types.h"

#include <fmt/format.h>

#include "kiln/ir/diag.h"

namespace kiln {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::F32:
      return "f32";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view n) {
  if (n == "f16" || n == "float16") return DType::F16;
  if (n == "bf16" || n == "bfloat16") return DType::BF16;
  if (n == "f32" || n == "float32") return DType::F32;
  return std::nullopt;
}

int dtype_bytes(DType t) {
  return t == DType::F32 ? 4 : 2;
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

}  // namespace kiln
