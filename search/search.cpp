// The search driver: variants in parallel, partitions and schedules within each, pruning,
// costing, then verification in rank order (docs/search.md).
#include "kiln/search/search.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "kiln/algebra/algebra.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/ir/memory.h"
#include "kiln/search/absexpr.h"
#include "kiln/search/enumerate.h"
#include "kiln/search/float_model.h"
#include "kiln/search/prune.h"
#include "kiln/search/trace.h"
#include "kiln/verifier/verify.h"

namespace kiln::search {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Exhausted:
      return "exhausted";
    case StopReason::TimeLimit:
      return "time_limit";
    case StopReason::StateLimit:
      return "state_limit";
    case StopReason::MemoryLimit:
      return "memory_limit";
  }
  return "?";
}

nlohmann::json SearchConfig::to_json() const {
  return {{"arch", target_for(arch).name},
          {"time_limit_s", time_limit_s},
          {"check_share", check_share},
          {"max_states", max_states},
          {"max_memory_mb", max_memory_mb},
          {"seed", seed},
          {"top_k", top_k},
          {"max_kernels", max_kernels},
          {"max_block_ops", max_block_ops},
          {"beam", beam},
          {"algebra", variants.algebra},
          {"algebra_graphs", variants.algebra_graphs},
          {"algebra_iterations", variants.algebra_iterations},
          {"algebra_nodes", variants.algebra_nodes},
          {"hoist_scales", variants.hoist_scales},
          {"split", variants.split},
          {"max_split", variants.max_split},
          {"min_split_tile", variants.min_split_tile},
          {"max_grid_dims", schedules.max_grid_dims},
          {"max_blocks", schedules.max_blocks},
          {"max_schedules", schedules.max_schedules},
          {"block_threads", schedules.block_threads},
          {"enumerate", enumerate},
          {"enum_max_ops", enumerate_opts.max_ops},
          {"enum_max_states", enumerate_opts.max_states},
          {"enum_max_results", enumerate_opts.max_results},
          {"enum_classes", enum_classes},
          {"enum_z3_budget_ms", enum_z3_budget_ms},
          {"prune", prune},
          {"use_z3", use_z3},
          {"verify", verify},
          {"float_check", float_check}};
}

nlohmann::json SearchStats::to_json() const {
  return {{"states", states},
          {"variants", variants},
          {"partitions", partitions},
          {"groups", groups},
          {"schedules", schedules},
          {"lowered", lowered},
          {"complete", complete},
          {"enum_states", enum_states},
          {"enum_recipes", enum_recipes},
          {"enum_kernels", enum_kernels},
          {"enum_same", enum_same},
          {"verified", verified},
          {"rejected", rejected},
          {"pruned", pruned},
          {"time_first_valid_s", time_first_valid_s},
          {"time_best_s", time_best_s},
          {"algebra_s", algebra_s},
          {"algebra", algebra},
          {"algebra_graphs", algebra_graphs},
          {"generate_s", generate_s},
          {"verify_s", verify_s},
          {"elapsed_s", elapsed_s},
          {"pruner", pruner},
          {"enum_pruner", enum_pruner}};
}

namespace {

using Clock = std::chrono::steady_clock;

int64_t rss_mb() {
  return rss_bytes() >> 20;
}

// One kernel choice for a group, with its modeled cost.
// What the beam tells apart: a generic block kernel's (blocks, threads, iterations); a kernel
// the planner lowers to a runtime kernel by that kernel's own (CTAs, -2, chunks), since block
// graphs that differ only in what the lowering replaces run the same launch.
using KernelShape = std::tuple<int64_t, int, int64_t>;

struct Choice {
  KernelChoice kernel;
  double time = 0;
  KernelShape shape{-1, -1, -1};
  std::string detail;
  int sched = -1;           // index of its schedule in the group's list (-1: predefined)
  bool enumerated = false;  // built by the op-by-op enumerator
  int64_t state = -1;       // its schedule state (local trace id)
  std::string code;         // the schedule's decision code (trace.h), when tracing
};

struct GroupResult {
  std::vector<Choice> kept;  // cheapest first, at most beam
  int64_t state = -1;        // local trace id
};

// What one variant's task produces (its trace rows went to the TraceSink as it ran).
struct Branch {
  int64_t ids = 0;  // local trace ids used
  std::vector<Candidate> candidates;
  SearchStats stats;
  bool pruned = false;
};

// Shared between tasks: limits and progress.
struct Shared {
  Clock::time_point start, deadline;
  const SearchConfig* config;
  std::atomic<int64_t> states{0}, lowered{0};
  std::atomic<int> stop{-1};  // a StopReason once a limit is hit
  std::mutex progress_mu;
  const ProgressFn* progress = nullptr;
  Clock::time_point last_progress;
  std::atomic<double> best_us{0};
  // The spec as written (its primitive graph) has an exp that may overflow f32 at std 1
  // (overflowing_exp): variants are then not held to a rule the spec breaks itself.
  bool spec_exp_overflows = false;
  std::mutex pruned_mu;
  std::map<std::string, int64_t> pruned;

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start).count(); }
  bool stopped() const { return stop.load() >= 0; }
  void halt(StopReason r) {
    int expect = -1;
    stop.compare_exchange_strong(expect, static_cast<int>(r));
  }
  // Counts a state and checks the limits.
  void count_state() { add_states(1); }
  // Counts k states at once (the enumerator's, without a trace). The clock is read on every call
  // (tens of nanoseconds; one state of a large graph costs milliseconds, so a count-based check
  // let a 1,000-node chain run twice its limit); progress is offered when the count crosses a
  // multiple of 256 and memory read at 4096 (it reads /proc), as if counted one by one.
  void add_states(int64_t k) {
    int64_t n = states += k;
    if (n >= config->max_states) halt(StopReason::StateLimit);
    if (Clock::now() >= deadline) halt(StopReason::TimeLimit);
    if ((n >> 12) != ((n - k) >> 12) && rss_mb() > config->max_memory_mb)
      halt(StopReason::MemoryLimit);
    if ((n >> 8) != ((n - k) >> 8)) report("generate", 0);
  }
  void add_pruned(const std::string& why, int64_t n = 1) {
    std::lock_guard<std::mutex> l(pruned_mu);
    pruned[why] += n;
  }
  void report(const char* phase, int64_t verified, bool force = false) {
    if (!progress || !*progress) return;
    std::unique_lock<std::mutex> l(progress_mu, std::try_to_lock);
    if (!l.owns_lock()) return;
    auto now = Clock::now();
    if (!force && now - last_progress < std::chrono::milliseconds(100)) return;
    last_progress = now;
    Progress p;
    p.states = states.load();
    p.lowered = lowered.load();
    p.verified = verified;
    {
      std::lock_guard<std::mutex> l2(pruned_mu);
      p.pruned = pruned;
    }
    p.best_us = best_us.load();
    p.elapsed_s = elapsed();
    p.limit_s = config->time_limit_s;
    p.phase = phase;
    (*progress)(p);
  }
};

// Abstract expressions of a primitive graph's nodes (partials: the sum over one part).
std::vector<AbsExpr> node_exprs(const PGraph& g) {
  std::vector<AbsExpr> e(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const PNode& x = g.nodes[n];
    if (x.kind == OpKind::Input) {
      e[n] = AbsExpr::input(x.name);
      continue;
    }
    std::vector<AbsExpr> ops;
    std::vector<Shape> shapes;
    for (int i : x.inputs) {
      ops.push_back(e[i]);
      shapes.push_back(g.nodes[i].shape);
    }
    if (x.split > 0) {
      // The partial reduces one part of its label.
      if (x.kind == OpKind::MatMul) {
        shapes[0].back() /= x.split;
        shapes[1][shapes[1].size() - 2] /= x.split;
      } else {
        shapes[0][x.attrs.dim] /= x.split;
      }
    }
    e[n] = abstract_op(x.kind, x.attrs, ops, shapes);
  }
  return e;
}

