// The public benchmark suite's computations (shared/benchmarks.md) as spec-level kernel graphs,
// for timing and partial-evaluation tests.
#pragma once

#include <string>

#include "kiln/ir/kernel_graph.h"

namespace kiln::testing {

inline Attrs last_dim() {
  Attrs a;
  a.dim = -1;
  return a;
}

inline KernelGraph rmsnorm_linear(int64_t bs) {
  KernelGraphBuilder b("rmsnorm_linear");
  int x = b.input("X", {2 * bs, 4096}, DType::F16);
  int w = b.input("W", {4096, 6144}, DType::F16);
  b.output(b.op(OpKind::MatMul, {b.op(OpKind::RmsNorm, {x}, {}, "N"), w}, {}, "O"));
  return std::move(b).finish();
}

inline KernelGraph gated_mlp_spec(int64_t m) {
  KernelGraphBuilder b("gated_mlp");
  int x = b.input("X", {m, 4096}, DType::F16);
  int w1 = b.input("W1", {4096, 4096}, DType::F16);
  int w2 = b.input("W2", {4096, 4096}, DType::F16);
  int a = b.op(OpKind::Silu, {b.op(OpKind::MatMul, {x, w1}, {}, "H1")}, {}, "A");
  b.output(b.op(OpKind::Mul, {a, b.op(OpKind::MatMul, {x, w2}, {}, "H2")}, {}, "O"));
  return std::move(b).finish();
}

inline KernelGraph gqa(int64_t bs) {
  KernelGraphBuilder b("gqa");
  int q = b.input("Q", {2 * bs, 256, 64}, DType::F16);
  int k = b.input("K", {2 * bs, 64, 4096}, DType::F16);
  int v = b.input("V", {2 * bs, 4096, 64}, DType::F16);
  int p = b.op(OpKind::Exp, {b.op(OpKind::MatMul, {q, k}, {}, "S")}, {}, "P");
  int s = b.op(OpKind::Sum, {p}, last_dim(), "Z");
  b.output(b.op(OpKind::MatMul, {b.op(OpKind::Div, {p, s}, {}, "A"), v}, {}, "O"));
  return std::move(b).finish();
}

inline KernelGraph lora() {
  KernelGraphBuilder b("lora");
  int x = b.input("X", {16, 256}, DType::F16);
  int w = b.input("W", {256, 4096}, DType::F16);
  int a = b.input("A", {256, 16}, DType::F16);
  int bb = b.input("B", {16, 4096}, DType::F16);
  int xw = b.op(OpKind::MatMul, {x, w}, {}, "XW");
  int xab = b.op(OpKind::MatMul, {b.op(OpKind::MatMul, {x, a}, {}, "XA"), bb}, {}, "XAB");
  b.output(b.op(OpKind::Add, {xw, xab}, {}, "O"));
  return std::move(b).finish();
}

inline KernelGraph add_rmsnorm(int64_t n) {
  KernelGraphBuilder b("add_rmsnorm");
  int x = b.input("X", {n, 16384}, DType::F16);
  int r = b.input("R", {n, 16384}, DType::F16);
  int w = b.input("w", {16384}, DType::F16);
  int h = b.op(OpKind::Add, {x, r}, {}, "H");
  b.output(b.op(OpKind::RmsNorm, {h, w}, {}, "O"));
  b.output(h);
  return std::move(b).finish();
}

inline KernelGraph skinny_gemm(int64_t m, int64_t n, int64_t k) {
  KernelGraphBuilder b("skinny_gemm");
  int x = b.input("X", {m, k}, DType::F16);
  int w = b.input("W", {k, n}, DType::F16);
  b.output(b.op(OpKind::MatMul, {x, w}, {}, "O"));
  return std::move(b).finish();
}

}  // namespace kiln::testing
