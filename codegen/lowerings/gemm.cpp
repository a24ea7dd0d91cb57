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
  const int tr = kmajor_b_source(ctx, op);
  const bool kmajor = tr >= 0;
  // TMA reads rows of A (K long) and of B as stored (N long, or K where B^T is read in place);
  // the output takes direct stores where its rows are not 16-byte aligned, so a K-major B allows
  // any N (a prime N included).
  if (!tensor_core_operands(ctx, op, s, kmajor) || rows < 1 || ctx.t.arch != Arch::Sm90a)
    return std::nullopt;
  if (wgmma_hang_shape(s.N, s.K)) return std::nullopt;
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

// The contraction plan a predefined matmul of `rows` (folded) rows runs as on the wgmma GEMM:
// one weight, no epilogue (contraction_cost models it).
static ContractionPlan predefined_gemm_plan(const CostContext& x, int64_t rows) {
  ContractionPlan p;
  p.m = rows;
  p.k = x.g.tensor(x.op.inputs[0]).shape.back();
  p.n = x.g.tensor(x.op.inputs[1]).shape.back();
  p.a = 0;
  p.b = {1};
  p.out = x.g.tensor(x.op.outputs[0]).dtype;
  return p;
}

// Modeled as the runtime kernel it runs: like a lowered contraction with one weight and no
// epilogue.
KernelCost WgmmaGemmKernel::cost(const CostContext& x) const {
  const ContractionPlan p = predefined_gemm_plan(x, rows);
  KernelCost c =
      contraction_cost(x.op.name, p, {x.g.tensor(x.op.inputs[0]), x.g.tensor(x.op.inputs[1])}, x.t);
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

// The transpose op whose output is operand `idx` of matmul `op`, where the f32 kernels may read
// its input in place (any strides: they read scalars, the split pass through shared memory): a
// swap of the last two dims (the leading ones, at most max_rank - 2 of them, in place), not a
// folded constant, not an output, read by nothing else, free to take over. -1 otherwise.
static int transposed_source(const PlanContext& ctx, const KernelOp& op, int idx, size_t max_rank) {
  const int v = op.inputs[idx];
  const int pr = ctx.g.producer(v);
  if (pr < 0) return -1;
  const KernelOp& t = ctx.g.ops[pr];
  if (t.kind != OpKind::Transpose || t.inputs.size() != 1) return -1;
  const size_t r = ctx.g.tensor(v).shape.size();
  if (r < 2 || r > max_rank || ctx.g.tensor(t.inputs[0]).shape.size() != r) return -1;
  std::vector<int> swap(r);
  for (size_t i = 0; i < r; ++i) swap[i] = static_cast<int>(i);
  std::swap(swap[r - 2], swap[r - 1]);
  if (transpose_perm(t.attrs, static_cast<int>(r)) != swap) return -1;
  // Read by nothing else: matmul(T, T) counts T's consumer once, but A reads T too.
  if (ctx.is_const(t.inputs[0]) || ctx.is_output.count(v) || ctx.consumers[v] != 1 ||
      op.inputs[0] == op.inputs[1] || !ctx.can_take_over(pr))
    return -1;
  return pr;
}

// The runtime's f32_rowdot_splits (runtime/tf32.cuh), for `sms` SMs.
static int rowdot_splits(int64_t L, int64_t K, int sms) {
  const int64_t want = cdiv(32 * sms, L), most = K / 2048;
  return static_cast<int>(std::clamp<int64_t>(std::min(want, most), 1, 32));
}

std::optional<F32RowdotKernel> F32RowdotKernel::match(const PlanContext& ctx, int k,
                                                      KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (op.kind != OpKind::MatMul) return std::nullopt;
  const MatmulShape s(ctx.g, op);
  if (s.a.dtype != DType::F32 && s.b.dtype != DType::F32) return std::nullopt;
  if (s.b.shape.size() != 2) return std::nullopt;
  if (ctx.is_const(op.inputs[0]) || ctx.is_const(op.inputs[1])) return std::nullopt;
  F32RowdotKernel p;
  const int ta = transposed_source(ctx, op, 0, 2), tb = transposed_source(ctx, op, 1, 2);
  const int64_t folded = folded_rows(s);    // A [.., M, K] as one [rows, K]
  if (s.N <= 8 && ta < 0 && folded >= 1) {  // W = A [rows, K]; X = B, [K, N] or (tb) [N, K]
    p.n_small = true;
    p.s = s.N, p.l = folded;
    if (tb >= 0) kp.view_op = tb;
  } else if (s.M <= 8 && s.a.shape.size() == 2 && tb >= 0) {  // W = B^T [N, K]; X = A, [M, K]
                                                              // or (ta) [K, M]
    p.s = s.M, p.l = s.N;
    kp.view_op = tb;
    if (ta >= 0) kp.prologue_op = ta, p.a_view = ta;
  } else {
    return std::nullopt;
  }
  p.splits = rowdot_splits(p.l, s.K, ctx.t.sm_count);
  kp.splits = p.splits;
  kp.threads = 256;
  kp.grid = std::min<int64_t>(p.l * p.splits / 8 + 1, 65535);
  if (p.splits > 1) kp.scratch_bytes = int64_t(p.splits) * p.l * p.s * 4;
  return p;
}

std::string F32RowdotKernel::describe() const {
  return fmt::format("f32 rowdot {} x {}{}{}", s, l,
                     splits > 1 ? fmt::format(", {} k-splits", splits) : "",
                     n_small ? "" : ", B read K-major in place");
}

// f32_rowdot and f32_colstream (runtime/tf32.cuh): the large operand streamed once at the copy
// rate, the small one from L2, `partial_floats` k-split partials written and summed (one more
// launch), `macs` multiply-adds on the CUDA cores over `blocks` blocks.
static KernelCost f32_stream_cost(const CostContext& x, double blocks, int splits,
                                  double partial_floats, double macs) {
  const CostConstants& k = cost_constants(x.t.arch);
  const TensorDesc& a = x.g.tensor(x.op.inputs[0]);
  const TensorDesc& b = x.g.tensor(x.op.inputs[1]);
  const TensorDesc& o = x.g.tensor(x.op.outputs[0]);
  KernelCost c;
  c.name = x.op.name;
  c.blocks = x.kp.grid;
  c.waves = 1;
  c.dram_read =
      double(numel(a.shape)) * dtype_bytes(a.dtype) + double(numel(b.shape)) * dtype_bytes(b.dtype);
  c.dram_write = double(numel(o.shape)) * dtype_bytes(o.dtype) + 2.0 * partial_floats * 4;
  c.cuda_flops = 2.0 * macs;
  double dram_u, comp_u;
  grid_utilization(blocks, x.t, k.row_efficiency, k.dram_saturation, dram_u, comp_u);
  finish_times(c, x.t, k, dram_u, comp_u);
  if (splits > 1) c.time += x.t.launch_s + k.fixed_s;
  return c;
}

KernelCost F32RowdotKernel::cost(const CostContext& x) const {
  const double K = double(x.g.tensor(x.op.inputs[0]).shape.back());
  return f32_stream_cost(x, double(x.kp.grid), splits, double(splits) * double(l * s),
                         double(l) * double(s) * K);
}

void F32RowdotKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  MatmulView m(x, op, kp);
  Code& L = m.L;
  // n_small: W = A [M, K], X(s, k) = B[k][s] or B^T[s][k]; out(s, l) = C[l][s].
  // else:    W = B^T [N, K], X(s, k) = A[s][k] or A^T[k][s]; out(s, l) = C[s][l].
  const int w = n_small ? op.inputs[0] : x.g.ops[kp.view_op].inputs[0];
  int xi = n_small ? op.inputs[1] : op.inputs[0];
  int64_t xs = 0, xk = 0;
  if (n_small) {
    const bool bt = kp.view_op >= 0;
    if (bt) xi = x.g.ops[kp.view_op].inputs[0];
    xs = bt ? m.K : 1, xk = bt ? 1 : m.N;
  } else {
    if (a_view >= 0) xi = x.g.ops[a_view].inputs[0];
    xs = a_view >= 0 ? 1 : m.K, xk = a_view >= 0 ? m.M : 1;
  }
  const int64_t cs = n_small ? 1 : m.N, cl = n_small ? m.N : 1;
  L.f("err = kiln::rt::f32_rowdot_launch({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
      "stream);",
      s, x.ptr(w), m.K, x.ptr(xi), xs, xk, x.ptr(op.outputs[0]), cs, cl, l, m.K, splits,
      splits > 1 ? fmt::format("reinterpret_cast<float*>(ws + {})", kp.scratch_offset)
                 : std::string("nullptr"));
  L.line("if (err != cudaSuccess) return err;");
  L.close();
}

