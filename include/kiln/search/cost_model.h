// The analytical cost model: an estimate of a μGraph's run time on a target, from first
// principles, with no GPU. It is what the search ranks by.
//
// Per kernel it counts bytes at each memory level (DRAM reads and writes with the coalescing of
// each tile, L2 re-reads of tiles that several blocks load, shared-memory traffic), tensor-core
// and CUDA-core work, and the launch; it derives blocks per SM from the target's resource rule,
// waves and SM coverage, the DRAM round trips the emitter's cp.async ring needs (Little's law,
// with the planner's own stage count) and the per-iteration loop overhead, and takes the kernel's
// time as the launch plus a fixed latency plus the largest term plus the pipeline drain. Every
// formula and constant is in docs/cost-model.md; the breakdown is returned so reports can say
// what bounds each kernel.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/codegen/cost.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/kernel_graph.h"
#include "kiln/ir/target.h"

namespace kiln::search {

// The per-kernel model (constants, KernelCost, each lowering's cost) is kiln/codegen/cost.h.
using kiln::cost_constants;
using kiln::CostConstants;
using kiln::KernelCost;

struct GraphCost {
  std::vector<KernelCost> kernels;
  double time = 0;  // seconds: the kernels run back to back
  int launches = 0;
  // Ops that run no kernel of their own, in words: "Wt read in place by k1_Y" (a transpose a
  // matmul reads K-major), "x0 fused into k1_Y" (a prologue). For traces and reports.
  std::vector<std::string> fused;
};

// One kernel; `block`, for a graph-defined op, costs it as the generic block-graph kernel under
// that plan (no lowering considered); null plans the graph here (plan_schedule, lowerings
// included) and costs what the emitter would emit.
KernelCost kernel_cost(const KernelGraph& g, const KernelOp& op, const Target& t,
                       const BlockSchedule* block = nullptr);
GraphCost estimate_cost(const KernelGraph& g, const Target& t);
nlohmann::json cost_to_json(const GraphCost& c);

}  // namespace kiln::search
