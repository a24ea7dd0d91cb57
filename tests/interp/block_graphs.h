// Block-graph programs used by several interpreter tests, each paired with the spec-level graph
// it must equal. Both graphs of a pair take the same inputs (names, shapes, dtypes, order).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/ir/block_graph.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln::testing {

struct GraphPair {
  KernelGraph mugraph;  // uses graph-defined ops
  KernelGraph spec;     // predefined ops only
};

inline std::shared_ptr<const BlockGraph> share(BlockGraphBuilder&& b) {
  return std::make_shared<const BlockGraph>(std::move(b).finish());
}

inline std::vector<int> add_inputs(KernelGraphBuilder& kb, const std::vector<TensorDesc>& ins) {
  std::vector<int> ids;
  for (const TensorDesc& t : ins) ids.push_back(kb.input(t.name, t.shape, t.dtype));
  return ids;
}

// C = A·B with a (m/tm) x (n/tn) grid and a loop over k; A's tile replicates across grid
// dim 1 and B's across grid dim 0.
inline GraphPair tiled_matmul(int64_t m, int64_t k, int64_t n, int64_t gm, int64_t gn,
                              int64_t loops, DType dt = DType::F32) {
  std::vector<TensorDesc> ins = {{"A", {m, k}, dt}, {"B", {k, n}, dt}};
  KernelGraphBuilder kb("tiled_matmul");
  auto ids = add_inputs(kb, ins);
  BlockGraphBuilder b({gm, gn}, 128, {loops}, ins);
  int x = b.input(0, {0, -1}, {1}, "x");
  int w = b.input(1, {-1, 1}, {0}, "w");
  int acc = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, w}, {}, "mm")}, {}, "acc");
  b.output(acc, {0, 1}, {-1}, dt, "C");
  kb.output(kb.graph_defined(share(std::move(b)), ids, "k_matmul")[0]);

  KernelGraphBuilder sb("matmul");
  auto sids = add_inputs(sb, ins);
  sb.output(sb.op(OpKind::MatMul, sids, {}, "C"));
  return {std::move(kb).finish(), std::move(sb).finish()};
}

// Split-K: grid (n/tn, splits), each block sums its k range over `loops` iterations and saves
// into an extra leading output dim; a kernel-level sum over that dim finishes the reduction.
inline GraphPair split_k_matmul(int64_t m, int64_t k, int64_t n, int64_t gn, int64_t splits,
                                int64_t loops, DType dt = DType::F32) {
  std::vector<TensorDesc> ins = {{"A", {m, k}, dt}, {"B", {k, n}, dt}};
  KernelGraphBuilder kb("split_k");
  auto ids = add_inputs(kb, ins);
  BlockGraphBuilder b({gn, splits}, 128, {loops}, ins);
  int x = b.input(0, {-1, 1}, {1}, "x");
  int w = b.input(1, {1, 0}, {0}, "w");
  int acc = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, w}, {}, "mm")}, {}, "acc");
  b.output(acc, {2, 0}, {-1}, DType::F32, "P", 3);
  int partial = kb.graph_defined(share(std::move(b)), ids, "k_split")[0];
  Attrs sum0;
  sum0.dim = 0;
  sum0.keepdim = false;
  kb.output(kb.op(OpKind::Sum, {partial}, sum0, "C"));

  KernelGraphBuilder sb("matmul");
  auto sids = add_inputs(sb, ins);
  sb.output(sb.op(OpKind::MatMul, sids, {}, "C"));
  return {std::move(kb).finish(), std::move(sb).finish()};
}

// softmax(X, -1) with the row max and the normalizer computed online in a block graph: per
// iteration a [rows/grid, cols/loops] tile gives a local max m and a local sum s of exp(x - m);
// accum_max(m) and accum_rescale(s, m) combine them; kernel-level ops finish exp(X - M) / S.
// With rescale = false the local sums are added without rescaling (a wrong program).
inline GraphPair online_softmax(int64_t rows, int64_t cols, int64_t grid, int64_t loops,
                                DType dt = DType::F32, bool rescale = true) {
  std::vector<TensorDesc> ins = {{"X", {rows, cols}, dt}};
  KernelGraphBuilder kb("online_softmax");
  auto ids = add_inputs(kb, ins);
  BlockGraphBuilder b({grid}, 128, {loops}, ins);
  Attrs last;
  last.dim = 1;
  int x = b.input(0, {0}, {1}, "x");
  int m = b.op(OpKind::Max, {x}, last, "m");
  int e = b.op(OpKind::Exp, {b.op(OpKind::Sub, {x, m}, {}, "d")}, {}, "e");
  int s = b.op(OpKind::Sum, {e}, last, "s");
  int big_s =
      rescale ? b.op(OpKind::AccumRescale, {s, m}, {}, "S") : b.op(OpKind::AccumSum, {s}, {}, "S");
  int big_m = b.op(OpKind::AccumMax, {m}, {}, "M");
  b.output(big_m, {0}, {-1}, DType::F32, "Mx");
  b.output(big_s, {0}, {-1}, DType::F32, "Sx");
  auto ms = kb.graph_defined(share(std::move(b)), ids, "k_stats");
  int num = kb.op(OpKind::Exp, {kb.op(OpKind::Sub, {ids[0], ms[0]}, {}, "Xc")}, {}, "E");
  kb.output(kb.op(OpKind::Div, {num, ms[1]}, {}, "Y"));

  KernelGraphBuilder sb("softmax");
  auto sids = add_inputs(sb, ins);
  sb.output(sb.op(OpKind::Softmax, sids, {}, "Y"));
  return {std::move(kb).finish(), std::move(sb).finish()};
}

