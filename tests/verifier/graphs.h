// Small graphs for the verifier tests, built with the checking builders.
#pragma once

#include <memory>

#include "kiln/ir/kernel_graph.h"

namespace kiln::verifier::testing {

inline Attrs dim_attrs(int64_t dim, bool keepdim = true) {
  Attrs a;
  a.dim = dim;
  a.keepdim = keepdim;
  return a;
}

inline Attrs value_attrs(double v) {
  Attrs a;
  a.value = v;
  return a;
}

// Attention: O = softmax(Q K * 0.25) V with Q [B, S, D], K [B, D, N], V [B, N, D].
inline KernelGraph attention_spec(int64_t b, int64_t s, int64_t d, int64_t n) {
  KernelGraphBuilder kb("attention");
  int q = kb.input("Q", {b, s, d}, DType::F16);
  int k = kb.input("K", {b, d, n}, DType::F16);
  int v = kb.input("V", {b, n, d}, DType::F16);
  int sc = kb.op(OpKind::MatMul, {q, k}, {}, "S");
  int c = kb.op(OpKind::Constant, {}, value_attrs(0.25), "c");
  int s2 = kb.op(OpKind::Mul, {sc, c}, {}, "S2");
  int p = kb.op(OpKind::Softmax, {s2}, dim_attrs(-1), "P");
  kb.output(kb.op(OpKind::MatMul, {p, v}, {}, "O"));
  return std::move(kb).finish();
}

// Split-KV flash decoding with max subtraction, the online-softmax way. Kernel 1: a block per
// (batch, rows / rt, split) walks its split in `steps` chunks; per chunk it takes the row max m
// of the scores, exp(s - m), their row sum and exp(s - m) V, and folds them with accum_rescale
// (rescaling to the running max) while accum_max keeps the split's max. It writes partials with
// a leading split dim. Kernel 2 walks the splits, rescaling every partial to the global max
// with accum_rescale, and divides.
inline KernelGraph flash_decoding(int64_t b, int64_t s, int64_t d, int64_t n, int64_t rt,
                                  int64_t splits, int64_t steps) {
  KernelGraphBuilder kb("attention");
  int q = kb.input("Q", {b, s, d}, DType::F16);
  int k = kb.input("K", {b, d, n}, DType::F16);
  int v = kb.input("V", {b, n, d}, DType::F16);
  std::vector<int> part;
  {
    const KernelGraph& g = kb.peek();
    BlockGraphBuilder bb({b, s / rt, splits}, 128, {steps},
                         {g.tensor(q), g.tensor(k), g.tensor(v)});
    int tq = bb.input(0, {0, 1, -1}, {-1}, "q");
    int tk = bb.input(1, {0, -1, 2}, {2}, "k");
    int tv = bb.input(2, {0, -1, 1}, {1}, "v");
    int ts = bb.op(OpKind::MatMul, {tq, tk}, {}, "s");
    int tc = bb.op(OpKind::Constant, {}, value_attrs(0.25), "c");
    int ts2 = bb.op(OpKind::Mul, {ts, tc}, {}, "s2");
    int tm = bb.op(OpKind::Max, {ts2}, dim_attrs(2), "m");
    int te = bb.op(OpKind::Exp, {bb.op(OpKind::Sub, {ts2, tm}, {}, "sm")}, {}, "e");
    int tl = bb.op(OpKind::Sum, {te}, dim_attrs(2), "l");
    int tpv = bb.op(OpKind::MatMul, {te, tv}, {}, "pv");
    int acc_pv = bb.op(OpKind::AccumRescale, {tpv, tm}, {}, "acc_pv");
    int acc_l = bb.op(OpKind::AccumRescale, {tl, tm}, {}, "acc_l");
    int acc_m = bb.op(OpKind::AccumMax, {tm}, {}, "acc_m");
    bb.output(acc_pv, {1, 2, 0}, {-1}, DType::F32, "OP", 4, "save_pv");
    bb.output(acc_l, {1, 2, 0}, {-1}, DType::F32, "LP", 4, "save_l");
    bb.output(acc_m, {1, 2, 0}, {-1}, DType::F32, "MP", 4, "save_m");
    auto bg = std::make_shared<const BlockGraph>(std::move(bb).finish());
    part = kb.graph_defined(bg, {q, k, v}, "flash_partial");
  }
  const KernelGraph& g = kb.peek();
  BlockGraphBuilder bb({b, s / rt}, 128, {splits},
                       {g.tensor(part[0]), g.tensor(part[1]), g.tensor(part[2])});
  int op = bb.input(0, {1, 2}, {0}, "op");
  int lp = bb.input(1, {1, 2}, {0}, "lp");
  int mp = bb.input(2, {1, 2}, {0}, "mp");
  int acc_o = bb.op(OpKind::AccumRescale, {op, mp}, {}, "acc_o");
  int acc_l = bb.op(OpKind::AccumRescale, {lp, mp}, {}, "acc_l");
  int o4 = bb.op(OpKind::Div, {acc_o, acc_l}, {}, "o4");
  int o = bb.op(OpKind::Sum, {o4}, dim_attrs(0, false), "o");
  bb.output(o, {0, 1}, {-1}, DType::F16, "O", -1, "save_o");
  auto bg = std::make_shared<const BlockGraph>(std::move(bb).finish());
  auto out = kb.graph_defined(bg, part, "flash_combine");
  kb.output(out[0]);
  return std::move(kb).finish();
}

// The row mean of X [rows, n] taken per tile: a block per row walks n / tile tiles, takes each
// tile's mean (a block-level mean, count `tile`), sums them and multiplies by `scale` (1 / (n /
// tile) is right).
inline KernelGraph tiled_mean(int64_t rows, int64_t n, int64_t tile, double scale) {
  KernelGraphBuilder kb("tiled_mean");
  int x = kb.input("X", {rows, n}, DType::F16);
  const KernelGraph& g = kb.peek();
  BlockGraphBuilder bb({rows}, 128, {n / tile}, {g.tensor(x)});
  int tx = bb.input(0, {0}, {1}, "x");
  int m = bb.op(OpKind::Mean, {tx}, dim_attrs(1), "m");
  int acc = bb.op(OpKind::AccumSum, {m}, {}, "acc");
  int c = bb.op(OpKind::Constant, {}, value_attrs(scale), "c");
  int o = bb.op(OpKind::Mul, {acc, c}, {}, "o");
  bb.output(o, {0}, {-1}, DType::F16, "O", -1, "save_o");
  auto bg = std::make_shared<const BlockGraph>(std::move(bb).finish());
  auto out = kb.graph_defined(bg, {x}, "tiled_mean");
  kb.output(out[0]);
  return std::move(kb).finish();
}

}  // namespace kiln::verifier::testing
