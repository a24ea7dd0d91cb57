// Predefined matmuls of decode rows: the runtime's GEMV, register- or TMA-streamed.
#include "kiln/codegen/lowerings/gemv.h"

#include <algorithm>

#include "../cost_util.h"
#include "matmul_view.h"

namespace kiln {

using namespace cgen;

namespace {

int64_t align_up(int64_t a, int64_t b) {
  return (a + b - 1) / b * b;
}

}  // namespace

// The TMA-streamed GEMV (runtime gemv_tma.cuh) for Y = epi(X W_0[, X W_1]) with M <= 32 rows of X
// on sm_90a, or nullopt where the register-streamed GEMV stays (sm_80, weights under 8 MB, N past
// 256 columns per SM, strides TMA cannot take). The rule, measured on the H100 (tests/gpu/
// gemv_tma_sweep.cu, 2026-11-25; docs/runtime.md has the table):
//   - one block per SM, each with a ring of 4 stages of 32 KB of weight (BK = 16384 / (nw BN) rows
//     of K per stage, at least 64; fewer stages where X's panels or a second weight would not fit):
//     with the ring that large, a block streams ~27 GB/s and more blocks per SM only unbalance the
//     SMs (N6144 K4096 M32: 19.3 us at 96 blocks of 193 KB, 21.5 at 192 of 97 KB);
//   - BN, the columns per block: the narrowest of 64, 128, 256 whose column blocks fit on the SMs
//     at one block each (N16384: 128 x 128 columns, 71.6-73.3 us for M 1-32; 256 blocks of 64
//     columns at two per SM: 73.0-74.4);
//   - split-K (a cluster of `splits` blocks per column block) only until the rings hold 8 MB in
//     flight (Little's law: ~3 TB/s x ~2.7 us), one block per SM at most, at most 8 splits, and
//     each split streaming at least two full rings: N2304 K16384 (36 column blocks): 2 splits,
//     28.0 / 28.9 us at M 1 / 32 where the register GEMV takes 28.5 / 31.2; the runtime's
//     two-weight N4096 (64 column blocks, 8 MB): none, 24.2 us against 25.1 with 2; K2048 N2048:
//     none (6.5 us, 7.1 with 2).
// Against the register GEMV as planned below, on 25 shapes (M 1-32, N 2048-32000, K 2048-16384,
// 8-436 MB of weight, with and without the fused rms_norm, one and two weights): 0.53-0.99 of its
// time (rmsnorm_linear bs16: 20.4 us against 24.4; torch 23.0 in the same session), and within
// 1.7% of the best configuration swept for each shape (the rule was chosen on these numbers).
//
// K-major weights (W^T [N, K], `kmajor`) have no 8 MB floor: there the alternative is not the
// register GEMV over [K, N] but a transpose kernel in front of it, or the K-major register GEMV
// (gemv_kmajor_shape). Under 8 MB the TMA GEMV is kept while each block streams at most 192 KB
// (1.5 rings), measured on the H100 (tests/gpu/gemv_kmajor_sweep.cu, 2026-11-27, cold weights, us:
// TMA / K-major register at its best / torch F.linear): M8 N3072 K1024 bf16 4.71 / 4.62 / 5.25,
// M32 5.08 / 5.74 / 5.81, M8 N1024 K1024 3.58 / 3.62 / 4.73; past it the register kernel's clusters
// win: M4 N512 K4096 f16 (16 blocks of 262 KB) 6.39 / 4.54 / 7.53.
std::optional<GemvTmaShape> gemv_tma_shape(int64_t M, int64_t N, int64_t K, int nw, const Target& t,
                                           bool kmajor) {
  if (t.arch != Arch::Sm90a || M > 32 || M < 1 || nw < 1 || nw > 2) return std::nullopt;
  if (N % 8 != 0 || K % 8 != 0 || N < 8) return std::nullopt;  // TMA strides, 16-byte stores
  const int64_t weight_bytes = K * N * 2 * nw;
  const bool small = weight_bytes < (int64_t(8) << 20);
  if (small && !kmajor) return std::nullopt;
  const int64_t sms = t.sm_count, mt = M <= 8 ? 1 : M <= 16 ? 2 : 4;  // wgmma n in {8, 16, 32}
  int64_t bn = 64;
  while (bn < 256 && cdiv(N, bn) > sms) bn *= 2;
  const int64_t cb = cdiv(N, bn);
  if (cb > sms) return std::nullopt;
  const int64_t bk = std::max<int64_t>(64, 16384 / (nw * bn));
  auto smem = [&](int64_t st) {
    return std::max(st * (nw * bn * bk * 2 + 8 * mt * bk * 2), nw * 8 * mt * (bn + 4) * 4) + 1024;
  };
  int64_t st = 4;
  // The block's static shared memory (mbarriers, row sums) needs well under 2 KB.
  while (st > 2 && smem(st) + 2048 > t.smem_per_block) --st;
  const int64_t ring_w = st * nw * bn * bk * 2;
  int64_t splits = 1;
  while (splits < 8 && cb * splits * ring_w < (int64_t(8) << 20) && cb * (splits + 1) <= sms &&
         K >= (splits + 1) * 2 * st * bk)
    ++splits;
  GemvTmaShape c;
  c.mt = mt;
  c.bn = bn;
  c.bk = bk;
  c.stages = st;
  c.splits = splits;
  c.grid = cb * splits;
  c.smem = smem(st);
  if (small && weight_bytes > c.grid * (int64_t(192) << 10)) return std::nullopt;
  return c;
}

// The K-major register GEMV (runtime gemv_kmajor.cuh) at 8 warps of 4 k-steps in flight, one
// 16-column slab per block; on sm_90a the k-range splits over a cluster until the blocks cover
// the SMs once, keeping at least 256 rows of K per split. Measured on the H100 (tests/gpu/
// gemv_kmajor_sweep.cu, 2026-11-27; docs/runtime.md has the table), on the shapes the TMA GEMV
// declines this is within 2% of the best of 4/8 warps, 1/2/4 slabs, unroll 2/4 and 1-8 splits:
// N512 K4096 8 splits 4.54 us (1 split: 10.19), N777 K4104 M27 4 splits 9.70 (8: 12.56), N1001
// K1000 4 splits 3.73 (best 3.67); N3072 K1024 none 4.62 (2: 5.00).
// Emitted files build for sm_80 too, whose static shared memory stops at 48 KB: the kernel's
// partials (float4 per lane per 16-column tile, for the other warps and the other CTAs of a
// cluster) and row sums must fit, as its static_assert checks. Two weights at 4 m-tiles do not.
std::optional<GemvKmajorShape> gemv_kmajor_shape(int64_t M, int64_t N, int64_t K, const Target& t,
                                                 int64_t nw, bool rows) {
  GemvKmajorShape c;
  c.nw = nw;
  c.mt = M <= 8 ? 1 : M <= 16 ? 2 : 4;
  const int64_t cb = cdiv(N, 16);
  auto chunk = [&](int64_t s) { return align_up(cdiv(K, s), 32); };
  c.max_cluster = t.arch == Arch::Sm90a ? 8 : 1;
  if (t.arch == Arch::Sm90a)
    while (c.splits < 8 && cb * c.splits < t.sm_count && chunk(2 * c.splits) >= 256) c.splits *= 2;
  c.grid = cb * c.splits;
  const int64_t tiles = nw * c.mt, w = GemvKmajorShape::kWarps, cl = c.max_cluster;
  const int64_t static_smem =
      16 * 32 * tiles * ((w - 1) + (cl - 1)) + (rows ? 4 * 8 * c.mt * (w + cl) : 0);
  if (static_smem > 48 * 1024) return std::nullopt;
  return c;
}

std::string gemv_kmajor_launch_call(const GemvKmajorShape& c, const char* ta, const char* to,
                                    const std::string& epi_type, const std::string& x,
                                    const std::string& w, const std::string& w1,
                                    const std::string& out, int64_t m, int64_t n, int64_t k,
                                    const std::string& epi) {
  return fmt::format(
      "err = kiln::rt::gemv_kmajor_launch<{}, {}, {}, 1, {}, {}, {}, {}{}>({}, {}, {}, {}, {}, {}, "
      "{}, {}, {}, {}, {}, stream, {});",
      ta, to, c.mt, GemvKmajorShape::kWarps, GemvKmajorShape::kUnroll, c.max_cluster, epi_type,
      c.nw > 1 ? ", 2" : "", x, k, w, c.nw > 1 ? w1 : "nullptr", k, out, n, m, n, k, c.splits, epi);
}

std::optional<GemvKernel> GemvKernel::match(const PlanContext& ctx, int k, KernelPlan& kp) {
  const KernelGraph& g = ctx.g;
  const KernelOp& op = g.ops[k];
  const Target& t = ctx.t;
  if (op.kind != OpKind::MatMul) return std::nullopt;
  const MatmulShape s(g, op);
  // A batch over a 2-D B folds into the GEMV's rows (folded_rows).
  const int64_t M = folded_rows(s), N = s.N, K = s.K;
  if (M < 1 || M > 32) return std::nullopt;
  // B = transpose(W) of an [N, K] W (nn.Linear's layout) is read K-major in place, by the TMA GEMV
  // or the K-major register GEMV: any N, K a multiple of 8 (both load 16-byte runs of a row). The
  // transpose would otherwise rewrite the whole weight before every call.
  // Off sm_90a the register kernel has no clusters to split K over: where its 16-column blocks
  // would leave most SMs idle (N = 16 by K = 16384 is one block), the transpose kernel and the
  // [K, N] register GEMV with its workspace split-K stay.
  const int tr = kmajor_b_source(ctx, op);
  const bool kmajor = tr >= 0 && !ctx.is_const(op.inputs[0]) && s.a.dtype == s.b.dtype &&
                      s.a.dtype != DType::F32 && K % 8 == 0 &&
                      (t.arch == Arch::Sm90a || 2 * cdiv(N, 16) >= t.sm_count);
  if (!kmajor &&
      (!tensor_core_operands(ctx, op, s) || K % 4 != 0 || (N * dtype_bytes(s.out.dtype)) % 16 != 0))
    return std::nullopt;
  GemvKernel p;
  p.rows = M;
  // Where 64-column slabs already give 1.5 blocks per SM: 1 x 8 warps per slab, no
  // split-K (no partials, no second pass). Otherwise 1 x 4 warps per slab and k-splits
  // for about 2.5 blocks per SM. Measured on the H100 (tests/gpu/gemv_sweep.cu,
  // 2026-11-24; cluster split-K below): the time jumps by up to 40% once blocks pass
  // about 3 per SM (N6144 K4096 m32: 22.5 us at 96x3, 30.5 at 96x4; N2304 K16384 m16
  // 29.4 at 36x8), and 2 per SM leaves 5-10% on the table (N6144 m16 22.8 at 96x2
  // against 20.6 at 96x3). Against the former 2 x 4 warps at 2 blocks per SM: N2304
  // m1 28.5 us against 31.3, N6144 m16 20.6 against 23.6.
  // UNROLL 2 (two k-steps of loads in flight per warp); four m-tiles (M > 24) hold 64
  // accumulator floats per lane, so they run 2 blocks per SM there (N2304 m32 31.1 us
  // against 35.0 with UNROLL 1 at 3 per SM), and UNROLL 1 in the 8-warp blocks.
  const int64_t slabs = cdiv(N, 64);
  const int mt = static_cast<int>(cdiv(M, 8));
  const bool wide = 2 * slabs >= 3 * int64_t(t.sm_count);
  p.warps_n = 1;
  p.warps_k = wide ? 8 : 4;
  p.min_blocks = wide || mt >= 4 ? 2 : 3;
  p.unroll = wide && mt >= 4 ? 1 : 2;
  const int64_t col_blocks = slabs;
  int splits =
      wide ? 1 : static_cast<int>(std::max<int64_t>(1, 5 * int64_t(t.sm_count) / (2 * col_blocks)));
  // At least 256 rows of K per warp, so each streams enough to amortize the reduction.
  splits = static_cast<int>(std::min<int64_t>(splits, std::max<int64_t>(1, K / (256 * p.warps_k))));
  // On sm_90a the k-splits of a column block form one thread-block cluster and sum
  // through distributed shared memory (runtime gemv_cluster_kernel): no float32
  // workspace, no counters to reset (a memset node per call), no last-block pass
  // through L2. A cluster has at most 8 CTAs.
  p.cluster = t.arch == Arch::Sm90a && splits > 1;
  if (p.cluster) splits = std::min(splits, 8);
  int64_t chunk = align_up(cdiv(K, splits), 16);
  splits = static_cast<int>(cdiv(K, chunk));
  if (splits == 1) p.cluster = false;
  kp.splits = splits;
  kp.threads = 32 * p.warps_n * p.warps_k;
  kp.grid = col_blocks * splits;
  // The TMA-streamed GEMV where gemv_tma_shape gives a configuration (one weight).
  if (std::optional<GemvTmaShape> c = gemv_tma_shape(M, N, K, 1, t, kmajor)) {
    p.tma = c;
    p.cluster = false;
    kp.splits = static_cast<int>(c->splits);
    kp.threads = 160;
    kp.smem = c->smem;
    kp.grid = c->grid;
  }
  // rms_norm(X) W with a weightless rms_norm that nothing else reads: one GEMV with
  // the runtime's row-rms epilogue, diag(1 / rms(X)) (X W), which sums X^2 from the X
  // values the GEMV loads anyway; the rms_norm kernel and its round trip through
  // memory go (H100: the separate rms_norm kernel plus its graph node cost ~2 us in
  // front of a ~20 us GEMV).
  const int a_id = op.inputs[0];
  const int pr = g.producer(a_id);
  if (pr >= 0 && g.ops[pr].kind == OpKind::RmsNorm && g.ops[pr].inputs.size() == 1 &&
      ctx.can_take_over(pr) && !ctx.is_output.count(a_id) && ctx.consumers[a_id] == 1 &&
      g.tensor(g.ops[pr].inputs[0]).dtype == s.a.dtype &&
      g.tensor(g.ops[pr].inputs[0]).shape == s.a.shape) {
    p.rms = true;
    if (p.tma) kp.threads = 192;  // + the row-sum-of-squares warp
    kp.prologue_op = pr;
    kp.prologue_stores = false;
  }
  if (kmajor) {
    kp.view_op = tr;
    p.b_kmajor = true;
    if (!p.tma) {
      const std::optional<GemvKmajorShape> v = gemv_kmajor_shape(M, N, K, t, 1, p.rms);
      KILN_ASSERT(v, "one weight always fits the K-major GEMV's shared memory");
      const GemvKmajorShape& c = *v;
      p.kmajor = c;
      p.cluster = false;
      kp.splits = static_cast<int>(c.splits);
      kp.threads = GemvKmajorShape::threads();
      kp.smem = 0;
      kp.grid = c.grid;
    }
  }
  if (splits > 1 && !p.cluster && !p.tma && !p.kmajor) {
    kp.scratch_bytes =
        col_blocks * splits * (p.warps_n * mt * 512 + (p.rms ? mt * 8 : 0)) * 4 + col_blocks * 4;
  }
  return p;
}

std::string GemvKernel::describe() const {
  std::string s = tma      ? fmt::format("gemv tma {}x{} s{}", tma->bn, tma->bk, tma->stages)
                  : kmajor ? fmt::format("gemv k-major {} warps x 16 columns, cluster {}",
                                         GemvKmajorShape::kWarps, kmajor->splits)
                           : std::string("gemv");
  if (b_kmajor) s += ", W read K-major in place";
  return rms ? s + " rms_norm" : s;
}

// The runtime GEMV streams the weight near copy bandwidth; the TMA GEMV (the same runtime kernel
// as a lowered decode contraction) saturates DRAM from fewer SMs than the other kernels.
KernelCost GemvKernel::cost(const CostContext& x) const {
  const CostConstants& k = cost_constants(x.t.arch);
  if (const std::optional<GemvKmajorShape>& v = kmajor) {
    // The same model as the K-major contraction (cost::gemv_kmajor_cost), with this op's bytes.
    KernelCost c = predefined_kernel_cost(x, k.gemv_efficiency, k.dram_saturation);
    const TensorDesc& a = x.g.tensor(rms ? x.g.ops[x.kp.prologue_op].inputs[0] : x.op.inputs[0]);
    const TensorDesc& o = x.g.tensor(x.op.outputs[0]);
    return cost::gemv_kmajor_cost(c, double(numel(a.shape)) * dtype_bytes(a.dtype), rows,
                                  o.shape.back(), a.shape.back(), *v, x.t);
  }
  return predefined_kernel_cost(x, k.gemv_efficiency,
                                tma ? k.gemv_tma_saturation : k.dram_saturation);
}

void GemvKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  MatmulView m(x, op, kp);
  Code& L = m.L;
  int mt = static_cast<int>(cdiv(rows, 8));
  // A prologue here is A = rms_norm(X) (GemvKernel::match took it over): read X, scale rows at the
  // end.
  const KernelOp* rms_op = rms ? &x.g.ops[kp.prologue_op] : nullptr;
  const int a_in = rms ? rms_op->inputs[0] : op.inputs[0];
  const std::string epi = rms ? fmt::format("kiln::rt::GemvRmsNorm{{{}, {}}}",
                                            flit(1.0 / double(m.K)), flit(rms_op->attrs.eps))
                              : std::string("kiln::rt::GemvIdentity()");
  // Template arguments and operands shared by both launchers; unroll and blocks per SM are
  // plan_schedule's gemv rule.
  const std::string targs =
      fmt::format("{}, {}, {}, 1, {}, {}, {}, {}, {}", m.TA, m.TO, mt, warps_n, warps_k, unroll,
                  min_blocks, rms ? "kiln::rt::GemvRmsNorm" : "kiln::rt::GemvIdentity");
  // K-major: W^T [N, K] is the transpose's input (kp.view_op), row stride K.
  const int b = b_kmajor ? x.g.ops[kp.view_op].inputs[0] : op.inputs[1];
  const std::string operands = fmt::format(
      "{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}", x.ptr(a_in), m.K, x.ptr(b), x.ptr(b),
      b_kmajor ? m.K : m.N, x.ptr(op.outputs[0]), m.N, rows, m.N, m.K, kp.splits);
  if (const std::optional<GemvTmaShape>& v = tma) {
    // The TMA-streamed GEMV.
    const std::string tma_targs = fmt::format(
        "{}, {}, {}, 1, {}, {}, {}, 1, {}{}", m.TA, m.TO, v->mt, v->bn, v->bk, v->stages,
        rms ? "kiln::rt::GemvRmsNorm" : "kiln::rt::GemvIdentity", b_kmajor ? ", true" : "");
    L.f("err = kiln::rt::gemv_tma_launch<{}>({}, stream, {});", tma_targs, operands, epi);
  } else if (const std::optional<GemvKmajorShape>& c = kmajor) {
    // The K-major register GEMV: W [N, K], row stride K.
    L.line(gemv_kmajor_launch_call(
        *c, m.TA, m.TO, rms ? "kiln::rt::GemvRmsNorm" : "kiln::rt::GemvIdentity", x.ptr(a_in),
        x.ptr(b), "", x.ptr(op.outputs[0]), rows, m.N, m.K, epi));
  } else if (cluster) {
    L.f("err = kiln::rt::gemv_cluster_launch<{}>({}, stream, {});", targs, operands, epi);
  } else {
    if (kp.splits > 1) {
      int64_t col_blocks = cdiv(m.N, 64 * warps_n);
      L.f("float* gw = reinterpret_cast<float*>(ws + {});", kp.scratch_offset);
      L.f("int* counters = reinterpret_cast<int*>(ws + {});",
          kp.scratch_offset + kp.scratch_bytes - col_blocks * 4);
      L.f("if ((err = cudaMemsetAsync(counters, 0, {}, stream)) != cudaSuccess) return err;",
          col_blocks * 4);
    } else {
      L.line("float* gw = nullptr;");
      L.line("int* counters = nullptr;");
    }
    L.f("err = kiln::rt::gemv_launch<{}>({}, gw, counters, stream, {});", targs, operands, epi);
  }
  L.line("if (err != cudaSuccess) return err;");
  L.close();
}