// The runtime's f32_colstream_splits (runtime/tf32.cuh), for `sms` SMs.
static int colstream_splits(int64_t S, int64_t N, int64_t K, int sms) {
  const int64_t want = cdiv(16 * sms, cdiv(N, 128));
  const int64_t s = std::min({want, K / 16, K / (8 * std::max<int64_t>(1, S))});
  return static_cast<int>(std::clamp<int64_t>(s, 1, 256));
}

std::optional<F32ColstreamKernel> F32ColstreamKernel::match(const PlanContext& ctx, int k,
                                                            KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (op.kind != OpKind::MatMul) return std::nullopt;
  const MatmulShape s(ctx.g, op);
  if (s.a.dtype != DType::F32 && s.b.dtype != DType::F32) return std::nullopt;
  if (s.b.shape.size() != 2 || transposed_source(ctx, op, 1, 2) >= 0) return std::nullopt;
  if (ctx.is_const(op.inputs[0]) || ctx.is_const(op.inputs[1])) return std::nullopt;
  F32ColstreamKernel p;
  const int ta = transposed_source(ctx, op, 0, 2);
  if (ta >= 0) {
    p.rows = s.M;
    kp.prologue_op = ta;
    p.a_view = ta;
  } else {
    p.rows = folded_rows(s);
  }
  if (p.rows < 1 || p.rows > 16) return std::nullopt;
  p.splits = colstream_splits(p.rows, s.N, s.K, ctx.t.sm_count);
  kp.splits = p.splits;
  kp.threads = 256;
  kp.grid = cdiv(s.N, 1024) * p.splits;
  if (p.splits > 1) kp.scratch_bytes = int64_t(p.splits) * p.rows * s.N * 4;
  return p;
}

