// Small μGraphs built with the checking builders, shared by the codec and printer tests.
// Together they use every op kind at every level it may appear at, every attr, fused thread
// graphs, several grid and loop dims, in-loop savers, savers of higher rank, the online-softmax
// accumulators, chained kernels, a kernel that reads one tensor twice, and both targets.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/ir/kernel_graph.h"

namespace kiln::samples {

inline Attrs dim_attrs(int64_t dim, bool keepdim = true) {
  Attrs a;
  a.dim = dim;
  a.keepdim = keepdim;
  return a;
}

// Predefined ops only (what a parsed spec looks like), with every kernel-level attr.
inline KernelGraph spec_like() {
  KernelGraphBuilder b("spec_like", "every predefined op and attr");
  int x = b.input("X", {4, 64}, DType::F16);
  int w = b.input("W", {64, 32}, DType::F16);
  int g = b.input("g", {64}, DType::BF16);
  Attrs eps;
  eps.eps = 1e-5;
  int n = b.op(OpKind::RmsNorm, {x, g}, eps, "N");
  Attrs half;
  half.value = 0.5;
  int c = b.op(OpKind::Constant, {}, half, "c");
  int y = b.op(OpKind::MatMul, {n, w}, {}, "Y");
  int s = b.op(OpKind::Mul, {y, c}, {}, "S");
  int t = b.op(OpKind::Transpose, {s}, {}, "T");
  int r = b.op(OpKind::Sum, {t}, dim_attrs(-1, false), "R");
  Attrs tanh;
  tanh.approximate = GeluApprox::Tanh;
  int ge = b.op(OpKind::Gelu, {s}, tanh, "G");
  Attrs slope;
  slope.negative_slope = 0.2;
  int l = b.op(OpKind::LeakyRelu, {ge}, slope, "L");
  Attrs lo;
  lo.min = -1.0;
  int cl = b.op(OpKind::Clamp, {l}, lo, "C");
  int m = b.op(OpKind::Mean, {cl}, dim_attrs(0), "M");
  Attrs last;
  last.dim = -1;
  int sm = b.op(OpKind::Softmax, {cl}, last, "P");
  int mx = b.op(OpKind::Max, {sm}, dim_attrs(1, false), "Pmax");
  int e = b.op(OpKind::Exp, {mx}, {}, "E");
  int d = b.op(OpKind::Div, {e, c}, {}, "D");
  b.output(r);
  b.output(sm);
  b.output(m);
  b.output(d);
  b.output(x);  // an output may name an input, and may repeat
  b.output(r);
  return std::move(b).finish();
}

// A tiled matmul with a bias + activation epilogue fused at thread level.
inline KernelGraph tiled_matmul() {
  KernelGraphBuilder kb("tiled_matmul", "X @ W + B, then a chain of activations in registers");
  int x = kb.input("X", {16, 256}, DType::F16);
  int w = kb.input("W", {256, 512}, DType::F16);
  int bias = kb.input("B", {512}, DType::F32);
  BlockGraphBuilder bb({4}, 128, {4},
                       {kb.peek().tensor(x), kb.peek().tensor(w), kb.peek().tensor(bias)});
  int xt = bb.input(0, {-1}, {1}, "x");
  int wt = bb.input(1, {1}, {0}, "w");
  int bt = bb.input(2, {0}, {-1}, "b");
  int m = bb.op(OpKind::MatMul, {xt, wt}, {}, "m");
  int a = bb.op(OpKind::AccumSum, {m}, {}, "a");
  ThreadGraph tg;
  tg.num_inputs = 2;
  Attrs two;
  two.value = 2.0;
  Attrs box;
  box.min = -4.0;
  box.max = 4.0;
  Attrs slope;
  slope.negative_slope = 0.1;
  Attrs tanh;
  tanh.approximate = GeluApprox::Tanh;
  tg.ops = {{OpKind::Add, {0, 1}, {}}, {OpKind::Silu, {2}, {}},    {OpKind::Constant, {}, two},
            {OpKind::Mul, {3, 4}, {}}, {OpKind::Clamp, {5}, box},  {OpKind::LeakyRelu, {6}, slope},
            {OpKind::Gelu, {7}, tanh}, {OpKind::Sigmoid, {8}, {}}, {OpKind::Maximum, {9, 8}, {}}};
  int f = bb.fused(tg, {a, bt}, "f");
  bb.output(f, {1}, {-1}, DType::F16, "O", -1, "save");
  auto block = std::make_shared<const BlockGraph>(std::move(bb).finish());
  std::vector<int> outs = kb.graph_defined(block, {x, w, bias}, "matmul_epilogue");
  kb.output(outs[0]);
  return std::move(kb).finish();
}

// Flash attention with max subtraction: accum_max and accum_rescale, an invariant Q tile, an
// in-loop saver of the scores, and two post-loop savers.
inline KernelGraph flash_attention() {
  KernelGraphBuilder kb("flash_attention", "softmax(Q K) V, one pass over the keys");
  int q = kb.input("Q", {64, 32}, DType::F16);
  int k = kb.input("Kt", {32, 256}, DType::F16);
  int v = kb.input("V", {256, 32}, DType::F16);
  BlockGraphBuilder bb({4}, 256, {4},
                       {kb.peek().tensor(q), kb.peek().tensor(k), kb.peek().tensor(v)});
  int qt = bb.input(0, {0}, {-1}, "q");
  int kt = bb.input(1, {-1}, {1}, "k");
  int vt = bb.input(2, {-1}, {0}, "v");
  int s = bb.op(OpKind::MatMul, {qt, kt}, {}, "s");
  int mx = bb.op(OpKind::Max, {s}, dim_attrs(1), "mx");
  ThreadGraph tg;
  tg.num_inputs = 2;
  tg.ops = {{OpKind::Sub, {0, 1}, {}}, {OpKind::Exp, {2}, {}}};
  int e = bb.fused(tg, {s, mx}, "e");
  int l = bb.op(OpKind::Sum, {e}, dim_attrs(1), "l");
  int pv = bb.op(OpKind::MatMul, {e, vt}, {}, "pv");
  int gm = bb.op(OpKind::AccumMax, {mx}, {}, "gmax");
  int o = bb.op(OpKind::AccumRescale, {pv, mx}, {}, "o");
  int ls = bb.op(OpKind::AccumRescale, {l, mx}, {}, "lsum");
  int out = bb.op(OpKind::Div, {o, ls}, {}, "out");
  bb.output(s, {0}, {1}, DType::F32, "S", -1, "save_s");
  bb.output(out, {0}, {-1}, DType::F16, "O", -1, "save_o");
  bb.output(gm, {0}, {-1}, DType::F32, "Mx", -1, "save_m");
  auto block = std::make_shared<const BlockGraph>(std::move(bb).finish());
  std::vector<int> outs = kb.graph_defined(block, {q, k, v}, "attention");
  kb.output(outs[1]);
  kb.output(outs[0]);
  kb.output(outs[2]);
  return std::move(kb).finish();
}

// Two grid dims and two loop dims on sm_80, a rank-raising in-loop saver, block-level constant,
// transpose, unary and reductions, then a predefined op and a second graph-defined kernel that
// reads one tensor twice.
inline KernelGraph multi_dim() {
  KernelGraphBuilder kb("multi_dim", "", Arch::Sm80);
  int x = kb.input("X", {8, 64, 128}, DType::F32);
  int y = kb.input("Y", {8, 64, 128}, DType::BF16);
  BlockGraphBuilder bb({2, 4}, 128, {2, 2}, {kb.peek().tensor(x), kb.peek().tensor(y)});
  int xt = bb.input(0, {0, 1}, {2, 1}, "x");  // [4, 8, 64]
  int yt = bb.input(1, {0, 1}, {2, 1}, "y");
  int p = bb.op(OpKind::Mul, {xt, yt}, {}, "p");
  Attrs perm;
  perm.perm = {0, 2, 1};
  int t = bb.op(OpKind::Transpose, {p}, perm, "t");    // [4, 64, 8]
  int r = bb.op(OpKind::Sum, {t}, dim_attrs(2), "r");  // [4, 64, 1]
  int acc = bb.op(OpKind::AccumSum, {r}, {}, "acc");
  Attrs quarter;
  quarter.value = -0.25;
  int c = bb.op(OpKind::Constant, {}, quarter, "c");
  int sc = bb.op(OpKind::Mul, {acc, c}, {}, "scaled");
  int ng = bb.op(OpKind::Neg, {sc}, {}, "negated");
  int mn = bb.op(OpKind::Mean, {ng}, dim_attrs(-1, false), "mn");   // [4, 64]
  bb.output(p, {1, 2}, {3, 2}, DType::F32, "P", 4, "save_p");       // [1, 8, 64, 128]
  bb.output(mn, {0, 1}, {-1, -1}, DType::BF16, "A", -1, "save_a");  // [8, 256]
  auto block = std::make_shared<const BlockGraph>(std::move(bb).finish(target_for(Arch::Sm80)));
  std::vector<int> outs = kb.graph_defined(block, {x, y}, "k_reduce");
  int z = kb.op(OpKind::Sqrt, {outs[1]}, {}, "Z");
  BlockGraphBuilder b2({2}, 64, {}, {kb.peek().tensor(z), kb.peek().tensor(z)});
  int z0 = b2.input(0, {0}, {}, "z0");
  int z1 = b2.input(1, {0}, {}, "z1");
  int sum = b2.op(OpKind::Add, {z0, z1}, {}, "zz");
  int mxr = b2.op(OpKind::Max, {sum}, dim_attrs(1), "zmax");
  b2.output(mxr, {0}, {}, DType::F32, "Zmax", -1, "save_z");
  auto block2 = std::make_shared<const BlockGraph>(std::move(b2).finish(target_for(Arch::Sm80)));
  std::vector<int> outs2 = kb.graph_defined(block2, {z, z}, "k_twice");
  kb.output(outs[0]);
  kb.output(outs2[0]);
  return std::move(kb).finish();
}

inline std::vector<std::pair<std::string, KernelGraph>> all() {
  return {{"spec_like", spec_like()},
          {"tiled_matmul", tiled_matmul()},
          {"flash_attention", flash_attention()},
          {"multi_dim", multi_dim()}};
}

}  // namespace kiln::samples