std::optional<ColumnSumGemvKernel> ColumnSumGemvKernel::match(const PlanContext& ctx, int k,
                                                              KernelPlan& kp) {
  const KernelGraph& g = ctx.g;
  const KernelOp& op = g.ops[k];
  if (!ctx.opt.lowerings || ctx.t.arch != Arch::Sm90a) return std::nullopt;
  if (op.kind != OpKind::Sum && op.kind != OpKind::Mean) return std::nullopt;
  const TensorDesc& in = g.tensor(op.inputs[0]);
  const TensorDesc& out = g.tensor(op.outputs[0]);
  if (in.shape.size() != 2 || op.attrs.dim != 0 || ctx.is_const(op.inputs[0])) return std::nullopt;
  if (in.dtype != DType::F16 && in.dtype != DType::BF16) return std::nullopt;
  const int64_t K = in.shape[0], N = in.shape[1];
  if (N % 8 != 0 || (N * dtype_bytes(out.dtype)) % 16 != 0 || K >= (int64_t(1) << 31) ||
      N >= (int64_t(1) << 31))
    return std::nullopt;
  std::optional<GemvTmaShape> c = gemv_tma_shape(1, N, K, 1, ctx.t);
  if (!c) return std::nullopt;
  kp.splits = static_cast<int>(c->splits);
  kp.threads = 160;
  kp.smem = c->smem;
  kp.grid = c->grid;
  return ColumnSumGemvKernel{*c};
}

