// The layout/schedule optimizer: decides how each kernel of a μGraph runs before the emitter
// writes any CUDA. For a graph-defined op it fixes, for every block op, where its tile lives
// (shared memory at an offset with a padded row pitch, a per-block slice of the workspace when
// shared memory is short, registers for accumulators, or nowhere: recomputed inline in its single
// consumer), which threads compute which element (a distribution: strided elements, lane groups
// for reductions, or the mma.sync fragment layout of a warp partition), whether a matmul runs on
// tensor cores, the cp.async pipeline depth of loop inputs, the order of steps and the barriers
// between them. For the kernel graph it places intermediate tensors in the workspace and picks a
// strategy for every predefined op.
//
// The emitter implements exactly what the schedule says; the schedule never changes semantics,
// only placement and order (block_graph.h's comment is the semantics).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/codegen/block_schedule.h"
#include "kiln/codegen/lowerings.h"
#include "kiln/ir/kernel_graph.h"
#include "kiln/ir/target.h"

namespace kiln {

// How one kernel-graph op runs: the lowering the planner chose and its typed plan, the launch
// shape, and the fusion across kernel-graph ops.
struct KernelPlan {
  int op = -1;
  std::string kernel;  // CUDA symbol stem, unique in the file
  LoweredPlan plan;    // which lowering runs the op, and how (kiln/codegen/lowerings.h)
  std::shared_ptr<BlockSchedule> block;  // graph-defined ops: planned whichever lowering runs them
                                         // (for the listing and the resource rule)
  // Launch shape (what the lowering's match set): blocks, threads per block, dynamic shared
  // memory, split-K factor (the grid includes it).
  int64_t grid = 0;
  int threads = 0;
  int64_t smem = 0;
  int splits = 1;
  // Fusion across kernel-graph ops (predefined ops only). fused_into >= 0: this op has no kernel
  // of its own; the kernel of op fused_into does its work. prologue_op >= 0: this kernel does
  // the work of op prologue_op on its inputs (a weightless rms_norm before a GEMV, an elementwise
  // op before a row rms_norm), and stores that op's output too when prologue_stores.
  // view_op >= 0: op view_op is a transpose whose output this kernel reads in place, from the
  // transpose's input with the other layout (a K-major matmul operand: an access pattern, not a
  // kernel); that op gets no kernel and its output is not materialised.
  int fused_into = -1;
  int prologue_op = -1;
  bool prologue_stores = false;
  int view_op = -1;
  int64_t scratch_offset = -1;  // workspace bytes the kernel needs for itself
  int64_t scratch_bytes = 0;

  // The plan as lowering P, or null when another lowering runs the op.
  template <class P>
  const P* as() const {
    return std::get_if<P>(&plan);
  }
  // The strategy in words ("elementwise v8", "gemm_tc 128x128x32 s3", ...): the plan's describe().
  std::string strategy() const;
};

struct Schedule {
  Arch arch = Arch::Sm90a;
  std::vector<KernelPlan> kernels;     // one per kernel-graph op, in order
  std::vector<int64_t> tensor_offset;  // workspace byte offset per tensor, -1 if not there
  int64_t workspace_bytes = 0;
  int64_t block_scratch_offset = -1;  // start of per-block Global tiles (shared by kernels)
};

// Plans every kernel of g for target t. Throws UserError(Unsupported) for what the emitter cannot
// implement (none known), never for valid graphs.
Schedule plan_schedule(const KernelGraph& g, const Target& t, const PlanOptions& opt = {});

// The schedule as text: one paragraph per kernel, for the .cu header and `kiln emit --schedule`.
std::string schedule_to_text(const KernelGraph& g, const Schedule& s);

}  // namespace kiln
