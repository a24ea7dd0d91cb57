// Constants and fused ops: no kernel, or a one-thread fill.
#include "kiln/codegen/lowerings/trivial.h"

#include "../emit_internal.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/diag.h"

namespace kiln {

std::optional<UnplannedKernel> UnplannedKernel::match(const PlanContext&, int, KernelPlan&) {
  return std::nullopt;
}
std::string UnplannedKernel::describe() const {
  return "unplanned";
}
KernelCost UnplannedKernel::cost(const CostContext& x) const {
  KILN_ASSERT(false, "cost of unplanned op {}", x.op.name);
  return {};
}
void UnplannedKernel::emit(cgen::GraphCtx&, const KernelOp& op, const KernelPlan&) const {
  KILN_ASSERT(false, "emit of unplanned op {}", op.name);
}

std::optional<FillKernel> FillKernel::match(const PlanContext& ctx, int op, KernelPlan&) {
  const KernelOp& o = ctx.g.ops[op];
  if (o.kind != OpKind::Constant || !ctx.need_store[o.outputs[0]]) return std::nullopt;
  return FillKernel{};
}
std::string FillKernel::describe() const {
  return "fill";
}
KernelCost FillKernel::cost(const CostContext& x) const {
  return predefined_kernel_cost(x);
}
void FillKernel::emit(cgen::GraphCtx& x, const KernelOp& op, const KernelPlan&) const {
  cgen::emit_launch(x.launch, "kiln::cg::fill_scalar_kernel", "1", "1", "0", 1,
                    fmt::format("{}, {}", x.ptr(op.outputs[0]), cgen::flit(op.attrs.value)));
  cgen::launch_check(x.launch);
}

std::optional<FoldedConstant> FoldedConstant::match(const PlanContext& ctx, int op, KernelPlan&) {
  const KernelOp& o = ctx.g.ops[op];
  if (o.kind != OpKind::Constant || ctx.need_store[o.outputs[0]]) return std::nullopt;
  return FoldedConstant{};
}
std::string FoldedConstant::describe() const {
  return "folded";
}
KernelCost FoldedConstant::cost(const CostContext& x) const {
  return predefined_kernel_cost(x);
}
void FoldedConstant::emit(cgen::GraphCtx&, const KernelOp&, const KernelPlan&) const {}

std::optional<FusedIntoKernel> FusedIntoKernel::match(const PlanContext&, int, KernelPlan&) {
  return std::nullopt;
}
std::string FusedIntoKernel::describe() const {
  return in_place ? "read in place by " + into + " (no kernel)" : "fused into " + into;
}
KernelCost FusedIntoKernel::cost(const CostContext& x) const {
  return predefined_kernel_cost(x);
}
void FusedIntoKernel::emit(cgen::GraphCtx&, const KernelOp&, const KernelPlan&) const {}

}  // namespace kiln