// silu(X·W1) * (X·W2): two tiled matmuls accumulated in one block graph, finished by a fused
// thread graph after the loop.
inline GraphPair gated_mlp(int64_t m, int64_t k, int64_t n, int64_t gm, int64_t gn, int64_t loops,
                           DType dt = DType::F16) {
  std::vector<TensorDesc> ins = {{"X", {m, k}, dt}, {"W1", {k, n}, dt}, {"W2", {k, n}, dt}};
  KernelGraphBuilder kb("gated_mlp");
  auto ids = add_inputs(kb, ins);
  BlockGraphBuilder b({gm, gn}, 128, {loops}, ins);
  int x = b.input(0, {0, -1}, {1}, "x");
  int w1 = b.input(1, {-1, 1}, {0}, "w1");
  int w2 = b.input(2, {-1, 1}, {0}, "w2");
  int a1 = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, w1}, {}, "m1")}, {}, "a1");
  int a2 = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, w2}, {}, "m2")}, {}, "a2");
  ThreadGraph tg;
  tg.num_inputs = 2;
  tg.ops = {{OpKind::Silu, {0}, {}}, {OpKind::Mul, {2, 1}, {}}};
  int f = b.fused(tg, {a1, a2}, "act");
  b.output(f, {0, 1}, {-1}, dt, "O");
  kb.output(kb.graph_defined(share(std::move(b)), ids, "k_mlp")[0]);

  KernelGraphBuilder sb("gated_mlp_spec");
  auto s = add_inputs(sb, ins);
  int h1 = sb.op(OpKind::MatMul, {s[0], s[1]}, {}, "H1");
  int h2 = sb.op(OpKind::MatMul, {s[0], s[2]}, {}, "H2");
  sb.output(sb.op(OpKind::Mul, {sb.op(OpKind::Silu, {h1}, {}, "A"), h2}, {}, "O"));
  return {std::move(kb).finish(), std::move(sb).finish()};
}

// Attention with max subtraction, flash style: the grid splits the batch, the loop walks the
// keys in chunks; per chunk S = q·k, m = rowmax(S), P = exp(S - m), and accum_rescale folds both
// P·v and rowsum(P) to the running max; after the loop O = acc / l.
inline GraphPair flash_attention(int64_t batch, int64_t rows, int64_t d, int64_t keys,
                                 int64_t loops, DType dt = DType::F16) {
  std::vector<TensorDesc> ins = {
      {"Q", {batch, rows, d}, dt}, {"K", {batch, d, keys}, dt}, {"V", {batch, keys, d}, dt}};
  KernelGraphBuilder kb("flash");
  auto ids = add_inputs(kb, ins);
  BlockGraphBuilder b({batch}, 128, {loops}, ins);
  Attrs last;
  last.dim = 2;
  int q = b.input(0, {0}, {-1}, "q");
  int k = b.input(1, {0}, {2}, "k");
  int v = b.input(2, {0}, {1}, "v");
  int sc = b.op(OpKind::MatMul, {q, k}, {}, "s");
  int m = b.op(OpKind::Max, {sc}, last, "m");
  int p = b.op(OpKind::Exp, {b.op(OpKind::Sub, {sc, m}, {}, "sm")}, {}, "p");
  int l = b.op(OpKind::Sum, {p}, last, "l");
  int pv = b.op(OpKind::MatMul, {p, v}, {}, "pv");
  int acc = b.op(OpKind::AccumRescale, {pv, m}, {}, "acc");
  int den = b.op(OpKind::AccumRescale, {l, m}, {}, "den");
  b.output(b.op(OpKind::Div, {acc, den}, {}, "o"), {0}, {-1}, dt, "O");
  kb.output(kb.graph_defined(share(std::move(b)), ids, "k_flash")[0]);

  KernelGraphBuilder sb("attention");
  auto s2 = add_inputs(sb, ins);
  int a = sb.op(OpKind::Softmax, {sb.op(OpKind::MatMul, {s2[0], s2[1]}, {}, "S")}, {}, "A");
  sb.output(sb.op(OpKind::MatMul, {a, s2[2]}, {}, "O"));
  return {std::move(kb).finish(), std::move(sb).finish()};
}

}  // namespace kiln::testing
