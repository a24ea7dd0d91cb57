// Op-by-op block-graph enumeration pruned by abstract expressions (enumerate.h).
#include "kiln/search/enumerate.h"

#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/ir/diag.h"
#include "kiln/search/prune.h"

namespace kiln::search {

namespace {

bool commutative(OpKind k) {
  return k == OpKind::Add || k == OpKind::Mul || k == OpKind::Maximum || k == OpKind::Minimum;
}

bool is_reduce(OpKind k) {
  return op_info(k).cls == OpClass::Reduce;
}

int dim_with(const PGraph& g, int n, int l, size_t from = 0) {
  const auto& ls = g.labels[n];
  for (size_t d = from; d < ls.size(); ++d)
    if (ls[d] == l) return static_cast<int>(d);
  return -1;
}

// The fed tiles: one input iterator per external tensor (the lowering's imaps and fmaps), then
// the group's constants.
BlockGraphBuilder start_builder(const PGraph& g, const std::vector<int>& group, const Schedule& s,
                                const GroupIO& io) {
  std::vector<int64_t> grid, loop;
  for (const GridDim& d : s.grid) grid.push_back(d.parts);
  if (grid.empty()) grid.push_back(1);
  if (s.loop_label >= 0) loop.push_back(s.loop_range);
  std::vector<TensorDesc> descs;
  for (int i : io.inputs) descs.push_back({g.nodes[i].name, g.nodes[i].shape, g.device_dtype(i)});
  BlockGraphBuilder bb(grid, s.block_threads, loop, descs);
  for (size_t k = 0; k < io.inputs.size(); ++k) {
    int n = io.inputs[k];
    std::vector<int> imap, fmap;
    for (const GridDim& d : s.grid) imap.push_back(dim_with(g, n, d.label));
    if (s.grid.empty()) imap.push_back(-1);
    if (s.loop_label >= 0) fmap.push_back(dim_with(g, n, s.loop_label));
    bb.input(static_cast<int>(k), imap, fmap, "in_" + g.nodes[n].name);
  }
  std::set<int> seen;
  for (int x : group)
    for (int i : g.nodes[x].inputs)
      if (g.is_const(i) && seen.insert(i).second)
        bb.op(OpKind::Constant, {}, g.nodes[i].attrs, g.nodes[i].name);
  return bb;
}

// The savers, with the lowering's omaps (a partial's split dim is its leading dim).
void add_savers(BlockGraphBuilder& bb, const PGraph& g, const Schedule& s, const GroupIO& io,
                const std::vector<int>& saves) {
  for (size_t k = 0; k < io.outputs.size(); ++k) {
    int o = io.outputs[k];
    const PNode& n = g.nodes[o];
    std::vector<int> omap, fmap;
    for (const GridDim& d : s.grid)
      omap.push_back(n.split > 0 && d.label == g.split_label
                         ? 0
                         : dim_with(g, o, d.label, n.split > 0 ? 1 : 0));
    if (s.grid.empty()) omap.push_back(-1);
    if (s.loop_label >= 0)
      fmap.push_back(bb.peek().ops[saves[k]].stage == Stage::Loop ? dim_with(g, o, s.loop_label)
                                                                  : -1);
    bb.output(saves[k], omap, fmap, g.device_dtype(o), n.name, static_cast<int>(n.shape.size()),
              "save_" + n.name);
  }
}

// Whether the op accepts operand tiles of these shapes. The common kinds are checked here without
// building an error (most candidate extensions fail this); the rest go through infer_op_shape.
bool shape_ok(const VocabOp& v, const std::vector<Shape>& shapes) {
  OpClass c = op_info(v.kind).cls;
  if (c == OpClass::Unary) return true;
  if (c == OpClass::Binary) return broadcast_shapes(shapes[0], shapes[1]).has_value();
  if (c == OpClass::Reduce) {
    int64_t r = static_cast<int64_t>(shapes[0].size());
    if (v.attrs.dim >= r || v.attrs.dim < -r) return false;
  } else if (v.kind == OpKind::MatMul) {
    const Shape &a = shapes[0], &b = shapes[1];
    if (a.size() < 2 || b.size() < 2 || a.back() != b[b.size() - 2]) return false;
  }
  try {
    Attrs a = v.attrs;
    infer_op_shape(v.kind, shapes, a);
    return true;
  } catch (const UserError&) {
    return false;
  }
}

}  // namespace

std::string VocabOp::str() const {
  if (is_reduce(kind))
    return fmt::format("{}(dim {}, keepdim {})", op_name(kind), attrs.dim, attrs.keepdim);
  return op_name(kind);
}

std::string EnumState::detail(const std::vector<VocabOp>& voc) const {
  std::string op = vocab >= 0 && vocab < static_cast<int>(voc.size()) ? voc[vocab].str() : "?";
  return fmt::format("{}({}){}", op, fmt::join(inputs, ", "), complete ? " -> complete" : "");
}

namespace {

std::string op_str(const VocabOp& v) {
  return v.str();
}

// One node of the enumeration: a partial block graph and what is known about its ops.
struct Node {
  BlockGraphBuilder bb;
  std::vector<AbsExpr> memo;   // abstract expression per op
  std::vector<AbsExpr> canon;  // its canonical form
  std::vector<int> vocab;      // per op: vocabulary index (-1 for fed tiles)
  std::vector<std::vector<int>> ins;
  int compute = 0;  // ops added
  int log = -1;     // index in the states log
  // Per op: the graph label of each tile dim (PGraph::labels; -1 where unknown or broadcast).
  std::vector<std::vector<int>> labels;
};

// The labels of a new op's tile from its operands' (Node::labels of its inputs), or nullopt where
// a matmul would contract dims of different labels: abstract expressions cannot tell X Y from
// X Y^T (no dims in them), so without labels the enumerator offered in_X * in_X for X X^T (one
// tensor in two roles, one iterator), which only the verifier rejected. -1 matches any label.
std::optional<std::vector<int>> op_labels(const VocabOp& v, const std::vector<Shape>& shapes,
                                          const std::vector<std::vector<int>>& in) {
  auto same = [](int a, int b) { return a < 0 || b < 0 || a == b; };
  auto pick = [](int a, int b) { return a >= 0 ? a : b; };
  // Broadcast alignment from the right; a dim of extent 1 takes the other operand's label.
  auto broadcast = [&](const std::vector<int>& a, const Shape& sa, const std::vector<int>& b,
                       size_t drop) {
    const size_t ra = a.size() - drop, rb = b.size() - drop, r = std::max(ra, rb);
    std::vector<int> out(r, -1);
    for (size_t k = 0; k < r; ++k) {
      const int la = k < ra ? a[ra - 1 - k] : -1, lb = k < rb ? b[rb - 1 - k] : -1;
      const int64_t ea = k < ra ? sa[ra - 1 - k] : 1;
      out[r - 1 - k] = ea == 1 ? pick(lb, la) : pick(la, lb);
    }
    return out;
  };
  const OpClass c = op_info(v.kind).cls;
  // A label vector that does not match its tile's rank is unknown, and so is what follows from
  // it (an empty vector): only two known, different labels prune.
  if (in.empty()) return std::vector<int>{};
  for (size_t k = 0; k < in.size(); ++k)
    if (in[k].size() != shapes[k].size()) return std::vector<int>{};
  switch (c) {
    case OpClass::Matmul: {
      const std::vector<int>&a = in[0], &b = in[1];
      if (a.size() < 2 || b.size() < 2) return std::vector<int>{};
      if (!same(a.back(), b[b.size() - 2])) return std::nullopt;
      std::vector<int> out = broadcast(a, shapes[0], b, 2);
      out.push_back(a[a.size() - 2]);
      out.push_back(b.back());
      return out;
    }
    case OpClass::Binary:
      return broadcast(in[0], shapes[0], in[1], 0);
    case OpClass::Reduce: {
      std::vector<int> out = in[0];
      const int64_t r = static_cast<int64_t>(out.size());
      const int64_t d = v.attrs.dim < 0 ? v.attrs.dim + r : v.attrs.dim;
      if (d < 0 || d >= r) return std::vector<int>{};
      if (v.attrs.keepdim)
        out[d] = -1;
      else
        out.erase(out.begin() + d);
      return out;
    }
    case OpClass::Transpose: {
      const std::vector<int> perm = transpose_perm(v.attrs, in[0].size());
      std::vector<int> out;
      for (int q : perm)
        out.push_back(q >= 0 && q < static_cast<int>(in[0].size()) ? in[0][q] : -1);
      return out;
    }
    default:
      return in[0];  // elementwise and accumulators keep their first operand's dims
  }
}

class Enumerator {
 public:
  Enumerator(const PGraph& g, const std::vector<int>& group, const Schedule& s,
             const std::vector<AbsExpr>& exprs, Pruner* pruner, const Target& target,
             const EnumOptions& opt, const std::function<bool()>& stop)
      : g_(g), group_(group), s_(s), pruner_(pruner), target_(target), opt_(opt), stop_(stop) {
    io_ = group_io(g, group);
    vocab_ = block_vocabulary(g, s.loop_label >= 0);
    for (const VocabOp& v : opt.extra)
      if (std::find(vocab_.begin(), vocab_.end(), v) == vocab_.end()) vocab_.push_back(v);
    if (opt.record_states) res_.vocab = vocab_;
    popt_ = pruner ? pruner->options() : PrunerOptions{};
    for (int i : io_.inputs) in_exprs_.push_back(exprs[i]);
    std::vector<AbsExpr> raw;
    for (int o : io_.outputs) {
      raw.push_back(exprs[o]);
      targets_.push_back(canonical(exprs[o], popt_));
    }
    if (opt.group_roots) {
      PrunerOptions go = popt_;
      go.use_z3 = false;
      group_pruner_ = std::make_unique<Pruner>(raw, go);
    }
  }

