// verify(): scaling, the degree bound, finite-field trials and the verdict.
#include "kiln/verifier/verify.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include <fmt/ranges.h>
#include <tbb/task_arena.h>

#include "kiln/interp/eval_core.h"
#include "kiln/interp/interp.h"
#include "kiln/ir/diag.h"
#include "kiln/verifier/degree.h"
#include "kiln/verifier/field.h"
#include "kiln/verifier/scale.h"

namespace kiln::verifier {

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::Equivalent:
      return "equivalent";
    case Outcome::Different:
      return "not equivalent";
    case Outcome::Inconclusive:
      return "inconclusive";
  }
  return "?";
}

uint64_t trial_seed(uint64_t s, int i) {
  return mix64(mix64(s) ^ (0x747269616cull + static_cast<uint64_t>(i)));
}

namespace {

std::string index_str(const std::vector<int64_t>& idx) {
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

std::string log2_str(double x) {
  if (x <= 0) return "0";
  return fmt::format("2^{:.1f}", std::log2(x));
}

uint64_t name_key(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then mixed
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return mix64(h);
}

std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}

double min_q() {
  uint64_t q = UINT64_MAX;
  for (const PrimePair& pp : prime_pairs()) q = std::min(q, pp.q);
  return static_cast<double>(q);
}

// Rows of each output to compare in one trial (empty plan: everything).
struct Sampling {
  bool active = false;
  std::vector<std::vector<int64_t>> rows;
  interp::EvalPlan plan_a, plan_b;
};

// Rows of each output to evaluate when a graph is too big: candidates from sample_rows (first and
// last row, then the others in a seeded order); each output keeps its first candidate, and more are
// added, up to `want` per output, while the planned work of both graphs stays within
// max(budget, 1.5 x the work of the first rows). Rows that share their tiles with chosen ones come
// almost free.
std::vector<std::vector<int64_t>> choose_rows(const KernelGraph& a, const KernelGraph& b,
                                              int64_t want, double budget, uint64_t seed) {
  const size_t n = a.outputs.size();
  std::vector<std::vector<int64_t>> cand(n), sel(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<int64_t> rows =
        sample_rows(a.tensor(a.outputs[i]).shape, std::max<int64_t>(4 * want, 2), seed + i);
    // First and last, then the rest in a seeded order.
    cand[i] = {rows.front()};
    if (rows.size() > 1) cand[i].push_back(rows.back());
    std::vector<int64_t> mid(rows.begin() + std::min<size_t>(1, rows.size()),
                             rows.end() - std::min<size_t>(1, rows.size() - 1));
    for (size_t k = mid.size(); k > 1; --k) std::swap(mid[k - 1], mid[mix64(seed ^ k) % k]);
    cand[i].insert(cand[i].end(), mid.begin(), mid.end());
    sel[i] = {cand[i][0]};
  }
  auto cost = [&](const std::vector<std::vector<int64_t>>& rows) {
    return estimate_work(a, interp::plan_rows(a, rows)) +
           estimate_work(b, interp::plan_rows(b, rows));
  };
  const double limit = std::max(budget, 1.5 * cost(sel));
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 1; k < cand[i].size() && static_cast<int64_t>(sel[i].size()) < want; ++k) {
      auto next = sel;
      next[i].push_back(cand[i][k]);
      if (cost(next) <= limit) sel = std::move(next);
    }
  for (auto& r : sel) std::sort(r.begin(), r.end());
  return sel;
}

Sampling make_sampling(const KernelGraph& a, const KernelGraph& b, double work, double budget,
                       uint64_t seed) {
  Sampling s;
  if (work <= budget) return s;
  s.active = true;
  s.rows = choose_rows(a, b, 16, budget, seed);
  s.plan_a = interp::plan_rows(a, s.rows);
  s.plan_b = interp::plan_rows(b, s.rows);
  return s;
}

// Calls f(flat element index) for every element of output i that the sampling computes.
template <class F>
void for_compared(const Sampling& s, size_t i, const Shape& shape, F&& f) {
  int64_t cols = interp::num_cols(shape);
  if (!s.active) {
    for (int64_t e = 0; e < interp::elements(shape); ++e) f(e);
    return;
  }
  for (int64_t r : s.rows[i])
    for (int64_t c = 0; c < cols; ++c) f(r * cols + c);
}

