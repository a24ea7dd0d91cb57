// Declarations shared by the emitter's translation units.
#pragma once

#include "emit_util.h"
#include "kiln/codegen/emit.h"
#include "kiln/codegen/schedule.h"

namespace kiln::cgen {

// Appends the __global__ kernel of a graph-defined op to `out`.
void emit_block_kernel(const KernelGraph& g, const KernelOp& kop, const KernelPlan& kp, Code& out);

// Appends the kernels of every op of g, in namespace kiln_gen_NAME, and the extern "C" launch
// and workspace functions kiln_NAME and kiln_NAME_workspace_bytes (the body of an emitted .cu
// after the device library).
void emit_graph_body(const KernelGraph& g, const Schedule& s, const std::string& name, Code& out);

// The float64 reference of spec graph g: kernels in namespace kiln_ref and
//   static cudaError_t kiln_ref_run(const double* const* in, double* const* out, double* ws,
//                                   cudaStream_t)
// plus `static size_t kiln_ref_workspace_doubles()`.
void emit_reference(const KernelGraph& spec, Code& out);

}  // namespace kiln::cgen

namespace kiln {
// Text of runtime/harness/kiln_rng.h (the seeded generator), for the harness.
const std::string& rng_text();
// The harness's fixed device and host code (runtime/harness/harness_runtime.cuh) and its main()
// (runtime/harness/harness_main.cuh).
const std::string& harness_runtime_text();
const std::string& harness_main_text();
}  // namespace kiln