  EnumResult run() {
    Node root{start_builder(g_, group_, s_, io_), {}, {}, {}, {}, 0, -1, {}};
    const BlockGraph& bg = root.bb.peek();
    fed_ = static_cast<int>(bg.ops.size());
    for (int i = 0; i < fed_; ++i) {
      abstract_of_block_op(bg, i, in_exprs_, &root.memo);
      root.canon.push_back(canonical(root.memo[i], popt_));
      root.vocab.push_back(-1);
      root.ins.push_back({});
      // An input tile keeps its tensor's dims (start_builder: input k reads io_.inputs[k]).
      const BlockOp& o = bg.ops[i];
      std::vector<int> l(o.shape.size(), -1);
      if (o.kind == OpKind::Input && o.io >= 0 && o.io < static_cast<int>(io_.inputs.size()) &&
          g_.labels[io_.inputs[o.io]].size() == o.shape.size())
        l = g_.labels[io_.inputs[o.io]];
      root.labels.push_back(std::move(l));
    }
    for (int limit = 1; limit <= opt_.max_ops && !res_.budget_hit; ++limit) {
      limit_ = limit;
      if (unmatched(root) <= limit) expand(root);
    }
    return std::move(res_);
  }

 private:
  // canonical(), memoized (the same expressions recur across states).
  AbsExpr canon(AbsExpr e) {
    auto it = canon_memo_.find(e.id());
    if (it != canon_memo_.end()) return it->second;
    AbsExpr c = canonical(e, popt_);
    canon_memo_.emplace(e.id(), c);
    return c;
  }

