// The block planner (block_planner.h). Pass 4: steps ordered by data dependence into barrier
// levels, live intervals, and the final step list.
#include "block_planner.h"

namespace kiln::planner {

void BlockPlanner::plan_levels() {
  // Build tasks.
  for (int i = 0; i < n_; ++i) {
    TilePlan& t = tp(i);
    if (cls(i) == OpClass::Output) {
      Phase ph = op(i).stage == Stage::Loop ? Phase::Loop : Phase::Post;
      tasks_.push_back({StepKind::Save, ph, i, {}, {}, {}, 0});
    } else if (t.home == TileHome::Fragment) {
      // One step: the root matmul, p, and every consumer of p with its accumulators.
      Task k{StepKind::Accumulate, Phase::Loop, i, {}, {}, {}, 0};
      for (int c : distinct_consumers(i))
        for (int a : distinct_consumers(c)) k.accums.push_back(a);
      tasks_.push_back(k);
    } else if (t.home == TileHome::Feed && !reads_fragment(i)) {
      Task k{StepKind::Accumulate, Phase::Loop, i, {}, {}, {}, 0};
      for (int c : distinct_consumers(i))
        if (op(c).inputs[0] == i) k.accums.push_back(c);
      tasks_.push_back(k);
    } else if ((t.home == TileHome::Smem || t.home == TileHome::Global) &&
               cls(i) != OpClass::Input && !cons_[i].empty()) {
      tasks_.push_back({StepKind::Compute, phase_of_stage(op(i).stage), i, {}, {}, {}, 0});
    }
  }
  // Accumulators whose value operand is stored (not a Feed): a step reading it.
  for (int i = 0; i < n_; ++i) {
    if (cls(i) != OpClass::Accum) continue;
    int v = op(i).inputs[0];
    if (tp(v).home == TileHome::Feed) continue;
    // Fold directly from the stored/inline value: an Accumulate step with the accum as top.
    tasks_.push_back({StepKind::Accumulate, Phase::Loop, -1, {i}, {}, {}, 0});
  }
  // Spills.
  for (int i = 0; i < n_; ++i)
    if (tp(i).home == TileHome::Registers && tp(i).spill)
      tasks_.push_back({StepKind::Spill, Phase::Post, i, {}, {}, {i}, 0});
  // Reads/writes.
  for (Task& k : tasks_) {
    std::vector<int> tops;
    if (k.kind == StepKind::Spill) continue;
    if (k.op >= 0) tops.push_back(k.op);
    if (k.op >= 0 && tp(k.op).home == TileHome::Fragment) {
      // The consumers' other operands (a matmul's B) are read by the same step.
      for (int c : distinct_consumers(k.op)) {
        std::vector<int> nodes;
        collect_tree(c, nodes, true);
        for (int i : nodes)
          for (int in : op(i).inputs) {
            TileHome h = tp(in).home;
            if (h == TileHome::Smem || h == TileHome::Global ||
                (h == TileHome::Registers && tp(in).spill))
              k.reads.push_back(in);
          }
      }
    } else if (k.kind == StepKind::Accumulate)
      for (int a : k.accums)
        for (int in : op(a).inputs)
          if (k.op < 0 || in != k.op) tops.push_back(in);
    for (int top : tops) {
      std::vector<int> nodes;
      if (k.op >= 0 && top == k.op) {
        collect_tree(top, nodes, true);
      } else {
        collect_tree(top, nodes,
                     tp(top).home == TileHome::Inline || tp(top).home == TileHome::Root);
        if (tp(top).home != TileHome::Inline && tp(top).home != TileHome::Root)
          k.reads.push_back(top);
      }
      for (int i : nodes)
        for (int in : op(i).inputs) {
          TileHome h = tp(in).home;
          if (h == TileHome::Smem || h == TileHome::Global ||
              (h == TileHome::Registers && tp(in).spill))
            k.reads.push_back(in);
        }
    }
    if (k.kind == StepKind::Compute) k.writes.push_back(k.op);
  }
  // Levels per phase: 1 + the level of the latest producer in the same phase.
  std::map<int, const Task*> producer;
  for (Phase ph : {Phase::Pre, Phase::Loop, Phase::Post}) {
    for (Task& k : tasks_) {
      if (k.phase != ph) continue;
      int lvl = 0;
      for (int r : k.reads)
        for (const Task& p : tasks_)
          if (p.phase == ph && &p != &k &&
              std::find(p.writes.begin(), p.writes.end(), r) != p.writes.end())
            lvl = std::max(lvl, level_of(p, ph) + 1);
      k.level = lvl;
    }
  }
}

int64_t BlockPlanner::num_levels(Phase ph) const {
  int64_t m = -1;
  for (const Task& k : tasks_)
    if (k.phase == ph) m = std::max<int64_t>(m, k.level);
  return m + 1;
}

void BlockPlanner::emit_steps() {
  // Pre: loads of every input (loop inputs: the pipeline prologue), then invariant levels.
  for (int i = 0; i < n_; ++i)
    if (cls(i) == OpClass::Input)
      s_.steps.push_back(
          {StepKind::Load, op(i).stage == Stage::Loop ? Phase::Loop : Phase::Pre, i, {}});
  auto add_phase = [&](Phase ph, bool leading_barrier) {
    int64_t L = num_levels(ph);
    if (L == 0) return 0;
    int barriers = 0;
    for (int64_t l = 0; l < L; ++l) {
      if (l > 0 || leading_barrier) {
        s_.steps.push_back({StepKind::Barrier, ph, -1, {}});
        ++barriers;
      }
      for (const Task& k : tasks_)
        if (k.phase == ph && k.level == l) s_.steps.push_back({k.kind, ph, k.op, k.accums});
    }
    return barriers;
  };
  // Pre levels read invariant input tiles: wait for their copies and a barrier first.
  add_phase(Phase::Pre, true);
  s_.barriers_per_iteration = 1 + add_phase(Phase::Loop, false);
  // The first post level may overwrite shared memory the loop read (buffer reuse).
  add_phase(Phase::Post, true);
}

}  // namespace kiln::planner
