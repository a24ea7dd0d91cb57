// The lowering interface. A lowering is one way to run a kernel-graph op on the GPU (a GEMV, the
// wgmma GEMM, a row kernel, the generic block-graph kernel, ...). It is a plan type P — the typed
// configuration the planner chose — with
//
//   static std::optional<P> match(const PlanContext& ctx, int op, KernelPlan& kp);
//       Whether the lowering can run op `op` of ctx.g, and how. On a match it returns the plan
//       and fills kp's launch fields (grid, threads, smem, splits, scratch_bytes) and, where it
//       takes over its input's producer as a prologue, kp.prologue_op / prologue_stores (the
//       planner then retires that producer's kernel). On no match it returns nullopt and leaves
//       kp as it was.
//   std::string describe() const;        the strategy in words, for listings and .cu comments
//   KernelCost cost(const CostContext&) const;            the cost model's time for the plan
//   void emit(cgen::GraphCtx&, const KernelOp&, const KernelPlan&) const;   its kernel and launch
//
// kiln/codegen/lowerings.h lists every lowering in one variant type, in the order the planner
// tries them (the first match wins); the planner, the cost model and the emitter all go through
// that list (std::visit), so a new lowering is its own header and source plus one line there.
// Nothing matches on strategy text.
#pragma once

#include <concepts>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/codegen/cost.h"
#include "kiln/ir/kernel_graph.h"
#include "kiln/ir/target.h"

namespace kiln {

struct KernelPlan;
struct Schedule;
namespace cgen {
struct GraphCtx;
}

struct PlanOptions {
  // Run graph-defined kernels that match a runtime lowering (contraction.h, attention.h) through
  // the runtime's wgmma kernels on sm_90a. The CPU simulator turns it off: it runs only the
  // generic block-graph kernels.
  bool lowerings = true;
};

// What a lowering's match may look at: the graph, the target, the kernels planned so far (ops
// before the one being matched, in graph order) and facts about the graph's tensors.
struct PlanContext {
  const KernelGraph& g;
  const Target& t;
  const PlanOptions& opt;
  const Schedule& s;
  std::vector<int> consumers;    // reading ops per tensor (an op reading twice counts once)
  std::vector<bool> need_store;  // constants read by graph-defined ops, and graph outputs
  std::set<int> is_output;
  // Per tensor, the graph outputs that depend on it (for the precision a kernel may trade).
  std::vector<std::set<int>> reach;

  PlanContext(const KernelGraph& g, const Target& t, const PlanOptions& opt, const Schedule& s);
  bool is_const(int tensor) const;
  // Whether a lowering may take over planned op `op` as its prologue: the op's kernel has not
  // taken over a producer of its own (whose output it may not store) nor been taken over already.
  bool can_take_over(int op) const;
  // Whether every graph output that op `op`'s outputs reach is f16 (f16 = true) or bf16 (bf16 =
  // true): where it is, float32 intermediates of the op may be rounded to that type.
  void output_precision(int op, bool& f16, bool& bf16) const;
};

// What a lowering's cost may look at.
struct CostContext {
  const KernelGraph& g;
  const KernelOp& op;
  const Target& t;
  const KernelPlan& kp;
};

// Declares the four members of the contract above inside lowering P's struct.
#define KILN_LOWERING(P)                                                         \
  static std::optional<P> match(const PlanContext& ctx, int op, KernelPlan& kp); \
  std::string describe() const;                                                  \
  KernelCost cost(const CostContext& x) const;                                   \
  void emit(cgen::GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const

template <class P>
concept Lowering = requires(const P p, const PlanContext& pc, KernelPlan& kp, const CostContext& cc,
                            cgen::GraphCtx& gx, const KernelOp& op) {
  { P::match(pc, 0, kp) } -> std::same_as<std::optional<P>>;
  { p.describe() } -> std::same_as<std::string>;
  { p.cost(cc) } -> std::same_as<KernelCost>;
  { p.emit(gx, op, kp) } -> std::same_as<void>;
};

// The generic predefined kernel's cost (reads its non-constant inputs, writes its output, at
// efficiency e of the rates, DRAM saturating once `saturation` of the SMs are busy; split-K pays
// one more round trip). Predefined lowerings cost their plans with it (docs/cost-model.md).
KernelCost predefined_kernel_cost(const CostContext& x, double e, double saturation);
// The same at the generic efficiency of the op's kind and the default DRAM saturation.
KernelCost predefined_kernel_cost(const CostContext& x);
// A predefined matmul on the CUDA cores (the scalar FMA kernel): its products at the block-graph
// FMA matmuls' fraction of the FMA rate (fma_matmul_efficiency). On the H200 (session 25) bf16
// products of 127-508 rows ran 2.4-8.5 TFLOP/s there; counted at the tensor rate, as they were,
// such a kernel looked as fast as a wgmma GEMM (5 us modeled for ~110 measured) and won.
KernelCost predefined_fma_matmul_cost(const CostContext& x);

}  // namespace kiln
