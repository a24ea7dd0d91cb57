// The CPU reference interpreter: evaluates a spec or any μGraph on host tensors.
//
// Two precisions: F64 computes every value in double and rounds nothing but the inputs (the
// spec's reference semantics); F32 computes in float and rounds every stored device tensor to
// its dtype, as a GPU implementation would. Block graphs are walked with the exact grid, loop,
// map and accumulator semantics of block_graph.h (the same traversal the verifier uses with its
// finite-field values), in parallel across blocks.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/ir/kernel_graph.h"

namespace kiln {

enum class Precision : uint8_t { F32, F64 };

// A host tensor, row-major. Values are held as double whatever the dtype; in F32 mode and for
// inputs they are exactly representable in `dtype`.
struct HostTensor {
  Shape shape;
  DType dtype = DType::F32;
  std::vector<double> data;
};

// The documented seeded generator (docs/interpreter.md): element e of input i under seed s is a
// pure function of (s, i, e), uniform in [-0.5, 0.5) on a 2^-24 grid, rounded to the dtype with
// round-to-nearest-even. Bit-for-bit reproducible on a GPU.
HostTensor random_tensor(const TensorDesc& t, uint64_t seed, int input_index);
std::vector<HostTensor> random_inputs(const KernelGraph& g, uint64_t seed);

struct EvalOptions {
  Precision precision = Precision::F64;
  int threads = 0;  // 0: all cores
};

// Evaluates g on inputs (one per g.inputs, matching shapes) and returns g's outputs in order.
// Throws UserError(Shape) if the inputs do not match.
std::vector<HostTensor> evaluate(const KernelGraph& g, const std::vector<HostTensor>& inputs,
                                 const EvalOptions& opt = {});

// ‖out − ref‖₂ / ‖ref‖₂ (‖out‖₂ if ref is all zeros); infinity on NaN or shape mismatch.
double relative_l2_error(const HostTensor& out, const HostTensor& ref);
// The spec's tolerance for an output of dtype t: 1e-4 f32, 5e-3 f16, 2e-2 bf16.
double spec_tolerance(DType t);

}  // namespace kiln
