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
#include "kiln/ir/hash.h"
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
  return mix64(hash64(s));
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
// last row, then the others in a seeded order); each output keeps its first `mandatory`
// candidates (the first row; the last; a random one), and more are added, up to `want` per
// output, while the planned work of both graphs stays within max(budget, 1.5 x the work of the
// mandatory rows). Rows that share their tiles with chosen ones come almost free.
std::vector<std::vector<int64_t>> choose_rows(const KernelGraph& a, const KernelGraph& b,
                                              int64_t want, double budget, uint64_t seed,
                                              size_t mandatory = 1, const Deadline& deadline = {}) {
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
    sel[i].assign(cand[i].begin(), cand[i].begin() + std::min(mandatory, cand[i].size()));
  }
  auto cost = [&](const std::vector<std::vector<int64_t>>& rows) {
    deadline.check();  // each plan is linear in the graphs: large graphs take milliseconds
    return estimate_work(a, interp::plan_rows(a, rows)) +
           estimate_work(b, interp::plan_rows(b, rows));
  };
  const double limit = std::max(budget, 1.5 * cost(sel));
  for (size_t i = 0; i < n; ++i)
    for (size_t k = sel[i].size(); k < cand[i].size() && static_cast<int64_t>(sel[i].size()) < want;
         ++k) {
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

  // Memory: each trial holds both graphs' field values (inputs shared by name), one evaluation
  // at a time, and the free-selection re-evaluation's.
  if (opt.max_bytes > 0) {
    const int vb = static_cast<int>(sizeof(FieldValue));
    v.memory = over_memory_limit(3 * std::max(estimate_bytes(*ga, vb), estimate_bytes(*gb, vb)),
                                 opt.max_bytes);
    if (!v.memory.empty()) {
      v.outcome = Outcome::Inconclusive;
      return v;
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
    uint64_t dout = 1, dself = 1;
    for (size_t i = 0; i < oa.size(); ++i)
      for_compared(s0, i, oa[i].shape, [&](int64_t e) {
        const Degree x = oa[i].data[e], y = ob[i].data[e];
        dout = std::max<uint64_t>(dout, std::max(uint64_t(x.n) + y.m, uint64_t(y.n) + x.m));
        dself = std::max<uint64_t>(dself, 2 * std::max(uint64_t(x.n) + x.m, uint64_t(y.n) + y.m));
      });
    v.selections = sa.selections + sb.selections;
    // With selections, each trial also tests each graph for dependence on them (the same
    // outputs with every selection replaced by a fresh variable): a difference of degree at most
    // 2 (n + m) that is missed with probability at most that over q.
    v.degree =
        dout + sa.exp_arg + sb.exp_arg + sa.prf_arg + sb.prf_arg + (v.selections ? dself : 0);
  }
  v.per_trial_bound = std::min(1.0, static_cast<double>(v.degree) / min_q());
  int trials = opt.trials;
  if (trials <= 0) {
    double bits = -std::log2(v.per_trial_bound);
    trials = bits > 0 ? std::max(2, static_cast<int>(std::ceil(opt.target_bits / bits))) : 64;
    trials = std::min(trials, 64);
  }

  // 3. Trials. Trials cycle through the selection orders (random; constants above the rest;
  // below), so a selection against a constant is decided both ways. An order under which the
  // first two attempts both hit a zero divisor, while another order has run trials, leaves the
  // cycle: there the zero comes from the order, not from the graphs (with every constant above
  // the rest, each relu(c) + relu(-c) is 0, and a divisor that is their mean is 0 in every
  // trial; the real order makes it |c|). The trials it would have run go to the other orders. A
  // divisor that is identically zero is zero under every order and stays inconclusive.
  const SelectionOrder orders[3] = {SelectionOrder::Random, SelectionOrder::ConstantsHigh,
                                    SelectionOrder::ConstantsLow};
  std::vector<int> live = {0, 1, 2};  // orders still in the cycle
  int zero_by_order[3] = {0, 0, 0}, ok_by_order[3] = {0, 0, 0};
  size_t next_order = 0;
  v.outcome = Outcome::Equivalent;
  for (int i = 0; v.trials < trials; ++i) {
    if (i >= 2 * trials + 8 + 2 * v.dropped_orders) {
      v.outcome = Outcome::Inconclusive;
      break;
    }
    if (opt.deadline.passed()) {
      v.outcome = Outcome::Inconclusive;
      v.cut = true;
      break;
    }
    const uint64_t seed = trial_seed(opt.seed, i);
    const size_t pair = static_cast<size_t>(i) % prime_pairs().size();
    std::atomic<uint64_t> zero_divs{0};
    const int oi = live[next_order++ % live.size()];
    FieldDomain d(field_context(pair), seed, &zero_divs, orders[oi]);
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
    auto run = [&](const FieldDomain& dom, const KernelGraph& g, const Sampling& smp, bool first) {
      return interp::evaluate_graph(dom, g, inputs_for(g, dom, make),
                                    smp.active ? (first ? &smp.plan_a : &smp.plan_b) : nullptr, {},
                                    opt.deadline);
    };
    auto oa = run(d, *ga, s, true);
    auto ob = run(d, *gb, s, false);
    // Does either graph depend on what its selections select? Same inputs, same trial, every
    // selection result replaced by a fresh value (FieldDomain's free_selections).
    if (v.selections && !v.selection_dependent && zero_divs.load() == 0) {
      FieldDomain df(field_context(pair), seed, &zero_divs, orders[oi], true);
      auto changed = [&](const KernelGraph& g, bool first,
                         const std::vector<interp::Tensor<FieldValue>>& normal) {
        auto o = run(df, g, s, first);
        for (size_t k = 0; k < o.size(); ++k) {
          bool diff = false;
          for_compared(s, k, o[k].shape, [&](int64_t e) {
            diff = diff || !same_value(o[k].data[e], normal[k].data[e]);
          });
          if (diff) return true;
        }
        return false;
      };
      if (changed(*ga, true, oa))
        v.selection_dependent = true, v.dependent_graph = a.name;
      else if (changed(*gb, false, ob))
        v.selection_dependent = true, v.dependent_graph = b.name;
      // Unbounded verdicts rest on the orders alone: run every order at least twice.
      if (v.selection_dependent) trials = std::max(trials, 6);
    }
    if (zero_divs.load() > 0) {
      ++v.inconclusive_trials;
      const bool others_ran = ok_by_order[0] + ok_by_order[1] + ok_by_order[2] > 0;
      if (++zero_by_order[oi] >= 2 && ok_by_order[oi] == 0 && others_ran && live.size() > 1) {
        live.erase(std::find(live.begin(), live.end(), oi));
        next_order = 0;
        ++v.dropped_orders;
      }
      continue;
    }
    ++ok_by_order[oi];
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
  v.bound = v.bounded() ? std::pow(v.per_trial_bound, v.trials) : 1.0;
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
  // The outputs are the ABI of the emitted kernel (pointer order, names in the header, element
  // types): all of it must agree, not only the values.
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const TensorDesc &x = a.tensor(a.outputs[i]), &y = b.tensor(b.outputs[i]);
    if (x.name != y.name)
      throw UserError(
          ErrorCode::Name,
          fmt::format("output {} is {} in {} but {} in {}", i, x.name, a.name, y.name, b.name),
          "the two graphs must have the same outputs in the same order");
    if (x.shape != y.shape || x.dtype != y.dtype)
      user_error(ErrorCode::Shape, "output {} ({}) is {} {} in {} but {} {} in {}", i, x.name,
                 shape_str(x.shape), dtype_name(x.dtype), a.name, shape_str(y.shape),
                 dtype_name(y.dtype), b.name);
  }
}

Verdict verify(const KernelGraph& a, const KernelGraph& b, const VerifyOptions& opt) {
  check_compatible(a, b);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    if (opt.threads > 0) {
      tbb::task_arena arena(opt.threads);
      return arena.execute([&] { return verify_impl(a, b, opt); });
    }
    return verify_impl(a, b, opt);
  } catch (const DeadlinePassed&) {  // inside a trial: no verdict
    Verdict v;
    v.seed = opt.seed;
    v.cut = true;
    v.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return v;
  }
}

