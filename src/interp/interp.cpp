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

// Inputs are values of their dtype: anything else is rounded to it first.
template <class V>
Tensor<V> to_domain(const HostTensor& h) {
  Tensor<V> t(h.shape);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, t.size(), 1 << 16),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      for (int64_t i = r.begin(); i < r.end(); ++i) {
                        const double x = h.data[i];
                        const float f = static_cast<float>(x);
                        // Inline fast path of round_to_dtype for values that are floats.
                        t.data[i] = static_cast<double>(f) == x
                                        ? static_cast<V>(interp::round_float_to_dtype(f, h.dtype))
                                        : static_cast<V>(interp::round_to_dtype(x, h.dtype));
                      }
                    });
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

template <class D>
std::vector<HostTensor> run(const D& d, const KernelGraph& g, const std::vector<HostTensor>& inputs,
                            const EvalPlan* plan, std::span<const OperandRounding> rounding,
                            const Deadline& deadline) {
  using V = typename D::V;
  std::vector<Tensor<V>> in;
  for (const HostTensor& h : inputs) in.push_back(to_domain<V>(h));
  std::vector<Tensor<V>> outs =
      interp::evaluate_graph(d, g, std::move(in), plan, rounding, deadline);
  std::vector<HostTensor> res;
  for (size_t i = 0; i < outs.size(); ++i) {
    const TensorDesc& t = g.tensor(g.outputs[i]);
    res.push_back(HostTensor{t.shape, t.dtype,
                             std::vector<double>(outs[i].data.begin(), outs[i].data.end())});
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
                                      const EvalOptions& opt, const EvalPlan* plan) {
  if (opt.max_bytes > 0) {
    // The domain's tensors, and the float64 copies of the outputs handed back.
    double need = estimate_bytes(g, opt.precision == Precision::F32 ? 4 : 8);
    for (int t : g.outputs) need += 8.0 * static_cast<double>(numel(g.tensor(t).shape));
    if (std::string why = over_memory_limit(need, opt.max_bytes); !why.empty())
      throw MemoryLimitExceeded(fmt::format("evaluating {} {}", g.name, why));
  }
  return with_threads(opt.threads, [&] {
    if (opt.precision == Precision::F32)
      return run(interp::F32Domain{}, g, inputs, plan, opt.operand_rounding, opt.deadline);
    if (!opt.out_of_f32_range) return run(interp::F64Domain{}, g, inputs, plan, {}, opt.deadline);
    std::atomic<bool> out{false};
    F64RangeDomain d;
    d.out = &out;
    auto r = run(d, g, inputs, plan, {}, opt.deadline);
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

double estimate_bytes(const KernelGraph& g, int value_bytes) {
  const size_t nt = g.tensors.size();
  std::vector<int> last_use(nt, -1);
  std::vector<uint8_t> keep(nt, 0);
  for (int t : g.outputs) keep[t] = 1;
  for (size_t i = 0; i < g.ops.size(); ++i)
    for (int t : g.ops[i].inputs) last_use[t] = static_cast<int>(i);
  auto bytes = [&](int t) { return static_cast<double>(numel(g.tensor(t).shape)) * value_bytes; };
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

std::vector<HostTensor> evaluate(const KernelGraph& g, const std::vector<HostTensor>& inputs,
                                 const EvalOptions& opt) {
  check_inputs(g, inputs);
  return run_precision(g, inputs, opt, nullptr);
}

std::vector<HostTensor> evaluate_rows(const KernelGraph& g, const std::vector<HostTensor>& inputs,
                                      const std::vector<std::vector<int64_t>>& rows,
                                      const EvalOptions& opt) {
  check_inputs(g, inputs);
  EvalPlan plan = interp::plan_rows(g, rows);
  std::vector<HostTensor> full = run_precision(g, inputs, opt, &plan);
  std::vector<HostTensor> res;
  for (size_t i = 0; i < full.size(); ++i) res.push_back(select_rows(full[i], rows[i]));
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
