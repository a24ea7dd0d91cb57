// The generic block-graph kernel: the block emitter (block_emit/) writes the kernel from the
// block plan; this launches it on the block graph's grid.
#include "kiln/codegen/lowerings/block_graph.h"

#include "../emit_internal.h"
#include "kiln/codegen/schedule.h"

namespace kiln {

using namespace cgen;

std::optional<BlockGraphKernel> BlockGraphKernel::match(const PlanContext& ctx, int k,
                                                        KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (op.kind != OpKind::GraphDefined) return std::nullopt;
  kp.grid = op.block->num_blocks();
  kp.threads = op.block->block_threads;
  kp.smem = kp.block->smem_bytes;
  return BlockGraphKernel{};
}

std::string BlockGraphKernel::describe() const {
  return "block graph";
}

KernelCost BlockGraphKernel::cost(const CostContext& x) const {
  return block_graph_cost(x.op, x.t, x.kp.block.get());
}

void BlockGraphKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  emit_block_kernel(x.g, op, kp, x.kernels);
  const BlockGraph& bg = *op.block;
  std::vector<std::string> args;
  for (int t : op.inputs) args.push_back(x.ptr(t));
  for (int t : op.outputs) args.push_back(x.ptr(t));
  if (kp.block->global_bytes_per_block > 0)
    args.push_back(fmt::format("reinterpret_cast<float*>(ws + {})", x.s.block_scratch_offset));
  int64_t g[3] = {1, 1, 1};
  for (size_t d = 0; d < bg.grid.size(); ++d) g[d] = bg.grid[d];
  Code& L = x.launch;
  L.open("{");
  // Above 48 KB of shared memory per block, static included, a launch needs the raised limit.
  if (kp.block->smem_bytes + kStaticSmemBytes > 48 * 1024)
    L.f("if ((err = kiln::rt::raise_smem_limit_once<{}>(kSmem_{})) != cudaSuccess) return err;",
        kp.kernel, kp.kernel);
  emit_launch(L, kp.kernel, fmt::format("{}, {}, {}", g[0], g[1], g[2]),
              std::to_string(bg.block_threads), "kSmem_" + kp.kernel, 1,
              fmt::format("{}", fmt::join(args, ", ")));
  launch_check(L);
  L.close();
}

}  // namespace kiln