std::string Verdict::summary() const {
  std::string s;
  if (outcome == Outcome::Different) {
    s += fmt::format("NOT equivalent: output {} ({}) differs at element {}", output, output_name,
                     index_str(element));
    if (scaled) s += fmt::format(" (scaled instance: {})", index_str(scaled_element));
    s += fmt::format("\n  seed {} (trial seed {:#018x}, prime pair {}), after {} trial(s)\n", seed,
                     failing_seed, failing_pair, trials);
  } else if (outcome == Outcome::Inconclusive && !memory.empty()) {
    s += "inconclusive: the verification " + memory + "\n";
  } else if (outcome == Outcome::Inconclusive && cut) {
    s += fmt::format("inconclusive: the time limit passed after {} trial(s)\n", trials);
  } else if (outcome == Outcome::Inconclusive) {
    s += fmt::format(
        "inconclusive: {} of {} trials hit a zero divisor in the field (a division by something "
        "that is identically zero?)\n",
        inconclusive_trials, inconclusive_trials + trials);
  } else if (selection_dependent) {
    s += fmt::format(
        "equivalent on {} trials, but UNBOUNDED: the outputs of {} depend on what its selections "
        "(max/relu/clamp/maximum/minimum) select, which the field model cannot bound; a float "
        "check on inputs of both signs must back this verdict\n",
        trials, dependent_graph);
  } else {
    s += fmt::format(
        "equivalent: {} trials, false-positive bound {} (per trial {} = degree {} / q)\n", trials,
        log2_str(bound), log2_str(per_trial_bound), degree);
    if (inconclusive_trials)
      s += fmt::format("  {} trial(s) retried after a zero divisor\n", inconclusive_trials);
  }
  if (dropped_orders && outcome != Outcome::Different)
    s += fmt::format(
        "  {} selection order(s) with constants above or below the rest dropped: they made a "
        "divisor zero on every trial\n",
        dropped_orders);
  if (scaled) s += fmt::format("  scaled instance: {}\n", scaling);
  if (sampled)
    s += fmt::format("  sampled {} of {} output rows per trial (drawn afresh each trial)\n",
                     rows_checked, rows_total);
  if (selections && bounded())
    s += "  the graphs select (max), but no output depends on what is selected (a max that "
         "cancels): the bound holds\n";
  s += fmt::format("  {:.3f} s", seconds);
  return s;
}

