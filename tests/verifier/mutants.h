// An automatic mutation generator for μGraphs: every mutant is a copy of the graph with one
// plausible bug (a wrong imap, fmap or omap; a shifted map; an accumulator of the wrong kind,
// doubled, dropped or fed the wrong tile; a dropped rescale; swapped operands of a
// non-commutative op; a wrong reduction dim; a changed grid or loop range; a wrong constant or
// thread op; swapped kernel inputs). Mutants are unchecked: rebuild_graph() decides whether
// each still builds.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/ir/kernel_graph.h"

namespace kiln::verifier::testing {

// A constant that stands for a count n (1/n or n, n >= 8 a power of two) replaced by the count
// a shrunk instance or a tile would have (4, n/32, n/4): the bug class "a constant equal to the
// shrunk count" that value-based rewriting once accepted, and a per-tile count.
inline std::vector<double> shrunk_counts(double v) {
  std::vector<double> r;
  const bool inv = v > 0 && v < 1;
  const double n = inv ? 1 / v : v;
  if (!(n >= 8) || n != std::floor(n) || (int64_t(n) & (int64_t(n) - 1))) return r;
  for (double m : {4.0, n / 32, n / 4})
    if (m >= 2 && m != n && std::find(r.begin(), r.end(), inv ? 1 / m : m) == r.end())
      r.push_back(inv ? 1 / m : m);
  return r;
}

struct Mutant {
  std::string kind;  // the mutation operator
  std::string what;  // where, in words
  KernelGraph g;
};

class MutantGenerator {
 public:
  explicit MutantGenerator(const KernelGraph& g) : g_(g) {}

  std::vector<Mutant> run() {
    for (size_t oi = 0; oi < g_.ops.size(); ++oi) {
      const KernelOp& op = g_.ops[oi];
      if (op.kind == OpKind::GraphDefined)
        block_mutants(oi);
      else
        kernel_op_mutants(oi);
      kernel_input_swaps(oi);
    }
    return std::move(out_);
  }

 private:
  using Edit = std::function<void(BlockGraph&)>;

  void add(std::string kind, std::string what, KernelGraph m) {
    out_.push_back({std::move(kind), std::move(what), std::move(m)});
  }
  void add_block(std::string kind, size_t oi, std::string what, const Edit& f) {
    KernelGraph c = g_;
    auto bg = std::make_shared<BlockGraph>(*g_.ops[oi].block);
    f(*bg);
    c.ops[oi].block = bg;
    add(std::move(kind), g_.ops[oi].name + ": " + what, std::move(c));
  }
  static bool non_commutative(OpKind k) {
    return k == OpKind::Sub || k == OpKind::Div || k == OpKind::MatMul;
  }
  // Inserts op at pos, renumbering later references.
  static void insert_op(BlockGraph& bg, int pos, BlockOp op) {
    for (BlockOp& o : bg.ops)
      for (int& i : o.inputs)
        if (i >= pos) ++i;
    bg.ops.insert(bg.ops.begin() + pos, std::move(op));
  }
  static BlockOp make_op(OpKind k, std::vector<int> inputs, std::string name, Attrs a = {}) {
    BlockOp o;
    o.kind = k;
    o.inputs = std::move(inputs);
    o.name = std::move(name);
    o.attrs = a;
    return o;
  }

  void kernel_op_mutants(size_t oi) {
    const KernelOp& op = g_.ops[oi];
    if (non_commutative(op.kind)) {
      KernelGraph c = g_;
      std::swap(c.ops[oi].inputs[0], c.ops[oi].inputs[1]);
      add("swapped operands", op.name, std::move(c));
    }
    if (op_info(op.kind).cls == OpClass::Reduce) {
      int rank = static_cast<int>(g_.tensor(op.inputs[0]).shape.size());
      for (int d = 0; d < rank; ++d)
        if (d != op.attrs.dim) {
          KernelGraph c = g_;
          c.ops[oi].attrs.dim = d;
          add("reduction dim", fmt::format("{}: dim {} -> {}", op.name, op.attrs.dim, d),
              std::move(c));
        }
    }
  }

  void kernel_input_swaps(size_t oi) {
    const KernelOp& op = g_.ops[oi];
    for (size_t i = 0; i < op.inputs.size(); ++i)
      for (size_t j = i + 1; j < op.inputs.size(); ++j)
        if (op.inputs[i] != op.inputs[j] &&
            g_.tensor(op.inputs[i]).shape == g_.tensor(op.inputs[j]).shape &&
            g_.tensor(op.inputs[i]).dtype == g_.tensor(op.inputs[j]).dtype &&
            (op.kind == OpKind::GraphDefined || non_commutative(op.kind))) {
          KernelGraph c = g_;
          std::swap(c.ops[oi].inputs[i], c.ops[oi].inputs[j]);
          add("swapped kernel inputs",
              fmt::format("{}: inputs {} and {}", op.name, g_.tensor(op.inputs[i]).name,
                          g_.tensor(op.inputs[j]).name),
              std::move(c));
        }
  }