std::string F32ColstreamKernel::describe() const {
  return fmt::format("f32 colstream {} rows{}{}", rows,
                     splits > 1 ? fmt::format(", {} k-splits", splits) : "",
                     a_view >= 0 ? ", A read transposed in place" : "");
}

KernelCost F32ColstreamKernel::cost(const CostContext& x) const {
  const double N = double(x.g.tensor(x.op.inputs[1]).shape.back());
  const double K = double(x.g.tensor(x.op.inputs[0]).shape.back());
  // 256-thread blocks of 1024 columns: counted twice for the utilization, as measured.
  return f32_stream_cost(x, double(x.kp.grid) * 2, splits, double(splits) * double(rows) * N,
                         double(rows) * N * K);
}

void F32ColstreamKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  MatmulView m(x, op, kp);
  Code& L = m.L;
  // X(s, k): A[s][k] (rows folded), or A^T's input [K, M] at [k][s].
  const int xi = a_view >= 0 ? x.g.ops[a_view].inputs[0] : op.inputs[0];
  const int64_t xs = a_view >= 0 ? 1 : m.K, xk = a_view >= 0 ? m.M : 1;
  L.f("err = kiln::rt::f32_colstream_launch({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
      "stream);",
      rows, x.ptr(op.inputs[1]), m.N, x.ptr(xi), xs, xk, x.ptr(op.outputs[0]), m.N, m.N, m.K,
      splits,
      splits > 1 ? fmt::format("reinterpret_cast<float*>(ws + {})", kp.scratch_offset)
                 : std::string("nullptr"));
  L.line("if (err != cudaSuccess) return err;");
  L.close();
}