// ---- Float check --------------------------------------------------------------------------

namespace {

struct InputSet {
  std::string name;
  double std = 0;  // 0: the uniform generator
  // 0: as drawn; -1 / +1: |normal| with that sign; 2: input i gets sign (-1)^(i+1) (negative,
  // positive, negative, ...), so that products of two inputs are negative too.
  int sign = 0;
};

// The inputs of one set; `rows` (one row set per input of g, or null: every row) restricts them
// to what a sampled check reads.
std::vector<HostTensor> make_inputs(const KernelGraph& g, uint64_t seed, const InputSet& set,
                                    const std::vector<std::vector<uint8_t>>* rows) {
  std::vector<HostTensor> in = random_inputs(g, seed, set.sign ? 1.0 : set.std, rows);
  if (set.sign)
    for (size_t i = 0; i < in.size(); ++i) {
      const double sg = set.sign == 2 ? (i % 2 ? 1.0 : -1.0) : set.sign;
      const int64_t cols = interp::num_cols(in[i].shape);
      for (size_t r = 0; r < static_cast<size_t>(interp::num_rows(in[i].shape)); ++r)
        if (!rows || (*rows)[i].empty() || (*rows)[i][r])  // the others stay zero, uncommitted
          for (int64_t e = static_cast<int64_t>(r) * cols; e < static_cast<int64_t>(r + 1) * cols;
               ++e)
            in[i].data[e] = sg * std::fabs(in[i].data[e]);  // exact: a sign flip
    }
  return in;
}

// For each input of the candidate, the position of the same-named input of the spec
// (check_compatible has made sure there is one).
std::vector<size_t> spec_input_positions(const KernelGraph& spec, const KernelGraph& cand) {
  std::vector<size_t> pos;
  for (int t : cand.inputs) {
    const int i = spec.find_tensor(cand.tensor(t).name);
    pos.push_back(static_cast<size_t>(std::find(spec.inputs.begin(), spec.inputs.end(), i) -
                                      spec.inputs.begin()));
    KILN_ASSERT(pos.back() < spec.inputs.size(), "candidate input {} is not the spec's",
                cand.tensor(t).name);
  }
  return pos;
}

// The rows of the spec's inputs that the sampled evaluations of spec and candidate read (both
// are given the same input tensors), or empty when the check is not sampled.
std::vector<std::vector<uint8_t>> sampled_input_rows(
    const KernelGraph& spec, const KernelGraph& cand,
    const std::vector<std::vector<int64_t>>& rows) {
  std::vector<std::vector<uint8_t>> need = input_rows(spec, rows);
  const std::vector<std::vector<uint8_t>> nc = input_rows(cand, rows);
  const std::vector<size_t> pos = spec_input_positions(spec, cand);
  for (size_t k = 0; k < cand.inputs.size(); ++k) {
    std::vector<uint8_t>& m = need[pos[k]];
    if (m.empty()) continue;  // every row already
    if (nc[k].empty()) {
      m.clear();
      continue;
    }
    for (size_t r = 0; r < m.size(); ++r) m[r] |= nc[k][r];
  }
  return need;
}

void check_sets(const KernelGraph& spec, const KernelGraph& cand, uint64_t seed,
                const std::vector<InputSet>& sets, const std::vector<std::vector<int64_t>>& rows,
                EvalOptions& es, EvalOptions& ec, const FloatCheckOptions& opt, FloatCheck& fc) {
  const std::vector<std::vector<uint8_t>> in_rows =
      fc.sampled ? sampled_input_rows(spec, cand, rows) : std::vector<std::vector<uint8_t>>();
  // The candidate's inputs: the spec's tensors, moved into its order after the spec's evaluation
  // (a copy would commit every page of a sampled tensor).
  const std::vector<size_t> order = spec_input_positions(spec, cand);
  for (const InputSet& set : sets) {
    std::vector<HostTensor> in_spec = make_inputs(spec, seed, set, fc.sampled ? &in_rows : nullptr);
    bool out_of_range = false;
    es.out_of_f32_range = &out_of_range;
    std::vector<HostTensor> os =
        fc.sampled ? evaluate_rows(spec, in_spec, rows, es) : evaluate(spec, in_spec, es);
    if (out_of_range) {
      fc.exempt.push_back(set.name);
      continue;
    }
    std::vector<HostTensor> in_cand;
    for (size_t k : order) in_cand.push_back(std::move(in_spec[k]));
    std::vector<HostTensor> oc =
        fc.sampled ? evaluate_rows(cand, in_cand, rows, ec) : evaluate(cand, in_cand, ec);
    for (size_t i = 0; i < os.size(); ++i) {
      FloatCheck::Output o;
      const TensorDesc& t = spec.tensor(spec.outputs[i]);
      o.name = t.name;
      o.inputs = set.name;
      o.error = relative_l2_error(oc[i], os[i]);
      o.tolerance = opt.tolerance > 0 ? opt.tolerance : spec_tolerance(t.dtype);
      o.rows_total = interp::num_rows(t.shape);
      o.rows_checked = fc.sampled ? static_cast<int64_t>(rows[i].size()) : o.rows_total;
      if (fc.sampled) o.rows = rows[i];
      o.ok = o.error <= o.tolerance;
      fc.ok &= o.ok;
      fc.outputs.push_back(o);
    }
  }
}

}  // namespace

