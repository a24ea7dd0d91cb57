// The CPU reference interpreter's entry points (interp.h): input checking, conversion between
// host tensors and domain tensors, precision and thread selection, partial evaluation, and the
// comparison helpers. The evaluation itself is the generic core (eval_core.h).
#include "kiln/interp/interp.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <set>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "kiln/interp/eval_core.h"
#include "kiln/interp/float_domain.h"
#include "kiln/ir/diag.h"

namespace kiln {

namespace {

using interp::EvalPlan;
using interp::Tensor;

void check_inputs(const KernelGraph& g, const std::vector<HostTensor>& inputs) {
  if (inputs.size() != g.inputs.size())
    user_error(ErrorCode::Shape, "{} takes {} inputs, given {}", g.name, g.inputs.size(),
               inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.inputs[i]);
    const HostTensor& h = inputs[i];
    if (h.shape != t.shape || h.dtype != t.dtype)
      user_error(ErrorCode::Shape, "input {} ({}) is {} {}, expected {} {}", i, t.name,
                 shape_str(h.shape), dtype_name(h.dtype), shape_str(t.shape), dtype_name(t.dtype));
    if (static_cast<int64_t>(h.data.size()) != interp::elements(h.shape))
      user_error(ErrorCode::Shape, "input {} ({}) holds {} values for shape {}", i, t.name,
                 h.data.size(), shape_str(h.shape));
  }
}

// Inputs are values of their dtype: anything else is rounded to it first. With a row set (see
// RowMask; empty: every row) only those rows are converted: the rest stay zero and uncommitted.
template <class V>
Tensor<V> to_domain(const HostTensor& h, const interp::RowMask& rows) {
  Tensor<V> t(h.shape);
  auto convert = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const double x = h.data[i];
      const float f = static_cast<float>(x);
      // Inline fast path of round_to_dtype for values that are floats.
      t.data[i] = static_cast<double>(f) == x
                      ? static_cast<V>(interp::round_float_to_dtype(f, h.dtype))
                      : static_cast<V>(interp::round_to_dtype(x, h.dtype));
    }
  };
  if (rows.empty()) {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, t.size(), 1 << 16),
                      [&](const tbb::blocked_range<int64_t>& r) { convert(r.begin(), r.end()); });
    return t;
  }
  const int64_t cols = interp::num_cols(h.shape);
  interp::for_rows(interp::Exec{true}, static_cast<int64_t>(rows.size()), cols, rows,
                   [&](int64_t r) { convert(r * cols, (r + 1) * cols); });
  return t;
}

// F64 that notes every stored value beyond the float32 range (EvalOptions::out_of_f32_range).
struct F64RangeDomain : interp::F64Domain {
  std::atomic<bool>* out = nullptr;
  V round_store(V x, DType) const {
    if (!(std::fabs(x) <= double(std::numeric_limits<float>::max())))
      out->store(true, std::memory_order_relaxed);
    return x;
  }
};
static_assert(interp::ValueDomain<F64RangeDomain>);

// Row restriction of a partial evaluation: the plan, and the rows of each output to hand back.
struct Partial {
  const EvalPlan* plan = nullptr;
  const std::vector<std::vector<int64_t>>* rows = nullptr;
};

