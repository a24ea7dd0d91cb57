// Symbolic dims by unification, unit scaling, full-size counts, and graph rebuilding.
#include "kiln/verifier/scale.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "kiln/interp/eval_core.h"
#include "kiln/interp/tensor_ops.h"
#include "kiln/ir/diag.h"

namespace kiln::verifier {

KernelGraph rebuild_graph(const KernelGraph& g) {
  KernelGraphBuilder kb(g.name, g.doc, g.arch);
  std::vector<int> id(g.tensors.size(), -1);
  for (int t : g.inputs) {
    const TensorDesc& d = g.tensor(t);
    id[t] = kb.input(d.name, d.shape, d.dtype);
  }
  for (const KernelOp& op : g.ops) {
    std::vector<int> in;
    for (int t : op.inputs) {
      KILN_ASSERT(id[t] >= 0, "rebuild: tensor {} used before it is defined", t);
      in.push_back(id[t]);
    }
    if (op.kind != OpKind::GraphDefined) {
      id[op.outputs.at(0)] = kb.op(op.kind, in, op.attrs, op.name);
      continue;
    }
    const BlockGraph& bg = *op.block;
    std::vector<TensorDesc> ins;
    for (int t : in) ins.push_back(kb.peek().tensor(t));
    BlockGraphBuilder bb(bg.grid, bg.block_threads, bg.loop, ins);
    for (const BlockOp& bo : bg.ops) {
      switch (op_info(bo.kind).cls) {
        case OpClass::Input:
          bb.input(bo.io, bo.imap, bo.fmap, bo.name);
          break;
        case OpClass::Output: {
          const TensorDesc& o = bg.outputs.at(bo.io);
          bb.output(bo.inputs.at(0), bo.imap, bo.fmap, o.dtype, o.name,
                    static_cast<int>(o.shape.size()), bo.name);
          break;
        }
        case OpClass::Fused:
          bb.fused(*bo.thread, bo.inputs, bo.name);
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
          bb.op(bo.kind, bo.inputs, bo.attrs, bo.name);
          break;
      }
    }
    auto block = std::make_shared<const BlockGraph>(std::move(bb).finish(target_for(g.arch)));
    std::vector<int> outs = kb.graph_defined(block, in, op.name);
    for (size_t i = 0; i < outs.size(); ++i) id[op.outputs.at(i)] = outs[i];
  }
  for (int t : g.outputs) kb.output(id[t]);
  return std::move(kb).finish();
}

namespace {

double op_work(OpKind kind, const std::vector<Shape>& in, const Shape& out) {
  const double n_out = static_cast<double>(numel(out));
  switch (op_info(kind).cls) {
    case OpClass::Matmul:
      return n_out * static_cast<double>(in.at(0).back());
    case OpClass::Reduce:
    case OpClass::Softmax:
    case OpClass::RmsNorm:
      return 3.0 * static_cast<double>(numel(in.at(0)));
    case OpClass::Transpose:
    case OpClass::Binary:
    case OpClass::Unary:
    case OpClass::Constant:
    case OpClass::GraphDefined:
    case OpClass::Input:
    case OpClass::Output:
    case OpClass::Accum:
    case OpClass::Fused:
      return n_out;
  }
}

}  // namespace

double estimate_op_work(const KernelGraph& g, size_t oi) {
  const KernelOp& op = g.ops.at(oi);
  if (op.kind != OpKind::GraphDefined) {
    std::vector<Shape> in;
    for (int t : op.inputs) in.push_back(g.tensor(t).shape);
    return op_work(op.kind, in, g.tensor(op.outputs.at(0)).shape);
  }
  const BlockGraph& bg = *op.block;
  double once = 0, per_iter = 0;
  for (const BlockOp& bo : bg.ops) {
    std::vector<Shape> in;
    for (int i : bo.inputs) in.push_back(bg.ops[i].shape);
    double w =
        bo.kind == OpKind::Input || bo.kind == OpKind::Output ? static_cast<double>(numel(bo.shape))
        : bo.kind == OpKind::Fused ? static_cast<double>(numel(bo.shape) * bo.thread->ops.size())
                                   : op_work(bo.kind, in, bo.shape);
    bool loop = bo.stage == Stage::Loop || op_info(bo.kind).cls == OpClass::Accum;
    (loop ? per_iter : once) += w;
  }
  return static_cast<double>(bg.num_blocks()) *
         (once + static_cast<double>(bg.num_iterations()) * per_iter);
}

double estimate_work(const KernelGraph& g) {
  double total = 0;
  for (size_t oi = 0; oi < g.ops.size(); ++oi) total += estimate_op_work(g, oi);
  return std::min(total, 4.6e18);
}

double estimate_work(const KernelGraph& g, const interp::EvalPlan& plan) {
  auto fraction = [](const std::vector<uint8_t>& flags) {
    if (flags.empty()) return 1.0;
    return static_cast<double>(
               std::count_if(flags.begin(), flags.end(), [](uint8_t f) { return f != 0; })) /
           static_cast<double>(flags.size());
  };
  double total = 0;
  for (size_t oi = 0; oi < g.ops.size(); ++oi) {
    const KernelOp& op = g.ops[oi];
    bool needed = false;
    for (int t : op.outputs) needed |= plan.needed.at(t) != 0;
    if (!needed) continue;
    double f = op.kind == OpKind::GraphDefined ? fraction(plan.blocks.at(oi))
                                               : fraction(plan.rows.at(op.outputs.at(0)));
    total += f * estimate_op_work(g, oi);
  }
  return std::min(total, 4.6e18);
}

namespace {

// Union-find over slots, each class carrying the gcd of its slots' extents.
class Classes {
 public:
  int add(int64_t extent) {
    parent_.push_back(static_cast<int>(parent_.size()));
    gcd_.push_back(extent);
    extent_.push_back(extent);
    return static_cast<int>(parent_.size()) - 1;
  }
  int find(int s) {
    while (parent_[s] != s) s = parent_[s] = parent_[parent_[s]];
    return s;
  }
  void unify(int x, int y) {
    x = find(x), y = find(y);
    if (x == y) return;
    parent_[y] = x;
    gcd_[x] = std::gcd(gcd_[x], gcd_[y]);
  }
  // Forces the unit of s's class to divide v (1: never scaled).
  void constrain(int s, int64_t v) {
    s = find(s);
    gcd_[s] = std::gcd(gcd_[s], v);
  }
  int64_t unit(int s) { return gcd_[find(s)]; }
  int64_t extent(int s) const { return extent_[s]; }
  int size() const { return static_cast<int>(parent_.size()); }

