// What the predefined matmul lowerings (gemv.cpp, gemm.cpp) share: a matmul's operands and
// extents, the broadcast strides of batched operands, and the launch scope they write into.
#pragma once

#include "../emit_internal.h"
#include "kiln/codegen/schedule.h"

namespace kiln::cgen {

// Predefined matmul op of g: A [.., M, K] x B [.., K, N] -> [.., M, N].
struct MatmulShape {
  const TensorDesc& a;
  const TensorDesc& b;
  const TensorDesc& out;
  int64_t M, K, N;
  int64_t batch;  // output elements / (M N)
  MatmulShape(const KernelGraph& g, const KernelOp& op)
      : a(g.tensor(op.inputs[0])),
        b(g.tensor(op.inputs[1])),
        out(g.tensor(op.outputs[0])),
        M(a.shape[a.shape.size() - 2]),
        K(a.shape.back()),
        N(b.shape.back()),
        batch(numel(out.shape) / (M * N)) {}
};

// The rows of one GEMM that computes the whole (batched) matmul: M times the batch where B has no
// batch dims and A is not broadcast over them (A [.., M, K] and the output [.., M, N] are then
// one row-major [rows, K] and [rows, N], e.g. nn.Linear over [B, S, K] activations); -1 where
// the batches need their own products.
inline int64_t folded_rows(const MatmulShape& s) {
  if (s.b.shape.size() != 2) return -1;
  if (numel(s.a.shape) != s.M * s.batch * s.K) return -1;
  return s.M * s.batch;
}

// Whether the runtime's tensor-core kernels can take the matmul: operands of one 16-bit type, not
// folded constants, K a multiple of 8, and N too unless B is read K-major (b_kmajor: B^T [N, K]
// has K-long rows, and the kernels that read it store any N).
inline bool tensor_core_operands(const PlanContext& ctx, const KernelOp& op, const MatmulShape& m,
                                 bool b_kmajor = false) {
  return !ctx.is_const(op.inputs[0]) && !ctx.is_const(op.inputs[1]) && m.a.dtype == m.b.dtype &&
         m.a.dtype != DType::F32 && m.K % 8 == 0 && (b_kmajor || m.N % 8 == 0);
}

// A product the wgmma GEMM must not run until a hang is understood: N not a multiple of 8 (the
// epilogue's direct stores) with a single k-tile. Both hangs seen (session 25, staged, 20000
// rows, K 7 and 33, N 513) had that shape; N 513 at K 200 and N 512 at K 40 and 64 ran
// (docs/codegen.md). The GEMM, the contraction and the staged GEMM all ask this.
inline bool wgmma_hang_shape(int64_t n, int64_t k) {
  return n % 8 != 0 && k <= 64;
}

// The transpose op whose output is operand B of predefined matmul `op`, where the matmul may read
// it in place as B^T [N, K] (K-major, PyTorch's nn.Linear weight layout) instead of running it as
// a kernel: a swap of the dims of a 2-D tensor whose rows TMA can address (16-byte strides), not
// a folded constant, not a graph output, read by nothing else, not taken over by another kernel.
// -1 where there is none.
inline int kmajor_b_source(const PlanContext& ctx, const KernelOp& op) {
  const int b = op.inputs[1];
  const int pr = ctx.g.producer(b);
  if (pr < 0) return -1;
  const KernelOp& t = ctx.g.ops[pr];
  if (t.kind != OpKind::Transpose || t.inputs.size() != 1) return -1;
  const TensorDesc& src = ctx.g.tensor(t.inputs[0]);
  if (src.shape.size() != 2 || ctx.g.tensor(b).shape.size() != 2) return -1;
  if (transpose_perm(t.attrs, 2) != std::vector<int>{1, 0}) return -1;
  if ((src.shape[1] * dtype_bytes(src.dtype)) % 16 != 0) return -1;
  // Read by nothing else: matmul(T, T) counts T's consumer once, but A reads T too.
  if (ctx.is_const(t.inputs[0]) || ctx.is_output.count(b) || ctx.consumers[b] != 1 ||
      op.inputs[0] == b || !ctx.can_take_over(pr))
    return -1;
  return pr;
}

// The emitter's view: batch dims of the output (at most 2 for rank 4) and each operand's
// broadcast strides; constructing it writes the kernel comment and opens the launch scope, which
// the lowering closes with L.close().
struct MatmulView : MatmulShape {
  Shape ob;
  std::vector<int64_t> as, bs;
  const char* TA;
  const char* TO;
  Code& L;
  MatmulView(GraphCtx& x, const KernelOp& op, const KernelPlan& kp)
      : MatmulShape(x.g, op), TA(ctype(a.dtype)), TO(ctype(out.dtype)), L(x.launch) {
    ob.assign(out.shape.begin(), out.shape.end() - 2);
    while (ob.size() < 2) ob.insert(ob.begin(), 1);
    auto bstrides = [&](const TensorDesc& t) {
      Shape tb(t.shape.begin(), t.shape.end() - 2);
      std::vector<int64_t> st = strides_of(t.shape);
      std::vector<int64_t> r(2, 0);
      for (size_t k = 0; k < tb.size(); ++k) {
        size_t od = k + (2 - tb.size());
        if (tb[k] != 1) r[od] = st[k];
      }
      return r;
    };
    as = bstrides(a);
    bs = bstrides(b);
    x.kernels.f("// {}: matmul [{}] x {} x {} x {} ({})", kp.kernel, ob[0] * ob[1], M, N, K,
                kp.strategy());
    x.kernels.line("");
    L.open("{");
  }
};

}  // namespace kiln::cgen
