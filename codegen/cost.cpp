// The per-kernel cost model: constants, shared formulas, the generic kernels' costs and the
// dispatch to each lowering's cost of its plan (docs/cost-model.md).
#include "kiln/codegen/cost.h"

#include <algorithm>
#include <cmath>
#include <variant>

#include "cost_util.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/elementwise.h"

namespace kiln {

const CostConstants& cost_constants(Arch a) {
  // L2 -> SM: every load crosses it, DRAM misses and L2 hits alike; H100 about 1.8x DRAM
  // (measured: a GEMV grid that reads each 67 MB weight twice, once through L2, ran 30.5 us where
  // one read per weight ran 28.0, i.e. ~4.4 TB/s of loads achieved). Shared memory: 128 bytes per
  // clock per SM at the boost clock (H100 SXM 1.755 GHz x 132 SMs; A100 SXM 1.41 GHz x 108 SMs).
  static CostConstants sm80 = [] {
    CostConstants c{4.5e12, 128.0 * 1.41e9 * 108};
    c.l2_capacity = 40e6;
    return c;
  }();
  // The generic block kernel multiplies with mma.sync; on the H100 the target's tensor rate is
  // wgmma's. Attention chains on mma.sync measured 146-191 TFLOP/s (session 4, gqa bs16), about
  // a quarter of the 690 TFLOP/s rate; 0.35 keeps them well behind the wgmma lowerings that run
  // the same graphs at ~300 (docs/cost-model.md).
  static CostConstants sm90a = [] {
    CostConstants c{5.5e12, 128.0 * 1.755e9 * 132};
    c.mma_sync_fraction = 0.35;
    return c;
  }();
  return a == Arch::Sm80 ? sm80 : sm90a;
}

namespace cost {

// Useful bytes per DRAM byte for a tile whose contiguous run is `run` bytes: whole sectors are
// fetched, and every run costs `overhead` bytes more (a new DRAM burst / row; short runs spread
// over many rows stream far below copy bandwidth: 64-byte weight rows ran at half of it).
double coalescing(double run, const CostConstants& k) {
  if (run >= 65536) return 1.0;
  double fetched = k.dram_granule * std::ceil(run / k.dram_granule);
  return run / (fetched + k.run_overhead);
}

// Contiguous bytes of a tile inside a row-major tensor.
double contiguous_run(const Shape& tile, const Shape& tensor, int bytes) {
  double run = bytes;
  size_t off = tensor.size() - tile.size();
  for (size_t j = tile.size(); j-- > 0;) {
    run *= double(tile[j]);
    if (tile[j] != tensor[j + off]) break;
  }
  return run;
}

int64_t pad(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

double matmul_tc_flops(const Shape& a, const Shape& b, const Shape& out) {
  int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
  int64_t batch = numel(out) / (m * n);
  return 2.0 * double(batch) * double(pad(m, 16)) * double(pad(n, 8)) * double(pad(k, 16));
}

// dram_u, comp_u: the fraction of DRAM bandwidth and of the SMs' rates the kernel reaches;
// tc_u: of the target's tensor-core rate (generic kernels use mma.sync, not wgmma).
void finish_times(KernelCost& c, const Target& t, const CostConstants& k, double dram_u,
                  double comp_u, double tc_u) {
  c.t_dram = (c.dram_read + c.dram_write) / (t.dram_bytes_per_s * dram_u);
  c.t_l2 = (c.dram_read + c.l2_bytes) / (k.l2_bytes_per_s * dram_u);
  c.t_smem = c.smem_bytes / (k.smem_bytes_per_s * comp_u);
  c.t_tc = c.tc_flops / (t.tc_flops_per_s * comp_u * tc_u);
  c.t_cuda = c.cuda_flops / (t.fp32_flops_per_s * comp_u);
  c.t_launch = t.launch_s;
  c.t_fixed = k.fixed_s;
  std::pair<double, const char*> terms[] = {
      {c.t_dram, "dram"}, {c.t_lat, "latency"}, {c.t_l2, "l2"},     {c.t_smem, "smem"},
      {c.t_tc, "tensor"}, {c.t_cuda, "cuda"},   {c.t_iter, "loop"}, {c.t_chain, "chain"}};
  auto best = *std::max_element(std::begin(terms), std::end(terms),
                                [](auto& a, auto& b) { return a.first < b.first; });
  c.bound = best.second;
  // Pipeline drain: loads overlap the compute of earlier iterations, but the last iteration's
  // compute of each wave (all of it without a loop) overlaps no load.
  c.t_fill = std::max({c.t_smem, c.t_tc, c.t_cuda}) / double(std::max<int64_t>(1, c.iterations));
  c.time = c.t_launch + c.t_fixed + best.first + c.t_fill;
}

// The fractions of DRAM bandwidth and of the SMs' rates reached by a kernel of `blocks` blocks
// at efficiency e: no kernel is faster than the SMs its grid covers, and DRAM saturates once a
// fraction `saturation` of the SMs is busy; compute loses the idle SMs of the last wave.
void grid_utilization(double blocks, const Target& t, double e, double saturation, double& dram_u,
                      double& comp_u) {
  const double sm = t.sm_count;
  dram_u = e * std::min(1.0, std::min(blocks, sm) / (saturation * sm));
  comp_u = e * blocks / (std::ceil(blocks / sm) * sm);
}

// A split-K kernel's last block per output tile sums the float32 partials after the others have
// landed: one more dependent DRAM round trip, after the stream, not overlapped with it.
void add_split_round_trip(KernelCost& c, const CostConstants& k) {
  c.t_fixed += k.dram_latency_s;
  c.time += k.dram_latency_s;
}

// A graph-defined GEMM with an elementwise epilogue that the emitter lowers to the runtime's
// warp-specialized wgmma mainloop (kiln/codegen/lowerings/contraction.h): 128 x 128 output tiles,
// each a block on its own SM. Tensor-core efficiency from the H100 timings of that kernel
// (docs/runtime.md: 4096^3 one weight 699 TFLOP/s, two weights 711 TFLOP/s with the persistent
// kernel, at 0.97 wave efficiency: about the target's 690 TFLOP/s rate). `inputs` are the tensors
// that p's input indices refer to.
// Modeled as the predefined GEMV: a weight stream at the GEMV's efficiency over the SMs the grid
// covers; A re-read through L2 by every 16-column block (at M = 32 that is twice the weight's
// bytes); a cluster's k-splits add one round trip.
KernelCost gemv_kmajor_cost(KernelCost c, double a_bytes, int64_t m, int64_t n, int64_t k,
                            const GemvKmajorShape& v, const Target& t) {
  const CostConstants& kc = cost_constants(t.arch);
  c.blocks = v.grid;
  c.blocks_per_sm = 1;
  c.waves = 1;
  c.iterations = std::max<int64_t>(1, k / (32 * GemvKmajorShape::kWarps * v.splits));
  c.pipeline_stages = 1;
  c.round_trips = 1;
  c.l2_bytes = a_bytes * double((n + 15) / 16);
  c.tc_flops = 2.0 * double(v.nw) * double(pad(m, 8)) * double(pad(n, 16)) * double(k);
  double dram_u, comp_u;
  grid_utilization(double(v.grid), t, kc.gemv_efficiency, kc.dram_saturation, dram_u, comp_u);
  finish_times(c, t, kc, dram_u, comp_u);
  if (v.splits > 1) add_split_round_trip(c, kc);
  return c;
}

int f32x3_splits(int64_t rows, int64_t n, int64_t k, int sms, int64_t batch) {
  const int64_t tiles = ((rows + 127) / 128) * ((n + 127) / 128) * batch;
  const int64_t ktiles = 3 * ((k + 31) / 32);
  if (tiles >= sms) return 1;
  // Each split walks at least 16 k-tiles, or 4 where K is small (under 32 k-tiles in all): there
  // 16 left one split, and 131 x 509 by K 257 ran 8 CTAs through 27 k-tiles (25.5 us, torch 8.7).
  const int64_t per = ktiles >= 32 ? 16 : 4;
  // At most 16 splits, or 64 where 64 f32 partials of the output take at most 8 MB: a 32 x 64
  // output over K 16384 (one tile) ran 47 us at 16 splits, 23 at 64 (H200, session 25).
  const int64_t cap = rows * n * batch * 4 * 64 <= (int64_t(8) << 20) ? 64 : 16;
  const int64_t s = std::min<int64_t>({(sms + tiles - 1) / tiles, ktiles / per, cap});
  return static_cast<int>(std::max<int64_t>(1, s));
}

// Measured on the H200 at 2048^3: the GEMM 150 us of 169.
KernelCost f32x3_gemm_cost(const std::string& name, int64_t rows, int64_t n, int64_t k,
                           int64_t batch, int splits, double in_bytes, double out_bytes,
                           const Target& t) {
  const CostConstants& kc = cost_constants(t.arch);
  const double M = double(rows), N = double(n), nb = double(batch);
  const double kp = double((k + 31) / 32 * 32);
  KernelCost c;
  c.name = name;
  c.lowered = true;
  c.blocks = ((n + 127) / 128) * ((rows + 127) / 128) * batch * splits;
  c.waves = (c.blocks + t.sm_count - 1) / t.sm_count;
  c.iterations = std::max<int64_t>(1, 3 * static_cast<int64_t>(kp) / 32 / splits);
  c.pipeline_stages = 6;
  const double pairs = (M + N) * 2 * kp * 4 * nb;
  c.dram_read = in_bytes + pairs * 1.5;  // B's hi pairs are read twice
  c.dram_write = pairs + out_bytes;
  if (splits > 1) c.dram_write += 2.0 * splits * M * N * 4 * nb;  // written, then read back
  c.l2_bytes = M * 2 * kp * 4 * double((n + 127) / 128 - 1) * nb;
  c.tc_flops = 2.0 * 2.0 * double(pad(rows, 128)) * double(pad(n, 128)) * 3.0 * kp * nb;
  const double wave_u = double(c.blocks) / double(c.waves * t.sm_count);
  finish_times(c, t, kc, 1.0, wave_u);
  // The split pass and the split-K sum are launches of their own.
  c.time += (1.0 + (splits > 1 ? 1.0 : 0.0)) * (t.launch_s + kc.fixed_s);
  return c;
}

KernelCost contraction_cost(const std::string& name, const ContractionPlan& p,
                            const std::vector<TensorDesc>& inputs, const Target& t) {
  const CostConstants& k = cost_constants(t.arch);
  KernelCost c;
  c.name = name;
  c.graph_defined = true;
  c.lowered = true;
  const double nb = double(p.b.size());
  c.blocks = ((p.m + 127) / 128) * ((p.n + 127) / 128);
  c.blocks_per_sm = 1;
  c.waves = (c.blocks + t.sm_count - 1) / t.sm_count;
  c.iterations = (p.k + 63) / 64;
  c.pipeline_stages = p.b.size() == 1 ? 4 : 3;
  c.round_trips = 1;
  auto bytes = [&](int io) {
    return double(numel(inputs[io].shape)) * dtype_bytes(inputs[io].dtype);
  };
  c.dram_read = bytes(p.a);
  for (int b : p.b) c.dram_read += bytes(b);
  for (int e : p.epi_inputs) c.dram_read += bytes(e);
  c.dram_write = double(p.m) * double(p.n) * dtype_bytes(p.out);
  // A is re-read once per column tile, each B once per row tile (through L2).
  c.l2_bytes = bytes(p.a) * double((p.n + 127) / 128 - 1);
  for (int b : p.b) c.l2_bytes += bytes(b) * double((p.m + 127) / 128 - 1);
  if (const std::optional<LowRankShape>& v = p.lowrank_shape) {
    // The low-rank chain kernel (runtime/lowrank.cuh): every tensor read once from DRAM; through
    // L2, X and L0 once per cluster, every CTA's columns of L1 once. A cluster's exchange of T's
    // partials is one more dependent round trip, after its loads.
    const LowRankTerm& lr = *p.lowrank;
    c.blocks = v->grid;
    c.waves = (v->grid + t.sm_count - 1) / t.sm_count;
    c.iterations = 1;
    c.pipeline_stages = 1;
    c.dram_read += bytes(lr.a) + bytes(lr.b);
    const double per_cluster = bytes(p.a) + bytes(lr.a);
    c.l2_bytes = per_cluster * double(v->grid / v->splits - 1);
    const double mp = 16.0 * v->mt, rp = 16.0 * v->rt;
    c.tc_flops = 2.0 * double(v->grid / v->splits) * mp * rp * double(pad(p.k, 16));
    c.cuda_flops = 2.0 * mp * rp * double(p.n);
    double dram_u, comp_u;
    grid_utilization(double(v->grid), t, k.gemv_efficiency, k.dram_saturation, dram_u, comp_u);
    finish_times(c, t, k, dram_u, comp_u);
    if (v->splits > 1) add_split_round_trip(c, k);
    return c;
  }
  if (const std::optional<GemvTmaShape>& v = p.gemv) {
    // M <= 32: the TMA GEMV, modeled as the predefined one (a weight stream at the GEMV's
    // efficiency over the SMs its grid covers; a cluster's k-splits add one round trip).
    c.blocks = v->grid;
    c.waves = 1;
    c.iterations = std::max<int64_t>(1, p.k / (v->bk * v->splits));
    c.pipeline_stages = v->stages;
    c.l2_bytes = bytes(p.a) * double((p.n + v->bn - 1) / v->bn);
    c.tc_flops = 2.0 * nb * double(pad(p.m, 8)) * double(p.n) * double(p.k);
    double dram_u, comp_u;
    grid_utilization(double(v->grid), t, k.gemv_efficiency, k.gemv_tma_saturation, dram_u, comp_u);
    finish_times(c, t, k, dram_u, comp_u);
    if (v->splits > 1) add_split_round_trip(c, k);
    return c;
  }
  if (const std::optional<GemvKmajorShape>& v = p.gemv_kmajor)
    return gemv_kmajor_cost(c, bytes(p.a), p.m, p.n, p.k, *v, t);
  c.tc_flops = 2.0 * nb * double(pad(p.m, 128)) * double(pad(p.n, 128)) * double(pad(p.k, 64));
  double wave_u = double(c.blocks) / double(c.waves * t.sm_count);
  finish_times(c, t, k, 1.0, wave_u);
  return c;
}

}  // namespace cost

using namespace cost;

namespace {

// The traffic and work of block graph bg's ops over B blocks of I iterations: DRAM, L2 and shared
// memory bytes, tensor-core and CUDA-core flops; loop_in / invariant_in receive the input tile
// bytes one block loads per iteration / once.
void count_block_ops(const BlockGraph& bg, const BlockSchedule* plan, const CostConstants& k,
                     double B, double I, KernelCost& c, double& loop_in, double& invariant_in) {
  // Which tiles live in registers (consumed only by accumulators) and how often each is used.
  size_t n = bg.ops.size();
  std::vector<int> uses(n, 0);
  std::vector<bool> only_accum(n, true);
  for (const BlockOp& o : bg.ops)
    for (int i : o.inputs) {
      uses[i]++;
      if (op_info(o.kind).cls != OpClass::Accum) only_accum[i] = false;
    }
  for (size_t i = 0; i < n; ++i) {
    const BlockOp& o = bg.ops[i];
    const OpInfo& info = op_info(o.kind);
    double mult = B * (o.stage == Stage::Loop ? I : 1.0);
    double elems = double(numel(o.shape));
    switch (info.cls) {
      case OpClass::Input: {
        const TensorDesc& td = bg.inputs[o.io];
        int bytes = dtype_bytes(td.dtype);
        double loaded = elems * bytes * mult;
        double unique = double(numel(td.shape)) * bytes;
        double eff = coalescing(contiguous_run(o.shape, td.shape, bytes), k);
        c.dram_read += unique / eff;
        // Re-reads (other blocks, later iterations) come from L2 if the tensor stays there; a
        // tensor larger than L2 streams through it, and a share of its re-reads miss.
        double again = std::max(0.0, loaded - unique) / eff;
        double miss = unique > k.l2_capacity ? k.l2_miss : 0.0;
        c.dram_read += again * miss;
        c.l2_bytes += again * (1 - miss);
        c.smem_bytes += elems * bytes * (1 + uses[i]) * mult;
        (o.stage == Stage::Loop ? loop_in : invariant_in) += elems * bytes;
        break;
      }
      case OpClass::Output: {
        const TensorDesc& td = bg.outputs[o.io];
        int bytes = dtype_bytes(td.dtype);
        double eff = coalescing(contiguous_run(o.shape, td.shape, bytes), k);
        c.dram_write += double(numel(td.shape)) * bytes / eff;
        break;
      }
      case OpClass::Matmul: {
        const Shape& a = bg.ops[o.inputs[0]].shape;
        const Shape& b = bg.ops[o.inputs[1]].shape;
        // A product the plan keeps off the tensor cores (f32 operands, or fragments that do not
        // fit) is a dot product per element on the CUDA cores, at a fraction of their rate.
        if (plan && plan->tiles.size() == n && !plan->tiles[i].mma.use) {
          c.cuda_flops +=
              2.0 * double(numel(o.shape)) * double(a.back()) * mult / k.fma_matmul_efficiency;
        } else {
          c.tc_flops += matmul_tc_flops(a, b, o.shape) * mult;
        }
        break;
      }
      case OpClass::Fused:
        for (const ThreadOp& to : o.thread->ops) c.cuda_flops += elems * op_weight(to.kind) * mult;
        break;
      case OpClass::Reduce:
        c.cuda_flops += double(numel(bg.ops[o.inputs[0]].shape)) * mult;
        break;
      case OpClass::Accum:
        // Accumulators add once per iteration.
        c.cuda_flops += elems * (o.kind == OpKind::AccumRescale ? 6 : 1) * B * I;
        break;
      case OpClass::Transpose:
      case OpClass::Binary:
      case OpClass::Unary:
      case OpClass::Constant:
      case OpClass::Softmax:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
        c.cuda_flops += elems * op_weight(o.kind) * mult;
        break;
    }
    // With the plan, a tile is staged exactly when it is stored (shared memory or workspace):
    // register-resident fragment chains, values recomputed inline and accumulator feeds never
    // touch shared memory.
    bool staged = info.cls != OpClass::Input && info.cls != OpClass::Output &&
                  info.cls != OpClass::Accum && !(uses[i] > 0 && only_accum[i]);
    if (plan && staged)
      staged = plan->tiles[i].home == TileHome::Smem || plan->tiles[i].home == TileHome::Global;
    if (staged) c.smem_bytes += elems * 4 * (1 + uses[i]) * mult;
  }
}

// The longest dependent chain one warp runs in a block of bg under plan, op after op (the ops of
// a block run one after another; loop ops once per iteration): a tensor-core matmul's k16 steps
// per warp (its k extent over the warps that split k); a matmul or reduction on CUDA cores, the
// fused multiply-adds (adds, maxima) each thread of its lane groups runs in sequence: its outputs
// per thread times its share of the reduced extent.
double chain_s(const BlockGraph& bg, const BlockSchedule& plan, const CostConstants& k) {
  double chain = 0;
  if (plan.tiles.size() != bg.ops.size()) return chain;  // no tile plans: nothing to follow
  const double I = double(bg.num_iterations());
  const int64_t T = bg.block_threads;
  for (size_t i = 0; i < bg.ops.size(); ++i) {
    const BlockOp& o = bg.ops[i];
    const OpClass cls = op_info(o.kind).cls;
    if (cls != OpClass::Matmul && cls != OpClass::Reduce) continue;
    const double times = o.stage == Stage::Loop ? I : 1.0;
    const Shape& in = bg.ops[o.inputs[0]].shape;
    const TilePlan& tp = plan.tiles[i];
    if (cls == OpClass::Matmul && tp.mma.use) {
      const Distribution* d = mma_distribution(plan, static_cast<int>(i));
      if (!d) continue;
      const int64_t ks = std::max(1, d->ks), steps = ((in.back() + 15) / 16 + ks - 1) / ks;
      const double step =
          tp.mma.a_ldmatrix && tp.mma.b_ldmatrix ? k.mma_step_s : k.mma_gather_step_s;
      chain += double(steps) * step * times;
      continue;
    }
    const Distribution& d = tp.dist;
    if (d.kind != DistKind::Group || tp.home == TileHome::Inline) continue;
    const int64_t g = std::max(1, d.group), lanes = std::max<int64_t>(1, T / g);
    // The reduced extent: a matmul's k; a reduction's input elements per output.
    const int64_t red =
        cls == OpClass::Matmul
            ? in.back()
            : std::max<int64_t>(1, numel(in) / std::max<int64_t>(1, numel(o.shape)));
    const int64_t per_thread = (numel(o.shape) + lanes - 1) / lanes;
    chain += double(per_thread * ((red + g - 1) / g)) * k.fma_step_s * times;
  }
  return chain;
}

}  // namespace

KernelCost block_graph_cost(const KernelOp& op, const Target& t, const BlockSchedule* plan) {
  const CostConstants& k = cost_constants(t.arch);
  // The kernel runs the planner's re-tiled loop when it has one (codegen/schedule.h).
  const BlockGraph& bg = plan && plan->retiled ? *plan->retiled : *op.block;
  KernelCost c;
  c.name = op.name;
  c.graph_defined = true;
  c.blocks = bg.num_blocks();
  c.iterations = bg.num_iterations();
  BlockResources r = block_resources(bg);
  c.smem_per_block = r.smem_bytes;
  c.regs_per_thread = r.regs_per_thread;
  int64_t smem_sm = t.smem_per_block + 1024;
  int64_t bps = std::min<int64_t>(32, 2048 / bg.block_threads);
  bps = std::min<int64_t>(bps, smem_sm / (r.smem_bytes + 1024));
  bps = std::min<int64_t>(bps, t.regs_per_sm / (int64_t(r.regs_per_thread) * bg.block_threads));
  c.blocks_per_sm = static_cast<int>(std::max<int64_t>(1, bps));
  int64_t slots = int64_t(t.sm_count) * c.blocks_per_sm;
  c.waves = (c.blocks + slots - 1) / slots;
  double B = double(c.blocks), I = double(c.iterations);

  double loop_in = 0, invariant_in = 0;  // input tile bytes of one block (per iteration: loop)
  count_block_ops(bg, plan, k, B, I, c, loop_in, invariant_in);
  double sm = t.sm_count;
  double busy = std::min(B, sm);
  double dram_u = std::min(1.0, busy / (k.dram_saturation * sm));
  double comp_u = B / (std::ceil(B / sm) * sm);
  // Memory latency (Little's law): a block keeps (stages - 1) pipeline stages of its loop inputs
  // in flight (one stage is being consumed; a ring of one stage overlaps nothing), so its loop
  // needs ceil(stages of the loop / max(1, stages - 1)) dependent DRAM round trips; invariant
  // inputs ride the first one. A ring that holds the whole loop (stages of the loop <= stages)
  // is filled by the prologue at once (block_emit/kernel.cpp): one round trip, all its bytes in
  // flight. Each wave of resident blocks pays its own round trips.
  c.pipeline_stages = plan ? std::max(1, plan->pipeline_stages) : 1;
  c.coarsen = plan ? std::max(1, plan->coarsen) : 1;
  if (loop_in > 0 && c.iterations > 1) {
    int64_t ring = c.iterations / c.coarsen;
    int64_t ahead = ring <= c.pipeline_stages ? ring : std::max(1, c.pipeline_stages - 1);
    c.round_trips = (ring + ahead - 1) / ahead;
    c.inflight_bytes = std::max(loop_in * c.coarsen * ahead, invariant_in);
  } else if (loop_in + invariant_in > 0) {
    c.round_trips = 1;
    c.inflight_bytes = loop_in * I + invariant_in;
  }
  // Input tiles copied without cp.async (rows cp.async cannot take: a 16-bit tile of odd row
  // pitch) block the iteration that issues them: about one plain_copy_trip_s per 16 chunks a
  // thread copies (kiln_cg.cuh load_tile batches up to 32 chunks 16 deep; its unroll-4 loop for
  // larger tiles measured alike), every iteration for a loop tile. Unmodeled, a 300 x
  // 1001 by 1001 x 515 f16 block graph (39 such trips) was 6.6 us modeled and 71 us measured
  // (H200, session 25).
  int64_t plain_trips = 0;
  if (plan && plan->tiles.size() == bg.ops.size())
    for (size_t i = 0; i < bg.ops.size(); ++i) {
      const BlockOp& o = bg.ops[i];
      const TilePlan& tp = plan->tiles[i];
      if (o.kind != OpKind::Input || tp.async || tp.load_vec < 1) continue;
      const int64_t chunks = (numel(o.shape) / tp.load_vec + bg.block_threads - 1) /
                             std::max<int64_t>(1, bg.block_threads);
      plain_trips += (chunks + 15) / 16 * (o.stage == Stage::Loop ? c.iterations : 1);
    }
  // The first round trip of a wave is part of t_fixed (first loads); later ones are not.
  c.t_lat = double(c.waves) * double(std::max<int64_t>(0, c.round_trips - 1)) * k.dram_latency_s +
            double(c.waves) * double(plain_trips) * k.plain_copy_trip_s;
  // Loop overhead: every iteration of a block costs a barrier, a pipeline wait and the issue of
  // its loads and fragment loads, a fixed part plus a part per warp. It is SM issue time, not
  // latency: the busiest SM runs ceil(B / SMs) blocks' iterations one after another.
  c.t_iter = std::ceil(B / sm) * I *
             (k.iteration_s + k.iteration_warp_s * double(bg.block_threads) / 32.0);
  // The warps' dependent chains: every block of a wave runs its own at once, so a wave
  // takes at least its longest chain, however few bytes and flops it has (a [1, 1000] x
  // [1000, 13] product per iteration is 63 dependent k16 steps in one warp).
  if (plan) c.t_chain = double(c.waves) * chain_s(bg, *plan, k);
  // The generic kernel's products are mma.sync, slower than the target's wgmma rate.
  finish_times(c, t, k, dram_u, comp_u, k.mma_sync_fraction);
  return c;
}

namespace {

// A predefined op's generic kernel: reads its non-constant inputs and writes its output once, at
// efficiency e (fitted to H100 measurements, docs/cost-model.md). No kernel is faster than the
// SMs its grid covers (the planner's launch grid; row-per-block reductions of few rows cover few
// SMs); DRAM saturates once a fraction `saturation` of the SMs is busy.
KernelCost generic_cost(const KernelGraph& g, const KernelOp& op, const Target& t, double e,
                        double saturation, const KernelPlan* plan, bool fma_matmul = false) {
  const CostConstants& k = cost_constants(t.arch);
  KernelCost c;
  c.name = op.name;
  for (int i : op.inputs) {
    int p = g.producer(i);
    if (p >= 0 && g.ops[p].kind == OpKind::Constant) continue;
    const TensorDesc& td = g.tensor(i);
    c.dram_read += double(numel(td.shape)) * dtype_bytes(td.dtype);
  }
  const TensorDesc& out = g.tensor(op.outputs[0]);
  c.dram_write = double(numel(out.shape)) * dtype_bytes(out.dtype);
  if (op.kind == OpKind::MatMul) {
    c.tc_flops =
        matmul_tc_flops(g.tensor(op.inputs[0]).shape, g.tensor(op.inputs[1]).shape, out.shape);
    // On the CUDA cores: the products at fma_matmul_efficiency of the FMA rate (compute runs at
    // efficiency e below, hence the ratio).
    if (fma_matmul) c.cuda_flops = c.tc_flops * e / k.fma_matmul_efficiency, c.tc_flops = 0;
  } else {
    double in_elems = 0;
    for (int i : op.inputs) in_elems = std::max(in_elems, double(numel(g.tensor(i).shape)));
    double w = op.kind == OpKind::Softmax   ? 12
               : op.kind == OpKind::RmsNorm ? 8
                                            : op_weight(op.kind);
    c.cuda_flops = std::max(in_elems, double(numel(out.shape))) * std::max(1.0, w);
  }
  c.round_trips = 1;  // a generic kernel loads, then computes: one DRAM round trip (in t_fixed)
  double dram_u = e, comp_u = e;
  if (plan && plan->grid > 0) {
    c.blocks = plan->grid;
    grid_utilization(double(plan->grid), t, e, saturation, dram_u, comp_u);
  }
  finish_times(c, t, k, dram_u, comp_u);
  if (plan && plan->splits > 1) add_split_round_trip(c, k);
  return c;
}

// Generic kernels other than the runtime's are eff_pre efficient (gemm_tc, fma), elementwise,
// gather and row kernels are simple streaming loops (row_efficiency).
double generic_efficiency(const KernelOp& op, const CostConstants& k) {
  return op.kind == OpKind::MatMul ? k.predefined_efficiency : k.row_efficiency;
}

}  // namespace

KernelCost predefined_kernel_cost(const CostContext& x, double e, double saturation) {
  return generic_cost(x.g, x.op, x.t, e, saturation, &x.kp);
}

KernelCost predefined_kernel_cost(const CostContext& x) {
  const CostConstants& k = cost_constants(x.t.arch);
  return generic_cost(x.g, x.op, x.t, generic_efficiency(x.op, k), k.dram_saturation, &x.kp);
}

KernelCost predefined_fma_matmul_cost(const CostContext& x) {
  const CostConstants& k = cost_constants(x.t.arch);
  return generic_cost(x.g, x.op, x.t, k.predefined_efficiency, k.dram_saturation, &x.kp, true);
}

KernelCost unplanned_cost(const KernelGraph& g, const KernelOp& op, const Target& t) {
  const CostConstants& k = cost_constants(t.arch);
  return generic_cost(g, op, t, generic_efficiency(op, k), k.dram_saturation, nullptr);
}

KernelCost plan_cost(const KernelGraph& g, const KernelOp& op, const Target& t,
                     const KernelPlan& kp) {
  const CostContext x{g, op, t, kp};
  return std::visit([&](const auto& p) { return p.cost(x); }, kp.plan);
}

}  // namespace kiln
