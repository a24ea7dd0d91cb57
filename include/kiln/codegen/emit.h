// The CUDA emitter: turns a kernel graph (a spec or any μGraph) into one standalone .cu file,
// its C header, and the GPU harness that checks and times it.
//
// The emitted file needs only the CUDA toolkit: the runtime headers (runtime/*.cuh) and the
// codegen device library (codegen/kiln_cg.cuh) are inlined into it. It exports, for a graph
// emitted under NAME (EmitOptions::name, default the graph's name) with inputs in0.. and outputs
// out0.. in graph order,
//
//   extern "C" size_t kiln_NAME_workspace_bytes(void);
//   extern "C" cudaError_t kiln_NAME(const void* in0, ..., void* out0, ..., void* workspace,
//                                    cudaStream_t stream);
//
// All pointers are device pointers, 16-byte aligned, to dense row-major tensors of the graph's
// shapes and dtypes; `workspace` holds kiln_NAME_workspace_bytes() bytes (may be null when that
// is 0) and is owned by the call until the stream reaches its end. The launch function only
// enqueues work on `stream` (it is CUDA-graph capturable) and returns the first launch error.
//
// Every other symbol the file defines is namespaced by NAME: its kernels live in kiln_gen_NAME
// and its copy of the device library in kiln::lib_NAME (an inline namespace, so the code still
// spells kiln::rt and kiln::cg). Any number of emitted files with distinct names, one graph
// emitted twice under two names included, compile separately and link into one program, with
// or without -rdc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/codegen/schedule.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln {

struct EmitOptions {
  Arch arch = Arch::Sm90a;      // the schedule is tuned for this target; the file builds for both
  std::string verdict;          // the verifier's verdict line, copied into the header comment
  std::string source;           // where the graph came from (file name), for the header comment
  bool include_listing = true;  // μGraph listing and schedule in the header comment
  bool lowerings = true;        // PlanOptions::lowerings (the CPU simulator turns them off)
  // The NAME of the exported symbols and namespaces (see above); empty: the graph's name. Must
  // match [A-Za-z_][A-Za-z0-9_]* (a UserError otherwise).
  std::string name;
  // The files as written, named in the header comments: the .cu (its build line; empty:
  // kiln_NAME.cu) and its C header (emit_header; empty: none is mentioned).
  std::string cu_file, header_file;
};

// The NAME a file emitted with `opt` exports (opt.name, else g.name); throws UserError
// (ErrorCode::Name) when it is not a C identifier.
std::string emitted_name(const KernelGraph& g, const EmitOptions& opt);

// Emits the .cu for g, planning its schedule for opt.arch.
std::string emit_cuda(const KernelGraph& g, const EmitOptions& opt = {});
// Emits the .cu for g with a given schedule (from plan_schedule(g, ...)).
std::string emit_cuda(const KernelGraph& g, const Schedule& s, const EmitOptions& opt);

// Emits the C header of the .cu that emit_cuda(g, opt) writes: an include guard, <stddef.h> and
// <cuda_runtime.h>, the two prototypes (extern "C" under C++) with one parameter per input and
// output in ABI order, named after the tensors (a C keyword, `workspace`, `stream` or a repeated
// name gets a trailing `_`), and per tensor its dtype, rank, shape, element and byte counts as
// macros KILN_NAME_<tensor>_DTYPE|RANK|SHAPE|NUMEL|BYTES, plus KILN_NAME_ALIGNMENT (16),
// KILN_NAME_NUM_INPUTS and KILN_NAME_NUM_OUTPUTS. It compiles as C and as C++ with the CUDA
// toolkit's include directory and nothing else.
std::string emit_header(const KernelGraph& g, const EmitOptions& opt = {});
std::string emit_header(const KernelGraph& g, const Schedule& s, const EmitOptions& opt);

struct HarnessOptions {
  EmitOptions emit;             // emit.name also names the harness (kName, KILN_RESULT name=)
  std::string file;             // the harness as written, for its build line (harness_NAME.cu)
  uint64_t seed = 1;            // first check's seed (the documented generator, interp.h)
  int checks = 2;               // correctness checks, seeds seed, seed + 1, ... (at least 2)
  int repeats = 30;             // timed graph replays; the median is reported
  int min_calls = 20;           // calls per captured graph (at least one full input rotation)
  int64_t l2_bytes = 50 << 20;  // input copies rotate over more than twice this
};

// Emits a standalone .cu with main(): the candidate's kernels (emit_cuda(candidate)), a float64
// reference built from `spec` (simple generic kernels, one per predefined op), inputs from the
// documented seeded generator, a check of every output against the spec tolerance (outputs
// poisoned with NaN first), and CUDA-graph timing with inputs rotating through enough copies to
// defeat L2. Check c (seed + c) draws uniform inputs when c is even and normal inputs of std 1
// when c is odd (the spec's range rule); `--input-std S` makes every check use std S (0:
// uniform). A check on which the float64 reference leaves the f32 range (an intermediate beyond
// FLT_MAX or not finite) is exempt: it neither passes nor fails. The default number of checks is
// max(opt.checks, 2), and exactly 2 where the reference's matmuls are big. Prints one line per
// check and output, `check seed=S dist=uniform|normal1 output=O err=E tol=T nonfinite=N
// ok|FAIL|exempt`, then
//   KILN_RESULT name=NAME ok=0|1 err=MAX_REL_ERR us=MEDIAN_US calls=N copies=C checks=K exempt=X
// (err is nan when every check was exempt) and exits 1 on a mismatch, 2 on a CUDA error.
// Arguments: --check-only, --no-check, --kernel-only, --seed S, --repeats R, --checks C,
// --input-std S. candidate and spec must have the same inputs and outputs (shapes, dtypes, order).
std::string emit_harness(const KernelGraph& candidate, const KernelGraph& spec,
                         const HarnessOptions& opt = {});

// The nvcc command that builds an emitted file: an object for sm_90a and sm_80 when `out` ends
// in .o, else an executable (harness) for `arch` only.
std::string nvcc_command(const std::string& cu_path, const std::string& out, Arch arch,
                         bool both_archs = true);

// Text of the runtime and codegen device headers, in inlining order (embedded in the binary at
// build time: cmake/embed_files.cmake; no source tree is read).
const std::string& device_library_text();

}  // namespace kiln