FloatCheck float_check(const KernelGraph& spec, const KernelGraph& cand, uint64_t seed,
                       const FloatCheckOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  check_compatible(spec, cand);
  FloatCheck fc;
  fc.seed = seed;
  auto done = [&] {
    fc.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return fc;
  };
  std::vector<InputSet> sets;
  for (double sd : opt.input_stds)
    sets.push_back({sd > 0 ? fmt::format("normal {:g}", sd) : "uniform", sd, 0});
  if (opt.signed_inputs) {
    sets.push_back({"negative", 1, -1});
    sets.push_back({"positive", 1, 1});
    sets.push_back({"mixed signs", 1, 2});
  }
  // The time left buys about so much work at an assumed rate (element operations per second and
  // thread; measured on 2 cores: ~8e7 on elementwise chains, ~4e8 on GEMMs). Each input set
  // evaluates both graphs once. The estimate narrows the rows, and skips only a check far beyond
  // it; the deadline decides the rest while the check runs (skipping at the estimate left a
  // 16x2048x3072 bf16 linear with nothing checked under a 4 s limit, though its check takes
  // 0.5 s).
  constexpr double kRatePerThread = 1e8, kSlack = 4;
  const int threads = opt.threads > 0 ? opt.threads : tbb::this_task_arena::max_concurrency();
  const double affordable =
      opt.deadline.remaining_s() * kRatePerThread * threads / static_cast<double>(sets.size());
  const double max_work = std::min(opt.max_work, affordable);
  const double max_sampled_work = std::min(opt.max_sampled_work, affordable);
  auto skip = [&](bool cut) {
    fc.skipped = true;
    fc.cut = cut;
    fc.ok = true;
    return done();
  };
  // Rows: every row when cheap; else the first, the last and a random row of every output (fewer
  // only if those alone are too costly), then more while cheap.
  const double work_spec = estimate_work(spec), work_cand = estimate_work(cand);
  const double work = work_spec + work_cand;
  std::vector<std::vector<int64_t>> rows;
  if (std::max(work_spec, work_cand) > opt.max_work || work > affordable) {
    fc.sampled = true;
    try {
      for (size_t mandatory : {3, 2, 1}) {
        rows = choose_rows(spec, cand, std::max<int64_t>(opt.rows, 3), max_work, seed, mandatory,
                           opt.deadline);
        fc.work = estimate_work(spec, interp::plan_rows(spec, rows)) +
                  estimate_work(cand, interp::plan_rows(cand, rows));
        if (fc.work <= max_sampled_work) break;
      }
    } catch (const DeadlinePassed&) {
      return skip(true);
    }
    if (fc.work > opt.max_sampled_work) return skip(false);
  } else {
    fc.work = work;
  }
  // What the check generates and holds: whole inputs and outputs, or the rows a sampled check
  // reads and compares (its tensors are committed only there; HostData).
  double in_elems = 0, out_elems = 0;
  if (fc.sampled) {
    const std::vector<std::vector<uint8_t>> in_rows = sampled_input_rows(spec, cand, rows);
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      const Shape& sh = spec.tensor(spec.inputs[i]).shape;
      const double nr = in_rows[i].empty()
                            ? double(interp::num_rows(sh))
                            : double(std::count(in_rows[i].begin(), in_rows[i].end(), 1));
      in_elems += nr * double(interp::num_cols(sh));
    }
    for (size_t i = 0; i < spec.outputs.size(); ++i)
      out_elems +=
          double(rows[i].size()) * double(interp::num_cols(spec.tensor(spec.outputs[i]).shape));
  } else {
    for (int t : spec.inputs) in_elems += double(interp::elements(spec.tensor(t).shape));
    for (int t : spec.outputs) out_elems += double(interp::elements(spec.tensor(t).shape));
  }
  // Memory: the inputs in float64, then one evaluation at a time, each with its outputs.
  if (opt.max_bytes > 0) {
    const int vc = opt.candidate_f32 ? 4 : 8;
    const double eval =
        fc.sampled ? std::max(estimate_bytes(spec, 8, rows), estimate_bytes(cand, vc, rows))
                   : std::max(estimate_bytes(spec, 8), estimate_bytes(cand, vc));
    fc.memory = over_memory_limit(8 * in_elems + 16 * out_elems + eval, opt.max_bytes);
    if (!fc.memory.empty()) return skip(false);
  }
  // Up to kSlack times the estimate may still fit (a GEMM runs ~4x the assumed rate); beyond,
  // one op alone could run far past the deadline, which is read between ops only. Generating an
  // input costs ~8 operations an element (a normal draw).
  if (fc.work + 8 * in_elems > kSlack * affordable) return skip(true);
  EvalOptions es, ec;
  es.threads = ec.threads = opt.threads;
  es.deadline = ec.deadline = opt.deadline;
  es.precision = Precision::F64;
  ec.precision = opt.candidate_f32 ? Precision::F32 : Precision::F64;
  if (opt.candidate_f32) ec.operand_rounding = opt.operand_rounding;
  fc.ok = true;
  try {
    check_sets(spec, cand, seed, sets, rows, es, ec, opt, fc);
  } catch (const DeadlinePassed&) {  // the rate was optimistic: what ran is not a check
    fc.outputs.clear();
    fc.exempt.clear();
    return skip(true);
  }
  return done();
}