// Hands the branches' trace rows to the writer in variant order, with their final ids: a
// branch's ids follow those of every branch before it, which are known only once that branch is
// done, so rows of a branch that runs ahead wait here. Branches hand rows over in batches as they
// run, so the writer works during the search and rows are not all held until its end.
class TraceSink {
 public:
  TraceSink(TraceWriter* w, std::vector<int64_t> variant_ids, int64_t first_id)
      : w_(w),
        variant_ids_(std::move(variant_ids)),
        base_(first_id),
        pending_(variant_ids_.size()) {}
  int64_t batch_rows() const { return w_->batch_rows(); }

  // Rows, enumerations and updates of branch b with local ids (a parent -1 is the variant, -2 the
  // root; an update of id -1 is of the variant). `ids`: the local ids the branch used, once it is
  // done.
  void put(size_t b, std::vector<TraceState> rows, std::vector<TraceEnumRun> runs,
           std::vector<TraceUpdate> updates, bool done, int64_t ids) {
    std::lock_guard<std::mutex> l(mu_);
    Pending& p = pending_[b];
    p.batches.push_back({std::move(rows), std::move(runs), std::move(updates)});
    if (done) {
      p.done = true;
      p.ids = ids;
    }
    while (next_ < pending_.size()) {
      Pending& q = pending_[next_];
      for (Batch& bt : q.batches) release(next_, bt);
      q.batches.clear();
      if (!q.done) break;
      base_ += q.ids;
      ++next_;
    }
  }

 private:
  struct Batch {
    std::vector<TraceState> rows;
    std::vector<TraceEnumRun> runs;
    std::vector<TraceUpdate> updates;
  };
  struct Pending {
    std::vector<Batch> batches;
    bool done = false;
    int64_t ids = 0;
  };
  int64_t global(size_t b, int64_t local) const {
    return local == -2 ? 0 : local == -1 ? variant_ids_[b] : base_ + local;
  }
  void release(size_t b, Batch& bt) {
    for (TraceState& r : bt.rows) {
      r.id = global(b, r.id);
      r.parent = global(b, r.parent);
      for (int64_t& k : r.kernels) k = base_ + k;
    }
    for (TraceUpdate& u : bt.updates) u.id = global(b, u.id);
    w_->write(std::move(bt.rows));
    for (TraceEnumRun& r : bt.runs) {
      r.first_id = global(b, r.first_id);
      r.group = global(b, r.group);
      w_->write_run(std::move(r));
    }
    for (TraceUpdate& u : bt.updates) w_->update(std::move(u));
  }

  TraceWriter* w_;
  std::vector<int64_t> variant_ids_;
  int64_t base_;
  std::mutex mu_;
  std::vector<Pending> pending_;
  size_t next_ = 0;
};

class BranchRunner {
 public:
  BranchRunner(const KernelGraph& spec, const PGraph& v, Shared& sh, Pruner* pruner,
               Pruner* enum_pruner, const Target& target, TraceSink* sink, size_t index)
      : spec_(spec),
        v_(v),
        sh_(sh),
        pruner_(pruner),
        enum_pruner_(enum_pruner),
        target_(target),
        cfg_(*sh.config),
        sink_(sink),
        index_(index) {
    for (const TensorDesc& t : spec.tensors) spec_dtypes_[t.name] = t.dtype;
    mags_ = node_magnitudes(v_);
  }

  // The branch in two parts, so that every variant's one-kernel form is costed before any
  // variant's many-kernel partitions (the variants' one-kernel partitions are few and fused
  // forms are what the search is for; a variant's partitions number up to thousands, and under a
  // time limit the first variants' took all of it). first(): the expression check and the
  // one-group partition (there is none for a split variant); rest(): the other partitions, fewest
  // groups first, and the branch's result.
  void first() {
    exprs_ = node_exprs(v_);
    if (pruner_) {
      for (size_t n = 0; n < v_.nodes.size(); ++n)
        if (v_.nodes[n].kind != OpKind::Input && !v_.is_const(static_cast<int>(n)) &&
            !pruner_->keep(exprs_[n])) {
          prune(-1, "expr", fmt::format("{} = {}", v_.nodes[n].name, exprs_[n].str()));
          out_.pruned = true;
          flush(true);
          return;
        }
    }
    // A variant may not overflow where the spec as written does not: the algebra's cancelled
    // softmax shift (exp(x - max x) / sum -> exp(x) / sum, docs/algebra.md) holds exp(x) in f32
    // only while x stays below ~88, and softmax(X W) at k 4096 reaches ~384 at std 1. Every such
    // kernel but the online attention (which puts the max back, and lowers the spec as written
    // too) failed the float check, after its schedules and checks had cost the search's time.
    if (const int e = overflowing_exp(v_, mags_); e >= 0 && !sh_.spec_exp_overflows) {
      prune(-1, "range",
            fmt::format("{}: exp of values up to about {:.3g} at std 1 overflows f32 (the spec "
                        "as written does not)",
                        v_.nodes[e].name, mags_[v_.nodes[e].inputs[0]].bound));
      out_.pruned = true;
      flush(true);
      return;
    }
    order_ = canonical_order(v_);
    cuts_ = enumerate_partition_cuts(v_, order_, cfg_.max_kernels);
    for (; next_cut_ < cuts_.size() && cuts_[next_cut_].empty() && !sh_.stopped(); ++next_cut_)
      run_partition(partition_at(order_, cuts_[next_cut_]));
    flush(false);
  }

  // Called once, after first(); a variant pruned there has no partitions left.
  Branch rest() {
    if (!out_.pruned) {
      for (; next_cut_ < cuts_.size() && !sh_.stopped(); ++next_cut_)
        run_partition(partition_at(order_, cuts_[next_cut_]));
      flush(true);
    }
    return std::move(out_);
  }

 private:
  // Trace rows: local ids count from 0; -1 is the variant itself, whose parent is the root
  // (marked -2); the TraceSink gives them their final ids.
  int64_t state(int64_t parent, TraceKind kind, std::string detail, std::string decision = {}) {
    if (tracing() && static_cast<int64_t>(rows_.size()) >= sink_->batch_rows()) flush(false);
    sh_.count_state();
    out_.stats.states++;
    int64_t id = out_.ids++;
    if (tracing()) {
      TraceState r;
      r.id = id;
      r.parent = parent;
      r.kind = kind;
      r.detail = std::move(detail);
      r.decision = std::move(decision);
      r.t = sh_.elapsed();
      rows_.push_back(std::move(r));
    }
    return id;
  }
  // How state `id` ended: its row while the branch still holds it, else an update.
  void settle(int64_t id, TraceStatus status, std::string reason, std::string note,
              double cost_us = -1) {
    if (!tracing()) return;  // a 100,000-node spec's events held ~1 GB of group names
    if (id >= flushed_) {
      // Rows are in id order (enumeration runs take ids without rows).
      auto it = std::lower_bound(rows_.begin(), rows_.end(), id,
                                 [](const TraceState& r, int64_t x) { return r.id < x; });
      KILN_ASSERT(it != rows_.end() && it->id == id, "a trace row for every state but block ops");
      TraceState& r = *it;
      r.status = status;
      r.reason = std::move(reason);
      if (!note.empty()) r.note = std::move(note);
      if (cost_us >= 0) r.cost_us = cost_us;
      return;
    }
    updates_.push_back({id, status, std::move(reason), std::move(note), cost_us});
  }
  void prune(int64_t id, const std::string& why, std::string note) {
    out_.stats.pruned[why]++;
    sh_.add_pruned(why);
    settle(id, TraceStatus::Pruned, why, std::move(note));
  }
  void flush(bool done) {
    if (!sink_) return;
    flushed_ = out_.ids;
    sink_->put(index_, std::move(rows_), std::move(runs_), std::move(updates_), done, out_.ids);
    rows_.clear();
    runs_.clear();
    updates_.clear();
  }

