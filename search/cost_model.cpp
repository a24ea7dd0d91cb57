// The analytical cost model (formulas in docs/cost-model.md).
#include "kiln/search/cost_model.h"

#include "kiln/codegen/contraction.h"
#include "kiln/ir/elementwise.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace kiln::search {

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

namespace {

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
                  double comp_u, double tc_u = 1.0) {
  c.t_dram = (c.dram_read + c.dram_write) / (t.dram_bytes_per_s * dram_u);
  c.t_l2 = (c.dram_read + c.l2_bytes) / (k.l2_bytes_per_s * dram_u);
  c.t_smem = c.smem_bytes / (k.smem_bytes_per_s * comp_u);
  c.t_tc = c.tc_flops / (t.tc_flops_per_s * comp_u * tc_u);
  c.t_cuda = c.cuda_flops / (t.fp32_flops_per_s * comp_u);
  c.t_launch = t.launch_s;
  c.t_fixed = k.fixed_s;
  std::pair<double, const char*> terms[] = {
      {c.t_dram, "dram"}, {c.t_lat, "latency"}, {c.t_l2, "l2"},    {c.t_smem, "smem"},
      {c.t_tc, "tensor"}, {c.t_cuda, "cuda"},   {c.t_iter, "loop"}};
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
// warp-specialized wgmma mainloop (codegen/contraction.h): 128 x 128 output tiles, each a block
// on its own SM. Tensor-core efficiency from the H100 timings of that kernel (docs/runtime.md:
// 4096^3 one weight 699 TFLOP/s, two weights 711 TFLOP/s with the persistent kernel, at 0.97
// wave efficiency: about the target's 690 TFLOP/s rate).
// `inputs` are the tensors that p's input indices refer to.
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
  c.tc_flops = 2.0 * nb * double(pad(p.m, 128)) * double(pad(p.n, 128)) * double(pad(p.k, 64));
  double wave_u = double(c.blocks) / double(c.waves * t.sm_count);
  finish_times(c, t, k, 1.0, wave_u);
  return c;
}

// A graph-defined kernel that the emitter lowers to the runtime's attention kernel
// (codegen/attention.h): blocks x mt / 64 CTAs of 64 rows, each walking its keys in chunks; the
// tensor cores do S and O (2 x 64 x keys x (d + dv) flops per CTA). Effective per-SM rates from
// the H100 timings of tests/gpu/attention_bench.cu (gqa shapes): 50% of the tensor-core peak
// with two CTAs per SM (one's exp overlaps the other's wgmma), 40% with one; plus a pipeline
// fill (A and the first chunks in flight) per wave.
KernelCost attention_cost(const KernelOp& op, const KernelPlan& kp, const Target& t) {
  const CostConstants& k = cost_constants(t.arch);
  const AttentionPlan& a = *kp.attention;
  KernelCost c;
  c.name = op.name;
  c.graph_defined = true;
  c.lowered = true;
  c.blocks = kp.grid;
  c.blocks_per_sm = kp.attn_min_blocks;
  const int64_t slots = int64_t(t.sm_count) * kp.attn_min_blocks;
  c.waves = (c.blocks + slots - 1) / slots;
  c.iterations = a.keys / kp.attn_chunk;
  c.pipeline_stages = kp.attn_stages;
  c.round_trips = 1;
  const BlockGraph& bg = *op.block;
  for (const AttentionView* v : {&a.q, &a.k, &a.v}) {
    const TensorDesc& td = bg.inputs[v->io];
    c.dram_read += double(numel(td.shape)) * dtype_bytes(td.dtype);
  }
  for (const TensorDesc& td : bg.outputs)
    c.dram_write += double(numel(td.shape)) * dtype_bytes(td.dtype);
  const double cta_flops = 2.0 * 64 * double(a.keys) * double(a.d + a.dv);
  c.tc_flops = cta_flops * double(c.blocks);
  // Consumer warpgroups per SM (CTAs per SM x consumers per CTA) share its tensor cores; a CTA
  // whose consumers split its keys finishes in 1 / key_split of its work's time.
  const int64_t ctas =
      std::min<int64_t>(kp.attn_min_blocks, (c.blocks + t.sm_count - 1) / t.sm_count);
  const int64_t active = ctas * kp.attn_key_split;
  const double eff = active >= 2 ? 0.5 : 0.4;
  const double sm_rate = t.tc_flops_per_s / t.sm_count * eff;
  const double t_cta = cta_flops * double(ctas) / sm_rate;
  finish_times(c, t, k, 1.0, 1.0);
  c.t_tc = double(c.waves) * t_cta;
  c.t_fill = k.dram_latency_s * double(c.waves);
  c.bound = c.t_tc >= c.t_dram ? "tensor" : "dram";
  c.time = c.t_launch + c.t_fixed + std::max(c.t_tc, c.t_dram) + c.t_fill;
  return c;
}

