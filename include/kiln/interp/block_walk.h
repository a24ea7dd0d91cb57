// The block-graph walker: runs a graph-defined kernel's block graph over device tensors, generic
// over the value domain, with exactly the semantics of the comment at the top of
// kiln/ir/block_graph.h. The interpreter and the verifier both run block graphs through this one
// traversal.
//
// For every selected block (grid index, row-major, dim 0 outermost), independently:
//   1. the Invariant ops are evaluated once (input tiles whose fmap is all -1, and compute ops on
//      them);
//   2. for each loop iteration (row-major loop index, dim 0 outermost; one iteration when there
//      are no loop dims): the Loop-stage ops are evaluated in graph order, then every
//      accumulator folds in its operand tile(s) of this iteration, then the Loop-stage tiles with
//      savers are stored at this iteration's offset;
//   3. the Post-stage ops are evaluated in graph order (accumulators now hold their results) and
//      the Post and Invariant tiles with savers are stored once.
// Accumulators: accum_sum adds, accum_max combines with D::max, accum_rescale(v, m) keeps a
// running max M and a sum S rescaled on every step,
//   M' = max(M, m_i),   S' = S * exp(M - M') + v_i * exp(m_i - M'),
// which equals sum_i v_i * exp(m_i - max_i m_i) in exact arithmetic and in the field domain
// (where exp is a homomorphism), the form online softmax uses.
// Stores apply D::round_store with the output tensor's dtype. Blocks write disjoint regions
// (the builder guarantees it), so they run in parallel with oneTBB.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <type_traits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "kiln/interp/tensor_ops.h"
#include "kiln/ir/block_graph.h"

namespace kiln::interp {

// Where one input iterator or output saver reads or writes: for each dim d of its device tensor,
// the tile extent t_d, the grid dim and loop dim mapped to d (-1 if none) and the loop range L_d.
// The tile of grid index g at loop index l starts at (g[grid_dim] * L_d + l[loop_dim]) * t_d.
// An output tile of lower rank than its tensor aligns with the trailing dims (leading t_d = 1).
struct TileGeometry {
  int rank = 0;
  std::array<int64_t, kMaxRank> tile{}, tensor{}, loop_range{};
  std::array<int, kMaxRank> grid_dim{}, loop_dim{};

  TileGeometry() = default;
  // op is an Input or Output op of bg.
  TileGeometry(const BlockGraph& bg, const BlockOp& op) {
    const bool is_input = op.kind == OpKind::Input;
    const TensorDesc& t = is_input ? bg.inputs.at(op.io) : bg.outputs.at(op.io);
    rank = static_cast<int>(t.shape.size());
    const int lead = rank - static_cast<int>(op.shape.size());
    KILN_ASSERT(lead >= 0 && (lead == 0 || !is_input), "tile {} of tensor {}", shape_str(op.shape),
                shape_str(t.shape));
    for (int d = 0; d < rank; ++d) {
      tensor[d] = t.shape[d];
      tile[d] = d < lead ? 1 : op.shape[d - lead];
      grid_dim[d] = loop_dim[d] = -1;
      loop_range[d] = 1;
      int64_t grid_extent = 1;
      for (size_t i = 0; i < op.imap.size(); ++i)
        if (op.imap[i] == d) grid_dim[d] = static_cast<int>(i), grid_extent = bg.grid[i];
      for (size_t i = 0; i < op.fmap.size(); ++i)
        if (op.fmap[i] == d) loop_dim[d] = static_cast<int>(i), loop_range[d] = bg.loop[i];
      KILN_ASSERT(tile[d] * grid_extent * loop_range[d] == tensor[d],
                  "{}: dim {}: tile {} x grid {} x loop {} != {}", op.name, d, tile[d], grid_extent,
                  loop_range[d], tensor[d]);
    }
  }