std::optional<Tf32x3GemmKernel> Tf32x3GemmKernel::match(const PlanContext& ctx, int k,
                                                        KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (op.kind != OpKind::MatMul || ctx.t.arch != Arch::Sm90a) return std::nullopt;
  const MatmulShape s(ctx.g, op);
  if (s.a.dtype != DType::F32 && s.b.dtype != DType::F32) return std::nullopt;
  if (ctx.is_const(op.inputs[0]) || ctx.is_const(op.inputs[1])) return std::nullopt;
  Tf32x3GemmKernel p;
  // Transposes of the last two dims are read in place by the split pass, batched too (the
  // leading dims keep their strides).
  const int tb = transposed_source(ctx, op, 1, 4);
  int ta = transposed_source(ctx, op, 0, 4);
  if (ta == tb) ta = -1;
  // A read transposed is not row-major [rows, K]: its batch stays a batch.
  const int64_t folded = ta >= 0 ? -1 : folded_rows(s);
  p.rows = folded >= 1 ? folded : s.M;
  p.batch = folded >= 1 ? 1 : s.batch;
  // What the f32 streaming kernels decline (colstream up to 16 rows, rowdot for vectors) ran on
  // the FMA kernel, at 8% of the FMA rate: 32 x 64 by K 16384 55 us, 23 here (H200, session
  // 25). Below 2M multiply-adds the FMA kernel's one launch stays.
  if (p.rows * p.batch * s.N * s.K < (int64_t(1) << 21) || p.batch > 65535) return std::nullopt;
  if (tb >= 0) {
    kp.view_op = tb;
    p.b_kmajor = true;
  }
  if (ta >= 0) {
    kp.prologue_op = ta;
    p.a_view = ta;
  }
  p.splits = f32x3_splits(p.rows, s.N, s.K, ctx.t.sm_count, p.batch);
  kp.splits = p.splits;
  kp.threads = 384;
  kp.grid =
      std::min<int64_t>(cdiv(s.N, 128) * cdiv(p.rows, 128) * p.batch * p.splits, ctx.t.sm_count);
  const int64_t kpad = cdiv(s.K, 32) * 32;
  kp.scratch_bytes = p.batch * (p.rows + s.N) * 2 * kpad * 4 +
                     (p.splits > 1 ? p.splits * p.batch * p.rows * s.N * 4 : 0);
  return p;
}

std::string Tf32x3GemmKernel::describe() const {
  std::string r = fmt::format("tf32x3 wgmma_ws 128x128x32 s6{}",
                              splits > 1 ? fmt::format(" split-k {}", splits) : "");
  if (batch > 1) r += fmt::format(", batch {}", batch);
  if (b_kmajor) r += ", B read K-major in place";
  if (a_view >= 0) r += ", A read transposed in place";
  return r;
}

// The split pass, the GEMM over three K segments, the split-K sum (cost_util.h).
KernelCost Tf32x3GemmKernel::cost(const CostContext& x) const {
  const TensorDesc& a = x.g.tensor(x.op.inputs[0]);
  const TensorDesc& b = x.g.tensor(x.op.inputs[1]);
  const TensorDesc& o = x.g.tensor(x.op.outputs[0]);
  KernelCost c = f32x3_gemm_cost(
      x.op.name, rows, b.shape.back(), a.shape.back(), batch, splits,
      double(numel(a.shape)) * dtype_bytes(a.dtype) + double(numel(b.shape)) * dtype_bytes(b.dtype),
      double(numel(o.shape)) * dtype_bytes(o.dtype), x.t);
  c.lowered = false;
  return c;
}

void Tf32x3GemmKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  MatmulView m(x, op, kp);
  Code& L = m.L;
  // A: the matmul's input, or the 2-D tensor its transpose reads (stored K x M); B likewise
  // (stored N x K where read K-major).
  const int a = a_view >= 0 ? x.g.ops[a_view].inputs[0] : op.inputs[0];
  const int b = b_kmajor ? x.g.ops[kp.view_op].inputs[0] : op.inputs[1];
  const int64_t M = rows;
  const int64_t lda = a_view >= 0 ? M : m.K, ldb = b_kmajor ? m.K : m.N;
  const std::string ws = fmt::format("ws + {}", kp.scratch_offset);
  // A batch (B with batch dims) runs in the same launches: batch index z = b0 nb1 + b1 of the
  // output, each operand at its broadcast strides.
  const std::string bt = batch == 1
                             ? std::string()
                             : fmt::format(", kiln::rt::F32x3Batch{{{}, {}, {}, {}, {}, {}}}",
                                           batch, m.ob[1], m.as[0], m.as[1], m.bs[0], m.bs[1]);
  L.f("err = kiln::rt::gemm_f32x3_launch({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, "
      "kiln::rt::WgmmaEpiIdentity(), stream{});",
      x.ptr(a), lda, a_view >= 0 ? "true" : "false", x.ptr(b), ldb, b_kmajor ? "true" : "false",
      x.ptr(op.outputs[0]), m.N, M, m.N, m.K, splits, ws, bt);
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