KernelCost graph_defined_cost(const KernelOp& op, const Target& t, const BlockSchedule* plan,
                              const KernelPlan* kp = nullptr) {
  const CostConstants& k = cost_constants(t.arch);
  // A lowered kernel is costed from the plan the planner made for it (nothing is matched again
  // here); otherwise the generic block-graph kernel.
  if (kp && kp->contraction)
    return contraction_cost(op.name, *kp->contraction, op.block->inputs, t);
  if (kp && kp->attention) return attention_cost(op, *kp, t);
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

  // Which tiles live in registers (consumed only by accumulators) and how often each is used.
  size_t n = bg.ops.size();
  std::vector<int> uses(n, 0);
  std::vector<bool> only_accum(n, true);
  for (const BlockOp& o : bg.ops)
    for (int i : o.inputs) {
      uses[i]++;
      if (op_info(o.kind).cls != OpClass::Accum) only_accum[i] = false;
    }
  double loop_in = 0, invariant_in = 0;  // input tile bytes of one block (per iteration: loop)
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
        c.tc_flops += matmul_tc_flops(a, b, o.shape) * mult;
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
  double sm = t.sm_count;
  double busy = std::min(B, sm);
  double dram_u = std::min(1.0, busy / (k.dram_saturation * sm));
  double comp_u = B / (std::ceil(B / sm) * sm);
  // Memory latency (Little's law): a block keeps (stages - 1) pipeline stages of its loop inputs
  // in flight (one stage is being consumed; a ring of one stage overlaps nothing), so its loop
  // needs ceil(stages of the loop / max(1, stages - 1)) dependent DRAM round trips; invariant
  // inputs ride the first one. Each wave of resident blocks pays its own round trips.
  c.pipeline_stages = plan ? std::max(1, plan->pipeline_stages) : 1;
  c.coarsen = plan ? std::max(1, plan->coarsen) : 1;
  if (loop_in > 0 && c.iterations > 1) {
    int64_t ring = c.iterations / c.coarsen;
    int64_t ahead = std::max(1, c.pipeline_stages - 1);
    c.round_trips = (ring + ahead - 1) / ahead;
    c.inflight_bytes = std::max(loop_in * c.coarsen * ahead, invariant_in);
  } else if (loop_in + invariant_in > 0) {
    c.round_trips = 1;
    c.inflight_bytes = loop_in * I + invariant_in;
  }
  // The first round trip of a wave is part of t_fixed (first loads); later ones are not.
  c.t_lat = double(c.waves) * double(std::max<int64_t>(0, c.round_trips - 1)) * k.dram_latency_s;
  // Loop overhead: every iteration of a block costs a barrier, a pipeline wait and the issue of
  // its loads and fragment loads, a fixed part plus a part per warp. It is SM issue time, not
  // latency: the busiest SM runs ceil(B / SMs) blocks' iterations one after another.
  c.t_iter = std::ceil(B / sm) * I *
             (k.iteration_s + k.iteration_warp_s * double(bg.block_threads) / 32.0);
  // The generic kernel's products are mma.sync, slower than the target's wgmma rate.
  finish_times(c, t, k, dram_u, comp_u, k.mma_sync_fraction);
  return c;
}