std::string ColumnSumGemvKernel::describe() const {
  return fmt::format("ones-row gemv tma {}x{} s{} (rows summed)", tma.bn, tma.bk, tma.stages);
}

// The same runtime kernel and model as the TMA GEMV, without X.
KernelCost ColumnSumGemvKernel::cost(const CostContext& x) const {
  const CostConstants& k = cost_constants(x.t.arch);
  return predefined_kernel_cost(x, k.gemv_efficiency, k.gemv_tma_saturation);
}

void ColumnSumGemvKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  const TensorDesc& in = x.g.tensor(op.inputs[0]);
  const TensorDesc& out = x.g.tensor(op.outputs[0]);
  const int64_t K = in.shape[0], N = in.shape[1];
  const double scale = op.kind == OpKind::Mean ? 1.0 / double(K) : 1.0;
  Code& L = x.launch;
  L.open("{");
  L.f("// {}: {} of {} over dim 0 ({})", kp.kernel, op_name(op.kind), shape_str(in.shape),
      kp.strategy());
  L.f("err = kiln::rt::gemv_tma_launch<{}, {}, 1, 1, {}, {}, {}, 1, kiln::rt::GemvOnesX>(nullptr, "
      "{}, {}, {}, {}, {}, {}, 1, {}, {}, {}, stream, kiln::rt::GemvOnesX{{{}}});",
      ctype(in.dtype), ctype(out.dtype), tma.bn, tma.bk, tma.stages, align_up(K, 8),
      x.ptr(op.inputs[0]), x.ptr(op.inputs[0]), N, x.ptr(op.outputs[0]), N, N, K, kp.splits,
      flit(scale));
  L.line("if (err != cudaSuccess) return err;");
  L.close();
}

}  // namespace kiln