  int64_t start(int d, const int64_t* g, const int64_t* l) const {
    int64_t gi = grid_dim[d] >= 0 ? g[grid_dim[d]] : 0;
    int64_t li = loop_dim[d] >= 0 ? l[loop_dim[d]] : 0;
    return (gi * loop_range[d] + li) * tile[d];
  }
};

// Calls f(src_offset, dst_offset, count) for each contiguous run of the box of extents
// geo.tile starting at `start` in a tensor of extents geo.tensor; dst is the box row-major.
template <class F>
void for_box_runs(const TileGeometry& geo, const std::array<int64_t, kMaxRank>& start, F&& f) {
  // Pad to rank 4 with leading extents of 1.
  std::array<int64_t, 4> ext{1, 1, 1, 1}, st{0, 0, 0, 0}, dim{1, 1, 1, 1};
  const int pad = 4 - geo.rank;
  for (int d = 0; d < geo.rank; ++d) {
    ext[pad + d] = geo.tile[d];
    st[pad + d] = start[d];
    dim[pad + d] = geo.tensor[d];
  }
  int64_t dst = 0;
  for (int64_t i0 = 0; i0 < ext[0]; ++i0)
    for (int64_t i1 = 0; i1 < ext[1]; ++i1)
      for (int64_t i2 = 0; i2 < ext[2]; ++i2) {
        int64_t src = (((st[0] + i0) * dim[1] + st[1] + i1) * dim[2] + st[2] + i2) * dim[3] + st[3];
        f(src, dst, ext[3]);
        dst += ext[3];
      }
}

template <ValueDomain D>
class BlockWalker {
 public:
  using V = typename D::V;
  using T = Tensor<V>;

  BlockWalker(const D& d, const BlockGraph& bg) : d_(d), bg_(bg), geo_(bg.ops.size()) {
    for (size_t i = 0; i < bg.ops.size(); ++i) {
      const BlockOp& op = bg.ops[i];
      const OpClass cls = op_info(op.kind).cls;
      const int id = static_cast<int>(i);
      if (cls == OpClass::Input || cls == OpClass::Output) geo_[i] = TileGeometry(bg, op);
      if (cls == OpClass::Output) {
        Stage s = bg.ops.at(op.inputs.at(0)).stage;
        (s == Stage::Loop ? loop_savers_ : final_savers_).push_back(id);
      } else if (cls == OpClass::Accum) {
        accums_.push_back(id);
      } else {
        (op.stage == Stage::Invariant ? invariant_
         : op.stage == Stage::Loop    ? loop_
                                      : post_)
            .push_back(id);
      }
    }
  }

  // Operand `operand` of matmul block op `op` is passed through D::round_store(v, dtype) where
  // the matmul reads it (OperandRounding in interp.h: what a 16-bit tensor-core mma does to a
  // float32 tile).
  // With row_scaled, each row (last dim) of the operand is rounded relative to its largest
  // magnitude (OperandRounding::row_scaled; float domains only, elsewhere plain round_store).
  void round_operand(int op, int operand, DType dtype, bool row_scaled = false) {
    KILN_ASSERT(op >= 0 && op < static_cast<int>(bg_.ops.size()) &&
                    op_info(bg_.ops[op].kind).cls == OpClass::Matmul && operand >= 0 && operand < 2,
                "round_operand: block op {} operand {}", op, operand);
    if (round_.empty()) round_.resize(bg_.ops.size());
    round_[op][operand] = (static_cast<int>(dtype) + 1) | (row_scaled ? kRowScaled : 0);
  }

