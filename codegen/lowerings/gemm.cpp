// Predefined matmuls past decode rows: the wgmma GEMM (sm_90a), mma.sync tiles, FMA.
#include "kiln/codegen/lowerings/gemm.h"

#include <algorithm>

#include "../cost_util.h"
#include "matmul_view.h"

namespace kiln {

using namespace cgen;
using namespace cost;

std::optional<WgmmaGemmKernel> WgmmaGemmKernel::match(const PlanContext& ctx, int k,
                                                      KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (op.kind != OpKind::MatMul) return std::nullopt;
  const MatmulShape s(ctx.g, op);
  // A batch over a 2-D B folds into the rows of one GEMM.
  const int64_t rows = folded_rows(s);
  if (!tensor_core_operands(ctx, op, s) || rows < 1 || ctx.t.arch != Arch::Sm90a)
    return std::nullopt;
  const int tr = kmajor_b_source(ctx, op);
  const bool kmajor = tr >= 0;
  // Past 64 rows; from 33 (where the GEMV stops) where B comes through a transpose: the mma.sync
  // GEMM reads B N-major only, so there the transpose would rewrite the whole weight first.
  if (rows <= (kmajor ? 32 : 64)) return std::nullopt;
  // Hopper: the runtime's warp-specialized TMA + wgmma GEMM (128x128x64 tiles).
  WgmmaGemmKernel p;
  p.rows = rows;
  kp.threads = 384;
  kp.grid = cdiv(s.N, 128) * cdiv(rows, 128);
  if (kmajor) {
    kp.view_op = tr;
    p.b_kmajor = true;
  }
  return p;
}

std::string WgmmaGemmKernel::describe() const {
  return b_kmajor ? "wgmma_ws 128x128x64 s6, B read K-major in place" : "wgmma_ws 128x128x64 s6";
}

// Modeled as the runtime kernel it runs: like a lowered contraction with one weight and no
// epilogue.
KernelCost WgmmaGemmKernel::cost(const CostContext& x) const {
  const TensorDesc& a = x.g.tensor(x.op.inputs[0]);
  const TensorDesc& b = x.g.tensor(x.op.inputs[1]);
  ContractionPlan p;
  p.m = rows;
  p.k = a.shape.back();
  p.n = b.shape.back();
  p.a = 0;
  p.b = {1};
  p.out = x.g.tensor(x.op.outputs[0]).dtype;
  KernelCost c = contraction_cost(x.op.name, p, {a, b}, x.t);
  c.graph_defined = false;
  return c;
}

void WgmmaGemmKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  MatmulView m(x, op, kp);
  Code& L = m.L;
  // K-major: B^T [N, K] is the transpose's input (kp.view_op), row stride K.
  const int b = b_kmajor ? x.g.ops[kp.view_op].inputs[0] : op.inputs[1];
  // Ping-pong (runtime/wgmma.cuh; contraction.cpp says why).
  L.f("err = kiln::rt::wgmma_ws_gemm_launch<kiln::rt::WgmmaGemmWS<{}, 1, 6, 1, {}, true>, {}, "
      "kiln::rt::WgmmaEpiIdentity>({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
      "kiln::rt::WgmmaEpiIdentity(), stream);",
      m.TA, b_kmajor ? "true" : "false", m.TO, x.ptr(op.inputs[0]), m.K, x.ptr(b), x.ptr(b),
      b_kmajor ? m.K : m.N, x.ptr(op.outputs[0]), m.N, rows, m.N, m.K);
  L.line("if (err != cudaSuccess) return err;");
  L.close();
}

std::optional<GemmTcKernel> GemmTcKernel::match(const PlanContext& ctx, int k, KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (op.kind != OpKind::MatMul) return std::nullopt;
  const MatmulShape s(ctx.g, op);
  if (!tensor_core_operands(ctx, op, s)) return std::nullopt;
  GemmTcKernel p;
  p.small = s.M <= 64;
  kp.threads = p.small ? 128 : 256;
  kp.smem = p.small ? 4 * (64 * 32 + 32 * 128) * 2 : 3 * (128 * 32 + 32 * 128) * 2;
  kp.grid = cdiv(s.N, 128) * cdiv(s.M, p.small ? 64 : 128) * s.batch;
  // Split K when the tiles cannot fill the machine (float32 partials, then a sum).
  if (kp.grid < ctx.t.sm_count && s.K >= 512) {
    int64_t splits = std::min<int64_t>({cdiv(2 * ctx.t.sm_count, kp.grid), s.K / 256, 16});
    int64_t chunk = cdiv(cdiv(s.K, splits), 32) * 32;
    splits = cdiv(s.K, chunk);
    if (splits > 1) {
      kp.splits = static_cast<int>(splits);
      kp.grid *= splits;
      kp.scratch_bytes = splits * s.batch * s.M * s.N * 4;
    }
  }
  return p;
}