// Evaluates g in domain d and hands back its outputs in float64: whole, or with a Partial the
// listed rows of each (select_rows's shapes). Only what the plan computes is read or copied.
template <class D>
std::vector<HostTensor> run(const D& d, const KernelGraph& g, const std::vector<HostTensor>& inputs,
                            Partial part, std::span<const OperandRounding> rounding,
                            const Deadline& deadline) {
  using V = typename D::V;
  static const interp::RowMask all;
  std::vector<Tensor<V>> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int t = g.inputs[i];
    if (part.plan && !part.plan->needed[t])
      in.push_back(Tensor<V>(inputs[i].shape));  // never read: zeros, uncommitted
    else
      in.push_back(to_domain<V>(inputs[i], part.plan ? part.plan->rows[t] : all));
  }
  std::vector<Tensor<V>> outs =
      interp::evaluate_graph(d, g, std::move(in), part.plan, rounding, deadline);
  std::vector<HostTensor> res;
  for (size_t i = 0; i < outs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.outputs[i]);
    if (!part.rows) {
      res.push_back(
          HostTensor{t.shape, t.dtype, HostData(outs[i].data.begin(), outs[i].data.end())});
    } else {
      const std::vector<int64_t>& rows = (*part.rows)[i];
      const int64_t cols = interp::num_cols(t.shape);
      HostTensor r{{static_cast<int64_t>(rows.size()), cols}, t.dtype, {}};
      r.data.reserve(rows.size() * static_cast<size_t>(cols));
      for (int64_t row : rows)
        r.data.insert(r.data.end(), outs[i].data.begin() + row * cols,
                      outs[i].data.begin() + (row + 1) * cols);
      res.push_back(std::move(r));
    }
    outs[i] = Tensor<V>();
  }
  return res;
}

template <class F>
auto with_threads(int threads, F&& f) {
  if (threads > 0) {
    tbb::task_arena arena(threads);
    return arena.execute(f);
  }
  return f();
}

std::vector<HostTensor> run_precision(const KernelGraph& g, const std::vector<HostTensor>& inputs,
                                      const EvalOptions& opt, Partial part) {
  if (opt.max_bytes > 0) {
    // The domain's tensors, and the float64 copies of the outputs handed back.
    const int vb = opt.precision == Precision::F32 ? 4 : 8;
    double need = part.rows ? estimate_bytes(g, vb, *part.rows) : estimate_bytes(g, vb);
    for (size_t i = 0; i < g.outputs.size(); ++i)
      need +=
          8.0 * static_cast<double>(part.rows ? (*part.rows)[i].size() *
                                                    interp::num_cols(g.tensor(g.outputs[i]).shape)
                                              : numel(g.tensor(g.outputs[i]).shape));
    if (std::string why = over_memory_limit(need, opt.max_bytes); !why.empty())
      throw MemoryLimitExceeded(fmt::format("evaluating {} {}", g.name, why));
  }
  return with_threads(opt.threads, [&] {
    if (opt.precision == Precision::F32)
      return run(interp::F32Domain{}, g, inputs, part, opt.operand_rounding, opt.deadline);
    if (!opt.out_of_f32_range) return run(interp::F64Domain{}, g, inputs, part, {}, opt.deadline);
    std::atomic<bool> out{false};
    F64RangeDomain d;
    d.out = &out;
    auto r = run(d, g, inputs, part, {}, opt.deadline);
    *opt.out_of_f32_range = out.load();
    return r;
  });
}

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

namespace {

// Peak bytes of an evaluation whose tensor t holds bytes(t) while live (estimate_bytes).
template <class Bytes>
double peak_bytes(const KernelGraph& g, Bytes bytes) {
  const size_t nt = g.tensors.size();
  std::vector<int> last_use(nt, -1);
  std::vector<uint8_t> keep(nt, 0);
  for (int t : g.outputs) keep[t] = 1;
  for (size_t i = 0; i < g.ops.size(); ++i)
    for (int t : g.ops[i].inputs) last_use[t] = static_cast<int>(i);
  double live = 0;
  for (int t : g.inputs) live += bytes(t);
  double peak = live;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    for (int t : g.ops[i].outputs) live += bytes(t);
    peak = std::max(peak, live);
    for (int t : g.ops[i].inputs)
      if (last_use[t] == static_cast<int>(i) && !keep[t]) live -= bytes(t);
  }
  return peak;
}

}  // namespace

double estimate_bytes(const KernelGraph& g, int value_bytes) {
  return peak_bytes(
      g, [&](int t) { return static_cast<double>(numel(g.tensor(t).shape)) * value_bytes; });
}