  std::vector<int> order_;
  std::vector<std::vector<size_t>> cuts_;
  size_t next_cut_ = 0;

  // Rows are kept for the trace only (the enumerator records its states for the same reason).
  bool tracing() const { return sink_ != nullptr; }

  std::string group_str(const std::vector<int>& grp) const {
    if (!tracing()) return {};
    std::vector<std::string> names;
    for (int x : grp) names.push_back(v_.nodes[x].name);
    return fmt::format("{{{}}}", fmt::join(names, ", "));
  }

  // The cost of one kernel alone (a graph of the group's inputs and that kernel), and its shape.
  double kernel_time(const KernelChoice& kc, KernelShape* shape = nullptr) {
    GraphCost gc = estimate_cost(kernel_graph(kc), target_);
    if (shape && kc.block) {
      *shape = {kc.block->num_blocks(), kc.block->block_threads, kc.block->num_iterations()};
      // The loop the kernel runs: the planner's re-tiled one (codegen/schedule.h), which the cost
      // counts. Loops of 2 to 256 steps that re-tile to the same 4 are one launch; as 8 shapes
      // they filled lora's beam with one kernel and kept out the 64-block one (3.9 us measured
      // against 4.5).
      for (const KernelCost& k : gc.kernels) {
        if (k.lowered)
          *shape = {k.blocks, -2, k.iterations};
        else if (k.graph_defined)
          std::get<2>(*shape) = k.iterations;
      }
    }
    return gc.time;
  }
  std::string kernel_fingerprint(const KernelChoice& kc) { return fingerprint(kernel_graph(kc)); }
  KernelGraph kernel_graph(const KernelChoice& kc) { return kernel_alone(v_, kc, cfg_.arch); }

  // Abstract-expression check of every tile of a lowered block graph.
  bool tiles_pass(const BlockGraph& bg, const GroupIO& io, std::string& why) {
    if (!pruner_) return true;
    std::vector<AbsExpr> in;
    for (int i : io.inputs) in.push_back(exprs_[i]);
    std::vector<AbsExpr> es = abstract_block(bg, in);
    for (size_t i = 0; i < es.size(); ++i) {
      if (checked_.count(es[i].id())) continue;
      if (!pruner_->keep(es[i])) {
        why = fmt::format("{} = {}", bg.ops[i].name, es[i].str());
        return false;
      }
      checked_.insert(es[i].id());
    }
    return true;
  }

