// One implementation per op class, generic over the value domain (domain.h).
//
// Kernel-level predefined ops and block-level tile ops call exactly these functions, so a tile
// op and the kernel op it stands for cannot drift apart, and the interpreter and the verifier
// share them. Composite ops are defined here once, from the domain's primitives, following
// spec-format.md:
//   mean(x)      = sum(x) * from_double(1/n)
//   softmax(x)   = exp(x - m) / sum(exp(x - m)),  m = max(x) through D::max
//   rms_norm(x)  = x / sqrt(mean(square(x)) + eps)  [* w]
//   matmul       = sum_k a_ik * b_kj, accumulated in k order from from_double(0)
// Every function resets `out` to the result shape (reusing its allocation); `out` must not alias
// an input. A non-empty RowMask asks for at least the flagged rows of the result (num_rows);
// other rows may hold anything.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "kiln/interp/domain.h"
#include "kiln/ir/block_graph.h"
#include "kiln/ir/diag.h"

namespace kiln::interp {

// Work (element operations) below which an op runs serially, and the least work per task.
inline constexpr int64_t kParallelWork = int64_t(1) << 16;
inline constexpr int64_t kGrainWork = int64_t(1) << 14;

// Calls f(r) for every row r in [0, rows) flagged by mask (all if empty), split across workers
// when ex.parallel and the work (rows * work_per_row) is large enough.
template <class F>
void for_rows(const Exec& ex, int64_t rows, int64_t work_per_row, const RowMask& mask, F&& f) {
  auto body = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      if (mask.empty() || mask[r]) f(r);
  };
  work_per_row = std::max<int64_t>(work_per_row, 1);
  if (ex.parallel && rows > 1 && rows * work_per_row >= kParallelWork) {
    int64_t grain = std::max<int64_t>(1, kGrainWork / work_per_row);
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows, grain),
                      [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
  } else {
    body(0, rows);
  }
}

// NumPy broadcast of index spaces: maps a flat index over `out` to the flat index of the element
// of `in` it reads, where `in` is aligned to `out` from the right and its extents of 1 stretch.
class BroadcastMap {
 public:
  BroadcastMap(const Shape& out, const Shape& in) {
    KILN_ASSERT(in.size() <= out.size() && out.size() <= 8, "broadcast {} to {}", shape_str(in),
                shape_str(out));
    rank_ = static_cast<int>(out.size());
    int pad = rank_ - static_cast<int>(in.size());
    int64_t stride = 1;
    identity_ = true;
    for (int d = rank_ - 1; d >= 0; --d) {
      int64_t e = d < pad ? 1 : in[d - pad];
      KILN_ASSERT(e == out[d] || e == 1, "broadcast {} to {}", shape_str(in), shape_str(out));
      out_[d] = out[d];
      stride_[d] = e == 1 ? 0 : stride;
      identity_ &= e == out[d];
      stride *= e;
    }
  }
  int64_t operator()(int64_t flat) const {
    if (identity_) return flat;
    int64_t off = 0;
    for (int d = rank_ - 1; d >= 0 && flat > 0; --d) {
      off += (flat % out_[d]) * stride_[d];
      flat /= out_[d];
    }
    return off;
  }

 private:
  int rank_ = 0;
  bool identity_ = true;
  int64_t out_[8] = {}, stride_[8] = {};
};

// Shapes without their last dim (the "row" index space), for rank >= 1.
inline Shape lead_shape(const Shape& s) {
  return s.empty() ? Shape{} : Shape(s.begin(), s.end() - 1);
}

// Operand `in` of a broadcasting op with result shape `out`, addressed row by row: the start of
// the operand's data for result row r, and its column step (0 when its last dim stretches).
class RowBroadcast {
 public:
  RowBroadcast(const Shape& out, const Shape& in)
      : map_(lead_shape(out), lead_shape(in)),
        in_cols_(num_cols(in)),
        col_step_(num_cols(in) == 1 ? 0 : 1) {}
  int64_t row_start(int64_t r) const { return map_(r) * in_cols_; }
  int64_t col_step() const { return col_step_; }

 private:
  BroadcastMap map_;
  int64_t in_cols_, col_step_;
};

// ---- Constant ---------------------------------------------------------------------------------

template <ValueDomain D>
void constant_op(const D& d, double value, Tensor<typename D::V>& out) {
  out.reset({});
  out.data[0] = d.from_double(value);
}

// ---- Unary (elementwise) ----------------------------------------------------------------------

