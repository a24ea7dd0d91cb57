// The layout/schedule optimizer's kernel level (see kiln/codegen/schedule.h): places the
// intermediate tensors in the workspace, plans every graph-defined op's block graph (the block
// planner, planner/), and runs each op through the first lowering of the registry that matches it
// (kiln/codegen/lowerings.h). Block graphs are planned in five passes over the ops:
//   1. homes: where each tile lives (shared memory, registers, or inline in its consumer);
//   2. steps: the tile each Compute/Accumulate/Save step materializes, the single matmul or
//      reduction ("root") whose loop structure drives it, and who computes which element;
//   3. register reads: an accumulator is read from registers only by steps with the same
//      distribution at the same flat index; anything else spills it to shared memory;
//   4. levels: steps are ordered by data dependence so that one barrier separates each level,
//      and every buffer gets a live interval in levels;
//   5. memory: pipeline depth, padding, and a first-fit allocation of shared memory that reuses
//      buffers with disjoint live intervals, degrading (fewer stages, no padding, workspace
//      instead of shared memory) until it fits the target.
#include "kiln/codegen/schedule.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "kiln/ir/diag.h"
#include "planner/block_planner.h"

namespace kiln {

const char* tile_home_name(TileHome h) {
  switch (h) {
    case TileHome::Smem:
      return "smem";
    case TileHome::Global:
      return "global";
    case TileHome::Registers:
      return "registers";
    case TileHome::Inline:
      return "inline";
    case TileHome::Root:
      return "root";
    case TileHome::Feed:
      return "feed";
    case TileHome::Fragment:
      return "fragment";
    case TileHome::None:
      return "-";
  }
  return "?";
}

const Distribution* mma_distribution(const BlockSchedule& s, int mm) {
  if (!s.tiles[mm].mma.use) return nullptr;
  if (s.tiles[mm].dist.kind == DistKind::Mma) return &s.tiles[mm].dist;
  for (const TilePlan& t : s.tiles)
    if (t.root == mm && t.dist.kind == DistKind::Mma) return &t.dist;
  return nullptr;
}

int Distribution::slots(int threads) const {
  if (kind == DistKind::Mma) return bw * mtw * ntw * 4;
  int64_t groups = threads / group;
  return static_cast<int>((numel + groups - 1) / groups);
}

std::string Distribution::str() const {
  if (kind == DistKind::Group)
    return group == 1 ? "strided" : fmt::format("groups of {} lanes", group);
  return fmt::format("mma [{}x{}x{}] warps b{} m{} n{} k{} ({}x{}x{} m16n8 tiles/warp)", batch, m,
                     n, wb, wm, wn, ks, bw, mtw, ntw);
}

BlockSchedule plan_block_graph(const BlockGraph& bg, const Target& t, bool lossy_f16,
                               bool lossy_bf16) {
  return planner::BlockPlanner(bg, t, lossy_f16, lossy_bf16).run();
}

// ---- kernel level ---------------------------------------------------------------------------

PlanContext::PlanContext(const KernelGraph& g, const Target& t, const PlanOptions& opt,
                         const Schedule& s)
    : g(g), t(t), opt(opt), s(s) {
  const int nt = static_cast<int>(g.tensors.size());
  reach.resize(nt);
  for (int o : g.outputs) reach[o].insert(o);
  for (int k = static_cast<int>(g.ops.size()) - 1; k >= 0; --k) {
    std::set<int> r;
    for (int o : g.ops[k].outputs) r.insert(reach[o].begin(), reach[o].end());
    for (int in : g.ops[k].inputs) reach[in].insert(r.begin(), r.end());
  }
  is_output.insert(g.outputs.begin(), g.outputs.end());
  consumers.assign(nt, 0);
  for (const KernelOp& k : g.ops)
    for (int in : std::set<int>(k.inputs.begin(), k.inputs.end())) consumers[in]++;
  // Constants are folded into predefined consumers; they are materialized only when a
  // graph-defined op reads them or they are outputs.
  need_store.assign(nt, false);
  for (const KernelOp& k : g.ops)
    if (k.kind == OpKind::GraphDefined)
      for (int in : k.inputs) need_store[in] = true;
  for (int o : g.outputs) need_store[o] = true;
}

bool PlanContext::is_const(int tensor) const {
  int p = g.producer(tensor);
  return p >= 0 && g.ops[p].kind == OpKind::Constant;
}

bool PlanContext::can_take_over(int op) const {
  const KernelPlan& p = s.kernels.at(op);
  return p.prologue_op < 0 && p.fused_into < 0;
}

void PlanContext::output_precision(int op, bool& f16, bool& bf16) const {
  f16 = bf16 = true;
  bool any = false;
  for (int o : g.ops[op].outputs)
    for (int r : reach[o]) {
      any = true;
      DType d = g.tensor(r).dtype;
      f16 &= d != DType::F32;
      bf16 &= d == DType::BF16;
    }
  if (!any) f16 = bf16 = false;
}

std::string KernelPlan::strategy() const {
  return std::visit([](const auto& p) { return p.describe(); }, plan);
}

namespace {

using planner::align_up;

int64_t tensor_bytes(const TensorDesc& t) {
  return numel(t.shape) * dtype_bytes(t.dtype);
}

// The block plan of graph-defined op k: the layout/schedule optimizer's BlockSchedule of its
// block graph (re-tiled where that is exact and useful), whichever lowering runs the op.
std::shared_ptr<BlockSchedule> plan_block(const PlanContext& ctx, int k) {
  const KernelOp& op = ctx.g.ops[k];
  bool f16 = false, bf16 = false;
  ctx.output_precision(k, f16, bf16);
  int rdim = -1;
  std::shared_ptr<const BlockGraph> rt = retile_loop(*op.block, ctx.t, &rdim);
  auto b =
      std::make_shared<BlockSchedule>(plan_block_graph(rt ? *rt : *op.block, ctx.t, f16, bf16));
  if (rt) {
    b->retiled = rt;
    b->retile_dim = rdim;
    b->retile_from = op.block->loop[rdim];
    b->retile_to = rt->loop[rdim];
  }
  return b;
}

// The first lowering of the registry (LoweredPlan's alternatives, in order) that matches op k.
template <size_t I = 0>
bool match_first(const PlanContext& ctx, int k, KernelPlan& kp) {
  if constexpr (I == std::variant_size_v<LoweredPlan>) {
    return false;
  } else {
    using P = std::variant_alternative_t<I, LoweredPlan>;
    static_assert(Lowering<P>, "every registry entry implements the lowering contract");
    if (std::optional<P> p = P::match(ctx, k, kp)) {
      kp.plan = std::move(*p);
      return true;
    }
    return match_first<I + 1>(ctx, k, kp);
  }
}

}  // namespace

Schedule plan_schedule(const KernelGraph& g, const Target& t, const PlanOptions& opt) {
  Schedule s;
  s.arch = t.arch;
  const PlanContext ctx(g, t, opt, s);
  const int nt = static_cast<int>(g.tensors.size());
  s.tensor_offset.assign(nt, -1);
  int64_t ws = 0;
  auto alloc = [&](int64_t bytes) {
    int64_t off = ws;
    ws = align_up(ws + std::max<int64_t>(bytes, 1), 256);
    return off;
  };
  // Intermediates get workspace once every kernel is matched: a tensor whose op was taken over
  // and is never stored (a transpose read in place, a prologue) takes none. (Allocated first,
  // an nn.Linear weight's unwritten transpose held 117 MB of linear_act_m16's workspace.)
  const std::set<int> is_input(g.inputs.begin(), g.inputs.end());
  std::vector<bool> unstored(nt, false);

  int64_t block_scratch = 0;
  for (size_t k = 0; k < g.ops.size(); ++k) {
    const KernelOp& op = g.ops[k];
    KernelPlan kp;
    kp.op = static_cast<int>(k);
    kp.kernel = fmt::format("k{}_{}", k, op.name);
    if (op.kind == OpKind::GraphDefined) kp.block = plan_block(ctx, static_cast<int>(k));
    const bool matched = match_first(ctx, static_cast<int>(k), kp);
    KILN_ASSERT(matched, "no lowering runs op {} ({})", op.name, op_name(op.kind));
    // An op this kernel does the work of (a prologue) or reads in place (a transpose as a K-major
    // operand) gets no kernel; its output is materialized only when the kernel stores it.
    auto retire = [&](int victim, bool in_place, bool stores) {
      KILN_ASSERT(ctx.can_take_over(victim), "{} takes over op {}, which is not free", kp.kernel,
                  victim);
      KernelPlan& pp = s.kernels[victim];
      pp.plan = FusedIntoKernel{kp.kernel, in_place};
      pp.fused_into = static_cast<int>(k);
      pp.grid = 0;
      pp.threads = 0;
      if (!stores) unstored[g.ops[victim].outputs[0]] = true;
    };
    KILN_ASSERT(kp.view_op < 0 || kp.view_op != kp.prologue_op, "{} takes over op {} twice",
                kp.kernel, kp.view_op);
    if (kp.prologue_op >= 0) retire(kp.prologue_op, false, kp.prologue_stores);
    if (kp.view_op >= 0) retire(kp.view_op, true, false);
    if (kp.as<BlockGraphKernel>())
      block_scratch = std::max(block_scratch, kp.block->global_bytes_per_block * kp.grid);
    s.kernels.push_back(std::move(kp));
  }
  for (int id = 0; id < nt; ++id) {
    if (is_input.count(id) || ctx.is_output.count(id) || g.producer(id) < 0 || unstored[id])
      continue;
    if (ctx.is_const(id) && !ctx.need_store[id]) continue;
    s.tensor_offset[id] = alloc(tensor_bytes(g.tensor(id)));
  }
  for (KernelPlan& kp : s.kernels)
    if (kp.scratch_bytes > 0) kp.scratch_offset = alloc(kp.scratch_bytes);
  if (block_scratch > 0) s.block_scratch_offset = alloc(block_scratch);
  s.workspace_bytes = ws;
  return s;
}

std::string schedule_to_text(const KernelGraph& g, const Schedule& s) {
  std::string out = fmt::format("schedule for {} ({}), workspace {} bytes\n", g.name,
                                target_for(s.arch).name, s.workspace_bytes);
  for (size_t i = 0; i < g.tensors.size(); ++i)
    if (s.tensor_offset[i] >= 0)
      out += fmt::format("  workspace +{}: {} {} {}\n", s.tensor_offset[i], g.tensors[i].name,
                         dtype_name(g.tensors[i].dtype), shape_str(g.tensors[i].shape));
  for (const KernelPlan& kp : s.kernels) {
    const KernelOp& op = g.ops[kp.op];
    if (!kp.block) {
      out += fmt::format("kernel {}: {} -> {}", kp.kernel, op_name(op.kind), kp.strategy());
      if (kp.grid) out += fmt::format(", grid {} x {} threads", kp.grid, kp.threads);
      if (kp.splits > 1) out += fmt::format(", split-K {}", kp.splits);
      out += "\n";
      continue;
    }
    const BlockSchedule& b = *kp.block;
    const BlockGraph& bg = b.retiled ? *b.retiled : *op.block;
    if (!kp.as<BlockGraphKernel>())
      out += fmt::format("kernel {}: {}, grid {} x {} threads (the block plan below is not used)\n",
                         kp.kernel, kp.strategy(), kp.grid, kp.threads);
    out += fmt::format(
        "kernel {}: block graph, grid {} x {} threads, {} iterations, pipeline {} stage(s) of {} "
        "iteration(s)\n",
        kp.kernel, shape_str(bg.grid), bg.block_threads, bg.num_iterations(), b.pipeline_stages,
        b.coarsen);
    if (b.retiled)
      out += fmt::format(
          "  loop dim {} re-tiled from {} to {} iterations (tiles below are re-tiled)\n",
          b.retile_dim, b.retile_from, b.retile_to);
    out += fmt::format(
        "  shared memory {} bytes (resource rule {}; budget {}), workspace per block {}, "
        "accumulator registers ~{}/thread, {} barrier(s) per iteration{}\n",
        b.smem_bytes, b.smem_rule_bytes, b.smem_budget, b.global_bytes_per_block, b.regs_estimate,
        b.barriers_per_iteration, b.lossy_mma_ok ? ", f32 mma operands may round to f16" : "");
    for (size_t i = 0; i < bg.ops.size(); ++i) {
      const BlockOp& o = bg.ops[i];
      const TilePlan& t = b.tiles[i];
      std::string line = fmt::format("  {:<10} {:<13} {:<16} {:<9}", o.name, op_name(o.kind),
                                     shape_str(o.shape), tile_home_name(t.home));
      if (t.home == TileHome::Smem || t.home == TileHome::Global) {
        line += fmt::format(" @{} {}B", t.offset, t.bytes);
        if (t.stages > 1) line += fmt::format(" x{} stages", t.stages);
        if (!t.strides.empty() && !o.shape.empty() && o.shape.size() >= 2 &&
            t.strides[o.shape.size() - 2] != o.shape.back())
          line += fmt::format(" pitch {}", t.strides[o.shape.size() - 2]);
        if (o.kind == OpKind::Input)
          line += fmt::format(" {} {}-elem chunks", t.async ? "cp.async" : "sync", t.load_vec);
      }
      if (t.home == TileHome::Registers) {
        line += " " + t.dist.str();
        if (t.spill)
          line += fmt::format(" spilled after loop to {} @{}",
                              t.spill_global ? "workspace" : "smem", t.spill_offset);
      }
      if ((t.home == TileHome::Smem || t.home == TileHome::Global || t.home == TileHome::Feed ||
           t.home == TileHome::Fragment) &&
          o.kind != OpKind::Input)
        line += " by " + t.dist.str();
      if (o.kind == OpKind::MatMul && t.home != TileHome::Inline)
        line += t.mma.use
                    ? fmt::format(" mma.sync {}{}{}{}", dtype_name(t.mma.dtype),
                                  t.mma.a_hoisted                                   ? " A:hoisted"
                                  : t.mma.a_ldmatrix                                ? " A:ldmatrix"
                                  : b.tiles[o.inputs[0]].home == TileHome::Fragment ? " A:registers"
                                                                                    : " A:gather",
                                  t.mma.b_ldmatrix ? " B:ldmatrix" : " B:gather",
                                  t.mma.lossy ? " (f32 operand rounded)" : "")
                    : " fma";
      if (o.kind == OpKind::Output && t.root >= 0)
        line += fmt::format(" (fused {})", bg.ops[t.root].name);
      if (!t.note.empty()) line += " " + t.note;
      out += line + "\n";
    }
    std::string steps;
    for (const Step& st : b.steps) {
      const char* ph = st.phase == Phase::Pre ? "pre" : st.phase == Phase::Loop ? "loop" : "post";
      std::string what;
      switch (st.kind) {
        case StepKind::Load:
          what = "load " + bg.ops[st.op].name;
          break;
        case StepKind::Compute:
          what = "compute " + bg.ops[st.op].name;
          break;
        case StepKind::Accumulate: {
          what = "accumulate";
          for (int a : st.accums) what += " " + bg.ops[a].name;
          break;
        }
        case StepKind::Save:
          what = "save " + bg.ops[st.op].name;
          break;
        case StepKind::Spill:
          what = "spill " + bg.ops[st.op].name;
          break;
        case StepKind::Barrier:
          what = "barrier";
          break;
      }
      steps += fmt::format("{}{}:{}", steps.empty() ? "" : ", ", ph, what);
    }
    out += "  steps: " + steps + "\n";
    for (const std::string& n : b.notes) out += "  note: " + n + "\n";
  }
  return out;
}

}  // namespace kiln