 private:
  std::vector<int> parent_;
  std::vector<int64_t> gcd_, extent_;
};

using Slots = std::vector<int>;  // one slot per dim

struct GraphSlots {
  std::vector<Slots> tensor;             // per kernel tensor
  std::vector<std::vector<Slots>> tile;  // per kernel op, per block op
};

class Unifier {
 public:
  Classes cls;

  GraphSlots add_graph(const KernelGraph& g) {
    GraphSlots gs;
    for (const TensorDesc& t : g.tensors) gs.tensor.push_back(new_slots(t.shape));
    gs.tile.resize(g.ops.size());
    for (size_t oi = 0; oi < g.ops.size(); ++oi) {
      const KernelOp& op = g.ops[oi];
      std::vector<const Slots*> in;
      std::vector<const Shape*> in_shapes;
      for (int t : op.inputs) in.push_back(&gs.tensor[t]), in_shapes.push_back(&g.tensor(t).shape);
      if (op.kind != OpKind::GraphDefined) {
        int t = op.outputs.at(0);
        unify_op(op.kind, op.attrs, in, in_shapes, gs.tensor[t], g.tensor(t).shape);
        continue;
      }
      const BlockGraph& bg = *op.block;
      auto& tiles = gs.tile[oi];
      for (const BlockOp& bo : bg.ops) {
        tiles.push_back(new_slots(bo.shape));
        Slots& mine = tiles.back();
        const OpClass c = op_info(bo.kind).cls;
        if (c == OpClass::Input) {
          const Slots& dev = gs.tensor[op.inputs.at(bo.io)];
          for (size_t d = 0; d < mine.size(); ++d) cls.unify(mine[d], dev[d]);
          continue;
        }
        if (c == OpClass::Output) {
          const Slots& dev = gs.tensor[op.outputs.at(bo.io)];
          const Slots& val = tiles[bo.inputs.at(0)];
          size_t lead = dev.size() - val.size();
          for (size_t d = 0; d < lead; ++d) cls.constrain(dev[d], 1);
          for (size_t d = 0; d < val.size(); ++d) {
            cls.unify(mine[d], val[d]);
            cls.unify(val[d], dev[lead + d]);
          }
          continue;
        }
        std::vector<const Slots*> bin;
        std::vector<const Shape*> bshapes;
        for (int i : bo.inputs) bin.push_back(&tiles[i]), bshapes.push_back(&bg.ops[i].shape);
        if (c == OpClass::Fused) {
          for (size_t i = 0; i < bin.size(); ++i) align(*bin[i], *bshapes[i], mine, bo.shape);
        } else if (c == OpClass::Accum) {
          for (size_t i = 0; i < bin.size(); ++i) align(*bin[i], *bshapes[i], mine, bo.shape);
        } else {
          unify_op(bo.kind, bo.attrs, bin, bshapes, mine, bo.shape);
        }
      }
    }
    return gs;
  }