template <ValueDomain D>
void unary_op(const D& d, OpKind kind, const Attrs& attrs, const Tensor<typename D::V>& x,
              Tensor<typename D::V>& out, const Exec& ex, const RowMask& mask = {}) {
  out.reset(x.shape);
  int64_t cols = num_cols(x.shape);
  with_unary(kind, [&](auto k) {
    for_rows(ex, num_rows(x.shape), cols * 4, mask, [&](int64_t r) {
      const auto* px = x.data.data() + r * cols;
      auto* po = out.data.data() + r * cols;
      for (int64_t j = 0; j < cols; ++j) po[j] = d.unary(k, attrs, px[j]);
    });
  });
}

// ---- Binary (elementwise, NumPy broadcast) ----------------------------------------------------

template <ValueDomain D>
void binary_op(const D& d, OpKind kind, const Tensor<typename D::V>& a,
               const Tensor<typename D::V>& b, Tensor<typename D::V>& out, const Exec& ex,
               const RowMask& mask = {}) {
  KILN_ASSERT(&out != &a && &out != &b, "binary_op output aliases an input");
  auto shape = broadcast_shapes(a.shape, b.shape);
  KILN_ASSERT(shape, "{}: {} and {} do not broadcast", op_name(kind), shape_str(a.shape),
              shape_str(b.shape));
  out.reset(*shape);
  int64_t cols = num_cols(out.shape);
  with_binary(kind, [&](auto k) {
    if (a.shape == b.shape) {
      for_rows(ex, num_rows(out.shape), cols, mask, [&](int64_t r) {
        const auto* pa = a.data.data() + r * cols;
        const auto* pb = b.data.data() + r * cols;
        auto* po = out.data.data() + r * cols;
        for (int64_t j = 0; j < cols; ++j) po[j] = d.binary(k, pa[j], pb[j]);
      });
      return;
    }
    RowBroadcast ba(out.shape, a.shape), bb(out.shape, b.shape);
    for_rows(ex, num_rows(out.shape), cols, mask, [&](int64_t r) {
      const auto* pa = a.data.data() + ba.row_start(r);
      const auto* pb = b.data.data() + bb.row_start(r);
      auto* po = out.data.data() + r * cols;
      // The four stride cases get their own loops so that the common ones vectorize.
      if (ba.col_step() && bb.col_step()) {
        for (int64_t j = 0; j < cols; ++j) po[j] = d.binary(k, pa[j], pb[j]);
      } else if (ba.col_step()) {
        auto y = pb[0];
        for (int64_t j = 0; j < cols; ++j) po[j] = d.binary(k, pa[j], y);
      } else if (bb.col_step()) {
        auto x = pa[0];
        for (int64_t j = 0; j < cols; ++j) po[j] = d.binary(k, x, pb[j]);
      } else {
        auto v = d.binary(k, pa[0], pb[0]);
        for (int64_t j = 0; j < cols; ++j) po[j] = v;
      }
    });
  });
}

// Elementwise D::max of two tensors of one shape (accumulators' running max).
template <ValueDomain D>
void max_combine(const D& d, const Tensor<typename D::V>& a, const Tensor<typename D::V>& b,
                 Tensor<typename D::V>& out) {
  KILN_ASSERT(a.shape == b.shape, "max_combine {} vs {}", shape_str(a.shape), shape_str(b.shape));
  out.reset(a.shape);
  for (int64_t i = 0; i < a.size(); ++i) out.data[i] = d.max(a.data[i], b.data[i]);
}

// ---- Matmul (batch dims broadcast) ------------------------------------------------------------