// A predefined matmul the planner runs as the runtime's warp-specialized wgmma GEMM: modeled as
// that kernel, like a lowered contraction with one weight and no epilogue.
KernelCost wgmma_gemm_cost(const KernelGraph& g, const KernelOp& op, const Target& t) {
  const TensorDesc& a = g.tensor(op.inputs[0]);
  const TensorDesc& b = g.tensor(op.inputs[1]);
  const TensorDesc& out = g.tensor(op.outputs[0]);
  ContractionPlan p;
  p.m = a.shape[a.shape.size() - 2];
  p.k = a.shape.back();
  p.n = b.shape.back();
  p.a = 0;
  p.b = {1};
  p.out = out.dtype;
  KernelCost c = contraction_cost(op.name, p, {a, b}, t);
  c.graph_defined = false;
  return c;
}

KernelCost predefined_cost(const KernelGraph& g, const KernelOp& op, const Target& t,
                           const KernelPlan* plan) {
  const CostConstants& k = cost_constants(t.arch);
  if (op.kind == OpKind::MatMul && plan && plan->kind == Strategy::WgmmaGemm)
    return wgmma_gemm_cost(g, op, t);
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
  } else {
    double in_elems = 0;
    for (int i : op.inputs) in_elems = std::max(in_elems, double(numel(g.tensor(i).shape)));
    double w = op.kind == OpKind::Softmax   ? 12
               : op.kind == OpKind::RmsNorm ? 8
                                            : op_weight(op.kind);
    c.cuda_flops = std::max(in_elems, double(numel(out.shape))) * std::max(1.0, w);
  }
  c.round_trips = 1;  // a generic kernel loads, then computes: one DRAM round trip (in t_fixed)
  // The kernel's efficiency by kind (fitted to H100 measurements, docs/cost-model.md): the
  // runtime GEMV streams the weight near copy bandwidth; elementwise and row kernels are simple
  // streaming loops; other generic kernels (gemm_tc, fma) are eff_pre efficient. No kernel is
  // faster than the SMs its grid covers (the planner's launch grid; row-per-block reductions of
  // few rows cover few SMs).
  double e = k.predefined_efficiency;
  if (plan && plan->kind == Strategy::Gemv)
    e = k.gemv_efficiency;
  else if (op.kind != OpKind::MatMul)
    e = k.row_efficiency;
  double dram_u = e, comp_u = e;
  if (plan && plan->grid > 0) {
    c.blocks = plan->grid;
    // The TMA GEMV (the same runtime kernel as a lowered decode contraction) saturates DRAM from
    // fewer SMs than the other kernels.
    grid_utilization(double(plan->grid), t, e,
                     plan->gemv_tma ? k.gemv_tma_saturation : k.dram_saturation, dram_u, comp_u);
  }
  finish_times(c, t, k, dram_u, comp_u);
  if (plan && plan->splits > 1) add_split_round_trip(c, k);
  return c;
}

