// Kernel-graph ops that need no kernel of their own, or only a trivial one: constants (stored by a
// one-thread kernel where something must read them from memory, else folded into their readers)
// and ops fused into another op's kernel.
#pragma once

#include "kiln/codegen/lowering.h"

namespace kiln {

// A KernelPlan before the planner chose its lowering; the emitter and the cost model never see
// one (they assert).
struct UnplannedKernel {
  KILN_LOWERING(UnplannedKernel);
};

// A constant that a graph-defined op reads or that is an output: one thread stores it.
struct FillKernel {
  KILN_LOWERING(FillKernel);
};

// A constant folded into the expressions of its readers: no kernel.
struct FoldedConstant {
  KILN_LOWERING(FoldedConstant);
};

// An op whose work another op's kernel does as its prologue (KernelPlan::fused_into): no kernel.
// Never matched; the planner assigns it when a consumer's lowering takes the op over.
struct FusedIntoKernel {
  std::string into;       // the kernel that does the work
  bool in_place = false;  // a transpose that kernel reads in place (KernelPlan::view_op)
  KILN_LOWERING(FusedIntoKernel);
};

}  // namespace kiln