template <ValueDomain D>
void matmul_op(const D& d, const Tensor<typename D::V>& a, const Tensor<typename D::V>& b,
               Tensor<typename D::V>& out, const Exec& ex, const RowMask& mask = {}) {
  using V = typename D::V;
  const Shape &sa = a.shape, &sb = b.shape;
  KILN_ASSERT(sa.size() >= 2 && sb.size() >= 2 && sa.back() == sb[sb.size() - 2], "matmul {} x {}",
              shape_str(sa), shape_str(sb));
  Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  auto batch = broadcast_shapes(batch_a, batch_b);
  KILN_ASSERT(batch, "matmul batch {} x {}", shape_str(sa), shape_str(sb));
  const int64_t m = sa[sa.size() - 2], kk = sa.back(), n = sb.back();
  Shape so = *batch;
  so.push_back(m);
  so.push_back(n);
  out.reset(so);
  const int64_t nbatch = elements(*batch);
  BroadcastMap map_a(*batch, batch_a), map_b(*batch, batch_b);

  // Tasks are (batch, group of up to kRows rows, panel of kCols columns). Within a task the k
  // loop is outermost, so one row of the B panel is reused by every row of the group from L1,
  // and the accumulating rows of C (kRows x kCols) stay in L1/L2; the j loop is contiguous.
  constexpr int64_t kRows = 32;
  constexpr int64_t kCols = std::max<int64_t>(64, 1024 / static_cast<int64_t>(sizeof(V)));
  struct Group {
    int64_t batch;
    std::vector<int64_t> rows;  // row indices i within the batch
  };
  std::vector<Group> groups;
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    Group g{bi, {}};
    for (int64_t i = 0; i < m; ++i) {
      if (!mask.empty() && !mask[bi * m + i]) continue;
      g.rows.push_back(i);
      if (static_cast<int64_t>(g.rows.size()) == kRows) {
        groups.push_back(g);
        g.rows.clear();
      }
    }
    if (!g.rows.empty()) groups.push_back(std::move(g));
  }
  const int64_t panels = (n + kCols - 1) / kCols;
  const int64_t tasks = static_cast<int64_t>(groups.size()) * panels;
  const V zero = d.from_double(0.0);

  auto run = [&](int64_t t) {
    const Group& g = groups[t / panels];
    const int64_t j0 = (t % panels) * kCols, j1 = std::min(n, j0 + kCols), w = j1 - j0;
    const V* pa = a.data.data() + map_a(g.batch) * m * kk;
    const V* pb = b.data.data() + map_b(g.batch) * kk * n + j0;
    V* pc = out.data.data() + g.batch * m * n + j0;
    for (int64_t i : g.rows) std::fill(pc + i * n, pc + i * n + w, zero);
    for (int64_t p = 0; p < kk; ++p) {
      const V* brow = pb + p * n;
      for (int64_t i : g.rows) {
        const V x = pa[i * kk + p];
        V* crow = pc + i * n;
        for (int64_t j = 0; j < w; ++j)
          crow[j] = d.binary(OpKind::Add, crow[j], d.binary(OpKind::Mul, x, brow[j]));
      }
    }
  };
  if (ex.parallel && tasks > 1 && elements(so) * kk >= kParallelWork) {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, tasks, 1),
                      [&](const tbb::blocked_range<int64_t>& r) {
                        for (int64_t t = r.begin(); t < r.end(); ++t) run(t);
                      });
  } else {
    for (int64_t t = 0; t < tasks; ++t) run(t);
  }
}

// ---- Transpose --------------------------------------------------------------------------------

template <ValueDomain D>
void transpose_op(const D&, const Attrs& attrs, const Tensor<typename D::V>& x,
                  Tensor<typename D::V>& out, const Exec& ex, const RowMask& mask = {}) {
  const size_t r = x.shape.size();
  std::vector<int> perm = transpose_perm(attrs, r);
  KILN_ASSERT(perm.size() == r, "transpose perm rank");
  Shape so(r);
  std::vector<int64_t> in_strides = strides_of(x.shape), step(r);
  for (size_t i = 0; i < r; ++i) {
    so[i] = x.shape[perm[i]];
    step[i] = in_strides[perm[i]];
  }
  out.reset(so);
  if (r == 0) {
    out.data = x.data;
    return;
  }
  const int64_t cols = num_cols(so);
  const int64_t col_step = r ? step[r - 1] : 0;
  for_rows(ex, num_rows(so), cols, mask, [&](int64_t row) {
    int64_t off = 0, rest = row;
    for (size_t i = r - 1; i-- > 0;) {
      off += (rest % so[i]) * step[i];
      rest /= so[i];
    }
    auto* po = out.data.data() + row * cols;
    for (int64_t j = 0; j < cols; ++j) po[j] = x.data[off + j * col_step];
  });
}

// ---- Reductions -------------------------------------------------------------------------------

// The one definition of "divide by a count" used by mean and rms_norm: multiply by the
// constant 1/n (a dyadic rational when n is a power of two).
template <ValueDomain D>
typename D::V scale_by_inverse_count(const D& d, typename D::V v, int64_t n) {
  return d.binary(OpKind::Mul, v, d.from_double(1.0 / static_cast<double>(n)));
}

// Splits a shape around dim: [outer, n, inner].
struct DimSplit {
  int64_t outer = 1, n = 1, inner = 1;
  DimSplit(const Shape& s, int64_t dim) {
    for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i)
      (i < dim ? outer : i == dim ? n : inner) *= s[i];
  }
};