  // The op-by-op enumerator on the group's best schedule classes; adds its kernels to `all`
  // (sorted cheapest first on return).
  void enumerate_group(const std::vector<int>& grp, const GroupIO& io,
                       const std::vector<Schedule>& scheds, int64_t gstate,
                       std::vector<Choice>& all) {
    if (scheds.empty() || sh_.stopped()) return;
    using Class = std::pair<std::vector<int>, int>;
    auto class_of = [](const Schedule& sc) {
      std::vector<int> ls;
      for (const GridDim& d : sc.grid) ls.push_back(d.label);
      return Class(ls, sc.loop_label);
    };
    // The classes to enumerate: those of the kept lowered schedules, else the first ones.
    std::vector<Class> classes;
    auto want = [&](const Class& c) {
      if (static_cast<int>(classes.size()) < cfg_.enum_classes &&
          std::find(classes.begin(), classes.end(), c) == classes.end())
        classes.push_back(c);
    };
    for (size_t i = 0; i < all.size() && static_cast<int>(i) < cfg_.beam; ++i)
      if (all[i].sched >= 0) want(class_of(scheds[all[i].sched]));
    if (classes.empty())
      for (const Schedule& sc : scheds) want(class_of(sc));
    std::vector<Choice> found;
    for (const Class& cl : classes) {
      size_t rep = 0;
      while (class_of(scheds[rep]) != cl) ++rep;
      if (group_op_count(v_, grp, cl.second >= 0) > cfg_.enumerate_opts.max_ops) continue;
      // Without a trace, enumeration states do not pass through count_state(): check the clock.
      auto stop = [this] {
        if (Clock::now() >= sh_.deadline) sh_.halt(StopReason::TimeLimit);
        return sh_.stopped();
      };
      EnumResult er = enumerate_block_graphs(v_, grp, scheds[rep], exprs_, enum_pruner_, target_,
                                             cfg_.enumerate_opts, stop);
      // Counted in bulk, traced or not, so that a trace never moves where a limit cuts.
      for (const auto& [why, n] : er.pruned) {
        out_.stats.pruned["enum_" + why] += n;
        sh_.add_pruned("enum_" + why, n);
      }
      out_.stats.enum_states += er.states;
      out_.stats.states += er.states;
      sh_.add_states(er.states);
      // Trace: every enumeration state, under the group, as one run of consecutive ids.
      if (tracing() && !er.states_log.empty()) {
        KILN_ASSERT(static_cast<int64_t>(er.states_log.size()) == er.states,
                    "the enumerator logs every state it counts");
        TraceEnumRun run;
        run.first_id = out_.ids;
        run.group = gstate;
        for (const VocabOp& vo : er.vocab) run.vocab.push_back(vo.str());
        run.states = std::move(er.states_log);
        run.t = sh_.elapsed();
        out_.ids += static_cast<int64_t>(run.states.size());
        run_states_ += static_cast<int64_t>(run.states.size());
        runs_.push_back(std::move(run));
        if (run_states_ >= 8 * sink_->batch_rows()) {
          flush(false);
          run_states_ = 0;
        }
      }
      out_.stats.enum_recipes += static_cast<int64_t>(er.recipes.size());
      const std::vector<VocabOp> vocab =
          tracing() ? block_vocabulary(v_, cl.second >= 0) : std::vector<VocabOp>{};
      for (const BlockRecipe& rc : er.recipes)
        for (size_t si = 0; si < scheds.size() && !sh_.stopped(); ++si) {
          if (class_of(scheds[si]) != cl) continue;
          Lowered lw = instantiate(v_, grp, scheds[si], rc, target_, cfg_.max_block_ops);
          if (!lw.block) continue;
          std::string why;
          if (!tiles_pass(*lw.block, io, why)) continue;
          KernelChoice kc{grp, lw.block};
          Lowered lowered = lower_group(v_, grp, scheds[si], target_, cfg_.max_block_ops);
          if (lowered.block && kernel_fingerprint({grp, lowered.block}) == kernel_fingerprint(kc)) {
            out_.stats.enum_same++;
            continue;
          }
          out_.stats.enum_kernels++;
          Choice c;
          c.kernel = kc;
          c.time = kernel_time(kc, &c.shape);
          c.detail = fmt::format("{} enumerated [{}]", scheds[si].str(v_), rc.str());
          c.sched = static_cast<int>(si);
          c.enumerated = true;
          if (tracing()) {
            std::string rcode = recipe_code(rc, vocab);
            if (!rcode.empty()) c.code = schedule_code(scheds[si]) + " e" + rcode;
          }
          found.push_back(std::move(c));
        }
    }
    if (found.empty()) return;
    // Keep the cheapest few enumerated kernels per group as trace states.
    std::stable_sort(found.begin(), found.end(),
                     [](const Choice& a, const Choice& b) { return a.time < b.time; });
    if (static_cast<int>(found.size()) > cfg_.beam) found.resize(cfg_.beam);
    for (Choice& c : found) {
      c.state = state(gstate, TraceKind::Schedule, c.detail, c.code);
      settle(c.state, TraceStatus::Costed, {}, {}, c.time * 1e6);
      all.push_back(std::move(c));
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const Choice& a, const Choice& b) { return a.time < b.time; });
  }

  const GroupResult& group(const std::vector<int>& grp, int64_t parent) {
    auto it = memo_.find(grp);
    if (it != memo_.end()) return it->second;
    GroupResult r;
    out_.stats.groups++;
    GroupIO io = group_io(v_, grp);
    r.state = state(
        parent, TraceKind::Group,
        tracing() ? fmt::format("{} fed {}", group_str(grp), group_str(io.inputs)) : std::string(),
        tracing() ? fmt::format("n{}", fmt::join(grp, ",")) : std::string());
    if (io.inputs.empty()) {
      // Constants alone (e.g. add(2, 0.25)): a kernel of its own would read no tensor, and the
      // one-kernel graph that costs it cannot exist (a graph needs an input). Such a node is
      // computed inside a consumer's kernel, where its constants fold in.
      prune(r.state, "no_input", {});
      return memo_.emplace(grp, std::move(r)).first->second;
    }
    // The range rule of the spec format: a tensor the spec stores wider than this graph would
    // (store_unbounded_intermediates: exp(Q K^T) in f32) may not cross kernels narrower. Every
    // such candidate failed the std-1 float check, after its schedules and its check had cost
    // time (a 4032-key attention spent all of it there).
    for (int o : io.outputs) {
      const PNode& n = v_.nodes[o];
      if (std::find(v_.outputs.begin(), v_.outputs.end(), o) != v_.outputs.end()) continue;
      auto sd = spec_dtypes_.find(n.name);
      if (sd != spec_dtypes_.end() && dtype_bytes(sd->second) > dtype_bytes(n.dtype)) {
        prune(r.state, "range",
              tracing() ? fmt::format("{} would cross kernels in {}; the spec stores it in {} "
                                      "(its range is unbounded at std 1)",
                                      n.name, dtype_name(n.dtype), dtype_name(sd->second))
                        : std::string());
        return memo_.emplace(grp, std::move(r)).first->second;
      }
      // The same rule for the variant's own nodes (a decomposed rms_norm's square(X W)): a value
      // whose magnitude at std 1 outgrows its 16-bit dtype may not cross kernels in it.
      if (magnitude_overflows(mags_[o], v_.device_dtype(o))) {
        prune(r.state, "range",
              tracing() ? fmt::format("{} would cross kernels in {}; it reaches about {:.3g} at "
                                      "std 1, past the dtype's range",
                                      n.name, dtype_name(v_.device_dtype(o)), mags_[o].bound)
                        : std::string());
        return memo_.emplace(grp, std::move(r)).first->second;
      }
    }
    std::vector<Choice> all;
    bool single = grp.size() == 1 && predefined_ok(v_, grp[0]);
    if (single) {
      Choice c;
      c.kernel = {grp, nullptr};
      c.time = kernel_time(c.kernel, &c.shape);
      c.detail = fmt::format("predefined {}", op_name(v_.nodes[grp[0]].kind));
      c.state = state(r.state, TraceKind::Schedule, c.detail, "p");
      settle(c.state, TraceStatus::Costed, {}, {}, c.time * 1e6);
      all.push_back(c);
    }
    std::vector<Schedule> scheds = enumerate_schedules(v_, grp, cfg_.schedules);
    for (size_t si = 0; si < scheds.size(); ++si) {
      const Schedule& sc = scheds[si];
      if (sh_.stopped()) break;
      out_.stats.schedules++;
      std::string d = tracing() ? sc.str(v_) : std::string();
      int64_t s =
          state(r.state, TraceKind::Schedule, d, tracing() ? schedule_code(sc) : std::string());
      Lowered lw = lower_group(v_, grp, sc, target_, cfg_.max_block_ops);
      if (!lw.block) {
        prune(s, lower_failure_name(lw.failure), lw.message);
        continue;
      }
      out_.stats.lowered++;
      sh_.lowered++;
      std::string why;
      if (!tiles_pass(*lw.block, io, why)) {
        prune(s, "expr", why);
        continue;
      }
      Choice c;
      c.kernel = {grp, lw.block};
      c.time = kernel_time(c.kernel, &c.shape);
      c.detail = d;
      c.sched = static_cast<int>(si);
      c.state = s;
      settle(s, TraceStatus::Costed, {}, {}, c.time * 1e6);
      all.push_back(std::move(c));
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const Choice& a, const Choice& b) { return a.time < b.time; });
    if (cfg_.enumerate) enumerate_group(grp, io, scheds, r.state, all);
    r.kept = keep_distinct(std::move(all));
    return memo_.emplace(grp, std::move(r)).first->second;
  }

  // The beam: the cheapest choice of each shape (blocks, threads, iterations; predefined kernels
  // are one shape), cheapest first, at most cfg_.beam. Choices of one shape differ in details
  // the model barely sees (which grid dim splits what, loop order); the profiler tells shapes
  // apart far better than the model, so the beam spends its slots on different shapes.
  std::vector<Choice> keep_distinct(std::vector<Choice> all) const {
    std::vector<Choice> kept;
    std::set<KernelShape> shapes;
    for (Choice& c : all) {
      if (static_cast<int>(kept.size()) >= cfg_.beam) break;
      if (shapes.insert(c.shape).second) kept.push_back(std::move(c));
    }
    return kept;
  }

  void run_partition(const Partition& p) {
    out_.stats.partitions++;
    std::vector<std::string> gs;
    for (const auto& g : p.groups) gs.push_back(group_str(g));
    int64_t ps = state(-1, TraceKind::Partition,
                       tracing() ? fmt::format("{}", fmt::join(gs, " | ")) : std::string());
    std::vector<const GroupResult*> rs;
    for (const auto& g : p.groups) {
      const GroupResult& r = group(g, -1);
      if (r.kept.empty()) {
        prune(ps, "no_kernel",
              tracing() ? fmt::format("no feasible kernel for {}", group_str(g)) : std::string());
        return;
      }
      rs.push_back(&r);
    }
    // The cheapest choice for every group, then each other kept choice of a group with the
    // others cheapest.
    std::vector<std::vector<int>> picks{std::vector<int>(rs.size(), 0)};
    for (size_t i = 0; i < rs.size(); ++i)
      for (size_t j = 1; j < rs[i]->kept.size(); ++j) {
        std::vector<int> alt(rs.size(), 0);
        alt[i] = static_cast<int>(j);
        picks.push_back(alt);
      }
    for (const auto& pick : picks) {
      std::vector<KernelChoice> ks;
      std::vector<std::string> ds;
      std::vector<int64_t> kstates;
      bool enumerated = false;
      for (size_t i = 0; i < rs.size(); ++i) {
        ks.push_back(rs[i]->kept[pick[i]].kernel);
        ds.push_back(rs[i]->kept[pick[i]].detail);
        kstates.push_back(rs[i]->kept[pick[i]].state);
        enumerated |= rs[i]->kept[pick[i]].enumerated;
      }
      Candidate c;
      try {
        c.graph = assemble(v_, ks, cfg_.arch);
      } catch (const UserError& e) {
        // Kernels are checked one by one; a mismatch between them is a generator bug, but it
        // costs this candidate only, not the search.
        prune(ps, "assemble", e.render());
        continue;
      }
      c.cost = estimate_cost(c.graph, target_);
      c.fingerprint = fingerprint(c.graph);
      c.rewrites = v_.rewrites;
      if (enumerated) c.rewrites.push_back("block graph enumerated op by op");
      out_.stats.complete++;
      // The trace names what runs no kernel of its own: a transpose read in place (K-major
      // operand) or an op fused into its consumer.
      c.state = state(
          ps, TraceKind::Candidate,
          tracing() ? fmt::format("{}{}{}", fmt::join(ds, " | "), c.cost.fused.empty() ? "" : "; ",
                                  fmt::join(c.cost.fused, "; "))
                    : std::string(),
          "f" + c.fingerprint);
      if (tracing()) {
        rows_.back().kernels = std::move(kstates);
        rows_.back().cost_us = c.cost.time * 1e6;
        rows_.back().status = TraceStatus::Costed;
      }
      double cur = sh_.best_us.load();
      double mine = c.cost.time * 1e6;
      while ((cur == 0 || mine < cur) && !sh_.best_us.compare_exchange_weak(cur, mine)) {
      }
      out_.candidates.push_back(std::move(c));
    }
  }

  const KernelGraph& spec_;
  std::map<std::string, DType> spec_dtypes_;  // the spec's tensors by name
  std::vector<Magnitude> mags_;               // per node of v_: its magnitude at std 1
  const PGraph& v_;
  Shared& sh_;
  Pruner* pruner_;
  Pruner* enum_pruner_;
  const Target& target_;
  const SearchConfig& cfg_;
  std::vector<AbsExpr> exprs_;
  std::set<uint32_t> checked_;
  std::map<std::vector<int>, GroupResult> memo_;
  Branch out_;
  TraceSink* sink_;
  size_t index_;                  // the variant's index
  std::vector<TraceState> rows_;  // rows not yet handed to the sink: ids flushed_.. on
  std::vector<TraceUpdate> updates_;
  std::vector<TraceEnumRun> runs_;
  int64_t run_states_ = 0;
  int64_t flushed_ = 0;  // local ids below this were handed to the sink
};