  // Distinct targets no tile computes yet.
  int unmatched(const Node& n) const {
    std::set<uint32_t> left;
    for (AbsExpr t : targets_)
      if (std::find(n.canon.begin(), n.canon.end(), t) == n.canon.end()) left.insert(t.id());
    return static_cast<int>(left.size());
  }

  // Key order: (vocabulary index, operands), lexicographic.
  static bool key_less(int va, const std::vector<int>& ia, int vb, const std::vector<int>& ib) {
    if (va != vb) return va < vb;
    return ia < ib;
  }

  int log(int parent, size_t v, const std::vector<int>& in) {
    ++res_.states;
    if (!opt_.record_states) return -1;
    res_.states_log.push_back({parent, static_cast<int>(v), in, {}, false});
    return static_cast<int>(res_.states_log.size()) - 1;
  }
  void prune(int id, const char* why) {
    res_.pruned[why]++;
    if (id >= 0) res_.states_log[id].pruned = why;
  }

  void expand(const Node& n) {
    const BlockGraph& bg = n.bb.peek();
    int p = static_cast<int>(bg.ops.size());
    for (size_t v = 0; v < vocab_.size(); ++v) {
      const VocabOp& vo = vocab_[v];
      int arity = op_info(vo.kind).min_inputs;
      std::vector<std::vector<int>> tuples;
      if (arity == 1) {
        for (int i = 0; i < p; ++i) tuples.push_back({i});
      } else if (arity == 2) {
        for (int i = 0; i < p; ++i)
          for (int j = commutative(vo.kind) ? i : 0; j < p; ++j) tuples.push_back({i, j});
      }
      for (const std::vector<int>& in : tuples) {
        if (res_.budget_hit) return;
        bool all_const = true;
        for (int i : in) all_const &= bg.ops[i].kind == OpKind::Constant;
        if (all_const) continue;
        // Canonical order: every op placed after the new op's operands exist is smaller.
        int ready = std::max(fed_, *std::max_element(in.begin(), in.end()) + 1);
        bool ordered = true, dup = false;
        for (int q = fed_; q < p; ++q) {
          if (n.vocab[q] == static_cast<int>(v) && n.ins[q] == in) dup = true;
          if (q >= ready && !key_less(n.vocab[q], n.ins[q], static_cast<int>(v), in))
            ordered = false;
        }
        if (dup) {
          res_.cse++;
          continue;
        }
        if (!ordered) {
          res_.out_of_order++;
          continue;
        }
        if (res_.states >= opt_.max_states || (stop_ && stop_())) {
          res_.budget_hit = true;
          return;
        }
        int id = log(n.log, v, in);
        // The cheap checks first, on the parent: shape and stage (BlockGraphBuilder's rules,
        // which op() below applies again), the expression, then only a survivor is copied.
        std::vector<Shape> shapes;
        std::vector<AbsExpr> args;
        bool post = false, looped = false;
        for (int i : in) {
          shapes.push_back(bg.ops[i].shape);
          args.push_back(n.memo[i]);
          post |= bg.ops[i].stage == Stage::Post;
          looped |= bg.ops[i].stage == Stage::Loop;
        }
        bool accum = op_info(vo.kind).cls == OpClass::Accum;
        if (post && (looped || accum)) {
          prune(id, "stage");
          continue;
        }
        AbsExpr e;
        if (accum) {
          e = vo.kind == OpKind::AccumMax ? AbsExpr::max_reduce(bg.num_iterations(), args[0])
                                          : AbsExpr::sum(bg.num_iterations(), args[0]);
        } else {
          if (!shape_ok(vo, shapes)) {
            prune(id, "shape");
            continue;
          }
          e = abstract_op(vo.kind, vo.attrs, args, shapes);
        }
        std::vector<std::vector<int>> in_labels;
        for (int i : in) in_labels.push_back(n.labels[i]);
        std::optional<std::vector<int>> labels = op_labels(vo, shapes, in_labels);
        if (!labels) {
          prune(id, "map");
          continue;
        }
        if (pruner_ && !pruner_->keep(e)) {
          prune(id, "absexpr");
          continue;
        }
        if (group_pruner_ && !group_pruner_->keep(e)) {
          prune(id, "absexpr_group");
          continue;
        }
        AbsExpr ce = canon(e);
        if (std::find(n.canon.begin(), n.canon.end(), ce) != n.canon.end()) {
          prune(id, "redundant");
          continue;
        }
        Node c = n;
        c.log = id;
        try {
          c.bb.op(vo.kind, in, vo.attrs, fmt::format("e{}_{}", p, op_name(vo.kind)));
        } catch (const UserError& err) {
          prune(id, err.code() == ErrorCode::Structure ? "stage" : "shape");
          continue;
        }
        c.memo.push_back(e);
        c.canon.push_back(ce);
        c.labels.push_back(std::move(*labels));
        c.vocab.push_back(static_cast<int>(v));
        c.ins.push_back(in);
        c.compute++;
        int left = unmatched(c);
        if (left == 0) {
          if (c.compute == limit_) complete(c, id);
          continue;  // complete graphs are not extended
        }
        if (c.compute + left <= limit_) expand(c);
      }
    }
  }

