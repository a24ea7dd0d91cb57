// The block planner (block_planner.h). Pass 1 and the driver: where each tile lives, and the roots
// whose loops drive each step.
#include "block_planner.h"

namespace kiln::planner {

BlockPlanner::BlockPlanner(const BlockGraph& bg, const Target& tgt, bool lossy_f16, bool lossy_bf16)
    : bg_(bg), tgt_(tgt), T_(bg.block_threads), lossy_f16_(lossy_f16), lossy_bf16_(lossy_bf16) {
  n_ = static_cast<int>(bg.ops.size());
  cons_.resize(n_);
  for (int i = 0; i < n_; ++i)
    for (int in : bg.ops[i].inputs) cons_[in].push_back(i);
  s_.tiles.resize(n_);
  s_.lossy_mma_ok = lossy_f16;
}

BlockSchedule BlockPlanner::run() {
  plan_homes();
  for (int round = 0; round < 64; ++round) {
    bool changed = fix_roots();
    plan_dists();
    changed |= fix_register_reads();
    if (!changed) break;
  }
  plan_dists();
  // Register-resident chains are chosen once the homes are settled; their distributions then
  // override the planner's (plan_dists applies them), and register reads are re-checked.
  if (plan_fragment_chains()) {
    // Spills decided under the old distributions (e.g. a k-split) are re-decided.
    for (TilePlan& t : s_.tiles) t.spill = false;
    for (int round = 0; round < 64; ++round) {
      plan_dists();
      if (!fix_register_reads()) break;
    }
    plan_dists();
  }
  plan_levels();
  plan_memory();
  emit_steps();
  return std::move(s_);
}

std::vector<int> BlockPlanner::distinct_consumers(int i) const {
  std::vector<int> c = cons_[i];
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

bool BlockPlanner::single_read(int i, int c) const {
  switch (cls(c)) {
    case OpClass::Matmul:
      return false;
    case OpClass::Binary:
    case OpClass::Unary:
    case OpClass::Fused:
      return same_padded(op(i).shape, op(c).shape);
    case OpClass::Accum:
      return same_padded(op(i).shape, op(c).shape);
    case OpClass::Reduce:
    case OpClass::Transpose:
    case OpClass::Output:
      return true;
    case OpClass::Constant:
    case OpClass::Softmax:
    case OpClass::RmsNorm:
    case OpClass::GraphDefined:
    case OpClass::Input:
      return false;
  }
  return false;  // unreachable: the switch names every class
}

bool BlockPlanner::flat_identity(int i, int c) const {
  switch (cls(c)) {
    case OpClass::Binary:
    case OpClass::Unary:
    case OpClass::Fused:
    case OpClass::Accum:
      return same_padded(op(i).shape, op(c).shape);
    case OpClass::Output:
      return true;
    case OpClass::Reduce:
      return reduce_len(c) == 1;
    case OpClass::Matmul:
    case OpClass::Transpose:
    case OpClass::Constant:
    case OpClass::Softmax:
    case OpClass::RmsNorm:
    case OpClass::GraphDefined:
    case OpClass::Input:
      return false;
  }
  return false;  // unreachable: the switch names every class
}

void BlockPlanner::plan_homes() {
  for (int i = 0; i < n_; ++i) {
    TilePlan& t = tp(i);
    const BlockOp& o = op(i);
    OpClass c = cls(i);
    std::vector<int> dc = distinct_consumers(i);
    if (c == OpClass::Input) {
      t.home = TileHome::Smem;
      continue;
    }
    if (c == OpClass::Output) {
      t.home = TileHome::None;
      continue;
    }
    if (c == OpClass::Accum) {
      t.home = TileHome::Registers;
      continue;
    }
    if (c == OpClass::Constant || is_view(i)) {
      t.home = TileHome::Inline;
      continue;
    }
    bool only_accums = !dc.empty();
    bool all_flat = true;
    for (int k : dc) {
      only_accums &= cls(k) == OpClass::Accum;
      all_flat &= flat_identity(i, k);
    }
    if (only_accums && all_flat) {
      t.home = TileHome::Feed;
      continue;
    }
    if (dc.size() > 1 && dc.size() <= 4 && cheap_over_stored(i)) {
      // A single unary/binary op of stored input tiles, read once per element by each of a
      // few consumers of its stage: recomputed in each (two shared-memory reads cost less than
      // a float32 tile written, synchronized and read back, and the tile's bytes).
      bool ok = true;
      for (int k : dc)
        ok &= cls(k) != OpClass::Matmul && single_read(i, k) &&
              (op(k).stage == o.stage || (cls(k) == OpClass::Accum && o.stage != Stage::Post));
      if (ok) {
        t.home = TileHome::Inline;
        continue;
      }
    }
    if (dc.size() == 1) {
      int k = dc[0];
      bool same_stage =
          op(k).stage == o.stage || (cls(k) == OpClass::Accum && o.stage != Stage::Post);
      if (is_elementwise(o.kind) && single_read(i, k) && same_stage) {
        t.home = TileHome::Inline;
        continue;
      }
      if (is_root_kind(i) && flat_identity(i, k) && same_stage &&
          (is_elementwise(op(k).kind) || cls(k) == OpClass::Output || cls(k) == OpClass::Accum ||
           is_view(k))) {
        t.home = TileHome::Root;
        continue;
      }
    }
    t.home = TileHome::Smem;
    t.note = dc.empty() ? "unused" : "";
  }
  // The max operand of accum_rescale is read at broadcast positions: it must be stored.
  for (int i = 0; i < n_; ++i)
    if (op(i).kind == OpKind::AccumRescale) {
      int m = op(i).inputs[1];
      if (!same_padded(op(m).shape, op(i).shape) && cls(m) != OpClass::Input &&
          cls(m) != OpClass::Constant && tp(m).home != TileHome::Registers)
        tp(m).home = TileHome::Smem;
    }
}

bool BlockPlanner::cheap_over_stored(int i) const {
  if (cls(i) != OpClass::Unary && cls(i) != OpClass::Binary) return false;
  for (int in : op(i).inputs)
    if (cls(in) != OpClass::Input && cls(in) != OpClass::Constant) return false;
  return true;
}

void BlockPlanner::collect_tree(int i, std::vector<int>& out, bool top) const {
  if (!top) {
    TileHome h = s_.tiles[i].home;
    if (h != TileHome::Inline && h != TileHome::Root) return;
  }
  if (std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
  for (int in : op(i).inputs) collect_tree(in, out, false);
}

BlockPlanner::Tree BlockPlanner::tree_of(int top) const {
  Tree t;
  collect_tree(top, t.nodes, true);
  for (int i : t.nodes) {
    bool here_root = (i == top && is_root_kind(i) && cls(i) != OpClass::Output) ||
                     (i != top && s_.tiles[i].home == TileHome::Root);
    if (here_root && t.root < 0) t.root = i;
    for (int in : op(i).inputs) {
      TileHome h = s_.tiles[in].home;
      if (h == TileHome::Registers) {
        if (s_.tiles[in].spill)
          t.smem_leaves.push_back(in);
        else
          t.reg_leaves.push_back(in);
      } else if (h == TileHome::Smem || h == TileHome::Global) {
        t.smem_leaves.push_back(in);
      }
    }
  }
  return t;
}

bool BlockPlanner::flat_path(int i, int top, const std::vector<int>& nodes) const {
  if (i == top) return true;
  for (int c : cons_[i]) {
    if (std::find(nodes.begin(), nodes.end(), c) == nodes.end()) continue;
    if (!flat_identity(i, c)) return false;
    if (!flat_path(c, top, nodes)) return false;
  }
  return true;
}

bool BlockPlanner::fix_roots() {
  bool changed = false;
  for (int top = 0; top < n_; ++top) {
    if (!is_task_top(top)) continue;
    std::vector<int> nodes;
    collect_tree(top, nodes, true);
    bool have = is_root_kind(top) && cls(top) != OpClass::Output;
    for (int i : nodes) {
      if (i == top || tp(i).home != TileHome::Root) continue;
      if (have || !flat_path(i, top, nodes)) {
        tp(i).home = TileHome::Smem;
        changed = true;
      } else {
        have = true;
      }
    }
    // An inline op under a root is recomputed per use of the root's inner loop; fine for
    // reductions (each element read once), never reached for matmuls (operands are stored).
  }
  return changed;
}

}  // namespace kiln::planner