// The emitter's plan of every kernel, or nothing if the planner refuses the graph (the model
// then assumes a ring of one stage).
std::optional<kiln::Schedule> plan(const KernelGraph& g, const Target& t) {
  try {
    return plan_schedule(g, t);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

const KernelPlan* kernel_plan(const std::optional<kiln::Schedule>& s, size_t op) {
  if (!s || op >= s->kernels.size()) return nullptr;
  return &s->kernels[op];
}

const BlockSchedule* block_plan(const std::optional<kiln::Schedule>& s, size_t op) {
  const KernelPlan* p = kernel_plan(s, op);
  return p ? p->block.get() : nullptr;
}

}  // namespace

KernelCost kernel_cost(const KernelGraph& g, const KernelOp& op, const Target& t,
                       const BlockSchedule* block) {
  if (block && op.kind == OpKind::GraphDefined) return graph_defined_cost(op, t, block);
  std::optional<kiln::Schedule> s = plan(g, t);
  size_t i = size_t(&op - g.ops.data());
  if (op.kind != OpKind::GraphDefined) return predefined_cost(g, op, t, kernel_plan(s, i));
  return graph_defined_cost(op, t, block_plan(s, i), kernel_plan(s, i));
}

GraphCost estimate_cost(const KernelGraph& g, const Target& t) {
  GraphCost c;
  std::optional<kiln::Schedule> s = plan(g, t);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const KernelOp& op = g.ops[i];
    if (op.kind == OpKind::Constant) continue;
    // Fused into its consumer's kernel by the planner (plan_schedule's prologues).
    if (const KernelPlan* kp = kernel_plan(s, i); kp && kp->fused_into >= 0) continue;
    c.kernels.push_back(op.kind == OpKind::GraphDefined
                            ? graph_defined_cost(op, t, block_plan(s, i), kernel_plan(s, i))
                            : predefined_cost(g, op, t, kernel_plan(s, i)));
    c.time += c.kernels.back().time;
    c.launches++;
  }
  return c;
}

nlohmann::json cost_to_json(const GraphCost& c) {
  nlohmann::json ks = nlohmann::json::array();
  // The slowest kernels tell where the time goes; a 100,000-kernel spec's full list was 1.7 s of
  // JSON per report. The rest are counted.
  constexpr size_t kListed = 256;
  std::vector<const KernelCost*> shown;
  for (const KernelCost& k : c.kernels) shown.push_back(&k);
  if (shown.size() > kListed) {
    std::stable_sort(shown.begin(), shown.end(),
                     [](const KernelCost* a, const KernelCost* b) { return a->time > b->time; });
    shown.resize(kListed);
  }
  for (const KernelCost* kp : shown) {
    const KernelCost& k = *kp;
    ks.push_back({{"name", k.name},
                  {"graph_defined", k.graph_defined},
                  {"lowered", k.lowered},
                  {"blocks", k.blocks},
                  {"iterations", k.iterations},
                  {"blocks_per_sm", k.blocks_per_sm},
                  {"pipeline_stages", k.pipeline_stages},
                  {"coarsen", k.coarsen},
                  {"inflight_bytes", k.inflight_bytes},
                  {"round_trips", k.round_trips},
                  {"waves", k.waves},
                  {"smem_per_block", k.smem_per_block},
                  {"regs_per_thread", k.regs_per_thread},
                  {"dram_read_bytes", k.dram_read},
                  {"dram_write_bytes", k.dram_write},
                  {"l2_bytes", k.l2_bytes},
                  {"smem_bytes", k.smem_bytes},
                  {"tc_flops", k.tc_flops},
                  {"cuda_flops", k.cuda_flops},
                  {"t_dram_us", k.t_dram * 1e6},
                  {"t_latency_us", k.t_lat * 1e6},
                  {"t_l2_us", k.t_l2 * 1e6},
                  {"t_smem_us", k.t_smem * 1e6},
                  {"t_tensor_us", k.t_tc * 1e6},
                  {"t_cuda_us", k.t_cuda * 1e6},
                  {"t_loop_us", k.t_iter * 1e6},
                  {"t_fill_us", k.t_fill * 1e6},
                  {"bound", k.bound},
                  {"time_us", k.time * 1e6}});
  }
  nlohmann::json j = {{"time_us", c.time * 1e6}, {"launches", c.launches}, {"kernels", ks}};
  if (c.kernels.size() > kListed) j["kernels_not_listed"] = c.kernels.size() - kListed;
  return j;
}

}  // namespace kiln::search