double estimate_bytes(const KernelGraph& g, int value_bytes,
                      const std::vector<std::vector<int64_t>>& rows) {
  const EvalPlan plan = interp::plan_rows(g, rows);
  // A row occupies whole pages where it is shorter than one (its neighbours are not written).
  constexpr double kPage = 4096;
  return peak_bytes(g, [&](int t) {
    const Shape& s = g.tensor(t).shape;
    const double full = static_cast<double>(numel(s)) * value_bytes;
    if (!plan.needed[t]) return 0.0;
    if (plan.rows[t].empty()) return full;
    const double n = static_cast<double>(std::count(plan.rows[t].begin(), plan.rows[t].end(), 1));
    return std::min(full, n * std::max(kPage, double(interp::num_cols(s)) * value_bytes));
  });
}

std::vector<HostTensor> evaluate(const KernelGraph& g, const std::vector<HostTensor>& inputs,
                                 const EvalOptions& opt) {
  check_inputs(g, inputs);
  return run_precision(g, inputs, opt, {});
}

std::vector<HostTensor> evaluate_rows(const KernelGraph& g, const std::vector<HostTensor>& inputs,
                                      const std::vector<std::vector<int64_t>>& rows,
                                      const EvalOptions& opt) {
  check_inputs(g, inputs);
  EvalPlan plan = interp::plan_rows(g, rows);
  return run_precision(g, inputs, opt, {&plan, &rows});
}

std::vector<std::vector<uint8_t>> input_rows(const KernelGraph& g,
                                             const std::vector<std::vector<int64_t>>& rows) {
  const EvalPlan plan = interp::plan_rows(g, rows);
  std::vector<std::vector<uint8_t>> res;
  for (int t : g.inputs) {
    if (!plan.needed[t])
      res.emplace_back(static_cast<size_t>(interp::num_rows(g.tensor(t).shape)), 0);
    else
      res.push_back(plan.rows[t]);
  }
  return res;
}

HostTensor select_rows(const HostTensor& t, const std::vector<int64_t>& rows) {
  const int64_t cols = interp::num_cols(t.shape), n = interp::num_rows(t.shape);
  HostTensor r{{static_cast<int64_t>(rows.size()), cols}, t.dtype, {}};
  r.data.reserve(rows.size() * cols);
  for (int64_t row : rows) {
    if (row < 0 || row >= n)
      user_error(ErrorCode::Shape, "row {} is out of range for shape {}", row, shape_str(t.shape));
    r.data.insert(r.data.end(), t.data.begin() + row * cols, t.data.begin() + (row + 1) * cols);
  }
  return r;
}

std::vector<int64_t> sample_rows(const Shape& s, int64_t count, uint64_t seed) {
  const int64_t n = interp::num_rows(s);
  std::vector<int64_t> rows;
  if (count >= n) {
    for (int64_t r = 0; r < n; ++r) rows.push_back(r);
    return rows;
  }
  std::set<int64_t> pick;
  if (count >= 1) pick.insert(0);
  if (count >= 2) pick.insert(n - 1);
  // Floyd's algorithm over the interior rows [1, n - 1): count - 2 distinct picks.
  const int64_t inner = n - 2, want = count - static_cast<int64_t>(pick.size());
  for (int64_t j = inner - want, i = 0; j < inner; ++j, ++i) {
    int64_t t =
        static_cast<int64_t>(mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i)) %
                             static_cast<uint64_t>(j + 1));
    pick.insert(pick.count(1 + t) ? 1 + j : 1 + t);
  }
  return {pick.begin(), pick.end()};
}

double relative_l2_error(const HostTensor& out, const HostTensor& ref) {
  const double inf = std::numeric_limits<double>::infinity();
  if (out.shape != ref.shape || out.data.size() != ref.data.size()) return inf;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < out.data.size(); ++i) {
    const double d = out.data[i] - ref.data[i];
    diff += d * d;
    norm += ref.data[i] * ref.data[i];
  }
  if (std::isnan(diff) || std::isnan(norm)) return inf;
  if (norm == 0) return std::sqrt(diff);
  const double e = std::sqrt(diff) / std::sqrt(norm);
  return std::isnan(e) ? inf : e;
}

double spec_tolerance(DType t) {
  switch (t) {
    case DType::F32:
      return 1e-4;
    case DType::F16:
      return 5e-3;
    case DType::BF16:
      return 2e-2;
  }
  return 0;
}

}  // namespace kiln
