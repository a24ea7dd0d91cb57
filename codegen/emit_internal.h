// Declarations shared by the emitter's translation units.
#pragma once

#include "emit_util.h"
#include "kiln/codegen/emit.h"
#include "kiln/codegen/schedule.h"

namespace kiln::cgen {

inline int64_t cdiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The emitter's state while it writes one kernel graph: each lowering's emit appends its kernel
// (if any) to `kernels` and its launch to `launch`, the body of the extern "C" launch function.
struct GraphCtx {
  const KernelGraph& g;
  const Schedule& s;
  Code kernels;
  Code launch;

  bool is_const(int t) const {
    int p = g.producer(t);
    return p >= 0 && g.ops[p].kind == OpKind::Constant;
  }
  double const_value(int t) const { return g.ops[g.producer(t)].attrs.value; }
  std::string ptr(int t) const { return fmt::format("t{}", t); }
  const char* ty(int t) const { return ctype(g.tensor(t).dtype); }
};

// [outer, R, inner] view of a reduction over `dim` of shape x.
struct RowView {
  int64_t outer = 1, R = 1, inner = 1;
};
RowView row_view(const Shape& x, int dim);

// Returns early from the launch function on a launch error.
void launch_check(Code& c);

// `if ((err = kiln::rt::launch(KERNEL, dim3(GRID), dim3(BLOCK), SMEM, stream, CLUSTER, ARGS)) !=
// cudaSuccess) return err;`: every kernel the emitted file launches goes through the runtime's
// launcher (programmatic dependent launch where the device has it, runtime/base.cuh), and
// begins with kernel_entry's line.
void emit_launch(Code& c, const std::string& kernel, const std::string& grid,
                 const std::string& block, const std::string& smem, int cluster,
                 const std::string& args);
// The first line of every generated kernel: kiln::rt::pdl_entry(), before any load or store;
// early_trigger for kernels of a few small CTAs (runtime/base.cuh says why).
void kernel_entry(Code& c, bool early_trigger = false);

// The kernel parameters `const T* p<j>` (and launch arguments) of op's non-constant inputs j;
// constants are folded into the expressions instead. Returns the indices j it added.
std::vector<int> operand_params(GraphCtx& x, const KernelOp& op, std::vector<std::string>& params,
                                std::vector<std::string>& args);

// `auto fz_NAME = [](float a0, ...) -> float {...};`: block op o's thread graph (a Fused op) as a
// device lambda, for the kernels that evaluate it per element (block graphs, row chains). With
// `uniform` (per lambda parameter: the caller passes the same value to every call of its loop, a
// per-row scalar), a division of a varying value by a uniform one becomes a multiplication by
// its reciprocal (div_by_uniform), which the compiler computes once for the loop.
void fused_lambda(Code& c, const BlockOp& o, const std::vector<bool>* uniform = nullptr);
// `(x * (1.0f / d))`: x / d with the reciprocal of d shared by every x of a row. One rounding
// more than IEEE division (at most 1.5 ulp instead of 0.5), instead of a full-precision division
// (a reciprocal, its refinement and a slow-path check) per element: row chains dividing every
// element of an 8192-wide row by its norm ran 0.6 us slower (H100, session 13).
std::string div_by_uniform(const std::string& x, const std::string& d);

// Loads V consecutive elements of each of op's non-constant inputs, at element offset `at` of
// p<j>, into `float a<j>[V]`, and returns the per-element operand expressions for ew_expr (a<j>[q],
// or the folded constant). V elements are 16 bytes of the inputs' dtype.
std::vector<std::string> vector_operands(GraphCtx& x, const KernelOp& op, Code& c, int V,
                                         const std::string& at);

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