  // NumPy alignment from the right: dims of equal extent are one symbolic dim.
  void align(const Slots& in, const Shape& in_shape, const Slots& out, const Shape& out_shape) {
    KILN_ASSERT(in.size() <= out.size(), "align {} to {}", shape_str(in_shape),
                shape_str(out_shape));
    size_t pad = out.size() - in.size();
    for (size_t i = 0; i < in.size(); ++i)
      if (in_shape[i] == out_shape[pad + i]) cls.unify(in[i], out[pad + i]);
  }

 private:
  Slots new_slots(const Shape& s) {
    Slots r;
    for (int64_t e : s) r.push_back(cls.add(e));
    return r;
  }

  void unify_op(OpKind kind, const Attrs& attrs, const std::vector<const Slots*>& in,
                const std::vector<const Shape*>& in_shapes, const Slots& out,
                const Shape& out_shape) {
    switch (op_info(kind).cls) {
      case OpClass::Matmul: {
        const Slots &a = *in[0], &b = *in[1];
        const size_t ra = a.size(), rb = b.size(), ro = out.size();
        cls.unify(a[ra - 1], b[rb - 2]);
        cls.unify(out[ro - 2], a[ra - 2]);
        cls.unify(out[ro - 1], b[rb - 1]);
        Slots ob(out.begin(), out.end() - 2);
        Shape obs(out_shape.begin(), out_shape.end() - 2);
        for (size_t k = 0; k < 2; ++k) {
          const Slots& x = *in[k];
          const Shape& xs = *in_shapes[k];
          align(Slots(x.begin(), x.end() - 2), Shape(xs.begin(), xs.end() - 2), ob, obs);
        }
        return;
      }
      case OpClass::Transpose: {
        std::vector<int> perm = transpose_perm(attrs, out.size());
        for (size_t i = 0; i < out.size(); ++i) cls.unify(out[i], (*in[0])[perm[i]]);
        return;
      }
      case OpClass::Binary:
      case OpClass::Unary:
      case OpClass::Softmax:
        for (size_t i = 0; i < in.size(); ++i) align(*in[i], *in_shapes[i], out, out_shape);
        return;
      case OpClass::Reduce: {
        const Slots& x = *in[0];
        for (size_t i = 0, o = 0; i < x.size(); ++i) {
          if (static_cast<int64_t>(i) == attrs.dim) {
            if (attrs.keepdim) ++o;
            continue;
          }
          cls.unify(x[i], out[o++]);
        }
        return;
      }
      case OpClass::RmsNorm:
        align(*in[0], *in_shapes[0], out, out_shape);
        if (in.size() > 1) cls.unify((*in[1])[0], in[0]->back());
        return;
      case OpClass::Constant:
      case OpClass::GraphDefined:
      case OpClass::Input:
      case OpClass::Output:
      case OpClass::Accum:
      case OpClass::Fused:
        return;  // Constant
    }
  }
};

// Mean and rms_norm divide by a count; in the scaled instance they keep the full-size count
// (Attrs::count), so the instance is the full one with offsets deleted from every reduction and
// every constant unchanged: no literal is ever reinterpreted because of its value.
void keep_full_counts(KernelGraph& g) {
  for (KernelOp& op : g.ops) {
    if ((op.kind == OpKind::Mean || op.kind == OpKind::RmsNorm) && op.attrs.count == 0) {
      const Shape& x = g.tensor(op.inputs.at(0)).shape;
      op.attrs.count = op.kind == OpKind::Mean ? x.at(op.attrs.dim) : x.back();
    }
    if (op.kind != OpKind::GraphDefined) continue;
    bool any = false;
    for (const BlockOp& bo : op.block->ops) any |= bo.kind == OpKind::Mean;
    if (!any) continue;
    auto bg = std::make_shared<BlockGraph>(*op.block);
    for (BlockOp& bo : bg->ops)
      if (bo.kind == OpKind::Mean && bo.attrs.count == 0)
        bo.attrs.count = bg->ops.at(bo.inputs.at(0)).shape.at(bo.attrs.dim);
    op.block = bg;
  }
}

}  // namespace

std::vector<int64_t> ScaledPair::full_index(int output, const std::vector<int64_t>& scaled) const {
  std::vector<int64_t> r = scaled;
  const auto& dims = out_dims.at(output);
  for (size_t d = 0; d < r.size() && d < dims.size(); ++d) {
    const DimScale& s = dims[d];
    r[d] = (scaled[d] / s.scaled_unit) * s.unit + scaled[d] % s.scaled_unit;
  }
  return r;
}

ScaledPair scale_pair(const KernelGraph& a, const KernelGraph& b, const ScaleOptions& opt) {
  Unifier u;
  GraphSlots sa = u.add_graph(a), sb = u.add_graph(b);
  for (int ta : a.inputs) {
    int tb = b.find_tensor(a.tensor(ta).name);
    KILN_ASSERT(tb >= 0 && b.tensor(tb).shape == a.tensor(ta).shape, "scale_pair: input {}",
                a.tensor(ta).name);
    for (size_t d = 0; d < sa.tensor[ta].size(); ++d)
      u.cls.unify(sa.tensor[ta][d], sb.tensor[tb][d]);
  }
  KILN_ASSERT(a.outputs.size() == b.outputs.size(), "scale_pair: outputs");
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const Slots &x = sa.tensor[a.outputs[i]], &y = sb.tensor[b.outputs[i]];
    KILN_ASSERT(x.size() == y.size(), "scale_pair: output {} rank", i);
    for (size_t d = 0; d < x.size(); ++d) u.cls.unify(x[d], y[d]);
  }

