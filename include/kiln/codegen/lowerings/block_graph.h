// Graph-defined ops as the generic block-graph kernel: the block plan (KernelPlan::block, the
// layout/schedule optimizer's BlockSchedule) written out by the block emitter.
#pragma once

#include "kiln/codegen/lowering.h"

namespace kiln {

struct BlockGraphKernel {
  KILN_LOWERING(BlockGraphKernel);
};

}  // namespace kiln