std::optional<StagedGemmKernel> StagedGemmKernel::match(const PlanContext& ctx, int k,
                                                        KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (op.kind != OpKind::MatMul || ctx.t.arch != Arch::Sm90a) return std::nullopt;
  const MatmulShape s(ctx.g, op);
  if (s.a.dtype != s.b.dtype || (s.a.dtype != DType::F16 && s.a.dtype != DType::BF16))
    return std::nullopt;
  if (ctx.is_const(op.inputs[0]) || ctx.is_const(op.inputs[1])) return std::nullopt;
  const int64_t rows = folded_rows(s), lim = int64_t(1) << 30;
  if (rows < 1 || rows >= lim || s.N >= lim || s.K >= lim) return std::nullopt;
  // Below K 32 the copies pad K to 64 and outgrow the product: 20000 x 7 by 7 x 513 ran 47 us
  // staged (torch 22; H200, session 25).
  if (rows * s.N * s.K < (int64_t(1) << 23) || s.K < 32) return std::nullopt;
  StagedGemmKernel p;
  p.rows = rows;
  const int tb = transposed_source(ctx, op, 1, 2);
  p.b_kmajor = tb >= 0;
  p.stage_a = s.K % 8 != 0 || s.K < 64;  // stage16_launch copies both there
  p.stage_b = !(p.b_kmajor && s.K % 8 == 0 && s.K >= 64);
  // The GEMV reads Kp columns of both copies (zeros past K) where K is not a multiple of 8.
  // Up to 64 rows as GEMVs of at most 32 rows each (the second streams the copy from L2): the
  // GEMM's 128-row tiles gave 61 rows by N 1531 twelve CTAs, 21 us for a 9.4 MB weight (H200).
  if (rows <= 64)
    p.gemv = gemv_kmajor_shape(std::min<int64_t>(rows, 32), s.N, cdiv(s.K, 8) * 8, ctx.t);
  // Not yet understood, so not run: with A copied and 20000 rows (K 7 and 33, N 513) the GEMM
  // hung in repeated calls on an H200 (session 25); with A copied it ran at 300 rows in graphs of
  // 20 calls and at 2000 rows three calls back to back. Past 2048 rows only B may be copied.
  if (!p.gemv && p.stage_a && rows > 2048) return std::nullopt;
  if (!p.gemv && wgmma_hang_shape(s.N, s.K)) return std::nullopt;
  if (p.b_kmajor) kp.view_op = tb;
  kp.threads = 384;
  kp.grid = cdiv(s.N, 128) * cdiv(rows, 128);
  if (p.gemv) {
    kp.threads = GemvKmajorShape::threads();
    kp.grid = p.gemv->grid;
    kp.splits = static_cast<int>(p.gemv->splits);
  }
  kp.scratch_bytes = (rows + s.N) * (cdiv(s.K, 64) * 64) * 2;  // gemm16_staged_workspace
  return p;
}

std::string StagedGemmKernel::describe() const {
  return fmt::format("staged ({}{}{} copied K-major, padded) + {}", stage_a ? "A" : "",
                     stage_a && stage_b ? ", " : "", stage_b ? (b_kmajor ? "B^T" : "B") : "",
                     gemv ? fmt::format("K-major gemv x{} m{} s{}", GemvKmajorShape::kWarps,
                                        gemv->mt, gemv->splits)
                          : std::string("wgmma_ws 128x128x64 s6"));
}