  void map_mutants(size_t oi, int j, bool grid_map, int rank) {
    const BlockOp& bo = g_.ops[oi].block->ops[j];
    const std::vector<int>& map = grid_map ? bo.imap : bo.fmap;
    const char* name = grid_map ? (bo.kind == OpKind::Input ? "imap" : "omap") : "fmap";
    for (size_t i = 0; i < map.size(); ++i)
      for (int v = -1; v < rank; ++v) {
        if (v == map[i]) continue;
        std::vector<int> m = map;
        for (int& e : m)
          if (v >= 0 && e == v) e = map[i];  // keep it a valid map: swap the two entries
        m[i] = v;
        add_block(std::string("wrong ") + name, oi,
                  fmt::format("{} {} [{}] -> [{}]", bo.name, name, fmt::join(map, ","),
                              fmt::join(m, ",")),
                  [&, m](BlockGraph& bg) { (grid_map ? bg.ops[j].imap : bg.ops[j].fmap) = m; });
      }
    if (map.size() >= 2) {  // shift: grid dim i takes the role of grid dim i + 1
      std::vector<int> m(map.size());
      for (size_t i = 0; i < map.size(); ++i) m[i] = map[(i + 1) % map.size()];
      add_block(
          "shifted map", oi,
          fmt::format("{} {} [{}] -> [{}]", bo.name, name, fmt::join(map, ","), fmt::join(m, ",")),
          [&, m](BlockGraph& bg) { (grid_map ? bg.ops[j].imap : bg.ops[j].fmap) = m; });
    }
  }

  void thread_mutants(size_t oi, int j) {
    const ThreadGraph& tg = *g_.ops[oi].block->ops[j].thread;
    const std::string& name = g_.ops[oi].block->ops[j].name;
    auto edit = [&](std::string kind, std::string what, std::function<void(ThreadGraph&)> f) {
      add_block(std::move(kind), oi, name + ": " + what, [&, f](BlockGraph& bg) {
        auto t = std::make_shared<ThreadGraph>(*bg.ops[j].thread);
        f(*t);
        bg.ops[j].thread = t;
      });
    };
    for (size_t t = 0; t < tg.ops.size(); ++t) {
      const ThreadOp& o = tg.ops[t];
      if (o.kind == OpKind::Constant) {
        edit("wrong constant",
             fmt::format("thread op {} constant {} -> {}", t, o.attrs.value, o.attrs.value * 2),
             [t](ThreadGraph& x) { x.ops[t].attrs.value *= 2; });
        for (double w : shrunk_counts(o.attrs.value))
          edit("constant at a shrunk count",
               fmt::format("thread op {} constant {} -> {}", t, o.attrs.value, w),
               [t, w](ThreadGraph& x) { x.ops[t].attrs.value = w; });
      }
      if (o.kind == OpKind::Sub || o.kind == OpKind::Div)
        edit("swapped operands", fmt::format("thread op {} ({})", t, op_name(o.kind)),
             [t](ThreadGraph& x) { std::swap(x.ops[t].inputs[0], x.ops[t].inputs[1]); });
      static const std::pair<OpKind, OpKind> swaps[] = {
          {OpKind::Sqrt, OpKind::Rsqrt},   {OpKind::Rsqrt, OpKind::Sqrt},
          {OpKind::Silu, OpKind::Sigmoid}, {OpKind::Sigmoid, OpKind::Silu},
          {OpKind::Exp, OpKind::Square},   {OpKind::Add, OpKind::Sub},
          {OpKind::Mul, OpKind::Add}};
      for (auto [from, to] : swaps)
        if (o.kind == from)
          edit("wrong op", fmt::format("thread op {} {} -> {}", t, op_name(from), op_name(to)),
               [t, to](ThreadGraph& x) { x.ops[t].kind = to; });
      // Drop a term / factor: an operand replaced by another earlier value.
      for (size_t a = 0; a < o.inputs.size(); ++a)
        for (int r = 0; r < tg.num_inputs + static_cast<int>(t); ++r)
          if (r != o.inputs[a] &&
              (r < tg.num_inputs || tg.ops[r - tg.num_inputs].kind != OpKind::Constant)) {
            edit("misplaced operand",
                 fmt::format("thread op {} operand {}: {} -> {}", t, a, o.inputs[a], r),
                 [t, a, r](ThreadGraph& x) { x.ops[t].inputs[a] = r; });
            break;  // one replacement per operand keeps the suite small
          }
    }
  }