  Classes& cls = u.cls;
  auto scaled_unit = [&](int slot) {
    int64_t unit = cls.unit(slot);
    return unit > opt.unit ? opt.unit : unit;
  };
  auto scaled_extent = [&](int slot) {
    return cls.extent(slot) / cls.unit(slot) * scaled_unit(slot);
  };
  // Prefix shrinking: fewer units in a class, by cutting the one grid dim (or loop dim) that
  // partitions it in each block graph, or its whole tile where nothing does, keeping at least
  // two blocks (iterations).
  std::map<int, int64_t> cut_by;  // class root -> factor h
  struct Cut {
    int graph;
    size_t op;
    bool grid;
    int dim;
    int64_t h;
  };
  std::vector<Cut> cuts;
  if (opt.prefix) {
    std::map<int, int64_t> units;  // class root -> number of units
    for (int sl = 0; sl < cls.size(); ++sl) {
      int64_t n = cls.extent(sl) / cls.unit(sl);
      int64_t& m = units[cls.find(sl)];
      m = std::max(m, n);
    }
    const KernelGraph* gr[2] = {&a, &b};
    const GraphSlots* gsl[2] = {&sa, &sb};
    for (auto [root, count] : units) {
      if (count < 8) continue;
      int64_t divisor = count, limit = count / 2;
      bool ok = true;
      std::vector<Cut> mine;
      for (int gi = 0; gi < 2 && ok; ++gi) {
        const KernelGraph& g = *gr[gi];
        for (size_t oi = 0; oi < g.ops.size() && ok; ++oi) {
          const KernelOp& op = g.ops[oi];
          if (op.kind != OpKind::GraphDefined) continue;
          const BlockGraph& bg = *op.block;
          int kind = -1, which = -1;  // kind 0: a grid dim cuts it, 1: a loop dim, 2: nothing
          auto dev_slots = [&](const BlockOp& bo) -> const Slots& {
            return gsl[gi]
                ->tensor[bo.kind == OpKind::Input ? op.inputs.at(bo.io) : op.outputs.at(bo.io)];
          };
          for (const BlockOp& bo : bg.ops) {
            if (bo.kind != OpKind::Input && bo.kind != OpKind::Output) continue;
            const Slots& dev = dev_slots(bo);
            const int lead = static_cast<int>(dev.size() - bo.shape.size());
            for (int d = 0; d < static_cast<int>(dev.size()); ++d) {
              if (cls.find(dev[d]) != root) continue;
              auto at = [d](const std::vector<int>& m) {
                return static_cast<int>(std::find(m.begin(), m.end(), d) - m.begin());
              };
              int gd = at(bo.imap), ld = at(bo.fmap);
              int k = gd < static_cast<int>(bo.imap.size())   ? 0
                      : ld < static_cast<int>(bo.fmap.size()) ? 1
                                                              : 2;
              int w = k == 0 ? gd : k == 1 ? ld : -1;
              if (kind < 0) kind = k, which = w;
              ok &= kind == k && which == w;
              if (k == 2) {
                int64_t t = d < lead ? 1 : bo.shape[d - lead];
                divisor = std::gcd(divisor, t / cls.unit(dev[d]));
              }
            }
          }
          if (kind == 0 || kind == 1) {
            // The dim must cut nothing but this class.
            for (const BlockOp& bo : bg.ops) {
              if (bo.kind != OpKind::Input && bo.kind != OpKind::Output) continue;
              int d = (kind == 0 ? bo.imap : bo.fmap)[which];
              ok &= d < 0 || cls.find(dev_slots(bo)[d]) == root;
            }
            int64_t e = kind == 0 ? bg.grid[which] : bg.loop[which];
            divisor = std::gcd(divisor, e);
            limit = std::min(limit, e / 2);
            mine.push_back({gi, oi, kind == 0, which, 0});
          }
        }
      }
      if (!ok) continue;
      int64_t h = 1;
      for (int64_t want : {8, 2}) {
        for (int64_t c = limit; c >= 2 && h == 1; --c)
          if (divisor % c == 0 && count / c >= want) h = c;
        if (h > 1) break;
      }
      if (h < 2) continue;
      cut_by[root] = h;
      for (Cut& c : mine) c.h = h, cuts.push_back(c);
    }
  }
  auto cut_of = [&](int slot) {
    auto it = cut_by.find(cls.find(slot));
    return it == cut_by.end() ? int64_t(1) : it->second;
  };

