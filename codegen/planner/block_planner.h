// The block planner: the layout/schedule optimizer of one block graph (see
// kiln/codegen/block_schedule.h), one class whose passes live in homes.cpp, distributions.cpp,
// levels.cpp and memory.cpp.
//
// Block graphs are planned in five passes over the ops:
//   1. homes: where each tile lives (shared memory, registers, or inline in its consumer);
//   2. steps: the tile each Compute/Accumulate/Save step materializes, the single matmul or
//      reduction ("root") whose loop structure drives it, and who computes which element;
//   3. register reads: an accumulator is read from registers only by steps with the same
//      distribution at the same flat index; anything else spills it to shared memory;
//   4. levels: steps are ordered by data dependence so that one barrier separates each level,
//      and every buffer gets a live interval in levels;
//   5. memory: pipeline depth, padding, and a first-fit allocation of shared memory that reuses
//      buffers with disjoint live intervals, degrading (fewer stages, no padding, workspace
//      instead of shared memory) until it fits the target.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "kiln/codegen/block_schedule.h"
#include "kiln/ir/diag.h"

namespace kiln::planner {

inline bool is_elementwise(OpKind k) {
  OpClass c = op_info(k).cls;
  return c == OpClass::Binary || c == OpClass::Unary || c == OpClass::Constant ||
         c == OpClass::Fused;
}

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
inline int64_t align_up(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}

// Shapes equal after left-padding with 1s (a flat index means the same element in both).
inline bool same_padded(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y) return false;
  }
  return true;
}

class BlockPlanner {
 public:
  BlockPlanner(const BlockGraph& bg, const Target& tgt, bool lossy_f16, bool lossy_bf16);

  BlockSchedule run();

 private:
  const BlockOp& op(int i) const { return bg_.ops[i]; }
  TilePlan& tp(int i) { return s_.tiles[i]; }
  OpClass cls(int i) const { return op_info(op(i).kind).cls; }

  bool is_root_kind(int i) const {
    if (cls(i) == OpClass::Matmul) return true;
    if (cls(i) == OpClass::Reduce) return reduce_len(i) > 1;
    return false;
  }
  int64_t reduce_len(int i) const { return op(op(i).inputs[0]).shape[op(i).attrs.dim]; }
  bool is_view(int i) const {
    return cls(i) == OpClass::Transpose || (cls(i) == OpClass::Reduce && reduce_len(i) == 1);
  }
  std::vector<int> distinct_consumers(int i) const;

  // Does consumer c read each element of operand i exactly once?
  bool single_read(int i, int c) const;
  // Does consumer c read element f of operand i when it computes its own element f?
  bool flat_identity(int i, int c) const;

  // ---- 1. homes ------------------------------------------------------------------------------
  void plan_homes();

  bool cheap_over_stored(int i) const;

  bool is_task_top(int i) const {
    TileHome h = s_.tiles[i].home;
    return (h == TileHome::Smem && cls(i) != OpClass::Input) || h == TileHome::Global ||
           h == TileHome::Feed || h == TileHome::Fragment || cls(i) == OpClass::Output;
  }

  // Ops whose value a step evaluates: the top, and operands reached through Inline/Root homes.
  void collect_tree(int i, std::vector<int>& out, bool top) const;
  // Leaves of a step's tree (stored tiles, registers) and the root.
  struct Tree {
    std::vector<int> nodes;
    int root = -1;
    std::vector<int> reg_leaves;
    std::vector<int> smem_leaves;
  };
  Tree tree_of(int top) const;
  // Is the path from node i up to the step top flat-identity at every edge?
  bool flat_path(int i, int top, const std::vector<int>& nodes) const;

  // ---- 2. one root per step ------------------------------------------------------------------
  bool fix_roots();

  // ---- 3. distributions and register reads ---------------------------------------------------
  Distribution group_dist(int64_t numel, int64_t red_len) const;

  // Underlying stored operand of a matmul input, seen through Inline transposes.
  struct Operand {
    int leaf = -1;         // the stored op
    bool swapped = false;  // the matmul reads the leaf with its last two dims swapped
    bool clean = true;     // only views of the leaf (no other transposes)
  };
  Operand resolve_operand(int i) const;
  // dtype a matmul operand is exact in: the input tile's dtype, or F32 for computed values.
  DType operand_dtype(const Operand& o) const {
    if (cls(o.leaf) == OpClass::Input) return bg_.inputs[op(o.leaf).io].dtype;
    return DType::F32;
  }

