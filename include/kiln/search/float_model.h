// The float check as Kiln runs it before anything ships: the candidate evaluated the way the GPU
// will run it (F32 arithmetic, every device tensor stored in its dtype, and the narrowings the
// schedule applies inside block graphs), next to the spec's float64 reference, on the uniform
// generator and on std-1 normal inputs (the range rule of the spec format), and on inputs of one
// sign when the verdict leans on selections.
#pragma once

#include <vector>

#include "kiln/codegen/schedule.h"
#include "kiln/interp/interp.h"
#include "kiln/ir/kernel_graph.h"
#include "kiln/verifier/verify.h"

namespace kiln::search {

// The matmul operands that schedule s rounds to 16 bits inside g's block graphs (a float32 tile
// fed to a 16-bit tensor-core mma, MmaPlan::lossy; the attention lowering's P operand is the same
// tile). Rounding an operand that is already 16-bit is exact, so both operands of such a matmul
// are listed.
std::vector<OperandRounding> schedule_narrowings(const KernelGraph& g, const Schedule& s);

// Float check options that predict the GPU for candidate `cand` on the target of its arch:
// candidate_f32, the schedule's narrowings, uniform and std-1 normal inputs, and inputs of one
// sign when `selections_matter` (an unbounded verdict).
verifier::FloatCheckOptions gpu_float_check_options(const KernelGraph& cand, bool selections_matter,
                                                    int threads = 0);

}  // namespace kiln::search
