// Random small μGraphs for codegen tests: one graph-defined kernel (sometimes followed by a
// predefined op) exercising grids of 1 to 3 dims, 0 to 2 loop dims, imaps/fmaps on any tensor
// dim, broadcast elementwise ops, reductions (keepdim or not), batched matmuls, transposes, fused
// thread graphs, all three accumulators, post-loop ops, loop-stage and post-loop savers with
// extra leading output dims, and f16/bf16/f32 tensors.
#pragma once

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln::testing {

class RandomGraphs {
 public:
  explicit RandomGraphs(uint64_t seed) : rng_(seed) {}

  // Tries until a graph builds; returns it.
  KernelGraph next(const std::string& name) {
    for (int attempt = 0;; ++attempt) {
      try {
        return build(name);
      } catch (const UserError&) {
        if (attempt > 1000) throw;
      }
    }
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng_); }
  template <typename T>
  const T& any(const std::vector<T>& v) {
    return v[pick(0, static_cast<int>(v.size()) - 1)];
  }

  DType dtype() { return any(std::vector<DType>{DType::F16, DType::F16, DType::BF16, DType::F32}); }

  struct Plan {
    std::vector<int64_t> grid, loop;
  };

  // A tensor whose tile has extents `tile`, with dims mapped to random unused grid/loop dims.
  struct In {
    TensorDesc desc;
    std::vector<int> imap, fmap;
  };
  In make_input(const Plan& p, const Shape& tile, DType dt, bool allow_loop, int idx,
                std::vector<int> force_loop_dim = {}) {
    int r = static_cast<int>(tile.size());
    In in;
    in.desc.name = fmt::format("I{}", idx);
    in.desc.dtype = dt;
    in.desc.shape = tile;
    in.imap.assign(p.grid.size(), -1);
    in.fmap.assign(p.loop.size(), -1);
    std::vector<int> dims(r);
    for (int d = 0; d < r; ++d) dims[d] = d;
    std::shuffle(dims.begin(), dims.end(), rng_);
    size_t k = 0;
    for (size_t g = 0; g < p.grid.size() && k < dims.size(); ++g)
      if (coin(0.6)) {
        in.imap[g] = dims[k];
        in.desc.shape[dims[k]] *= p.grid[g];
        ++k;
      }
    if (allow_loop)
      for (size_t l = 0; l < p.loop.size() && k < dims.size(); ++l) {
        bool forced =
            std::find(force_loop_dim.begin(), force_loop_dim.end(), (int)l) != force_loop_dim.end();
        if (forced || coin(0.7)) {
          in.fmap[l] = dims[k];
          in.desc.shape[dims[k]] *= p.loop[l];
          ++k;
        }
      }
    return in;
  }

  Shape small_shape(int rank) {
    Shape s(rank);
    for (int& i = rank; i > 0; --i) s[i - 1] = any(std::vector<int64_t>{1, 2, 3, 4, 8, 16});
    return s;
  }

  KernelGraph build(const std::string& name) {
    Plan p;
    int gd = pick(1, 3);
    for (int i = 0; i < gd; ++i) p.grid.push_back(any(std::vector<int64_t>{1, 2, 3}));
    int ld = pick(0, 2);
    for (int i = 0; i < ld; ++i) p.loop.push_back(any(std::vector<int64_t>{1, 2, 3}));
    int T = any(std::vector<int>{32, 64, 128, 256});
    int pattern = pick(0, 3);
    std::vector<In> ins;
    // Pattern 0/1: elementwise + reductions over 1-2 inputs of one tile shape (+ a broadcast one).
    // Pattern 2: matmul-based (A [b.., m, k] x B [b.., k, n]), optionally transposed operand.
    // Pattern 3: online softmax with rescale.
    Shape tile;
    int64_t M = 0, K = 0, N = 0;
    Shape batch;
    if (pattern <= 1) {
      tile = small_shape(pick(1, 3));
      ins.push_back(make_input(p, tile, dtype(), true, 0));
      if (coin()) ins.push_back(make_input(p, tile, dtype(), true, 1));
      if (coin(0.4)) {
        Shape b = tile;
        b[pick(0, static_cast<int>(b.size()) - 1)] = 1;
        ins.push_back(make_input(p, b, dtype(), coin(), static_cast<int>(ins.size())));
      }
    } else {
      M = any(std::vector<int64_t>{1, 2, 5, 16, 32});
      K = any(std::vector<int64_t>{8, 16, 32, 48});
      N = any(std::vector<int64_t>{8, 16, 24, 64});
      if (coin(0.3)) batch = {any(std::vector<int64_t>{1, 2, 3})};
      DType dt = any(std::vector<DType>{DType::F16, DType::BF16, DType::F32});
      Shape a = batch, b = batch;
      a.push_back(M), a.push_back(K);
      bool bt = coin(0.3);
      if (bt)
        b.push_back(N), b.push_back(K);
      else
        b.push_back(K), b.push_back(N);
      if (pattern == 3) {
        // q [m, k] invariant, k [k, n] loop, v [n, d] loop: online softmax over n.
        In qi = make_input(p, a, dt, false, 0);
        In ki = make_input(p, {K, N}, dt, false, 1);
        In vi = make_input(p, {N, K}, dt, false, 2);
        if (!p.loop.empty()) {
          ki.fmap[0] = 1;
          ki.desc.shape[1] *= p.loop[0];
          vi.fmap[0] = 0;
          vi.desc.shape[0] *= p.loop[0];
        }
        ins = {qi, ki, vi};
        if (!batch.empty()) throw UserError(ErrorCode::Shape, "no batch for pattern 3");
      } else {
        ins.push_back(make_input(p, a, dt, true, 0));
        ins.push_back(make_input(p, b, coin(0.8) ? dt : dtype(), true, 1));
        if (bt)
          transpose_b_ = true;
        else
          transpose_b_ = false;
      }
    }
    std::vector<TensorDesc> descs;
    for (const In& i : ins) descs.push_back(i.desc);
    BlockGraphBuilder b(p.grid, T, p.loop, descs);
    std::vector<int> tiles;
    for (size_t i = 0; i < ins.size(); ++i)
      tiles.push_back(
          b.input(static_cast<int>(i), ins[i].imap, ins[i].fmap, fmt::format("x{}", i)));
    auto stage = [&](int t) { return b.peek().ops[t].stage; };
    auto shape = [&](int t) { return b.peek().ops[t].shape; };
    std::vector<int> loop_vals, post_vals, inv_vals;
    auto classify = [&](int t) {
      Stage s = stage(t);
      (s == Stage::Loop ? loop_vals : s == Stage::Post ? post_vals : inv_vals).push_back(t);
    };
    for (int t : tiles) classify(t);
    const std::vector<OpKind> unary = {
        OpKind::Exp,      OpKind::Neg,  OpKind::Square, OpKind::Silu,      OpKind::Sigmoid,
        OpKind::Tanh,     OpKind::Relu, OpKind::Gelu,   OpKind::LeakyRelu, OpKind::Clamp,
        OpKind::Softplus, OpKind::Sin,  OpKind::Cos};
    const std::vector<OpKind> binary = {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Maximum,
                                        OpKind::Minimum};
    auto uattrs = [&](OpKind k) {
      Attrs a;
      if (k == OpKind::Gelu && coin()) a.approximate = GeluApprox::Tanh;
      if (k == OpKind::LeakyRelu) a.negative_slope = 0.125;
      if (k == OpKind::Clamp)
        a.min = -0.25, a.max = coin() ? std::optional<double>(0.3) : std::nullopt;
      return a;
    };
    std::vector<int> outs_to_save;
    if (pattern <= 1) {
      // A few elementwise/reduction ops on whatever is there.
      int nops = pick(1, 5);
      std::vector<int> all = tiles;
      for (int i = 0; i < nops; ++i) {
        int kind = pick(0, 4);
        int x = any(all);
        if (kind == 0) {
          OpKind k = any(unary);
          all.push_back(b.op(k, {x}, uattrs(k)));
        } else if (kind == 1) {
          int y = any(all);
          if (stage(x) != stage(y) && stage(x) != Stage::Invariant && stage(y) != Stage::Invariant)
            continue;
          all.push_back(b.op(any(binary), {x, y}));
        } else if (kind == 2 && !shape(x).empty()) {
          Attrs a;
          a.dim = pick(0, static_cast<int>(shape(x).size()) - 1);
          a.keepdim = coin(0.7);
          all.push_back(
              b.op(any(std::vector<OpKind>{OpKind::Sum, OpKind::Mean, OpKind::Max}), {x}, a));
        } else if (kind == 3 && shape(x).size() >= 2) {
          all.push_back(b.op(OpKind::Transpose, {x}));
        } else if (kind == 4) {
          int y = any(all);
          if (stage(x) != stage(y) && stage(x) != Stage::Invariant && stage(y) != Stage::Invariant)
            continue;
          ThreadGraph tg{2, {{OpKind::Mul, {0, 1}, {}}, {any(unary), {2}, {}}}};
          if (tg.ops[1].kind == OpKind::Clamp || tg.ops[1].kind == OpKind::LeakyRelu)
            tg.ops[1].attrs = uattrs(tg.ops[1].kind);
          ThreadOp c{OpKind::Constant, {}, {}};
          c.attrs.value = 0.5;
          tg.ops.push_back(c);
          tg.ops.push_back({OpKind::Add, {3, 4}, {}});
          all.push_back(b.fused(tg, {x, y}));
        }
      }
      // Accumulate some loop values; post ops on accumulators.
      std::vector<int> accs;
      for (int t : all)
        if (stage(t) == Stage::Loop && coin(0.5)) {
          OpKind k = any(std::vector<OpKind>{OpKind::AccumSum, OpKind::AccumSum, OpKind::AccumMax});
          accs.push_back(b.op(k, {t}));
        }
      for (int a : accs) {
        all.push_back(a);
        if (coin(0.5)) all.push_back(b.op(any(unary), {a}, {}));
        if (coin(0.3) && !shape(a).empty()) {
          Attrs at;
          at.dim = static_cast<int>(shape(a).size()) - 1;
          int r = b.op(OpKind::Sum, {a}, at);
          all.push_back(b.op(OpKind::Div, {a, r}));
        }
      }
      // Save: loop tiles (if the loop is mapped) and post/invariant tiles.
      for (int t : all)
        if (coin(0.5)) outs_to_save.push_back(t);
      if (outs_to_save.empty()) outs_to_save.push_back(all.back());
    } else if (pattern == 2) {
      int a = tiles[0], bb = tiles[1];
      if (transpose_b_) bb = b.op(OpKind::Transpose, {bb});
      int mm = b.op(OpKind::MatMul, {a, bb});
      int v = mm;
      if (coin(0.3)) v = b.op(any(unary), {mm}, {});
      int acc = b.op(coin(0.8) ? OpKind::AccumSum : OpKind::AccumMax, {v});
      int post = acc;
      if (coin(0.5)) post = b.op(OpKind::Silu, {acc});
      if (coin(0.3)) {
        ThreadGraph tg{1, {{OpKind::Square, {0}, {}}, {OpKind::Add, {0, 1}, {}}}};
        post = b.fused(tg, {post});
      }
      outs_to_save.push_back(post);
      if (stage(mm) == Stage::Loop && coin(0.3)) outs_to_save.push_back(mm);
    } else {
      // Online softmax: s = q k; m = max(s, -1); e = exp(s - m); acc_o = rescale(e v, m),
      // acc_l = rescale(sum(e), m); out = acc_o / acc_l.
      int s = b.op(OpKind::MatMul, {tiles[0], tiles[1]});
      Attrs a;
      a.dim = 1;
      int m = b.op(OpKind::Max, {s}, a);
      int e = b.op(OpKind::Exp, {b.op(OpKind::Sub, {s, m})});
      int ev = b.op(OpKind::MatMul, {e, tiles[2]});
      int l = b.op(OpKind::Sum, {e}, a);
      int ao = b.op(OpKind::AccumRescale, {ev, m});
      int al = b.op(OpKind::AccumRescale, {l, m});
      outs_to_save.push_back(b.op(OpKind::Div, {ao, al}));
    }
    int saved = 0;
    for (int t : outs_to_save) {
      const BlockOp& o = b.peek().ops[t];
      int r = static_cast<int>(o.shape.size());
      std::vector<int> omap(p.grid.size(), -1), fmap(p.loop.size(), -1);
      int lead = 0;
      for (size_t g = 0; g < p.grid.size(); ++g)
        if (p.grid[g] > 1) omap[g] = lead++;
      if (o.stage == Stage::Loop)
        for (size_t l = 0; l < p.loop.size(); ++l)
          if (p.loop[l] > 1) fmap[l] = lead++;
      if (r + lead > kMaxRank) continue;
      // Shift tile dims after the new leading dims.
      b.output(t, omap, fmap, any(std::vector<DType>{DType::F16, DType::F32, DType::BF16}),
               fmt::format("O{}", saved), r + lead);
      ++saved;
    }
    if (saved == 0) throw UserError(ErrorCode::Structure, "nothing saved");
    BlockGraph bg = std::move(b).finish();
    KernelGraphBuilder kb(name);
    std::vector<int> ids;
    for (const In& i : ins) ids.push_back(kb.input(i.desc.name, i.desc.shape, i.desc.dtype));
    auto block = std::make_shared<const BlockGraph>(std::move(bg));
    std::vector<int> outs = kb.graph_defined(block, ids, "k");
    for (int o : outs) kb.output(o);
    // Sometimes a predefined op after the kernel.
    if (coin(0.3)) {
      int o = outs[0];
      const TensorDesc& t = kb.peek().tensor(o);
      Attrs a;
      a.dim = -1;
      if (t.shape.empty()) return std::move(kb).finish();
      OpKind k =
          any(std::vector<OpKind>{OpKind::Softmax, OpKind::Sum, OpKind::Exp, OpKind::RmsNorm});
      kb.output(kb.op(k, {o}, a, "post"));
    }
    return std::move(kb).finish();
  }

  std::mt19937_64 rng_;
  bool transpose_b_ = false;
};

}  // namespace kiln::testing