  MmaPlan plan_mma(int i) const;

  // Best warp partition of a [B, M, N] x K product; ks > 1 only when allowed.
  bool mma_partition(int64_t B, int64_t M, int64_t N, int64_t K, bool allow_ks, int reg_cap,
                     Distribution& out) const;

  // The distribution of the step whose top is `top`, given its tree.
  Distribution step_dist(int top, const Tree& t);

  void plan_dists();

  // ---- 3b. register-resident chains ----------------------------------------------------------
  // A loop tile p = elementwise(S), S = matmul on tensor cores (p's step root), whose consumers
  // are all Feed tiles of the loop that are either a matmul reading p as its A operand (feeding
  // one accum_sum) or a sum/mean/max of p's last dim, stays in S's C fragments (home Fragment):
  // the m16n8 C layout of two adjacent n8 tiles is the m16n8k16 A layout of one k step, so p is
  // packed to 16-bit A fragments in registers, and its row reductions are a quad shuffle. This
  // needs every warp to own whole rows: S and each consuming matmul are partitioned with the same
  // warps along batch and m16 tiles and none along n or k. The row reductions get the same
  // partition with n = 1 (one value per row, in fragment element 0/2 of lanes 4g).
  std::map<int, Distribution> chain_dists_;

  static Distribution rows_dist(int64_t B, int64_t M, int64_t N, int wb, int wm);

  bool chain_consumer_ok(int p, int c) const;

  bool plan_fragment_chains();
  const TilePlan& tp_const(int i) const { return s_.tiles[i]; }

  bool fix_register_reads();

  // ---- 4. steps and levels -------------------------------------------------------------------
  struct Task {
    StepKind kind;
    Phase phase;
    int op;
    std::vector<int> accums;
    std::vector<int> reads;   // buffers (op ids whose storage is read)
    std::vector<int> writes;  // buffers written (op ids; spills write the accumulator's buffer)
    int level = 0;
  };
  std::vector<Task> tasks_;

  Phase phase_of_stage(Stage s) const {
    return s == Stage::Invariant ? Phase::Pre : s == Stage::Loop ? Phase::Loop : Phase::Post;
  }

  bool reads_fragment(int i) const {
    for (int in : op(i).inputs)
      if (s_.tiles[in].home == TileHome::Fragment) return true;
    return false;
  }

  void plan_levels();
  // Levels are computed in op order; a producer always precedes its readers in op order except
  // spills (op = accumulator id), which have no inputs in the same phase and stay at level 0.
  int level_of(const Task& p, Phase) const { return p.level; }

  int64_t num_levels(Phase ph) const;

  // ---- 5. memory -----------------------------------------------------------------------------
  struct Buf {
    int op;
    bool spill;
    int64_t bytes;
    int64_t lo, hi;  // live interval in global level numbers
    bool input;
    int64_t offset = -1;
    bool global = false;
  };

  int64_t numel(const Shape& s) const { return kiln::numel(s); }

  void set_strides(int i, bool pad, bool f32, std::vector<int64_t>& strides, int64_t& bytes);

  bool used_by_ldmatrix(int i) const;

  void choose_load_vec(int i);

  int64_t level_base(Phase ph) const {
    if (ph == Phase::Pre) return 0;
    if (ph == Phase::Loop) return num_levels(Phase::Pre) + 1;
    return num_levels(Phase::Pre) + num_levels(Phase::Loop) + 3;
  }

  bool try_alloc(int stages, bool pad, int64_t budget, std::vector<Buf>& bufs);

  void plan_memory();

  // ---- steps ---------------------------------------------------------------------------------
  void emit_steps();

  const BlockGraph& bg_;
  const Target& tgt_;
  int T_;
  bool lossy_f16_, lossy_bf16_;
  int n_ = 0;
  std::vector<std::vector<int>> cons_;
  BlockSchedule s_;
};

}  // namespace kiln::planner
