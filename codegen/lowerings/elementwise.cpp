// Predefined elementwise ops and transposes: grid-stride loops over the output.
#include "kiln/codegen/lowerings/elementwise.h"

#include <algorithm>

#include "../emit_internal.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/diag.h"

namespace kiln {

using namespace cgen;

std::optional<ElementwiseKernel> ElementwiseKernel::match(const PlanContext& ctx, int k,
                                                          KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  const OpClass c = op_info(op.kind).cls;
  if (c != OpClass::Unary && c != OpClass::Binary) return std::nullopt;
  const TensorDesc& out = ctx.g.tensor(op.outputs[0]);
  ElementwiseKernel p;
  p.vec = true;
  p.v = 16 / dtype_bytes(out.dtype);
  for (int in : op.inputs)
    if (!ctx.is_const(in) && ctx.g.tensor(in).shape != out.shape) p.vec = false;
  for (int in : op.inputs)
    if (!ctx.is_const(in) && 16 / dtype_bytes(ctx.g.tensor(in).dtype) < p.v)
      p.v = 16 / dtype_bytes(ctx.g.tensor(in).dtype);
  p.vec &= numel(out.shape) % p.v == 0;
  kp.threads = 256;
  const int64_t items = p.vec ? numel(out.shape) / p.v : numel(out.shape);
  kp.grid = std::clamp<int64_t>(cdiv(items, 256), 1, int64_t(ctx.t.sm_count) * 16);
  return p;
}

std::string ElementwiseKernel::describe() const {
  return vec ? fmt::format("elementwise v{}", v) : "elementwise broadcast";
}

KernelCost ElementwiseKernel::cost(const CostContext& x) const {
  return predefined_kernel_cost(x);
}

void ElementwiseKernel::emit(cgen::GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  const TensorDesc& out = x.g.tensor(op.outputs[0]);
  int64_t N = numel(out.shape);
  std::vector<std::string> params, args;
  std::vector<int> loaded = operand_params(x, op, params, args);
  params.push_back(fmt::format("{}* __restrict__ y", ctype(out.dtype)));
  args.push_back(x.ptr(op.outputs[0]));
  bool vec = this->vec;
  for (int j : loaded) vec &= x.g.tensor(op.inputs[j]).dtype == out.dtype;
  int V = 16 / dtype_bytes(out.dtype);
  vec &= N % V == 0;
  Code& c = x.kernels;
  c.f("// {}: {} {} ({})", kp.kernel, op_name(op.kind), shape_str(out.shape),
      vec ? "16-byte vectors" : "broadcast");
  c.open(fmt::format("__global__ void __launch_bounds__(256) {}({}) {{", kp.kernel,
                     fmt::join(params, ", ")));
  kernel_entry(c);
  if (vec) {
    c.open(
        fmt::format("for (int64_t e = (int64_t)blockIdx.x * 256 + threadIdx.x; e < {}; e += "
                    "(int64_t)gridDim.x * 256) {{",
                    N / V));
    std::vector<std::string> xs = vector_operands(x, op, c, V, fmt::format("e * {}", V));
    c.f("float r[{}];", V);
    c.line("#pragma unroll");
    c.f("for (int q = 0; q < {}; ++q) r[q] = {};", V, ew_expr(op.kind, op.attrs, xs));
    c.f("kiln::rt::store16_f32(y + e * {}, r);", V);
    c.close();
  } else {
    c.open(
        fmt::format("for (int64_t e = (int64_t)blockIdx.x * 256 + threadIdx.x; e < {}; e += "
                    "(int64_t)gridDim.x * 256) {{",
                    N));
    std::vector<std::string> idx = unravel(c, "e", out.shape, "i", "int64_t");
    std::vector<std::string> xs;
    for (size_t j = 0; j < op.inputs.size(); ++j) {
      int t = op.inputs[j];
      if (x.is_const(t)) {
        xs.push_back(flit(x.const_value(t)));
        continue;
      }
      const Shape& s = x.g.tensor(t).shape;
      std::string off = offset_expr(bcast_index(s, out.shape, idx), strides_of(s));
      xs.push_back(fmt::format("kiln::cg::ld(p{} + {})", j, off));
    }
    c.f("y[e] = kiln::rt::from_f32<{}>({});", ctype(out.dtype), ew_expr(op.kind, op.attrs, xs));
    c.close();
  }
  c.close();
  c.line("");
  emit_launch(x.launch, kp.kernel, std::to_string(kp.grid), "256", "0", 1,
              fmt::format("{}", fmt::join(args, ", ")));
  launch_check(x.launch);
}

std::optional<GatherKernel> GatherKernel::match(const PlanContext& ctx, int k, KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (op_info(op.kind).cls != OpClass::Transpose) return std::nullopt;
  kp.threads = 256;
  kp.grid = std::clamp<int64_t>(cdiv(numel(ctx.g.tensor(op.outputs[0]).shape), 256), 1,
                                int64_t(ctx.t.sm_count) * 16);
  return GatherKernel{};
}

std::string GatherKernel::describe() const {
  return "gather";
}

KernelCost GatherKernel::cost(const CostContext& x) const {
  return predefined_kernel_cost(x);
}

void GatherKernel::emit(cgen::GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  const TensorDesc& out = x.g.tensor(op.outputs[0]);
  const TensorDesc& in = x.g.tensor(op.inputs[0]);
  Code& c = x.kernels;
  int64_t N = numel(out.shape);
  c.f("// {}: transpose {} -> {}", kp.kernel, shape_str(in.shape), shape_str(out.shape));
  c.open(fmt::format(
      "__global__ void __launch_bounds__(256) {}(const {}* __restrict__ p0, {}* __restrict__ y) {{",
      kp.kernel, ctype(in.dtype), ctype(out.dtype)));
  kernel_entry(c);
  c.open(
      fmt::format("for (int64_t e = (int64_t)blockIdx.x * 256 + threadIdx.x; e < {}; e += "
                  "(int64_t)gridDim.x * 256) {{",
                  N));
  std::vector<std::string> idx = unravel(c, "e", out.shape, "i", "int64_t");
  std::vector<std::string> in_idx(idx.size());
  for (size_t d = 0; d < idx.size(); ++d) in_idx[op.attrs.perm[d]] = idx[d];
  c.f("y[e] = kiln::rt::from_f32<{}>(kiln::cg::ld(p0 + {}));", ctype(out.dtype),
      offset_expr(in_idx, strides_of(in.shape)));
  c.close();
  c.close();
  c.line("");
  if (x.is_const(op.inputs[0])) KILN_ASSERT(false, "transpose of a scalar constant");
  emit_launch(x.launch, kp.kernel, std::to_string(kp.grid), "256", "0", 1,
              fmt::format("{}, {}", x.ptr(op.inputs[0]), x.ptr(op.outputs[0])));
  launch_check(x.launch);
}

}  // namespace kiln