// Whether any row of a result of shape `out` holding flat elements [e0, e1) is in mask.
inline bool any_row_in(const RowMask& mask, const Shape& out, int64_t e0, int64_t e1) {
  if (mask.empty()) return true;
  int64_t cols = num_cols(out);
  for (int64_t r = e0 / cols; r <= (e1 - 1) / cols; ++r)
    if (mask[r]) return true;
  return false;
}

template <ValueDomain D>
void reduce_op(const D& d, OpKind kind, const Attrs& attrs, const Tensor<typename D::V>& x,
               Tensor<typename D::V>& out, const Exec& ex, const RowMask& mask = {}) {
  using V = typename D::V;
  const int64_t dim = attrs.dim;
  KILN_ASSERT(dim >= 0 && dim < static_cast<int64_t>(x.shape.size()), "reduce dim {} of {}", dim,
              shape_str(x.shape));
  Shape so = x.shape;
  if (attrs.keepdim)
    so[dim] = 1;
  else
    so.erase(so.begin() + dim);
  out.reset(so);
  const DimSplit s(x.shape, dim);
  const V zero = d.from_double(0.0);
  for_rows(ex, s.outer, s.n * s.inner, {}, [&](int64_t o) {
    if (!any_row_in(mask, so, o * s.inner, (o + 1) * s.inner)) return;
    const V* px = x.data.data() + o * s.n * s.inner;
    V* po = out.data.data() + o * s.inner;
    if (kind == OpKind::Max) {
      std::copy(px, px + s.inner, po);
      for (int64_t i = 1; i < s.n; ++i)
        for (int64_t j = 0; j < s.inner; ++j) po[j] = d.max(po[j], px[i * s.inner + j]);
      return;
    }
    KILN_ASSERT(kind == OpKind::Sum || kind == OpKind::Mean, "{} is not a reduction",
                op_name(kind));
    std::fill(po, po + s.inner, zero);
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t j = 0; j < s.inner; ++j)
        po[j] = d.binary(OpKind::Add, po[j], px[i * s.inner + j]);
    if (kind == OpKind::Mean)
      for (int64_t j = 0; j < s.inner; ++j)
        po[j] = scale_by_inverse_count(d, po[j], attrs.count > 0 ? attrs.count : s.n);
  });
}

// ---- Softmax ----------------------------------------------------------------------------------

template <ValueDomain D>
void softmax_op(const D& d, const Attrs& attrs, const Tensor<typename D::V>& x,
                Tensor<typename D::V>& out, const Exec& ex, const RowMask& mask = {}) {
  using V = typename D::V;
  const int64_t dim = attrs.dim;
  KILN_ASSERT(dim >= 0 && dim < static_cast<int64_t>(x.shape.size()), "softmax dim {} of {}", dim,
              shape_str(x.shape));
  out.reset(x.shape);
  const DimSplit s(x.shape, dim);
  const V zero = d.from_double(0.0);
  const Attrs none;
  for_rows(ex, s.outer, s.n * s.inner * 8, {}, [&](int64_t o) {
    const int64_t base = o * s.n * s.inner;
    if (!any_row_in(mask, x.shape, base, base + s.n * s.inner)) return;
    const V* px = x.data.data() + base;
    V* po = out.data.data() + base;
    std::vector<V> mx(px, px + s.inner), sum(s.inner, zero);
    for (int64_t i = 1; i < s.n; ++i)
      for (int64_t j = 0; j < s.inner; ++j) mx[j] = d.max(mx[j], px[i * s.inner + j]);
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t j = 0; j < s.inner; ++j) {
        V e = d.unary(OpKind::Exp, none, d.binary(OpKind::Sub, px[i * s.inner + j], mx[j]));
        po[i * s.inner + j] = e;
        sum[j] = d.binary(OpKind::Add, sum[j], e);
      }
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t j = 0; j < s.inner; ++j)
        po[i * s.inner + j] = d.binary(OpKind::Div, po[i * s.inner + j], sum[j]);
  });
}

// ---- RmsNorm (over the last dim) --------------------------------------------------------------