void merge_stats(SearchStats& into, const SearchStats& s) {
  into.states += s.states;
  into.partitions += s.partitions;
  into.groups += s.groups;
  into.schedules += s.schedules;
  into.lowered += s.lowered;
  into.complete += s.complete;
  into.enum_states += s.enum_states;
  into.enum_recipes += s.enum_recipes;
  into.enum_kernels += s.enum_kernels;
  into.enum_same += s.enum_same;
  for (const auto& [k, v] : s.pruned) into.pruned[k] += v;
}

}  // namespace

std::vector<int64_t> launch_shape(const Candidate& c) {
  const KernelCost* slow = nullptr;
  for (const KernelCost& k : c.cost.kernels)
    if (!slow || k.time > slow->time) slow = &k;
  if (!slow) return {};
  std::vector<int64_t> shape{slow->graph_defined ? 1 : 0, slow->blocks, slow->iterations};
  if (slow->lowered) return shape;  // the runtime kernel's own launch (CTAs, chunks)
  for (const KernelOp& k : c.graph.ops)
    if (k.name == slow->name && k.block) {
      shape.push_back(k.block->block_threads);
      shape.insert(shape.end(), k.block->grid.begin(), k.block->grid.end());
    }
  return shape;
}

namespace {
// The verifier as the search runs it: the run's seed, threads and memory limit, and a deadline.
verifier::VerifyOptions verify_options(const SearchConfig& config, const Deadline& deadline) {
  verifier::VerifyOptions vo;
  vo.seed = config.seed;
  vo.threads = config.threads;
  vo.deadline = deadline;
  vo.max_bytes = config.max_memory_mb << 20;
  return vo;
}
}  // namespace

CandidateCheck check_candidate(const KernelGraph& spec, Candidate& c, const SearchConfig& config,
                               bool float_check, const Deadline& deadline) {
  CandidateCheck r;
  bool unbounded = false;
  std::string line;
  c.verified = false;
  c.float_checked = false;
  if (!c.is_spec && config.verify) {
    const verifier::VerifyOptions vo = verify_options(config, deadline);
    verifier::Verdict v;
    try {
      v = verifier::verify(spec, c.graph, vo);
    } catch (const UserError& e) {  // another interface (a damaged or foreign cache entry)
      c.verdict = std::string("not comparable with the spec: ") + e.what();
      r.failed_check = "verifier";
      r.detail = c.verdict;
      return r;
    }
    unbounded = v.equivalent() && !v.bounded();
    line = unbounded
               ? fmt::format("equivalent, unbounded: selections matter ({} trials{})", v.trials,
                             v.scaled ? ", scaled" : "")
               : fmt::format("{} (bound {:.3g}, {} trials{})", verifier::outcome_name(v.outcome),
                             v.bound, v.trials, v.scaled ? ", scaled" : "");
    if (!v.memory.empty()) line = "not verified: the verification " + v.memory;
    if (v.cut) {
      line = fmt::format("not verified: the time limit passed ({} trials)", v.trials);
      r.cut = "verifier";
    }
    if (!v.equivalent()) {
      c.verdict = line;
      r.failed_check = "verifier";
      r.detail = line;
      return r;
    }
  } else if (c.is_spec) {
    line = "the spec itself";
  } else {
    line = "not verified (verification off)";
  }
  // An unbounded verdict stands only on a float check with signed inputs; where the caller has no
  // time left for one, the candidate is not ranked.
  if (config.float_check && unbounded && !float_check) {
    c.verdict = line +
                "; not ranked: an unbounded verdict needs a float check, and the float-check "
                "time budget is spent";
    r.failed_check = "float_check";
    r.detail = c.verdict;
    r.needs_float_check = true;
    return r;
  }
  if (config.float_check && float_check) {
    verifier::FloatCheckOptions fo;
    try {
      fo = gpu_float_check_options(c.graph, unbounded, config.threads);
    } catch (const UserError& e) {  // the schedule cannot plan it: it could not ship either
      c.verdict = line + "; cannot be planned for the GPU: " + e.what();
      r.failed_check = "float_check";
      r.detail = c.verdict;
      return r;
    }
    fo.deadline = deadline;
    fo.max_bytes = config.max_memory_mb << 20;
    verifier::FloatCheck fc = verifier::float_check(spec, c.graph, config.seed, fo);
    r.float_seconds = fc.seconds;
    if (fc.cut) r.cut = "float_check";
    if (!fc.ok) {
      c.verdict = line + "; float check FAILED: " + fc.failures();
      r.failed_check = "float_check";
      r.detail = fc.summary();
      return r;
    }
    line += !fc.memory.empty() ? "; float check skipped (" + fc.memory + ")"
            : fc.cut           ? "; float check skipped (the time limit)"
            : fc.skipped
                ? "; float check skipped (too costly on the CPU)"
                : fmt::format("; float check ok ({}{}{}{})",
                              unbounded ? "uniform, normal 1, signed" : "uniform, normal 1",
                              fc.sampled && !fc.outputs.empty()
                                  ? fmt::format("; {} of {} rows", fc.outputs[0].rows_checked,
                                                fc.outputs[0].rows_total)
                                  : "",
                              fc.exempt.empty() ? "" : "; exempt: ",
                              fmt::format("{}", fmt::join(fc.exempt, ", ")));
    // An unbounded verdict stands only on a float check that ran.
    if (unbounded && fc.skipped) {
      c.verdict = line;
      r.failed_check = "float_check";
      r.detail = line;
      return r;
    }
    c.float_checked = !fc.skipped;
  } else if (config.float_check) {
    line += "; float check not run (time budget): the GPU check must vouch for it";
  }
  c.verdict = line;
  c.verified = c.is_spec || config.verify;  // the spec is its own proof
  r.passed = true;
  return r;
}

int recheck_cached(const KernelGraph& spec, SearchResult& r, const SearchConfig& config) {
  int failed = 0;
  const Deadline deadline = Deadline::in(std::max(0.0, config.time_limit_s - config.reserve_s));
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    Candidate& c = r.ranked[i];
    CandidateCheck chk = check_candidate(spec, c, config, i == 0 || c.is_spec, deadline);
    if (chk.needs_float_check) chk = check_candidate(spec, c, config, true, deadline);
    if (!chk.passed || (i == 0 && chk.cut == "float_check")) ++failed;
  }
  return failed;
}

namespace {

algebra::TermGraph terms_of(const PGraph& g) {
  algebra::TermGraph t;
  t.name = g.name;
  t.doc = g.doc;
  for (const PNode& n : g.nodes) {
    KILN_ASSERT(n.split == 0 && !n.combine, "the algebra pass runs before splits");
    t.nodes.push_back({n.kind, n.attrs, n.inputs, n.shape, n.dtype, n.name});
  }
  t.inputs = g.inputs;
  t.outputs = g.outputs;
  return t;
}

}  // namespace

