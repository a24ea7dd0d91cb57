// Value domains and dense tensors: the vocabulary of the generic evaluation core.
//
// The interpreter (float32 / float64 values) and the verifier (finite-field values) evaluate
// kernel and block graphs with one traversal and one implementation of every op class
// (tensor_ops.h, block_walk.h, eval_core.h). What differs between them is only the value type
// and its primitive operations, gathered in a *value domain* D:
//
//   typename D::V                                  a regular value type (copyable, default-
//                                                  constructible; the default value is never read)
//   V    d.from_double(double x)                   a constant (spec constants, eps, 1/n, 0). The
//                                                  field domain maps the exact dyadic value of x.
//   V    d.unary(OpKind k, const Attrs& a, V x)    every op of OpClass::Unary (neg exp log sqrt
//                                                  rsqrt reciprocal square tanh sigmoid silu relu
//                                                  gelu leaky_relu clamp); attrs as in the op row
//   V    d.binary(OpKind k, V x, V y)              every op of OpClass::Binary (add sub mul div
//                                                  maximum minimum)
//   V    d.max(V x, V y)                           the combine of max reductions, accum_max,
//                                                  softmax's row max and accum_rescale's running
//                                                  max; must be associative and commutative and
//                                                  select one of its arguments. The core never
//                                                  compares values itself.
//   V    d.round_store(V x, DType t)               applied to every value stored into a device
//                                                  tensor of dtype t (kernel op results, block
//                                                  output savers)
//
// All of them may be static or const member functions. The core calls unary/binary with a
// constant OpKind inside its element loops, so an inline domain whose functions switch on the
// kind compiles to straight-line code per op. Composite ops are written once in the core in
// terms of these primitives (see tensor_ops.h), so the domains cannot disagree on them.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/ir/diag.h"
#include "kiln/ir/elementwise.h"
#include "kiln/ir/memory.h"
#include "kiln/ir/ops.h"
#include "kiln/ir/types.h"

namespace kiln::interp {

template <class D>
concept ValueDomain = requires(const D& d, typename D::V x, typename D::V y, OpKind k,
                               const Attrs& a, DType t, double c) {
  requires std::copyable<typename D::V> && std::default_initializable<typename D::V>;
  { d.from_double(c) } -> std::same_as<typename D::V>;
  { d.unary(k, a, x) } -> std::same_as<typename D::V>;
  { d.binary(k, x, y) } -> std::same_as<typename D::V>;
  { d.max(x, y) } -> std::same_as<typename D::V>;
  { d.round_store(x, t) } -> std::same_as<typename D::V>;
};

// Number of elements of a shape ([] has one).
inline int64_t elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t e : s) n *= e;
  return n;
}

// A shape viewed as rows x columns: the columns are the last dim, the rows every index over the
// other dims (row-major). A scalar or a vector is one row. Partial evaluation selects rows.
inline int64_t num_rows(const Shape& s) {
  return s.size() <= 1 ? 1 : elements(s) / s.back();
}
inline int64_t num_cols(const Shape& s) {
  return s.empty() ? 1 : s.back();
}

// A dense row-major tensor (or tile) of domain values.
template <class V>
struct Tensor {
  Shape shape;
  // Zero-filled at construction, committed only where written (memory.h): a partial evaluation
  // of a huge tensor holds the rows it computes.
  std::vector<V, LazyZeroAllocator<V>> data;

  Tensor() = default;
  explicit Tensor(Shape s) : shape(std::move(s)), data(static_cast<size_t>(elements(shape))) {}

  // Reshapes in place, reusing the allocation (tiles are reset every loop iteration). Values
  // past the old size are zero, as a value-initialising resize leaves them.
  void reset(const Shape& s) {
    shape = s;
    const size_t old = data.size(), cap = data.capacity(), n = static_cast<size_t>(elements(shape));
    data.resize(n);
    // Within the old capacity the regrown values are stale; past it the storage is fresh (zero).
    if (n > old && n <= cap)
      std::fill(data.begin() + static_cast<std::ptrdiff_t>(old), data.end(), V{});
  }
  int64_t size() const { return static_cast<int64_t>(data.size()); }
};

// How an op may run: kernel-level ops split their rows across oneTBB workers; tile ops inside
// a block usually run serially because the blocks themselves are spread across workers.
struct Exec {
  bool parallel = false;
};

// A set of rows of a tensor (see num_rows): empty means every row, otherwise one flag per row.
// An op given a row set must compute at least those rows of its result; the others may hold
// anything.
using RowMask = std::vector<uint8_t>;

}  // namespace kiln::interp
