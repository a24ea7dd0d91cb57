// The analytical cost model of a kernel graph: each kernel's cost is its lowering's cost of the
// planner's plan (kiln/codegen/cost.h); the graph's time is their sum.
#include "kiln/search/cost_model.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

namespace kiln::search {

namespace {

// The emitter's plan of every kernel, or nothing if the planner refuses the graph (the model
// then assumes a ring of one stage).
std::optional<kiln::Schedule> plan(const KernelGraph& g, const Target& t) {
  try {
    return plan_schedule(g, t);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Op i as the emitter would run it: the plan's lowering's cost, or without a plan the generic
// kernels.
KernelCost planned_cost(const KernelGraph& g, size_t i, const Target& t,
                        const std::optional<kiln::Schedule>& s) {
  const KernelOp& op = g.ops[i];
  if (s && i < s->kernels.size()) return plan_cost(g, op, t, s->kernels[i]);
  if (op.kind == OpKind::GraphDefined) return block_graph_cost(op, t, nullptr);
  return unplanned_cost(g, op, t);
}

}  // namespace

KernelCost kernel_cost(const KernelGraph& g, const KernelOp& op, const Target& t,
                       const BlockSchedule* block) {
  if (block && op.kind == OpKind::GraphDefined) return block_graph_cost(op, t, block);
  return planned_cost(g, size_t(&op - g.ops.data()), t, plan(g, t));
}

GraphCost estimate_cost(const KernelGraph& g, const Target& t) {
  GraphCost c;
  std::optional<kiln::Schedule> s = plan(g, t);
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const KernelOp& op = g.ops[i];
    if (op.kind == OpKind::Constant) continue;
    // Fused into its consumer's kernel by the planner (plan_schedule's prologues), or read in
    // place by it (a transpose a matmul reads K-major).
    if (s && i < s->kernels.size() && s->kernels[i].fused_into >= 0) {
      const FusedIntoKernel* f = s->kernels[i].as<FusedIntoKernel>();
      const std::string into = f ? f->into : g.ops[s->kernels[i].fused_into].name;
      c.fused.push_back(fmt::format("{} {} {}", op.name,
                                    f && f->in_place ? "read in place by" : "fused into", into));
      continue;
    }
    c.kernels.push_back(planned_cost(g, i, t, s));
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
                  {"t_chain_us", k.t_chain * 1e6},
                  {"t_fill_us", k.t_fill * 1e6},
                  {"bound", k.bound},
                  {"time_us", k.time * 1e6}});
  }
  nlohmann::json j = {{"time_us", c.time * 1e6}, {"launches", c.launches}, {"kernels", ks}};
  if (c.kernels.size() > kListed) j["kernels_not_listed"] = c.kernels.size() - kListed;
  if (!c.fused.empty()) j["fused"] = c.fused;
  return j;
}

}  // namespace kiln::search