std::string FloatCheck::failures() const {
  std::string s;
  for (const Output& o : outputs)
    if (!o.ok)
      s += fmt::format("{}{} ({}: rel. L2 error {:.3g} > {:.0e})", s.empty() ? "" : ", ", o.name,
                       o.inputs, o.error, o.tolerance);
  return s;
}

std::string FloatCheck::summary() const {
  if (skipped && !memory.empty()) return "float check skipped: " + memory;
  if (skipped && cut)
    return fmt::format(
        "float check skipped: the time limit left too little time for ~{:.2g} element operations",
        work);
  if (skipped)
    return fmt::format("float check skipped: ~{:.2g} element operations even on sampled rows",
                       work);
  std::string s = fmt::format("float check (seed {}): {}\n", seed, ok ? "ok" : "FAILED");
  for (const Output& o : outputs)
    s += fmt::format("  {:<12} {:<9} rel. L2 error {:.3e} (tolerance {:.0e}){} {}\n", o.name,
                     o.inputs, o.error, o.tolerance,
                     o.rows_checked < o.rows_total
                         ? fmt::format(" on {} of {} rows", o.rows_checked, o.rows_total)
                         : std::string(),
                     o.ok ? "ok" : "FAIL");
  for (const std::string& e : exempt)
    s += fmt::format("  {} inputs: exempt (the float64 reference leaves the float32 range)\n", e);
  s += fmt::format("  {:.3f} s", seconds);
  return s;
}

}  // namespace kiln::verifier