  void complete(const Node& c, int id) {
    std::vector<int> saves;
    for (AbsExpr t : targets_)
      saves.push_back(
          static_cast<int>(std::find(c.canon.begin(), c.canon.end(), t) - c.canon.begin()));
    // Every added op must feed a saver.
    std::vector<bool> live(c.canon.size(), false);
    std::vector<int> stack = saves;
    while (!stack.empty()) {
      int i = stack.back();
      stack.pop_back();
      if (live[i]) continue;
      live[i] = true;
      for (int j : c.ins[i]) stack.push_back(j);
    }
    for (size_t i = fed_; i < live.size(); ++i)
      if (!live[i]) {
        prune(id, "dead");
        return;
      }
    BlockRecipe r;
    for (size_t i = fed_; i < c.canon.size(); ++i) r.ops.push_back({vocab_[c.vocab[i]], c.ins[i]});
    r.saves = saves;
    Lowered l = instantiate(g_, group_, s_, r, target_, 1 << 20);
    if (!l.block) {
      prune(id, lower_failure_name(l.failure));
      return;
    }
    if (static_cast<int>(res_.recipes.size()) < opt_.max_results) res_.recipes.push_back(r);
    if (id >= 0) res_.states_log[id].complete = true;
  }

  const PGraph& g_;
  const std::vector<int>& group_;
  const Schedule& s_;
  Pruner* pruner_;
  const Target& target_;
  const EnumOptions& opt_;
  const std::function<bool()>& stop_;
  GroupIO io_;
  std::vector<VocabOp> vocab_;
  PrunerOptions popt_;
  std::unique_ptr<Pruner> group_pruner_;
  std::unordered_map<uint32_t, AbsExpr> canon_memo_;  // roots: the group's outputs (fast path only)
  std::vector<AbsExpr> in_exprs_, targets_;
  int fed_ = 0, limit_ = 0;
  EnumResult res_;
};

}  // namespace

std::vector<VocabOp> block_vocabulary(const PGraph& g, bool loop) {
  std::vector<VocabOp> v;
  auto add = [&](OpKind k, Attrs a) {
    VocabOp o{k, {}};
    if (is_reduce(k)) {
      o.attrs.dim = a.dim;
      o.attrs.keepdim = a.keepdim;
    }
    if (std::find(v.begin(), v.end(), o) == v.end()) v.push_back(o);
  };
  bool sum = false, max = false;
  for (const PNode& n : g.nodes) {
    if (n.kind == OpKind::Input || n.kind == OpKind::Constant) continue;
    OpClass c = op_info(n.kind).cls;
    if (c == OpClass::Unary || c == OpClass::Binary || n.kind == OpKind::MatMul) add(n.kind, {});
    if (is_reduce(n.kind)) {
      add(n.kind, n.attrs);
      Attrs k = n.attrs;
      k.keepdim = true;
      add(n.kind, k);
    }
    max |= n.kind == OpKind::Max;
    sum |= n.kind == OpKind::Sum || n.kind == OpKind::MatMul;
  }
  if (loop && sum) add(OpKind::AccumSum, {});
  if (loop && max) add(OpKind::AccumMax, {});
  std::stable_sort(v.begin(), v.end(), [](const VocabOp& a, const VocabOp& b) {
    if (a.kind != b.kind) return a.kind < b.kind;
    if (a.attrs.dim != b.attrs.dim) return a.attrs.dim < b.attrs.dim;
    return a.attrs.keepdim < b.attrs.keepdim;
  });
  return v;
}

std::string BlockRecipe::str() const {
  std::vector<std::string> s;
  for (const Op& o : ops)
    s.push_back(fmt::format("{}({})", op_str(o.op), fmt::join(o.inputs, ",")));
  return fmt::format("{}; save {}", fmt::join(s, "; "), fmt::join(saves, ","));
}

int group_op_count(const PGraph& g, const std::vector<int>& group, bool loop) {
  int n = 0;
  for (int x : group) {
    if (g.is_const(x)) continue;
    ++n;
    const PNode& p = g.nodes[x];
    if (loop && (is_reduce(p.kind) || p.kind == OpKind::MatMul)) ++n;
  }
  return n;
}

EnumResult enumerate_block_graphs(const PGraph& g, const std::vector<int>& group, const Schedule& s,
                                  const std::vector<AbsExpr>& exprs, Pruner* pruner,
                                  const Target& target, const EnumOptions& opt,
                                  const std::function<bool()>& stop) {
  return Enumerator(g, group, s, exprs, pruner, target, opt, stop).run();
}

Lowered instantiate(const PGraph& g, const std::vector<int>& group, const Schedule& s,
                    const BlockRecipe& r, const Target& target, int max_block_ops) {
  Lowered res;
  GroupIO io = group_io(g, group);
  try {
    BlockGraphBuilder bb = start_builder(g, group, s, io);
    for (const BlockRecipe::Op& o : r.ops) {
      int p = static_cast<int>(bb.peek().ops.size());
      bb.op(o.op.kind, o.inputs, o.op.attrs, fmt::format("e{}_{}", p, op_name(o.op.kind)));
    }
    add_savers(bb, g, s, io, r.saves);
    // Abstract expressions forget indices: a tile can match an output's expression with the
    // wrong shape (another dim reduced, keepdim). The device tensors must be the group's.
    const BlockGraph& bg = bb.peek();
    for (size_t k = 0; k < io.outputs.size(); ++k) {
      int o = io.outputs[k];
      if (bg.outputs[k].shape != g.nodes[o].shape) {
        res.failure = LowerFailure::Map;
        res.message = fmt::format("{} saved as {}, expected {}", g.nodes[o].name,
                                  shape_str(bg.outputs[k].shape), shape_str(g.nodes[o].shape));
        return res;
      }
    }
    return fuse_block(bg, target, max_block_ops);
  } catch (const UserError& e) {
    res.failure = e.code() == ErrorCode::Resource    ? LowerFailure::Resource
                  : e.code() == ErrorCode::Structure ? LowerFailure::Stage
                                                     : LowerFailure::Map;
    res.message = e.render();
  }
  return res;
}

}  // namespace kiln::search