template <class D>
std::vector<interp::Tensor<typename D::V>> inputs_for(const KernelGraph& g, const D&,
                                                      const auto& make) {
  std::vector<interp::Tensor<typename D::V>> in;
  for (int t : g.inputs) in.push_back(make(g.tensor(t)));
  return in;
}

Verdict verify_impl(const KernelGraph& a, const KernelGraph& b, const VerifyOptions& opt) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Verdict v;
  v.seed = opt.seed;

  // 1. Shrink to a smaller instance of the same structure when the graphs are large.
  const KernelGraph *ga = &a, *gb = &b;
  ScaledPair sp;
  double work = std::max(estimate_work(a), estimate_work(b));
  if (opt.scale && work > opt.max_work) {
    // Units of 4 first; then fewer units (prefix cutting), then units of 2, while too big.
    for (ScaleOptions so : {ScaleOptions{4, false}, ScaleOptions{4, true}, ScaleOptions{2, true}}) {
      ScaledPair c;
      try {
        c = scale_pair(a, b, so);
      } catch (const UserError&) {
        continue;  // a builder refused the smaller instance: verify without it
      }
      if (!c.scaled) continue;
      double w = std::max(estimate_work(c.a), estimate_work(c.b));
      if (w >= work) continue;
      sp = std::move(c);
      work = w;
      if (work <= opt.sample_work) break;
    }
    if (sp.scaled) {
      ga = &sp.a, gb = &sp.b;
      v.scaled = true;
      v.scaling = sp.description;
    }
  }

  // 2. The degree bound, from the same traversal in the degree domain.
  Sampling s0 = make_sampling(*ga, *gb, work, opt.sample_work, trial_seed(opt.seed, -1));
  {
    DegreeDomain::Stats sa, sb;
    DegreeDomain da(&sa), db(&sb);
    auto make = [](const TensorDesc& t) {
      interp::Tensor<Degree> x(t.shape);
      std::fill(x.data.begin(), x.data.end(), Degree{1, 0});
      return x;
    };
    auto oa = interp::evaluate_graph(da, *ga, inputs_for(*ga, da, make),
                                     s0.active ? &s0.plan_a : nullptr);
    auto ob = interp::evaluate_graph(db, *gb, inputs_for(*gb, db, make),
                                     s0.active ? &s0.plan_b : nullptr);
    uint64_t dout = 1;
    for (size_t i = 0; i < oa.size(); ++i)
      for_compared(s0, i, oa[i].shape, [&](int64_t e) {
        const Degree x = oa[i].data[e], y = ob[i].data[e];
        dout = std::max<uint64_t>(dout, std::max(uint64_t(x.n) + y.m, uint64_t(y.n) + x.m));
      });
    v.degree = dout + sa.exp_arg + sb.exp_arg + sa.prf_arg + sb.prf_arg;
    v.selections = sa.selections + sb.selections;
  }
  v.per_trial_bound = std::min(1.0, static_cast<double>(v.degree) / min_q());
  int trials = opt.trials;
  if (trials <= 0) {
    double bits = -std::log2(v.per_trial_bound);
    trials = bits > 0 ? std::max(2, static_cast<int>(std::ceil(opt.target_bits / bits))) : 64;
    trials = std::min(trials, 64);
  }

  // 3. Trials.
  const int max_attempts = 2 * trials + 8;
  v.outcome = Outcome::Equivalent;
  for (int i = 0; v.trials < trials; ++i) {
    if (i >= max_attempts) {
      v.outcome = Outcome::Inconclusive;
      break;
    }
    const uint64_t seed = trial_seed(opt.seed, i);
    const size_t pair = static_cast<size_t>(i) % prime_pairs().size();
    std::atomic<uint64_t> zero_divs{0};
    FieldDomain d(field_context(pair), seed, &zero_divs);
    Sampling s = s0.active ? make_sampling(*ga, *gb, work, opt.sample_work, seed) : Sampling{};
    std::map<std::string, interp::Tensor<FieldValue>> by_name;
    auto make = [&](const TensorDesc& t) {
      auto it = by_name.find(t.name);
      if (it != by_name.end()) return it->second;
      interp::Tensor<FieldValue> x(t.shape);
      const uint64_t key = name_key(t.name);
      for (int64_t e = 0; e < x.size(); ++e) x.data[e] = d.random(key, e);
      return by_name.emplace(t.name, std::move(x)).first->second;
    };
    auto oa =
        interp::evaluate_graph(d, *ga, inputs_for(*ga, d, make), s.active ? &s.plan_a : nullptr);
    auto ob =
        interp::evaluate_graph(d, *gb, inputs_for(*gb, d, make), s.active ? &s.plan_b : nullptr);
    if (zero_divs.load() > 0) {
      ++v.inconclusive_trials;
      continue;
    }
    ++v.trials;
    for (size_t o = 0; o < oa.size() && v.outcome == Outcome::Equivalent; ++o) {
      const Shape& shape = oa[o].shape;
      int64_t bad = -1;
      for_compared(s, o, shape, [&](int64_t e) {
        if (bad < 0 && !same_value(oa[o].data[e], ob[o].data[e])) bad = e;
      });
      if (bad < 0) continue;
      v.outcome = Outcome::Different;
      v.output = static_cast<int>(o);
      v.output_name = a.tensor(a.outputs[o]).name;
      v.scaled_element = unravel(bad, shape);
      v.element =
          v.scaled ? sp.full_index(static_cast<int>(o), v.scaled_element) : v.scaled_element;
      v.failing_seed = seed;
      v.failing_pair = static_cast<int>(pair);
    }
    if (s.active) {
      v.sampled = true;
      v.rows_checked = v.rows_total = 0;
      for (size_t o = 0; o < s.rows.size(); ++o) {
        v.rows_checked += static_cast<int64_t>(s.rows[o].size());
        v.rows_total += interp::num_rows(ga->tensor(ga->outputs[o]).shape);
      }
    }
    if (v.outcome == Outcome::Different) break;
  }
  v.bound = v.outcome == Outcome::Equivalent ? std::pow(v.per_trial_bound, v.trials) : 1.0;
  v.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return v;
}

}  // namespace