  // Runs the blocks flagged in block_mask (all if empty; one flag per block, numbered row-major
  // over the grid) reading `inputs` (one per bg.inputs) and storing into `outputs` (one per
  // bg.outputs, already shaped). Blocks run in parallel if `parallel`.
  void run(std::span<const T* const> inputs, std::span<T* const> outputs,
           const std::vector<uint8_t>& block_mask, bool parallel) const {
    KILN_ASSERT(inputs.size() == bg_.inputs.size() && outputs.size() == bg_.outputs.size(),
                "block graph arity");
    for (size_t i = 0; i < inputs.size(); ++i)
      KILN_ASSERT(inputs[i]->shape == bg_.inputs[i].shape, "block input {} is {}, expected {}", i,
                  shape_str(inputs[i]->shape), shape_str(bg_.inputs[i].shape));
    for (size_t i = 0; i < outputs.size(); ++i)
      KILN_ASSERT(outputs[i]->shape == bg_.outputs[i].shape, "block output {}", i);
    std::vector<int64_t> blocks;
    for (int64_t b = 0; b < bg_.num_blocks(); ++b)
      if (block_mask.empty() || block_mask[b]) blocks.push_back(b);
    const int64_t nsel = static_cast<int64_t>(blocks.size());
    // With fewer blocks than workers, let the tile ops themselves spread out.
    const Exec tile_ex{parallel && nsel < tbb::this_task_arena::max_concurrency()};
    auto body = [&](int64_t b0, int64_t b1) {
      State st(bg_.ops.size());
      for (int64_t i = b0; i < b1; ++i) run_block(blocks[i], st, inputs, outputs, tile_ex);
    };
    if (parallel && nsel > 1)
      tbb::parallel_for(tbb::blocked_range<int64_t>(0, nsel, 1),
                        [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
    else
      body(0, nsel);
  }

 private:
  // Per-worker scratch, reused across the blocks a worker runs.
  struct State {
    explicit State(size_t n) : val(n), run_max(n) {}
    std::vector<T> val;      // the current tile of every op (accumulators: the running value)
    std::vector<T> run_max;  // accum_rescale: the running max M
    std::array<T, 4> tmp;
    std::array<T, 2> rounded;  // matmul operands rounded per round_operand
    std::vector<T> thread_tmp;
    std::vector<const T*> args;
  };

  void eval_op(int i, State& st, std::span<const T* const> inputs, const int64_t* g,
               const int64_t* l, const Exec& ex) const {
    const BlockOp& op = bg_.ops[i];
    T& out = st.val[i];
    if (op.kind == OpKind::Input) {
      const TileGeometry& geo = geo_[i];
      std::array<int64_t, kMaxRank> start{};
      for (int d = 0; d < geo.rank; ++d) start[d] = geo.start(d, g, l);
      out.reset(op.shape);
      const V* src = inputs[op.io]->data.data();
      V* dst = out.data.data();
      for_box_runs(geo, start, [&](int64_t s, int64_t o, int64_t n) {
        std::copy(src + s, src + s + n, dst + o);
      });
      return;
    }
    st.args.clear();
    for (int in : op.inputs) st.args.push_back(&st.val[in]);
    if (!round_.empty())
      for (int j = 0; j < 2; ++j)
        if (round_[i][j]) {
          // A rounded copy of the operand (the tile itself may have other readers).
          T& r = st.rounded[j];
          r = *st.args[j];
          const DType dt = static_cast<DType>((round_[i][j] & ~kRowScaled) - 1);
          if constexpr (std::is_floating_point_v<V>) {
            if (round_[i][j] & kRowScaled) {
              const int64_t cols = r.shape.empty() ? 1 : r.shape.back();
              for (size_t a = 0; a < r.data.size(); a += static_cast<size_t>(cols)) {
                V c = 0;
                for (int64_t b = 0; b < cols; ++b) c = std::max<V>(c, std::abs(r.data[a + b]));
                if (!(c > 0) || !std::isfinite(c)) c = 1;
                for (int64_t b = 0; b < cols; ++b)
                  r.data[a + b] = d_.round_store(r.data[a + b] / c, dt) * c;
              }
              st.args[j] = &r;
              continue;
            }
          }
          for (V& v : r.data) v = d_.round_store(v, dt);
          st.args[j] = &r;
        }
    std::span<const T* const> args(st.args);
    if (op.kind == OpKind::Fused)
      thread_graph_op(d_, *op.thread, args, op.shape, st.thread_tmp, out);
    else
      apply_op(d_, op.kind, op.attrs, args, out, ex);
    KILN_ASSERT(out.shape == op.shape, "block op {}: computed {}, expected {}", op.name,
                shape_str(out.shape), shape_str(op.shape));
  }

  void accumulate(int i, State& st, bool first, const Exec& ex) const {
    const BlockOp& op = bg_.ops[i];
    T& acc = st.val[i];
    const T& v = st.val[op.inputs[0]];
    auto& [t0, t1, t2, t3] = st.tmp;
    switch (accum_kind(op.kind)) {
      case AccumKind::Sum:
        if (first) {
          acc = v;
        } else {
          binary_op(d_, OpKind::Add, acc, v, t0, ex);
          std::swap(acc, t0);
        }
        return;
      case AccumKind::Max:
        if (first) {
          acc = v;
        } else {
          max_combine(d_, acc, v, t0);
          std::swap(acc, t0);
        }
        return;
      case AccumKind::Rescale: {
        const T& m = st.val[op.inputs[1]];
        T& mx = st.run_max[i];
        const Attrs none;
        if (first) {
          mx = m;  // S = v * exp(m - M) with M = m
          binary_op(d_, OpKind::Sub, m, mx, t0, ex);
          unary_op(d_, OpKind::Exp, none, t0, t1, ex);
          binary_op(d_, OpKind::Mul, v, t1, acc, ex);
          return;
        }
        max_combine(d_, mx, m, t3);                   // M' = max(M, m)
        binary_op(d_, OpKind::Sub, mx, t3, t0, ex);   // M - M'
        unary_op(d_, OpKind::Exp, none, t0, t1, ex);  // exp(M - M')
        binary_op(d_, OpKind::Mul, acc, t1, t2, ex);  // S * exp(M - M')
        binary_op(d_, OpKind::Sub, m, t3, t0, ex);    // m - M'
        unary_op(d_, OpKind::Exp, none, t0, t1, ex);  // exp(m - M')
        binary_op(d_, OpKind::Mul, v, t1, t0, ex);    // v * exp(m - M')
        binary_op(d_, OpKind::Add, t2, t0, acc, ex);  // S'
        std::swap(mx, t3);
        return;
      }
    }
  }

  void store(int i, const State& st, std::span<T* const> outputs, const int64_t* g,
             const int64_t* l) const {
    const BlockOp& op = bg_.ops[i];
    const TileGeometry& geo = geo_[i];
    const T& tile = st.val[op.inputs[0]];
    const DType dt = bg_.outputs[op.io].dtype;
    std::array<int64_t, kMaxRank> start{};
    for (int d = 0; d < geo.rank; ++d) start[d] = geo.start(d, g, l);
    V* dst = outputs[op.io]->data.data();
    const V* src = tile.data.data();
    for_box_runs(geo, start, [&](int64_t s, int64_t o, int64_t n) {
      for (int64_t j = 0; j < n; ++j) dst[s + j] = d_.round_store(src[o + j], dt);
    });
  }

  void run_block(int64_t block, State& st, std::span<const T* const> inputs,
                 std::span<T* const> outputs, const Exec& ex) const {
    int64_t g[3] = {0, 0, 0}, l[3] = {0, 0, 0};
    for (size_t i = bg_.grid.size(); i-- > 0;) {
      g[i] = block % bg_.grid[i];
      block /= bg_.grid[i];
    }
    for (int i : invariant_) eval_op(i, st, inputs, g, l, ex);
    const int64_t iters = bg_.num_iterations();
    for (int64_t it = 0; it < iters; ++it) {
      for (int64_t rest = it, i = static_cast<int64_t>(bg_.loop.size()); i-- > 0;) {
        l[i] = rest % bg_.loop[i];
        rest /= bg_.loop[i];
      }
      for (int i : loop_) eval_op(i, st, inputs, g, l, ex);
      for (int i : accums_) accumulate(i, st, it == 0, ex);
      for (int i : loop_savers_) store(i, st, outputs, g, l);
    }
    l[0] = l[1] = l[2] = 0;
    for (int i : post_) eval_op(i, st, inputs, g, l, ex);
    for (int i : final_savers_) store(i, st, outputs, g, l);
  }

  const D& d_;
  const BlockGraph& bg_;
  std::vector<TileGeometry> geo_;
  static constexpr int kRowScaled = 0x100;
  std::vector<std::array<int, 2>> round_;  // per op, per operand: 0, or DType + 1 | kRowScaled
  // Op indices by role, each in graph order.
  std::vector<int> invariant_, loop_, post_, accums_, loop_savers_, final_savers_;
};

}  // namespace kiln::interp