std::string GemmTcKernel::describe() const {
  return small ? "gemm_tc 64x128x32 s4" : "gemm_tc 128x128x32 s3";
}

KernelCost GemmTcKernel::cost(const CostContext& x) const {
  return predefined_kernel_cost(x);
}

void GemmTcKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  MatmulView m(x, op, kp);
  Code& L = m.L;
  std::string cfg = small ? fmt::format("kiln::rt::GemmConfig<{}, 64, 128, 32, 2, 2, 4>", m.TA)
                          : fmt::format("kiln::rt::GemmConfig<{}, 128, 128, 32, 2, 4, 3>", m.TA);
  int bm = small ? 64 : 128;
  L.f("using Cfg = {};", cfg);
  L.f("constexpr auto kern = kiln::cg::gemm_batched_kernel<Cfg, {}>;", m.TO);
  L.line(
      "if ((err = kiln::rt::raise_smem_limit_once<kern>(Cfg::kSmemBytes)) != cudaSuccess) "
      "return err;");
  int64_t nb = m.ob[0] * m.ob[1];
  int64_t chunk = kp.splits > 1 ? cdiv(cdiv(m.K, kp.splits), 32) * 32 : m.K;
  std::string part = kp.splits > 1
                         ? fmt::format("reinterpret_cast<float*>(ws + {})", kp.scratch_offset)
                         : "nullptr";
  emit_launch(L, "kern", fmt::format("{}, {}, {}", cdiv(m.N, 128), cdiv(m.M, bm), nb * kp.splits),
              "Cfg::kThreads", "Cfg::kSmemBytes", 1,
              fmt::format("{}, {}, {}, {}, {}, {}, {}, {}, (int64_t){}, (int64_t){}, (int64_t){}, "
                          "(int64_t){}, {}, {}",
                          x.ptr(op.inputs[0]), x.ptr(op.inputs[1]), x.ptr(op.outputs[0]), m.M, m.N,
                          m.K, nb, m.ob[1], m.as[0], m.as[1], m.bs[0], m.bs[1], chunk, part));
  launch_check(L);
  if (kp.splits > 1) {
    int64_t count = nb * m.M * m.N;
    emit_launch(
        L, fmt::format("kiln::cg::splitk_sum_kernel<{}>", m.TO),
        std::to_string(std::min<int64_t>(cdiv(count, 256), 4096)), "256", "0", 1,
        fmt::format("{}, {}, {}, (int64_t){}", part, x.ptr(op.outputs[0]), kp.splits, count));
    launch_check(L);
  }
  L.close();
}

std::optional<FmaKernel> FmaKernel::match(const PlanContext& ctx, int k, KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (op.kind != OpKind::MatMul) return std::nullopt;
  const MatmulShape s(ctx.g, op);
  kp.threads = 256;
  kp.grid = cdiv(s.N, 32) * cdiv(s.M, 32) * s.batch;
  return FmaKernel{};
}

std::string FmaKernel::describe() const {
  return "fma 32x32";
}

KernelCost FmaKernel::cost(const CostContext& x) const {
  return predefined_kernel_cost(x);
}

void FmaKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  MatmulView m(x, op, kp);
  Code& L = m.L;
  emit_launch(
      L, fmt::format("kiln::cg::matmul_fma_kernel<{}, {}, {}>", m.TA, ctype(m.b.dtype), m.TO),
      fmt::format("{}, {}, {}", cdiv(m.N, 32), cdiv(m.M, 32), m.ob[0] * m.ob[1]), "256", "0", 1,
      fmt::format("{}, {}, {}, {}, {}, {}, {}, (int64_t){}, (int64_t){}, (int64_t){}, "
                  "(int64_t){}",
                  x.ptr(op.inputs[0]), x.ptr(op.inputs[1]), x.ptr(op.outputs[0]), m.M, m.N, m.K,
                  m.ob[1], m.as[0], m.as[1], m.bs[0], m.bs[1]));
  launch_check(L);
  L.close();
}

}  // namespace kiln
