// Runs a kernel graph's emitted CUDA on the CPU simulator (tests/codegen/sim/kiln_sim.h): emits
// the .cu, rewrites its kernel section into host C++ (launch syntax, dynamic shared memory),
// compiles it with the host compiler and runs it on the given inputs.
#pragma once

#include <string>
#include <vector>

#include "kiln/codegen/emit.h"
#include "kiln/interp/interp.h"

namespace kiln::testing {

struct SimRun {
  bool ok = false;
  std::string log;  // compiler or simulator messages on failure
  std::vector<HostTensor> outputs;
};

// Work happens in `dir` (created); `tag` names the files. `lowerings`: plan graph-defined ops
// with the lowerings that replace their block graphs by runtime kernels (contractions as the
// GEMVs; off by default: the simulator's runtime covers the GEMVs and the wgmma GEMM's launcher
// only).
SimRun run_in_simulator(const KernelGraph& g, const std::vector<HostTensor>& inputs,
                        const std::string& dir, const std::string& tag, Arch arch = Arch::Sm90a,
                        bool lowerings = false);

// The simulator's C++ translation of an emitted .cu (kernels and launch function only).
std::string simulator_source(const std::string& cu, const KernelGraph& g);

// Checks each output of `g` run in the simulator against the float64 interpretation of `ref`
// (same interface), within the spec tolerance. Returns "" when all pass, else a message.
// `precision` is the interpreter's: F64 for a spec reference; F32 (stored tensors rounded to
// their dtype, as on the GPU) when ref is the μGraph itself, so that an ill-conditioned op after
// a 16-bit intermediate does not count as an emitter error.
std::string check_in_simulator(const KernelGraph& g, const KernelGraph& ref, uint64_t seed,
                               const std::string& tag, Arch arch = Arch::Sm90a,
                               Precision precision = Precision::F64, bool lowerings = false);

}  // namespace kiln::testing