template <ValueDomain D>
void rms_norm_op(const D& d, const Attrs& attrs, const Tensor<typename D::V>& x,
                 const Tensor<typename D::V>* w, Tensor<typename D::V>& out, const Exec& ex,
                 const RowMask& mask = {}) {
  using V = typename D::V;
  KILN_ASSERT(!x.shape.empty(), "rms_norm of a scalar");
  const int64_t n = x.shape.back();
  KILN_ASSERT(!w || w->size() == n, "rms_norm weight {}", shape_str(w->shape));
  out.reset(x.shape);
  const V zero = d.from_double(0.0), eps = d.from_double(attrs.eps);
  const Attrs none;
  for_rows(ex, num_rows(x.shape), n * 4, mask, [&](int64_t r) {
    const V* px = x.data.data() + r * n;
    V* po = out.data.data() + r * n;
    V ss = zero;
    for (int64_t j = 0; j < n; ++j)
      ss = d.binary(OpKind::Add, ss, d.unary(OpKind::Square, none, px[j]));
    V rms =
        d.unary(OpKind::Sqrt, none,
                d.binary(OpKind::Add,
                         scale_by_inverse_count(d, ss, attrs.count > 0 ? attrs.count : n), eps));
    for (int64_t j = 0; j < n; ++j) po[j] = d.binary(OpKind::Div, px[j], rms);
    if (w)
      for (int64_t j = 0; j < n; ++j) po[j] = d.binary(OpKind::Mul, po[j], w->data[j]);
  });
}

// ---- Dispatch ---------------------------------------------------------------------------------

// Applies a predefined (kernel-level or tile) op of any class except GraphDefined, Input,
// Output, Accum and Fused to its operands.
template <ValueDomain D>
void apply_op(const D& d, OpKind kind, const Attrs& attrs,
              std::span<const Tensor<typename D::V>* const> in, Tensor<typename D::V>& out,
              const Exec& ex, const RowMask& mask = {}) {
  switch (op_info(kind).cls) {
    case OpClass::Matmul:
      return matmul_op(d, *in[0], *in[1], out, ex, mask);
    case OpClass::Transpose:
      return transpose_op(d, attrs, *in[0], out, ex, mask);
    case OpClass::Binary:
      return binary_op(d, kind, *in[0], *in[1], out, ex, mask);
    case OpClass::Unary:
      return unary_op(d, kind, attrs, *in[0], out, ex, mask);
    case OpClass::Constant:
      return constant_op(d, attrs.value, out);
    case OpClass::Reduce:
      return reduce_op(d, kind, attrs, *in[0], out, ex, mask);
    case OpClass::Softmax:
      return softmax_op(d, attrs, *in[0], out, ex, mask);
    case OpClass::RmsNorm:
      return rms_norm_op(d, attrs, *in[0], in.size() > 1 ? in[1] : nullptr, out, ex, mask);
    case OpClass::GraphDefined:
    case OpClass::Input:
    case OpClass::Output:
    case OpClass::Accum:
    case OpClass::Fused:
      break;
  }
  throw InternalError(fmt::format("apply_op: {} is not a predefined op", op_name(kind)));
}

// Broadcasts x to `shape` (a shape x broadcasts to), into out.
template <ValueDomain D>
void expand_to(const Tensor<typename D::V>& x, const Shape& shape, Tensor<typename D::V>& out) {
  out.reset(shape);
  BroadcastMap map(shape, x.shape);
  for (int64_t i = 0; i < out.size(); ++i) out.data[i] = x.data[map(i)];
}

// Evaluates a thread graph on whole tiles: each thread op is the elementwise op of its class
// applied with NumPy broadcast, which is what a thread computes per element in registers. The
// result is broadcast to `shape` (the broadcast of the fused op's input tiles).
template <ValueDomain D>
void thread_graph_op(const D& d, const ThreadGraph& tg,
                     std::span<const Tensor<typename D::V>* const> in, const Shape& shape,
                     std::vector<Tensor<typename D::V>>& temps, Tensor<typename D::V>& out) {
  using T = Tensor<typename D::V>;
  KILN_ASSERT(static_cast<int>(in.size()) == tg.num_inputs, "thread graph arity");
  temps.resize(tg.ops.size());
  const Exec serial;
  for (size_t j = 0; j < tg.ops.size(); ++j) {
    const ThreadOp& op = tg.ops[j];
    std::vector<const T*> args;
    for (int ref : op.inputs)
      args.push_back(ref < tg.num_inputs ? in[ref] : &temps[ref - tg.num_inputs]);
    apply_op(d, op.kind, op.attrs, std::span<const T* const>(args), temps[j], serial);
  }
  const T& last = temps.back();
  if (last.shape == shape)
    out = last;
  else
    expand_to<D>(last, shape, out);
}

}  // namespace kiln::interp
