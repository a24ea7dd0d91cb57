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

#include "kiln/ir/deadline.h"
#include "kiln/ir/kernel_graph.h"
#include "kiln/ir/memory.h"

namespace kiln {

enum class Precision : uint8_t { F32, F64 };

// A host tensor, row-major. Values are held as double whatever the dtype; in F32 mode and for
// inputs they are exactly representable in `dtype`.
// The values are zero-filled at construction and committed only where written (memory.h), so
// that inputs generated for a few sampled rows hold those rows only.
using HostData = std::vector<double, LazyZeroAllocator<double>>;
struct HostTensor {
  Shape shape;
  DType dtype = DType::F32;
  HostData data;
};

// The documented seeded generator (docs/interpreter.md): element e of input i under seed s is a
// pure function of (s, i, e), uniform in [-0.5, 0.5) on a 2^-24 grid, rounded to the dtype with
// round-to-nearest-even. Bit-for-bit reproducible on a GPU. With normal_std > 0 the values are
// instead normal of that standard deviation (Irwin-Hall of 12 uniforms, from a second stream of
// the same input; the range rule of the spec format asks for std 1), equally reproducible.
//
// `rows` (one flag per row, see num_rows; empty: every row) restricts the generation to the
// flagged rows: the others are zero and occupy no memory (HostData). A row's values do not
// depend on which other rows are generated.
HostTensor random_tensor(const TensorDesc& t, uint64_t seed, int input_index, double normal_std = 0,
                         const std::vector<uint8_t>& rows = {});
// Every input of g; `rows`, if not null, holds one row set per input (as random_tensor's).
std::vector<HostTensor> random_inputs(const KernelGraph& g, uint64_t seed, double normal_std = 0,
                                      const std::vector<std::vector<uint8_t>>* rows = nullptr);

// A narrowing that a GPU implementation applies to a value the graph itself keeps in float:
// operand `operand` of block op `block_op` (a matmul) of kernel op `kernel_op` is rounded to
// `dtype` where the matmul reads it (a float32 tile fed to a 16-bit tensor-core mma; the
// schedule decides, codegen/schedule.h MmaPlan::lossy). Only F32 evaluation applies it, so
// that the float check predicts what the GPU computes.
struct OperandRounding {
  int kernel_op = -1, block_op = -1, operand = 0;
  DType dtype = DType::F16;
  // The kernel holds the operand divided by a positive factor per row (the attention lowering's
  // online softmax keeps P relative to the running row max), so rounding loses only relative
  // precision and cannot overflow: modeled as round(x / c) * c with c the row's largest magnitude.
  bool row_scaled = false;
};

struct EvalOptions {
  // `{precision, threads}` stays the short spelling; the rest is set by name.
  EvalOptions(Precision p = Precision::F64, int t = 0) : precision(p), threads(t) {}
  Precision precision = Precision::F64;
  int threads = 0;                                // 0: all cores
  std::vector<OperandRounding> operand_rounding;  // F32 only
  // F64 only: set to true when some value stored into a device tensor (every op result of a
  // spec) is beyond the float32 range (|x| > FLT_MAX, or not finite). The range rule of the spec
  // format exempts such inputs.
  bool* out_of_f32_range = nullptr;
  // Checked before every op: past it, evaluate() throws DeadlinePassed.
  Deadline deadline;
  // > 0: evaluate() throws MemoryLimitExceeded, before allocating, when the resident set plus
  // what the evaluation's tensors need (estimate_bytes) would pass this many bytes.
  int64_t max_bytes = 0;
};

// The most bytes an evaluation of g holds in tensors at once, `value_bytes` per element (8 for
// F64, 4 for F32): the inputs, every op's results while live (they are dropped after their last
// use) and the outputs. Block-level tiles are not counted (a few per worker).
double estimate_bytes(const KernelGraph& g, int value_bytes);
// The same for evaluate_rows(g, _, rows): what the rows it computes occupy (whole pages).
double estimate_bytes(const KernelGraph& g, int value_bytes,
                      const std::vector<std::vector<int64_t>>& rows);

// Evaluates g on inputs (one per g.inputs, matching shapes) and returns g's outputs in order.
// Throws UserError(Shape) if the inputs do not match.
std::vector<HostTensor> evaluate(const KernelGraph& g, const std::vector<HostTensor>& inputs,
                                 const EvalOptions& opt = {});

// Partial evaluation, for graphs too big to evaluate whole (gated_mlp at m = 4096): computes
// only the listed rows of each output. A row is an index over all dims but the last (row-major;
// a scalar or vector output has the one row 0). rows[i] lists the rows of output i (possibly
// none); the result i has shape [rows[i].size(), last dim of output i] and holds those rows in
// the listed order, equal to the same rows of evaluate(g, inputs, opt). Work is cut by
// propagating the needed rows backwards through the kernel graph and running only the blocks
// of graph-defined kernels whose saved tiles meet a needed row (docs/interpreter.md says how
// far each op narrows). Throws UserError(Shape) for bad inputs or a row out of range.
std::vector<HostTensor> evaluate_rows(const KernelGraph& g, const std::vector<HostTensor>& inputs,
                                      const std::vector<std::vector<int64_t>>& rows,
                                      const EvalOptions& opt = {});
// The rows of each input of g that evaluate_rows(g, _, rows) reads, one flag per row (see
// random_tensor; empty: every row): the inputs need hold nothing else.
std::vector<std::vector<uint8_t>> input_rows(const KernelGraph& g,
                                             const std::vector<std::vector<int64_t>>& rows);
// `count` distinct rows of a tensor of shape s, ascending, chosen by `seed`: the first and the
// last row always, the rest uniformly; every row if count >= the number of rows.
std::vector<int64_t> sample_rows(const Shape& s, int64_t count, uint64_t seed);
// The listed rows of t, as evaluate_rows returns them.
HostTensor select_rows(const HostTensor& t, const std::vector<int64_t>& rows);

// ‖out − ref‖₂ / ‖ref‖₂ (‖out‖₂ if ref is all zeros); infinity on NaN or shape mismatch.
double relative_l2_error(const HostTensor& out, const HostTensor& ref);
// The spec's tolerance for an output of dtype t: 1e-4 f32, 5e-3 f16, 2e-2 bf16.
double spec_tolerance(DType t);

}  // namespace kiln