void check_compatible(const KernelGraph& a, const KernelGraph& b) {
  auto is_input = [](const KernelGraph& g, int t) {
    return std::find(g.inputs.begin(), g.inputs.end(), t) != g.inputs.end();
  };
  for (int ta : a.inputs) {
    const TensorDesc& x = a.tensor(ta);
    int tb = b.find_tensor(x.name);
    if (tb < 0 || !is_input(b, tb))
      throw UserError(ErrorCode::Name,
                      fmt::format("input {} of {} is not an input of {}", x.name, a.name, b.name),
                      "the two graphs must take the same named inputs");
    const TensorDesc& y = b.tensor(tb);
    if (x.shape != y.shape || x.dtype != y.dtype)
      user_error(ErrorCode::Shape, "input {} is {} {} in {} but {} {} in {}", x.name,
                 shape_str(x.shape), dtype_name(x.dtype), a.name, shape_str(y.shape),
                 dtype_name(y.dtype), b.name);
  }
  for (int tb : b.inputs)
    if (a.find_tensor(b.tensor(tb).name) < 0 || !is_input(a, a.find_tensor(b.tensor(tb).name)))
      throw UserError(
          ErrorCode::Name,
          fmt::format("input {} of {} is not an input of {}", b.tensor(tb).name, b.name, a.name),
          "the two graphs must take the same named inputs");
  if (a.outputs.size() != b.outputs.size())
    user_error(ErrorCode::Shape, "{} has {} outputs but {} has {}", a.name, a.outputs.size(),
               b.name, b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const TensorDesc &x = a.tensor(a.outputs[i]), &y = b.tensor(b.outputs[i]);
    if (x.shape != y.shape)
      user_error(ErrorCode::Shape, "output {}: {} is {} in {} but {} is {} in {}", i, x.name,
                 shape_str(x.shape), a.name, y.name, shape_str(y.shape), b.name);
  }
}

Verdict verify(const KernelGraph& a, const KernelGraph& b, const VerifyOptions& opt) {
  check_compatible(a, b);
  if (opt.threads > 0) {
    tbb::task_arena arena(opt.threads);
    return arena.execute([&] { return verify_impl(a, b, opt); });
  }
  return verify_impl(a, b, opt);
}

