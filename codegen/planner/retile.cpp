// Loop re-tiling (kiln/codegen/block_schedule.h, retile_loop): a loop dim cut into different
// iterations where that is exact, so that pipeline stages are small enough to keep several in
// flight.
#include "block_planner.h"

namespace kiln {

using namespace planner;

namespace {

// ---- loop re-tiling ------------------------------------------------------------------------

// How a loop-stage tile depends on loop dim j: `dim` >= 0 when the tile is a slice of the k
// range the loop walks (along that tile dim); `partial` when it is a sum over its slice (a
// matmul contracting the slice, or a sum over it), so that summing it over iterations does not
// depend on how the k range is cut into iterations.
struct KSlice {
  int dim = -1;
  bool partial = false;
};

// True when cutting loop dim j's k range differently is exact for bg: every loop-stage value
// reaches the graph's outputs through accum_sum of partials only.
bool retile_exact(const BlockGraph& bg, int j) {
  const int n = static_cast<int>(bg.ops.size());
  std::vector<KSlice> ks(n);
  bool any = false;
  for (int i = 0; i < n; ++i) {
    const BlockOp& o = bg.ops[i];
    const OpClass c = op_info(o.kind).cls;
    const int r = static_cast<int>(o.shape.size());
    auto in = [&](int a) -> const KSlice& { return ks[o.inputs[a]]; };
    auto any_partial = [&] {
      for (int x : o.inputs)
        if (ks[x].partial) return true;
      return false;
    };
    if (c == OpClass::Accum) {
      if (bg.ops[o.inputs[0]].stage == Stage::Invariant && o.kind == OpKind::AccumSum)
        return false;  // a sum of an invariant tile counts the iterations
      if (o.kind != OpKind::AccumSum) {
        for (int x : o.inputs)
          if (bg.ops[x].stage == Stage::Loop) return false;
        continue;
      }
      if (!in(0).partial) return false;
      continue;
    }
    if (o.stage != Stage::Loop) continue;  // Invariant and Post tiles do not depend on j
    switch (c) {
      case OpClass::Input:
        if (j < static_cast<int>(o.fmap.size()) && o.fmap[j] >= 0) {
          ks[i].dim = o.fmap[j];
          any = true;
        }
        break;
      case OpClass::Constant:
        break;
      case OpClass::Unary:
      case OpClass::Binary:
      case OpClass::Fused: {
        if (any_partial()) return false;  // not linear in general
        int d = -1;
        for (int x : o.inputs)
          if (ks[x].dim >= 0) {
            int dd = ks[x].dim + (r - static_cast<int>(bg.ops[x].shape.size()));
            if (d >= 0 && dd != d) return false;
            d = dd;
          }
        if (d >= 0)
          for (int x : o.inputs) {
            // An operand that is not a slice must broadcast along the slice dim.
            const Shape& sh = bg.ops[x].shape;
            int dd = d - (r - static_cast<int>(sh.size()));
            if (ks[x].dim < 0 && dd >= 0 && sh[dd] != 1) return false;
          }
        ks[i].dim = d;
        break;
      }
      case OpClass::Transpose: {
        if (any_partial()) return false;
        if (in(0).dim < 0) break;
        std::vector<int> perm = o.attrs.perm;
        if (perm.empty()) {
          for (int k = 0; k < r; ++k) perm.push_back(k);
          std::swap(perm[r - 1], perm[r - 2]);
        }
        for (int k = 0; k < r; ++k)
          if (perm[k] == in(0).dim) ks[i].dim = k;
        break;
      }
      case OpClass::Matmul: {
        if (any_partial()) return false;
        const KSlice &a = in(0), &b = in(1);
        const int ra = static_cast<int>(bg.ops[o.inputs[0]].shape.size());
        const int rb = static_cast<int>(bg.ops[o.inputs[1]].shape.size());
        if (a.dim < 0 && b.dim < 0) break;
        if (a.dim != ra - 1 || b.dim != rb - 2) return false;  // only the contracted dim
        ks[i].partial = true;
        break;
      }
      case OpClass::Reduce: {
        if (any_partial()) return false;
        int d = in(0).dim;
        if (d < 0) break;
        int rd = static_cast<int>(o.attrs.dim);
        if (rd == d) {
          if (o.kind != OpKind::Sum) return false;  // mean divides by the slice, max is no sum
          ks[i].partial = true;
        } else {
          ks[i].dim = !o.attrs.keepdim && rd < d ? d - 1 : d;
        }
        break;
      }
      case OpClass::Softmax:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
      case OpClass::Output:
      case OpClass::Accum:
        return false;  // loop-stage outputs, and anything else
    }
  }
  return any;
}

// The same graph with loop dim j of range `range`; throws UserError when a tile does not divide.
BlockGraph with_loop_range(const BlockGraph& bg, int j, int64_t range, const Target& t) {
  std::vector<int64_t> loop = bg.loop;
  loop[j] = range;
  BlockGraphBuilder b(bg.grid, bg.block_threads, loop, bg.inputs);
  for (const BlockOp& o : bg.ops) {
    switch (op_info(o.kind).cls) {
      case OpClass::Input:
        b.input(o.io, o.imap, o.fmap, o.name);
        break;
      case OpClass::Output: {
        const TensorDesc& td = bg.outputs[o.io];
        b.output(o.inputs[0], o.imap, o.fmap, td.dtype, td.name, static_cast<int>(td.shape.size()),
                 o.name);
        break;
      }
      case OpClass::Fused:
        b.fused(*o.thread, o.inputs, o.name);
        break;
      case OpClass::Matmul:
      case OpClass::Transpose:
      case OpClass::Binary:
      case OpClass::Unary:
      case OpClass::Constant:
      case OpClass::Reduce:
      case OpClass::Softmax:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
      case OpClass::Accum:
        b.op(o.kind, o.inputs, o.attrs, o.name);
        break;
    }
  }
  return std::move(b).finish(t);
}

}  // namespace

std::shared_ptr<const BlockGraph> retile_loop(const BlockGraph& bg, const Target& t,
                                              int* loop_dim) {
  // One loop dim only: the innermost one of range > 1 that is exact (several k loops are rare).
  int j = -1;
  for (int d = static_cast<int>(bg.loop.size()) - 1; d >= 0 && j < 0; --d)
    if (bg.loop[d] > 1 && retile_exact(bg, d)) j = d;
  if (j < 0) return nullptr;
  // The k extent the loop walks, per block: the slice extent times the range, for any slice.
  int64_t kext = 0;
  for (const BlockOp& o : bg.ops)
    if (o.kind == OpKind::Input && o.stage == Stage::Loop && j < (int)o.fmap.size() &&
        o.fmap[j] >= 0) {
      kext = o.shape[o.fmap[j]] * bg.loop[j];
      break;
    }
  const int64_t blocks = bg.num_blocks();
  const int64_t per_sm = std::max<int64_t>(
      1, std::min<int64_t>((blocks + t.sm_count - 1) / t.sm_count, 2048 / bg.block_threads));
  // A stage of at most 20 KB, and at least four stages in the share of shared memory a block
  // gets at the occupancy the grid can use.
  const int64_t share = std::min<int64_t>(t.smem_per_block, (t.smem_per_block + 1024) / per_sm);
  const int64_t target = std::clamp<int64_t>(share / 5, 2048, 20 * 1024);
  struct Cand {
    int64_t range, stage;
    bool aligned;
    std::shared_ptr<const BlockGraph> g;
  };
  auto measure = [&](const BlockGraph& g, int64_t range) {
    Cand c{range, 0, true, nullptr};
    for (const BlockOp& o : g.ops) {
      if (o.kind == OpKind::Input && o.stage == Stage::Loop)
        c.stage += align_up(numel(o.shape) * dtype_bytes(g.inputs[o.io].dtype), 16);
      if (o.kind == OpKind::MatMul && o.stage == Stage::Loop) {
        const Shape& a = g.ops[o.inputs[0]].shape;
        c.aligned &= a.back() % 16 == 0;  // whole k16 steps: ldmatrix, no gathers
      }
    }
    return c;
  };
  const Cand orig = measure(bg, bg.loop[j]);
  auto better = [&](const Cand& x, const Cand& y) {  // is x better than y
    if (x.aligned != y.aligned) return x.aligned;
    bool xf = x.stage <= target, yf = y.stage <= target;
    if (xf != yf) return xf;
    if (xf) {
      // Both fit: the larger stage (fewer iterations), unless the ring would get too short.
      bool xl = x.range >= 4, yl = y.range >= 4;
      if (xl != yl) return xl;
      return x.stage > y.stage;
    }
    return x.stage < y.stage;
  };
  Cand best = orig;
  for (int64_t range = 1; range <= kext && range <= 4096; ++range) {
    if (kext % range || range == bg.loop[j]) continue;
    std::shared_ptr<const BlockGraph> g;
    try {
      g = std::make_shared<const BlockGraph>(with_loop_range(bg, j, range, t));
    } catch (const UserError&) {
      continue;  // a tile does not divide, or resources
    }
    Cand c = measure(*g, range);
    c.g = g;
    if (better(c, best)) best = c;
  }
  if (!best.g) return nullptr;
  if (loop_dim) *loop_dim = j;
  return best.g;
}

}  // namespace kiln