  ScaledPair r;
  std::set<int> shrunk;
  auto rescale = [&](const KernelGraph& g, const GraphSlots& gs, int gi) {
    KernelGraph c = g;
    keep_full_counts(c);  // before any shape changes: the counts are the full-size ones
    for (int t : c.inputs) {
      Shape& s = c.tensors[t].shape;
      for (size_t d = 0; d < s.size(); ++d) {
        int slot = gs.tensor[t][d];
        if (cls.unit(slot) != scaled_unit(slot) || cut_of(slot) > 1) shrunk.insert(cls.find(slot));
        s[d] = scaled_extent(slot) / cut_of(slot);
      }
    }
    for (const Cut& cut : cuts) {
      if (cut.graph != gi) continue;
      auto bg = std::make_shared<BlockGraph>(*c.ops[cut.op].block);
      (cut.grid ? bg->grid : bg->loop)[cut.dim] /= cut.h;
      c.ops[cut.op].block = bg;
    }
    return c;
  };
  KernelGraph a2 = rescale(a, sa, 0), b2 = rescale(b, sb, 1);
  r.scaled = !shrunk.empty();
  if (!r.scaled) {
    r.a = a;
    r.b = b;
  } else {
    r.a = rebuild_graph(a2);
    r.b = rebuild_graph(b2);
  }
  // The builders re-derived every shape; they must be the ones the classes predict.
  for (size_t i = 0; r.scaled && i < a.outputs.size(); ++i) {
    const Slots& slots = sa.tensor[a.outputs[i]];
    for (size_t d = 0; d < slots.size(); ++d) {
      int64_t want = scaled_extent(slots[d]) / cut_of(slots[d]);
      KILN_ASSERT(r.a.tensor(r.a.outputs[i]).shape[d] == want &&
                      r.b.tensor(r.b.outputs[i]).shape[d] == want,
                  "scaled output {} dim {}: {} and {}, expected {}", i, d,
                  shape_str(r.a.tensor(r.a.outputs[i]).shape),
                  shape_str(r.b.tensor(r.b.outputs[i]).shape), want);
    }
  }
  for (int t : a.outputs) {
    std::vector<DimScale> dims;
    for (int slot : sa.tensor[t])
      dims.push_back(r.scaled ? DimScale{cls.unit(slot), scaled_unit(slot)} : DimScale{1, 1});
    r.out_dims.push_back(dims);
  }
  // Describe each shrunk class by its largest slot.
  std::map<int, int> largest;
  for (int s = 0; s < cls.size(); ++s) {
    int root = cls.find(s);
    if (!shrunk.count(root)) continue;
    auto it = largest.find(root);
    if (it == largest.end() || cls.extent(s) > cls.extent(it->second)) largest[root] = s;
  }
  for (auto [root, s] : largest) {
    if (!r.description.empty()) r.description += ", ";
    r.description += fmt::format("{} -> {} (unit {} -> {}", cls.extent(s),
                                 scaled_extent(s) / cut_of(s), cls.unit(s), scaled_unit(s));
    if (cut_of(s) > 1)
      r.description += fmt::format(", units {} -> {}", cls.extent(s) / cls.unit(s),
                                   cls.extent(s) / cls.unit(s) / cut_of(s));
    r.description += ")";
  }
  return r;
}

}  // namespace kiln::verifier