std::string Verdict::summary() const {
  std::string s;
  if (outcome == Outcome::Different) {
    s += fmt::format("NOT equivalent: output {} ({}) differs at element {}", output, output_name,
                     index_str(element));
    if (scaled) s += fmt::format(" (scaled instance: {})", index_str(scaled_element));
    s += fmt::format("\n  seed {} (trial seed {:#018x}, prime pair {}), after {} trial(s)\n", seed,
                     failing_seed, failing_pair, trials);
  } else if (outcome == Outcome::Inconclusive) {
    s += fmt::format(
        "inconclusive: {} of {} trials hit a zero divisor in the field (a division by something "
        "that is identically zero?)\n",
        inconclusive_trials, inconclusive_trials + trials);
  } else {
    s += fmt::format(
        "equivalent: {} trials, false-positive bound {} (per trial {} = degree {} / q)\n", trials,
        log2_str(bound), log2_str(per_trial_bound), degree);
    if (inconclusive_trials)
      s += fmt::format("  {} trial(s) retried after a zero divisor\n", inconclusive_trials);
  }
  if (scaled) s += fmt::format("  scaled instance: {}\n", scaling);
  if (sampled)
    s += fmt::format("  sampled {} of {} output rows per trial (drawn afresh each trial)\n",
                     rows_checked, rows_total);
  if (selections && outcome == Outcome::Equivalent)
    s += "  note: the graphs select (max/relu/clamp); a difference visible only through a "
         "selection is caught with lower probability (docs/verifier.md)\n";
  s += fmt::format("  {:.3f} s", seconds);
  return s;
}

// ---- Float check --------------------------------------------------------------------------

FloatCheck float_check(const KernelGraph& spec, const KernelGraph& cand, uint64_t seed,
                       const FloatCheckOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  check_compatible(spec, cand);
  FloatCheck fc;
  fc.seed = seed;
  std::vector<HostTensor> in_spec = random_inputs(spec, seed), in_cand;
  for (int t : cand.inputs) {
    const std::string& name = cand.tensor(t).name;
    for (size_t i = 0; i < spec.inputs.size(); ++i)
      if (spec.tensor(spec.inputs[i]).name == name) in_cand.push_back(in_spec[i]);
  }
  EvalOptions es, ec;
  es.threads = ec.threads = opt.threads;
  es.precision = Precision::F64;
  ec.precision = opt.candidate_f32 ? Precision::F32 : Precision::F64;
  const double work = std::max(estimate_work(spec), estimate_work(cand));
  std::vector<HostTensor> os, oc;
  std::vector<std::vector<int64_t>> rows;
  if (work <= opt.max_work) {
    os = evaluate(spec, in_spec, es);
    oc = evaluate(cand, in_cand, ec);
  } else {
    fc.sampled = true;
    rows = choose_rows(spec, cand, opt.rows, opt.max_work, seed);
    fc.work = estimate_work(spec, interp::plan_rows(spec, rows)) +
              estimate_work(cand, interp::plan_rows(cand, rows));
    if (fc.work > opt.max_sampled_work) {
      fc.skipped = true;
      fc.ok = true;
      fc.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return fc;
    }
    os = evaluate_rows(spec, in_spec, rows, es);
    oc = evaluate_rows(cand, in_cand, rows, ec);
  }
  fc.ok = true;
  for (size_t i = 0; i < os.size(); ++i) {
    FloatCheck::Output o;
    const TensorDesc& t = spec.tensor(spec.outputs[i]);
    o.name = t.name;
    o.error = relative_l2_error(oc[i], os[i]);
    o.tolerance = opt.tolerance > 0 ? opt.tolerance : spec_tolerance(t.dtype);
    o.rows_total = interp::num_rows(t.shape);
    o.rows_checked = fc.sampled ? static_cast<int64_t>(rows[i].size()) : o.rows_total;
    o.ok = o.error <= o.tolerance;
    fc.ok &= o.ok;
    fc.outputs.push_back(o);
  }
  fc.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return fc;
}

std::string FloatCheck::summary() const {
  if (skipped)
    return fmt::format("float check skipped: ~{:.2g} element operations even on sampled rows",
                       work);
  std::string s = fmt::format("float check (f64, seed {}): {}\n", seed, ok ? "ok" : "FAILED");
  for (const Output& o : outputs)
    s += fmt::format("  {:<12} rel. L2 error {:.3e} (tolerance {:.0e}){} {}\n", o.name, o.error,
                     o.tolerance,
                     o.rows_checked < o.rows_total
                         ? fmt::format(" on {} of {} rows", o.rows_checked, o.rows_total)
                         : std::string(),
                     o.ok ? "ok" : "FAIL");
  s += fmt::format("  {:.3f} s", seconds);
  return s;
}

}  // namespace kiln::verifier
