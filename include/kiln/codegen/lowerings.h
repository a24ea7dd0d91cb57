// The registry of lowerings (the contract is kiln/codegen/lowering.h): one variant alternative
// per lowering, in the order the planner tries them for an op; the first that matches runs it.
// The planner (plan_schedule), the cost model (plan_cost) and the emitter all dispatch through
// this list with std::visit. A new lowering is its header and source under lowerings/ and one
// line here.
#pragma once

#include <variant>

#include "kiln/codegen/lowerings/attention.h"
#include "kiln/codegen/lowerings/block_graph.h"
#include "kiln/codegen/lowerings/contraction.h"
#include "kiln/codegen/lowerings/elementwise.h"
#include "kiln/codegen/lowerings/gemm.h"
#include "kiln/codegen/lowerings/gemv.h"
#include "kiln/codegen/lowerings/row_chain.h"
#include "kiln/codegen/lowerings/rows.h"
#include "kiln/codegen/lowerings/trivial.h"

namespace kiln {

using LoweredPlan =
    std::variant<UnplannedKernel,  // never matches: the default
                 FillKernel, FoldedConstant,
                 FusedIntoKernel,  // never matches: assigned by a consumer
                 ElementwiseKernel, GatherKernel, RmsRowsKernel, RowKernel, ColumnSumGemvKernel,
                 ColumnKernel, GemvKernel, WgmmaGemmKernel, F32RowdotKernel, F32ColstreamKernel,
                 Tf32x3GemmKernel, GemmTcKernel, StagedGemmKernel, FmaKernel, ContractionKernel,
                 AttentionKernel, RowChainKernel, BlockGraphKernel>;

}  // namespace kiln