AlgebraBases algebra_bases(const KernelGraph& spec, const PGraph& base, const SearchConfig& config,
                           const Deadline& own, const Deadline& hard) {
  AlgebraBases out;
  const auto t0 = std::chrono::steady_clock::now();
  algebra::AlgebraOptions ao;
  // A pool four times the bases wanted, ranked below by the planner's cost of each graph as
  // predefined kernels (the algebra's own op cost knows no lowering).
  const int wanted = std::max(0, config.variants.algebra_graphs - 1);
  ao.max_graphs = 1 + 4 * wanted;
  ao.limits.max_iterations = config.variants.algebra_iterations;
  ao.limits.max_nodes = static_cast<size_t>(std::max<int64_t>(config.variants.algebra_nodes, 0));
  ao.limits.max_seconds = std::min(config.variants.algebra_seconds, own.remaining_s());
  ao.limits.deadline = hard;
  const algebra::AlgebraResult r = algebra::rewrite(terms_of(base), ao);
  out.trace = {{"summary", r.summary()}, {"graphs", nlohmann::json::array()}};
  const Target& target = target_for(config.arch);
  const double spec_us = estimate_cost(spec, target).time * 1e6;
  struct Pooled {
    size_t i;  // index into r.graphs
    KernelGraph kg;
    double model_us;
  };
  std::vector<Pooled> pool;
  int rejected = 0;
  for (size_t i = 1; i < r.graphs.size(); ++i) {
    const algebra::Extracted& x = r.graphs[i];
    try {
      KernelGraph kg = algebra::to_kernel_graph(x.graph, config.arch);
      const double us = estimate_cost(kg, target).time * 1e6;
      pool.push_back({i, std::move(kg), us});
    } catch (const UserError& e) {
      ++rejected;
      out.lines.push_back(
          fmt::format("{}: REJECTED, does not build: {}", fmt::join(x.rewrites, "; "), e.what()));
    }
  }
  std::stable_sort(pool.begin(), pool.end(),
                   [](const Pooled& a, const Pooled& b) { return a.model_us < b.model_us; });
  // Cheapest first, a new set of rules before one already taken. No cap on this cost: as
  // predefined kernels a graph runs without the fusions the search will find for it (a cancelled
  // softmax shift models 1.5x the spec here and is the one-kernel attention there); the pass
  // already kept only graphs within 1.5x of the spec by its own op cost.
  std::vector<std::vector<std::string>> rule_sets;
  for (const Pooled& p : pool) rule_sets.push_back(r.graphs[p.i].rules);
  std::vector<const Pooled*> order;
  for (size_t j : algebra::new_rules_first(rule_sets)) order.push_back(&pool[j]);
  for (const Pooled* pp : order) {
    if (static_cast<int>(out.graphs.size()) >= wanted) break;
    const algebra::Extracted& x = r.graphs[pp->i];
    const std::string rewrites = fmt::format("{}", fmt::join(x.rewrites, "; "));
    std::string verdict;
    bool ok = false;
    try {
      const verifier::Verdict v = verifier::verify(spec, pp->kg, verify_options(config, hard));
      ok = v.equivalent();
      verdict = v.cut ? "not verified: the time limit passed"
                      : fmt::format("{} ({} trials)", verifier::outcome_name(v.outcome), v.trials);
    } catch (const UserError& e) {
      verdict = std::string("not comparable: ") + e.what();
    }
    out.lines.push_back(
        fmt::format("{} [{:.1f} us modeled as predefined kernels, spec {:.1f}]: {}{}", rewrites,
                    pp->model_us, spec_us, ok ? "" : "REJECTED, ", verdict));
    if (!ok) {
      ++rejected;
      continue;
    }
    PGraph p = primitive_graph(pp->kg);
    p.rewrites = x.rewrites;
    out.trace["graphs"].push_back({{"rewrites", x.rewrites}, {"graph", write_mugraph(pp->kg)}});
    out.graphs.push_back(std::move(p));
  }
  out.summary =
      fmt::format("{}; {} verified{} ({:.3f} s in all)", r.summary(), out.graphs.size(),
                  rejected ? fmt::format(", {} rejected by the verifier", rejected) : std::string(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  out.trace["summary"] = out.summary;
  return out;
}

SearchResult run_search(const KernelGraph& spec, const SearchConfig& config, TraceWriter* trace,
                        const ProgressFn& progress) {
  Shared sh;
  sh.start = Clock::now();
  const double check_share = std::clamp(config.check_share, 0.0, 0.9);
  const double own_s = std::max(0.0, config.time_limit_s - config.reserve_s);
  sh.deadline = sh.start + std::chrono::microseconds(int64_t(own_s * (1 - check_share) * 1e6));
  const Deadline hard{sh.start + std::chrono::microseconds(int64_t(own_s * 1e6))};
  sh.config = &config;
  sh.progress = &progress;
  const Target& target = target_for(config.arch);
  SearchResult res;
  SearchStats& st = res.stats;

  // The root, and the spec itself as the fallback candidate.
  std::vector<TraceState> head;  // the rows before the branches' (their ids are fixed)
  auto row = [&](int64_t id, int64_t parent, TraceKind kind, std::string detail,
                 std::string decision = {}) {
    TraceState r;
    r.id = id;
    r.parent = parent;
    r.kind = kind;
    r.detail = std::move(detail);
    r.decision = std::move(decision);
    r.t = sh.elapsed();
    head.push_back(std::move(r));
  };
  if (trace) trace->begin(spec, config);
  int64_t next_id = 0;
  row(next_id++, -1, TraceKind::Root, fmt::format("spec {}", spec.name));
  st.states++;
  Candidate fallback;
  fallback.graph = spec;
  fallback.graph.arch = config.arch;
  fallback.cost = estimate_cost(fallback.graph, target);
  fallback.fingerprint = fingerprint(fallback.graph);
  fallback.is_spec = true;
  fallback.verified = true;
  fallback.verdict = "the spec itself";
  fallback.state = next_id++;
  row(fallback.state, 0, TraceKind::Candidate,
      fmt::format("the spec itself (predefined ops){}{}", fallback.cost.fused.empty() ? "" : "; ",
                  fmt::join(fallback.cost.fused, "; ")),
      "spec f" + fallback.fingerprint);
  head.back().status = TraceStatus::Costed;
  head.back().cost_us = fallback.cost.time * 1e6;
  st.states++;

  // The bases: the spec's primitive graph, then the algebra pass's graphs, each proven equal to
  // the spec before any of its candidates can rank.
  std::vector<PGraph> bases{expand_spec(spec)};
  sh.spec_exp_overflows = overflowing_exp(bases[0], node_magnitudes(bases[0])) >= 0;
  const double algebra_from = sh.elapsed();
  if (config.variants.algebra) {
    const double share = std::min(config.variants.algebra_seconds, 0.05 * own_s);
    AlgebraBases ab = algebra_bases(spec, bases[0], config, Deadline::in(share), hard);
    st.algebra = ab.summary;
    st.algebra_graphs = ab.lines;
    for (PGraph& b : ab.graphs) bases.push_back(std::move(b));
    if (trace) trace->meta("algebra", ab.trace.dump());
  }
  st.algebra_s = sh.elapsed() - algebra_from;
  std::unique_ptr<Pruner> pruner, enum_pruner;
  if (config.prune) {
    PrunerOptions po;
    po.use_z3 = config.use_z3;
    // An extracted graph is proven equal to the spec, but its algebra may be beyond the pruning
    // axioms (a cancelled normalization shift is): its outputs are roots too (prune.h), or its
    // variants could be pruned at once.
    std::vector<AbsExpr> equal_roots;
    for (size_t i = 1; i < bases.size(); ++i) {
      const std::vector<AbsExpr> e = node_exprs(bases[i]);
      for (int o : bases[i].outputs) equal_roots.push_back(e[o]);
    }
    pruner = std::make_unique<Pruner>(Pruner::for_spec(spec, po, equal_roots));
    // The enumerator asks about many more expressions than the lowering; its own pruner (own
    // lock, own cache) gets a smaller Z3 budget so that Z3 cannot take the run's time.
    po.z3_budget_ms = config.enum_z3_budget_ms;
    enum_pruner = std::make_unique<Pruner>(Pruner::for_spec(spec, po, equal_roots));
  }

  std::vector<PGraph> variants = enumerate_variants(bases, config.variants);
  std::vector<int64_t> variant_ids;
  for (const PGraph& v : variants) {
    variant_ids.push_back(next_id);
    row(next_id++, 0, TraceKind::Variant,
        v.rewrites.empty() ? std::string("plain expansion")
                           : fmt::format("{}", fmt::join(v.rewrites, "; ")),
        fmt::format("v{}", variant_ids.size() - 1));
    st.states++;
    st.variants++;
  }
  sh.states = st.states;
  std::unique_ptr<TraceSink> sink;
  if (trace) {
    trace->write(std::move(head));
    sink = std::make_unique<TraceSink>(trace, variant_ids, next_id);
  }

  // Enumeration states go to the trace one by one only when there is a trace (they are most of
  // the states); otherwise only their counts are kept.
  SearchConfig cfg = config;
  cfg.enumerate_opts.record_states = trace != nullptr;
  sh.config = &cfg;
  std::vector<Branch> branches(variants.size());
  int threads = config.threads > 0 ? config.threads : tbb::this_task_arena::max_concurrency();
  tbb::task_arena arena(threads);
  // Two passes over the variants (BranchRunner::first, then rest), each in list order: a worker
  // takes the next variant when it is done with its last. Under a time limit only the first
  // variants' many-kernel partitions are explored, and the list puts the most useful first
  // (generator.h); tbb::parallel_for's recursive halving over the variants started the second
  // worker in the middle of the list (with 2 threads and 140 variants, variants 0, 1 and 70-72
  // ran), and one variant's thousands of partitions could take the whole limit before another
  // variant's one-kernel form was tried.
  std::vector<std::unique_ptr<BranchRunner>> runners(variants.size());
  auto pass = [&](auto&& body) {
    std::atomic<size_t> next_variant{0};
    arena.execute([&] {
      tbb::parallel_for(
          0, threads,
          [&](int) {
            for (size_t i = next_variant++; i < variants.size(); i = next_variant++) body(i);
          },
          tbb::simple_partitioner());
    });
  };
  pass([&](size_t i) {
    if (sh.stopped()) return;
    runners[i] = std::make_unique<BranchRunner>(spec, variants[i], sh, pruner.get(),
                                                enum_pruner.get(), target, sink.get(), i);
    runners[i]->first();
  });
  pass([&](size_t i) {
    if (runners[i]) {
      branches[i] = runners[i]->rest();
      runners[i].reset();
    } else if (sink) {
      sink->put(i, {}, {}, {}, true, 0);  // stopped before it began
    }
  });
  st.generate_s = sh.elapsed();
  if (sh.stopped()) res.stop = static_cast<StopReason>(sh.stop.load());
  if (res.stop == StopReason::TimeLimit)
    res.cut.push_back(
        fmt::format("generation: stopped at {:.2f} s, its share ({:.0f}%) of the {:g} s limit{}",
                    st.generate_s, 100 * (1 - check_share), config.time_limit_s,
                    config.reserve_s > 0
                        ? fmt::format(" less {:.2f} s for parsing and writing", config.reserve_s)
                        : std::string()));

  // Merge in variant order; candidates get their final trace ids (as TraceSink gave their rows).
  std::vector<Candidate> cands;
  for (size_t i = 0; i < branches.size(); ++i) {
    Branch& b = branches[i];
    int64_t base_id = next_id;
    next_id += b.ids;
    // Events were counted as states already where they expanded something.
    merge_stats(st, b.stats);
    if (b.pruned) st.pruned["expr"] += 0;
    for (Candidate& c : b.candidates) {
      c.state += base_id;
      cands.push_back(std::move(c));
    }
  }
  for (const auto& [k, v] : st.pruned) (void)k, (void)v;
  // Deduplicate by fingerprint (first kept) and rank; ties by kernels then fingerprint.
  std::set<std::string> seen{fallback.fingerprint};
  std::vector<Candidate> uniq;
  for (Candidate& c : cands)
    if (seen.insert(c.fingerprint).second)
      uniq.push_back(std::move(c));
    else
      st.pruned["duplicate"]++;
  uniq.push_back(std::move(fallback));
  std::stable_sort(uniq.begin(), uniq.end(), [](const Candidate& a, const Candidate& b) {
    if (a.cost.time != b.cost.time) return a.cost.time < b.cost.time;
    if (a.cost.launches != b.cost.launches) return a.cost.launches < b.cost.launches;
    return a.fingerprint < b.fingerprint;
  });
  // The cheapest candidate of each shape (launch_shape) first, the rest after them in cost
  // order: candidates of one shape differ in details the model barely sees (often not at all
  // once re-tiled, or only in a cheap follow-up kernel), so the verified top-K that the profiler
  // measures spans shapes (gqa bs16: the top 11 were one grid, the 12th measured 17% faster).
  {
    std::set<std::vector<int64_t>> shapes;
    std::vector<Candidate> firsts, rest;
    for (Candidate& c : uniq) {
      std::vector<int64_t> shape = launch_shape(c);
      (shapes.insert(shape).second || c.is_spec ? firsts : rest).push_back(std::move(c));
    }
    uniq = std::move(firsts);
    for (Candidate& c : rest) uniq.push_back(std::move(c));
  }

  // Verification in rank order until top_k candidates pass. Past the deadline we still verify
  // until one candidate is ranked. Nothing is ranked unchecked: a candidate needs the verifier's
  // verdict (the spec is its own proof), and the first one ranked, every candidate whose verdict
  // leans on selections (unbounded), and the spec also need the float check that predicts the
  // GPU (float_model.h). When everything fails, nothing is ranked and the caller ships nothing.
  auto tv = Clock::now();
  bool have_winner = false;
  // Each float check costs up to seconds, so they share one budget: half the time limit, at
  // least 10 s. With nothing ranked, failing candidates are checked until their checks have
  // spent it or 256 have failed; then the search stops looking (what remains is not checked, so
  // it is not ranked either). Once a candidate is ranked, the rest of the top K are float-checked
  // while the budget lasts; past it they are ranked unchecked and marked so (the profiler's GPU
  // check is then their check), except unbounded verdicts, which check_candidate refuses.
  //
  // All of it stops at the time limit (`hard`). Past it, with nothing ranked, only the spec is
  // still tried (its verdict needs no verifier; its float check may run up to spec_grace_s past
  // the limit), and only a float check that ran ranks it first:
  // a run out of time ships the spec's own kernels if they were checked, else nothing
  // (SearchResult::out_of_time), never something unchecked. Every other candidate left is
  // counted as cut.
  const double float_budget_s = std::max(10.0, 0.5 * config.time_limit_s);
  const double spec_grace_s =
      config.time_limit_s > 0 ? std::clamp(0.1 * config.time_limit_s, 1.0, 5.0) : 0.0;
  int float_failures = 0, not_checked = 0, cut_verifier = 0, cut_float = 0;
  double float_failure_s = 0, float_check_s = 0;
  for (Candidate& c : uniq) {
    if (static_cast<int>(res.ranked.size()) >= config.top_k) break;
    if (!have_winner && (float_failures >= 256 || float_failure_s >= float_budget_s)) {
      st.pruned["not float-checked (failure budget spent)"]++;
      continue;
    }
    if (hard.passed() && (have_winner || !c.is_spec)) {
      if (res.stop == StopReason::Exhausted) res.stop = StopReason::TimeLimit;
      if (have_winner) break;
      ++not_checked;
      continue;
    }
    // The first candidate ranked and the spec are always float-checked. The spec, with nothing
    // ranked, gets a grace of a tenth of the limit (1 to 5 s; none at 0) for its check (sampled
    // rows: usually well under a second), so that a run whose candidates all failed ships the
    // spec's own kernels rather than nothing (a 4032-key attention spent its 45 s on candidates
    // that overflow f16 at std 1, then shipped nothing).
    Deadline check_by = hard;
    if (c.is_spec && !have_winner && hard.set())
      check_by.at = std::max(hard.at, Deadline::in(spec_grace_s).at);
    CandidateCheck chk = check_candidate(
        spec, c, config, !have_winner || c.is_spec || float_check_s < float_budget_s, check_by);
    if (!chk.cut.empty()) ++(chk.cut == "verifier" ? cut_verifier : cut_float);
    // The first candidate ranked ships: its float check must have run. One the time limit cut
    // is not ranked first (a run whose limit is too short for any check ships nothing).
    if (chk.passed && !have_winner && chk.cut == "float_check") {
      chk.passed = false;
      chk.failed_check = "float_check";
      c.verdict += "; not ranked first: the winner needs a float check that ran";
      chk.detail = c.verdict;
    }
    if (c.is_spec && !chk.passed && !chk.cut.empty()) res.out_of_time = true;
    float_check_s += chk.float_seconds;
    if (!chk.passed) {
      if (chk.failed_check == "float_check") ++float_failures, float_failure_s += chk.float_seconds;
      if (trace) trace->update({c.state, TraceStatus::Rejected, chk.failed_check, chk.detail});
      st.rejected++;
      res.rejected.push_back(std::move(c));
      continue;
    }
    if (!c.is_spec && config.verify) {
      st.verified++;
      if (trace) trace->update({c.state, TraceStatus::Verified, {}, c.verdict});
      if (st.time_first_valid_s < 0) st.time_first_valid_s = sh.elapsed();
    }
    if (c.is_spec && trace) trace->update({c.state, TraceStatus::Costed, {}, c.verdict});
    if (!have_winner) st.time_best_s = sh.elapsed();
    have_winner = true;
    res.ranked.push_back(std::move(c));
    sh.report("verify", st.verified);
  }
  st.verify_s = std::chrono::duration<double>(Clock::now() - tv).count();
  if (not_checked > 0 || (hard.passed() && static_cast<int>(res.ranked.size()) < config.top_k))
    res.cut.push_back(fmt::format(
        "ranking: stopped at the {:g} s limit with {} of {} candidates ranked{}",
        config.time_limit_s, res.ranked.size(), config.top_k,
        not_checked ? fmt::format(" ({} passed over unchecked to reach the spec)", not_checked)
                    : std::string()));
  if (cut_verifier > 0)
    res.cut.push_back(fmt::format("verifier: {} candidate(s) not verified in time", cut_verifier));
  if (cut_float > 0)
    res.cut.push_back(
        fmt::format("float check: skipped for {} candidate(s) by the time limit", cut_float));
  if (trace)
    for (size_t i = 0; i < res.ranked.size(); ++i)
      trace->ranked(res.ranked[i].state, static_cast<int>(i) + 1);
  st.states = sh.states.load();
  st.elapsed_s = sh.elapsed();
  if (pruner) st.pruner = pruner->stats().str();
  if (enum_pruner) st.enum_pruner = enum_pruner->stats().str();
  sh.report("done", st.verified, true);
  return res;
}

nlohmann::json result_to_json(const SearchResult& r, bool with_graphs) {
  nlohmann::json cs = nlohmann::json::array();
  auto one = [&](const Candidate& c, int rank) {
    nlohmann::json j = {{"rank", rank},
                        {"fingerprint", c.fingerprint},
                        {"kernels", c.graph.num_kernels()},
                        {"time_us", c.cost.time * 1e6},
                        {"cost", cost_to_json(c.cost)},
                        {"verified", c.verified},
                        {"float_checked", c.float_checked},
                        {"verdict", c.verdict},
                        {"is_spec", c.is_spec},
                        {"rewrites", c.rewrites},
                        {"trace_id", c.state}};
    if (with_graphs) j["mugraph"] = mugraph_to_json(c.graph);
    return j;
  };
  for (size_t i = 0; i < r.ranked.size(); ++i) cs.push_back(one(r.ranked[i], int(i) + 1));
  nlohmann::json rej = nlohmann::json::array();
  for (const Candidate& c : r.rejected) rej.push_back(one(c, 0));
  return {{"stop_reason", stop_reason_name(r.stop)},
          {"cut", r.cut},
          {"statistics", r.stats.to_json()},
          {"ranked", cs},
          {"rejected", rej}};
}

SearchResult result_from_json(const nlohmann::json& j) {
  SearchResult r;
  std::string s = j.at("stop_reason").get<std::string>();
  for (StopReason x : {StopReason::Exhausted, StopReason::TimeLimit, StopReason::StateLimit,
                       StopReason::MemoryLimit})
    if (s == stop_reason_name(x)) r.stop = x;
  r.cut = j.value("cut", std::vector<std::string>{});
  const nlohmann::json& st = j.at("statistics");
  r.stats.states = st.value("states", int64_t(0));
  r.stats.variants = st.value("variants", int64_t(0));
  r.stats.partitions = st.value("partitions", int64_t(0));
  r.stats.groups = st.value("groups", int64_t(0));
  r.stats.schedules = st.value("schedules", int64_t(0));
  r.stats.lowered = st.value("lowered", int64_t(0));
  r.stats.complete = st.value("complete", int64_t(0));
  r.stats.enum_states = st.value("enum_states", int64_t(0));
  r.stats.enum_recipes = st.value("enum_recipes", int64_t(0));
  r.stats.enum_kernels = st.value("enum_kernels", int64_t(0));
  r.stats.enum_same = st.value("enum_same", int64_t(0));
  r.stats.verified = st.value("verified", int64_t(0));
  r.stats.rejected = st.value("rejected", int64_t(0));
  r.stats.pruned = st.value("pruned", std::map<std::string, int64_t>{});
  r.stats.time_first_valid_s = st.value("time_first_valid_s", -1.0);
  r.stats.time_best_s = st.value("time_best_s", -1.0);
  r.stats.algebra_s = st.value("algebra_s", 0.0);
  r.stats.algebra = st.value("algebra", std::string());
  r.stats.algebra_graphs = st.value("algebra_graphs", std::vector<std::string>{});
  r.stats.generate_s = st.value("generate_s", 0.0);
  r.stats.verify_s = st.value("verify_s", 0.0);
  r.stats.elapsed_s = st.value("elapsed_s", 0.0);
  r.stats.pruner = st.value("pruner", std::string());
  r.stats.enum_pruner = st.value("enum_pruner", std::string());
  auto load = [&](const nlohmann::json& c) {
    Candidate k;
    k.graph = mugraph_from_json(c.at("mugraph"), "<cache>");
    k.cost = estimate_cost(k.graph, target_for(k.graph.arch));
    k.fingerprint = c.at("fingerprint").get<std::string>();
    k.verified = c.at("verified").get<bool>();
    k.float_checked = c.value("float_checked", false);
    k.verdict = c.at("verdict").get<std::string>();
    k.is_spec = c.at("is_spec").get<bool>();
    k.rewrites = c.at("rewrites").get<std::vector<std::string>>();
    k.state = c.at("trace_id").get<int64_t>();
    return k;
  };
  for (const auto& c : j.at("ranked")) r.ranked.push_back(load(c));
  for (const auto& c : j.at("rejected")) r.rejected.push_back(load(c));
  if (r.ranked.empty()) throw std::runtime_error("empty cached result");
  return r;
}

}  // namespace kiln::search
