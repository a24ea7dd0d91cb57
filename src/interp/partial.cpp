// Partial evaluation planning: which rows of which tensors, and which blocks of which
// graph-defined kernels, a set of output rows depends on (see plan_rows in eval_core.h).
#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <utility>

#include "kiln/interp/eval_core.h"
#include "kiln/ir/diag.h"

namespace kiln::interp {

namespace {

// Row-major multi-index helpers over shapes of rank <= kMaxRank.
using Index = std::array<int64_t, kMaxRank>;

void unravel(int64_t flat, const Shape& s, Index& idx) {
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
}

int64_t ravel(const Index& idx, const Shape& s) {
  int64_t flat = 0;
  for (size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + idx[d];
  return flat;
}

int64_t row_of_element(int64_t flat, const Shape& s) {
  return flat / num_cols(s);
}

class Planner {
 public:
  explicit Planner(const KernelGraph& g) : g_(g), mask_(g.tensors.size()) {}

  void need_row(int t, int64_t r) { mask(t)[r] = 1; }
  void need_all(int t) { std::fill(mask(t).begin(), mask(t).end(), 1); }
  bool needed(int t) const {
    return std::any_of(mask_[t].begin(), mask_[t].end(), [](uint8_t f) { return f != 0; });
  }

  EvalPlan run() {
    EvalPlan plan;
    plan.needed.assign(g_.tensors.size(), 0);
    plan.rows.assign(g_.tensors.size(), {});
    plan.blocks.assign(g_.ops.size(), {});
    for (size_t oi = g_.ops.size(); oi-- > 0;) {
      const KernelOp& op = g_.ops[oi];
      if (std::none_of(op.outputs.begin(), op.outputs.end(), [&](int t) { return needed(t); }))
        continue;
      if (op.kind == OpKind::GraphDefined)
        plan.blocks[oi] = plan_graph_defined(op);
      else
        plan_predefined(op);
    }
    for (size_t t = 0; t < g_.tensors.size(); ++t) {
      plan.needed[t] = needed(static_cast<int>(t));
      bool all = std::all_of(mask_[t].begin(), mask_[t].end(), [](uint8_t f) { return f != 0; });
      if (plan.needed[t] && !all) plan.rows[t] = std::move(mask_[t]);
    }
    return plan;
  }

 private:
  RowMask& mask(int t) {
    if (mask_[t].empty()) mask_[t].assign(num_rows(g_.tensor(t).shape), 0);
    return mask_[t];
  }

  // Flags the row of every element of tensor `in` that output element (row r, column c) of
  // `so` reads, where `to_input` maps the output multi-index to the input's with one free dim
  // (`free_dim`, -1 for none) that ranges over its whole extent.
  template <class F>
  void need_elements(int in, int64_t r, int64_t c, const Shape& so, int free_dim, F&& to_input) {
    const Shape& si = g_.tensor(in).shape;
    Index oi{}, ii{};
    unravel(r * num_cols(so) + c, so, oi);
    to_input(oi, ii);
    RowMask& m = mask(in);
    if (free_dim < 0) {
      m[row_of_element(ravel(ii, si), si)] = 1;
      return;
    }
    for (int64_t v = 0; v < si[free_dim]; ++v) {
      ii[free_dim] = v;
      m[row_of_element(ravel(ii, si), si)] = 1;
    }
  }

  void plan_predefined(const KernelOp& op) {
    const int out = op.outputs[0];
    const Shape& so = g_.tensor(out).shape;
    const RowMask mo = mask_[out];  // a copy: mask() below may touch other tensors only
    const int64_t rows = static_cast<int64_t>(mo.size());
    switch (op_info(op.kind).cls) {
      case OpClass::Constant:
        return;
      case OpClass::Unary:
      case OpClass::Binary:
        for (int in : op.inputs) {
          BroadcastMap map(lead_shape(so), lead_shape(g_.tensor(in).shape));
          for (int64_t r = 0; r < rows; ++r)
            if (mo[r]) need_row(in, map(r));
        }
        return;
      case OpClass::Matmul: {
        const Shape &sa = g_.tensor(op.inputs[0]).shape, &sb = g_.tensor(op.inputs[1]).shape;
        Shape batch(so.begin(), so.end() - 2), ba(sa.begin(), sa.end() - 2),
            bb(sb.begin(), sb.end() - 2);
        BroadcastMap map_a(batch, ba), map_b(batch, bb);
        const int64_t m = so[so.size() - 2], k = sa.back();
        // B's rows depend only on the batch index: flag them once per B batch (a GEMM's rows
        // would otherwise flag all of B once per output row).
        std::vector<uint8_t> b_done(static_cast<size_t>(std::max<int64_t>(1, numel(bb))), 0);
        for (int64_t r = 0; r < rows; ++r) {
          if (!mo[r]) continue;
          const int64_t bi = r / m;
          need_row(op.inputs[0], map_a(bi) * m + r % m);
          if (b_done[map_b(bi)]++) continue;
          for (int64_t p = 0; p < k; ++p) need_row(op.inputs[1], map_b(bi) * k + p);
        }
        return;
      }
      case OpClass::Reduce: {
        const int in = op.inputs[0];
        const int d = static_cast<int>(op.attrs.dim);
        const int ri = static_cast<int>(g_.tensor(in).shape.size());
        // The output's columns matter only when they index a leading input dim.
        const bool cols_matter = !op.attrs.keepdim && d == ri - 1;
        for (int64_t r = 0; r < rows; ++r) {
          if (!mo[r]) continue;
          for (int64_t c = 0; c < (cols_matter ? num_cols(so) : 1); ++c)
            need_elements(in, r, c, so, d, [&](const Index& oi, Index& ii) {
              // Without keepdim the output lacks dim d: output dim j is input dim j (+1 past d).
              for (int i = 0; i < ri; ++i)
                ii[i] = i == d ? 0 : oi[op.attrs.keepdim || i < d ? i : i - 1];
            });
        }
        return;
      }
      case OpClass::Softmax: {
        const int in = op.inputs[0];
        const int d = static_cast<int>(op.attrs.dim);
        const bool last = d == static_cast<int>(so.size()) - 1;
        for (int64_t r = 0; r < rows; ++r) {
          if (!mo[r]) continue;
          if (last)
            need_row(in, r);
          else
            need_elements(in, r, 0, so, d, [&](const Index& oi, Index& ii) { ii = oi; });
        }
        return;
      }
      case OpClass::RmsNorm:
        for (int64_t r = 0; r < rows; ++r)
          if (mo[r]) need_row(op.inputs[0], r);
        if (op.inputs.size() > 1) need_all(op.inputs[1]);
        return;
      case OpClass::Transpose: {
        const int in = op.inputs[0];
        const int rk = static_cast<int>(so.size());
        std::vector<int> perm = transpose_perm(op.attrs, rk);
        const bool cols_matter = rk >= 1 && perm[rk - 1] != rk - 1;
        // Stops once every input row is flagged: a 2-D transpose's first row reads them all, and
        // walking the rest element by element took tens of seconds on a 14336 x 4096 weight.
        const RowMask& mi = mask(in);
        for (int64_t r = 0; r < rows; ++r) {
          if (!mo[r]) continue;
          if (cols_matter && r > 0 && mi[0] && mi.back() &&
              std::all_of(mi.begin(), mi.end(), [](uint8_t f) { return f != 0; }))
            break;
          for (int64_t c = 0; c < (cols_matter ? num_cols(so) : 1); ++c)
            need_elements(in, r, c, so, -1, [&](const Index& oi, Index& ii) {
              for (int i = 0; i < rk; ++i) ii[perm[i]] = oi[i];
            });
        }
        return;
      }
      case OpClass::GraphDefined:
      case OpClass::Input:
      case OpClass::Output:
      case OpClass::Accum:
      case OpClass::Fused:
        break;
    }
    throw InternalError(fmt::format("plan_rows: unexpected op {}", op_name(op.kind)));
  }

  // The rows of a device tensor covered by a box [lo_d, hi_d) over its dims, as runs of
  // consecutive rows: f(first, end) for each run along the last leading dim (the caller's work
  // per run is a prefix-sum lookup or a fill, not a loop over its rows).
  template <class F>
  static void for_box_runs(const Shape& s, const Index& lo, const Index& hi, F&& f) {
    const int lead = static_cast<int>(s.size()) - 1;
    if (lead <= 0) return f(int64_t(0), int64_t(1));
    const Shape ls = lead_shape(s);
    const int last = lead - 1;
    // A partial tile's box may reach past the tensor: its rows there do not exist.
    Index end = hi;
    for (int d = 0; d < lead; ++d) {
      end[d] = std::min(hi[d], s[d]);
      if (end[d] <= lo[d]) return;
    }
    Index i = lo;
    while (true) {
      Index full{};
      for (int d = 0; d < lead; ++d) full[d] = i[d];
      const int64_t first = ravel(full, ls);
      f(first, first + (end[last] - lo[last]));
      int d = last - 1;
      while (d >= 0 && ++i[d] == end[d]) i[d] = lo[d], --d;
      if (d < 0) return;
    }
  }

  // The box a tile iterator covers over all loop iterations of block g.
  static void block_box(const TileGeometry& geo, const int64_t* g, Index& lo, Index& hi) {
    const int64_t zero[3] = {0, 0, 0};
    for (int d = 0; d < geo.rank; ++d) {
      lo[d] = geo.start(d, g, zero);
      hi[d] = lo[d] + geo.tile[d] * (geo.loop_dim[d] >= 0 ? geo.loop_range[d] : 1);
    }
  }

  std::vector<uint8_t> plan_graph_defined(const KernelOp& op) {
    const BlockGraph& bg = *op.block;
    std::vector<TileGeometry> geo(bg.ops.size());
    for (size_t i = 0; i < bg.ops.size(); ++i)
      if (bg.ops[i].kind == OpKind::Input || bg.ops[i].kind == OpKind::Output)
        geo[i] = TileGeometry(bg, bg.ops[i]);
    const int64_t nb = bg.num_blocks();
    std::vector<uint8_t> blocks(nb, 0);
    std::vector<std::set<std::pair<Index, Index>>> marked(bg.ops.size());
    // Prefix counts of the outputs' masks (fixed while this kernel is planned: its outputs are
    // not its inputs), so that a block's hit test costs one lookup per run of rows.
    std::map<int, std::vector<int64_t>> prefixes;
    auto prefix = [&](int t) -> const std::vector<int64_t>& {
      auto it = prefixes.find(t);
      if (it != prefixes.end()) return it->second;
      std::vector<int64_t> p(mask_[t].size() + 1, 0);
      for (size_t r = 0; r < mask_[t].size(); ++r) p[r + 1] = p[r] + (mask_[t][r] != 0);
      return prefixes.emplace(t, std::move(p)).first->second;
    };
    bool all = true;
    for (int64_t b = 0; b < nb; ++b) {
      int64_t g[3] = {0, 0, 0};
      for (int64_t i = static_cast<int64_t>(bg.grid.size()), rest = b; i-- > 0;) {
        g[i] = rest % bg.grid[i];
        rest /= bg.grid[i];
      }
      bool hit = false;
      for (size_t i = 0; i < bg.ops.size() && !hit; ++i) {
        const BlockOp& bo = bg.ops[i];
        if (bo.kind != OpKind::Output) continue;
        const int t = op.outputs[bo.io];
        if (mask_[t].empty()) continue;
        Index lo{}, hi{};
        block_box(geo[i], g, lo, hi);
        const std::vector<int64_t>& pre = prefix(t);
        for_box_runs(g_.tensor(t).shape, lo, hi,
                     [&](int64_t a, int64_t e) { hit |= pre[e] > pre[a]; });
      }
      blocks[b] = hit;
      all &= hit;
      if (!hit) continue;
      for (size_t i = 0; i < bg.ops.size(); ++i) {
        const BlockOp& bo = bg.ops[i];
        if (bo.kind != OpKind::Input) continue;
        const int t = op.inputs[bo.io];
        Index lo{}, hi{};
        block_box(geo[i], g, lo, hi);
        // Blocks along the grid dims an input does not depend on read the same box (every row
        // block of a GEMM reads all of W's K rows): mark each distinct box once.
        if (!marked[i].insert({lo, hi}).second) continue;
        RowMask& m = mask(t);
        for_box_runs(g_.tensor(t).shape, lo, hi,
                     [&](int64_t a, int64_t e) { std::fill(m.begin() + a, m.begin() + e, 1); });
      }
    }
    if (all) blocks.clear();
    return blocks;
  }

  const KernelGraph& g_;
  std::vector<RowMask> mask_;  // per tensor: empty until something needs it
};

}  // namespace

EvalPlan plan_rows(const KernelGraph& g, const std::vector<std::vector<int64_t>>& rows) {
  if (rows.size() != g.outputs.size())
    user_error(ErrorCode::Shape, "row selection names {} outputs; the graph has {}", rows.size(),
               g.outputs.size());
  Planner p(g);
  for (size_t i = 0; i < rows.size(); ++i) {
    const TensorDesc& t = g.tensor(g.outputs[i]);
    const int64_t n = num_rows(t.shape);
    for (int64_t r : rows[i]) {
      if (r < 0 || r >= n)
        user_error(ErrorCode::Shape, "row {} of output {} is out of range: it has {} rows", r,
                   t.name, n);
      p.need_row(g.outputs[i], r);
    }
  }
  return p.run();
}

}  // namespace kiln::interp