// The GEMM as WgmmaGemmKernel's, plus the staging launch: it reads what it copies and writes the
// padded copies at the row kernels' efficiency.
KernelCost StagedGemmKernel::cost(const CostContext& x) const {
  const CostConstants& k = cost_constants(x.t.arch);
  const TensorDesc& a = x.g.tensor(x.op.inputs[0]);
  const TensorDesc& b = x.g.tensor(x.op.inputs[1]);
  ContractionPlan p = predefined_gemm_plan(x, rows);
  p.b_kmajor = true;
  p.gemv_kmajor = gemv;
  if (gemv) p.m = std::min<int64_t>(rows, 32);
  KernelCost c = contraction_cost(x.op.name, p, {a, b}, x.t);
  c.graph_defined = false;
  if (gemv && rows > 32) {  // a second GEMV over the last rows, its weight from L2
    c.time += c.time - c.t_dram + c.t_l2;
    c.l2_bytes += c.dram_read;
  }
  const double kp = double(cdiv(p.k, 64) * 64), esz = double(dtype_bytes(a.dtype));
  double rd = 0, wr = 0;
  if (stage_a) rd += double(rows) * double(p.k) * esz, wr += double(rows) * kp * esz;
  if (stage_b) rd += double(p.n) * double(p.k) * esz, wr += double(p.n) * kp * esz;
  c.dram_read += rd;
  c.dram_write += wr;
  c.time += (rd + wr) / (x.t.dram_bytes_per_s * k.row_efficiency) + x.t.launch_s + k.fixed_s;
  return c;
}

void StagedGemmKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  MatmulView m(x, op, kp);
  Code& L = m.L;
  const int b = b_kmajor ? x.g.ops[kp.view_op].inputs[0] : op.inputs[1];
  if (const std::optional<GemvKmajorShape>& c = gemv) {
    L.f("const {0}* sa = nullptr;", m.TA);
    L.f("const {0}* sb = nullptr;", m.TA);
    L.line("int64_t slda = 0, sldb = 0;");
    L.f("err = kiln::rt::stage16_launch<{}>({}, {}, {}, {}, {}, {}, {}, {}, ws + {}, stream, sa, "
        "slda, sb, sldb);",
        m.TA, x.ptr(op.inputs[0]), m.K, x.ptr(b), b_kmajor ? m.K : m.N, b_kmajor ? "true" : "false",
        rows, m.N, m.K, kp.scratch_offset);
    L.line("if (err != cudaSuccess) return err;");
    // Rows in chunks of at most 32 (8 mt rows a launch).
    L.f("for (int r0 = 0; r0 < {}; r0 += {}) {{", rows, 8 * c->mt);
    L.f("  err = kiln::rt::gemv_kmajor_launch<{}, {}, {}, 1, {}, {}, {}, "
        "kiln::rt::GemvIdentity>(sa "
        "+ r0 * slda, slda, sb, nullptr, sldb, {} + r0 * {}, {}, {} - r0 < {} ? {} - r0 : {}, {}, "
        "{}, {}, stream, kiln::rt::GemvIdentity());",
        m.TA, m.TO, c->mt, GemvKmajorShape::kWarps, GemvKmajorShape::kUnroll, c->max_cluster,
        x.ptr(op.outputs[0]), m.N, m.N, rows, 8 * c->mt, rows, 8 * c->mt, m.N, cdiv(m.K, 8) * 8,
        c->splits);
    L.line("  if (err != cudaSuccess) return err;");
    L.line("}");
  } else {
    L.f("err = kiln::rt::gemm16_staged_launch<{}, {}, kiln::rt::WgmmaEpiIdentity>({}, {}, {}, {}, "
        "{}, {}, {}, {}, {}, {}, ws + {}, kiln::rt::WgmmaEpiIdentity(), stream);",
        m.TA, m.TO, x.ptr(op.inputs[0]), m.K, x.ptr(b), b_kmajor ? m.K : m.N,
        b_kmajor ? "true" : "false", x.ptr(op.outputs[0]), m.N, rows, m.N, m.K, kp.scratch_offset);
    L.line("if (err != cudaSuccess) return err;");
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

// Scalar 32 x 32 tiles on the CUDA cores (lowering.h: predefined_fma_matmul_cost).
KernelCost FmaKernel::cost(const CostContext& x) const {
  return predefined_fma_matmul_cost(x);
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