  void block_mutants(size_t oi) {
    const BlockGraph& bg = *g_.ops[oi].block;
    for (size_t i = 0; i < bg.grid.size(); ++i) {
      for (int64_t f : {2, -2}) {
        int64_t e = f > 0 ? bg.grid[i] * f : bg.grid[i] / 2;
        if (e < 1 || (f < 0 && bg.grid[i] % 2)) continue;
        add_block("changed grid", oi, fmt::format("grid[{}] {} -> {}", i, bg.grid[i], e),
                  [i, e](BlockGraph& b) { b.grid[i] = e; });
      }
    }
    for (size_t i = 0; i < bg.loop.size(); ++i) {
      for (int64_t f : {2, -2}) {
        int64_t e = f > 0 ? bg.loop[i] * f : bg.loop[i] / 2;
        if (e < 1 || (f < 0 && bg.loop[i] % 2)) continue;
        add_block("changed loop range", oi, fmt::format("loop[{}] {} -> {}", i, bg.loop[i], e),
                  [i, e](BlockGraph& b) { b.loop[i] = e; });
      }
    }
    for (int j = 0; j < static_cast<int>(bg.ops.size()); ++j) {
      const BlockOp& bo = bg.ops[j];
      const OpClass cls = op_info(bo.kind).cls;
      if (cls == OpClass::Input || cls == OpClass::Output) {
        int rank = static_cast<int>(
            (cls == OpClass::Input ? bg.inputs[bo.io] : bg.outputs[bo.io]).shape.size());
        map_mutants(oi, j, true, rank);
        map_mutants(oi, j, false, rank);
        continue;
      }
      if (cls == OpClass::Accum) {
        if (bo.kind == OpKind::AccumSum)
          add_block("accumulator kind", oi, bo.name + ": accum_sum -> accum_max",
                    [j](BlockGraph& b) { b.ops[j].kind = OpKind::AccumMax; });
        if (bo.kind == OpKind::AccumMax)
          add_block("accumulator kind", oi, bo.name + ": accum_max -> accum_sum",
                    [j](BlockGraph& b) { b.ops[j].kind = OpKind::AccumSum; });
        if (bo.kind == OpKind::AccumMax)  // a running max initialised to 0
          add_block("selection against a constant", oi, bo.name + ": accumulates maximum(v, 0)",
                    [j](BlockGraph& b) {
                      int v = b.ops[j].inputs[0];
                      Attrs zero;
                      zero.value = 0;
                      insert_op(b, j, make_op(OpKind::Constant, {}, "mut_zero", zero));
                      insert_op(b, j + 1, make_op(OpKind::Maximum, {v, j}, "mut_relu"));
                      b.ops[j + 2].inputs[0] = j + 1;
                    });
        if (bo.kind == OpKind::AccumRescale)
          add_block("dropped rescale", oi, bo.name + ": accum_rescale -> accum_sum",
                    [j](BlockGraph& b) {
                      b.ops[j].kind = OpKind::AccumSum;
                      b.ops[j].inputs.resize(1);
                    });
        add_block("doubled accumulation", oi, bo.name + ": accumulates v + v", [j](BlockGraph& b) {
          int v = b.ops[j].inputs[0];
          insert_op(b, j, make_op(OpKind::Add, {v, v}, "mut_double"));
          b.ops[j + 1].inputs[0] = j;
        });
      }
      if (cls == OpClass::Fused) thread_mutants(oi, j);
      if (non_commutative(bo.kind) && bo.inputs.size() == 2)
        add_block("swapped operands", oi, bo.name,
                  [j](BlockGraph& b) { std::swap(b.ops[j].inputs[0], b.ops[j].inputs[1]); });
      if (cls == OpClass::Reduce)
        for (int d = 0; d < static_cast<int>(bg.ops[bo.inputs[0]].shape.size()); ++d)
          if (d != bo.attrs.dim)
            add_block("reduction dim", oi,
                      fmt::format("{}: dim {} -> {}", bo.name, bo.attrs.dim, d),
                      [j, d](BlockGraph& b) { b.ops[j].attrs.dim = d; });
      if (bo.kind == OpKind::Add)
        add_block("dropped term", oi, bo.name + ": a + b -> a + 0", [j](BlockGraph& b) {
          Attrs zero;
          zero.value = 0;
          insert_op(b, j, make_op(OpKind::Constant, {}, "mut_zero", zero));
          b.ops[j + 1].inputs[1] = j;
        });
      if (bo.kind == OpKind::Constant) {
        add_block("wrong constant", oi, bo.name + ": doubled",
                  [j](BlockGraph& b) { b.ops[j].attrs.value *= 2; });
        for (double w : shrunk_counts(bo.attrs.value))
          add_block("constant at a shrunk count", oi,
                    fmt::format("{}: {} -> {}", bo.name, bo.attrs.value, w),
                    [j, w](BlockGraph& b) { b.ops[j].attrs.value = w; });
      }
      // Misplaced operand: another earlier tile of the same shape (the accumulator or op reads
      // the wrong tile).
      for (size_t a = 0; a < bo.inputs.size(); ++a)
        for (int r = 0; r < j; ++r)
          if (r != bo.inputs[a] && bg.ops[r].kind != OpKind::Output &&
              bg.ops[r].shape == bg.ops[bo.inputs[a]].shape) {
            add_block("misplaced operand", oi,
                      fmt::format("{} operand {}: {} -> {}", bo.name, a, bg.ops[bo.inputs[a]].name,
                                  bg.ops[r].name),
                      [j, a, r](BlockGraph& b) { b.ops[j].inputs[a] = r; });
          }
    }
  }

  const KernelGraph& g_;
  std::vector<Mutant> out_;
};

inline std::vector<Mutant> mutants_of(const KernelGraph& g) {
  return MutantGenerator(g).run();
}

}  // namespace kiln::verifier::testing
