// The op vocabulary of every IR level, as one table.
//
// KILN_OPS lists each op once: its enum name, its name in files, how many inputs it takes, its
// class (which decides shape rules and semantics), the levels it may appear at and the attrs it
// accepts. The printer, the JSON codecs, the spec parser, the interpreter and the verifier all
// dispatch on this table, so adding an op is one row here plus its semantics (for an elementwise
// op, one Elementwise<> specialisation in kiln/ir/elementwise.h and a device functor).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln {

enum class OpClass : uint8_t {
  Matmul,        // [..., m, k] x [..., k, n] -> [..., m, n]; batch dims broadcast
  Transpose,     // permutes dims (attr perm; default swaps the last two)
  Binary,        // elementwise, NumPy broadcast
  Unary,         // elementwise
  Constant,      // no inputs, a scalar ([]) of value `value`
  Reduce,        // over attr dim, keepdim (default true)
  Softmax,       // over attr dim (default -1)
  RmsNorm,       // x / sqrt(mean(x^2, -1) + eps) [* w]
  GraphDefined,  // kernel level: a launch that owns a block graph
  Input,         // block level: input iterator (imap, fmap)
  Output,        // block level: output saver (omap, fmap)
  Accum,         // block level: accumulates a loop-body tile across all loop iterations
  Fused,         // block level: a thread graph of elementwise ops applied in registers
};

// Levels an op may appear at.
enum : uint8_t { kKernel = 1, kBlock = 2, kThread = 4 };

// Attribute bits: which attrs an op accepts.
enum : uint16_t {
  kAttrDim = 1 << 0,
  kAttrKeepdim = 1 << 1,
  kAttrPerm = 1 << 2,
  kAttrValue = 1 << 3,
  kAttrEps = 1 << 4,
  kAttrApproximate = 1 << 5,
  kAttrNegativeSlope = 1 << 6,
  kAttrMin = 1 << 7,
  kAttrMax = 1 << 8,
};

// X(Enum, "name", min_inputs, max_inputs, OpClass, levels, attrs)
#define KILN_OPS(X)                                                                       \
  X(MatMul, "matmul", 2, 2, Matmul, kKernel | kBlock, 0)                                  \
  X(Transpose, "transpose", 1, 1, Transpose, kKernel | kBlock, kAttrPerm)                 \
  X(Add, "add", 2, 2, Binary, kKernel | kBlock | kThread, 0)                              \
  X(Sub, "sub", 2, 2, Binary, kKernel | kBlock | kThread, 0)                              \
  X(Mul, "mul", 2, 2, Binary, kKernel | kBlock | kThread, 0)                              \
  X(Div, "div", 2, 2, Binary, kKernel | kBlock | kThread, 0)                              \
  X(Maximum, "maximum", 2, 2, Binary, kKernel | kBlock | kThread, 0)                      \
  X(Minimum, "minimum", 2, 2, Binary, kKernel | kBlock | kThread, 0)                      \
  X(Constant, "constant", 0, 0, Constant, kKernel | kBlock | kThread, kAttrValue)         \
  X(Neg, "neg", 1, 1, Unary, kKernel | kBlock | kThread, 0)                               \
  X(Exp, "exp", 1, 1, Unary, kKernel | kBlock | kThread, 0)                               \
  X(Log, "log", 1, 1, Unary, kKernel | kBlock | kThread, 0)                               \
  X(Sqrt, "sqrt", 1, 1, Unary, kKernel | kBlock | kThread, 0)                             \
  X(Rsqrt, "rsqrt", 1, 1, Unary, kKernel | kBlock | kThread, 0)                           \
  X(Reciprocal, "reciprocal", 1, 1, Unary, kKernel | kBlock | kThread, 0)                 \
  X(Square, "square", 1, 1, Unary, kKernel | kBlock | kThread, 0)                         \
  X(Tanh, "tanh", 1, 1, Unary, kKernel | kBlock | kThread, 0)                             \
  X(Sigmoid, "sigmoid", 1, 1, Unary, kKernel | kBlock | kThread, 0)                       \
  X(Silu, "silu", 1, 1, Unary, kKernel | kBlock | kThread, 0)                             \
  X(Relu, "relu", 1, 1, Unary, kKernel | kBlock | kThread, 0)                             \
  X(Gelu, "gelu", 1, 1, Unary, kKernel | kBlock | kThread, kAttrApproximate)              \
  X(LeakyRelu, "leaky_relu", 1, 1, Unary, kKernel | kBlock | kThread, kAttrNegativeSlope) \
  X(Clamp, "clamp", 1, 1, Unary, kKernel | kBlock | kThread, kAttrMin | kAttrMax)         \
  X(Softplus, "softplus", 1, 1, Unary, kKernel | kBlock | kThread, 0)                     \
  X(Sin, "sin", 1, 1, Unary, kKernel | kBlock | kThread, 0)                               \
  X(Cos, "cos", 1, 1, Unary, kKernel | kBlock | kThread, 0)                               \
  X(Sum, "sum", 1, 1, Reduce, kKernel | kBlock, kAttrDim | kAttrKeepdim)                  \
  X(Mean, "mean", 1, 1, Reduce, kKernel | kBlock, kAttrDim | kAttrKeepdim)                \
  X(Max, "max", 1, 1, Reduce, kKernel | kBlock, kAttrDim | kAttrKeepdim)                  \
  X(Softmax, "softmax", 1, 1, Softmax, kKernel, kAttrDim)                                 \
  X(RmsNorm, "rms_norm", 1, 2, RmsNorm, kKernel, kAttrEps)                                \
  X(GraphDefined, "graph_defined", 1, 64, GraphDefined, kKernel, 0)                       \
  X(Input, "input", 0, 0, Input, kBlock, 0)                                               \
  X(Output, "output", 1, 1, Output, kBlock, 0)                                            \
  X(AccumSum, "accum_sum", 1, 1, Accum, kBlock, 0)                                        \
  X(AccumMax, "accum_max", 1, 1, Accum, kBlock, 0)                                        \
  X(AccumRescale, "accum_rescale", 2, 2, Accum, kBlock, 0)                                \
  X(Fused, "fused", 1, 16, Fused, kBlock, 0)

enum class OpKind : uint8_t {
#define KILN_OP_ENUM(E, N, MIN, MAX, C, L, A) E,
  KILN_OPS(KILN_OP_ENUM)
#undef KILN_OP_ENUM
};

struct OpInfo {
  OpKind kind;
  const char* name;
  int min_inputs, max_inputs;
  OpClass cls;
  uint8_t levels;
  uint16_t attrs;
};

const OpInfo& op_info(OpKind k);
inline const char* op_name(OpKind k) {
  return op_info(k).name;
}
std::optional<OpKind> op_from_name(std::string_view name);
const std::vector<OpInfo>& all_ops();
// The known op name closest to `name` (edit distance), for "did you mean" hints; "" if none.
std::string closest_op_name(std::string_view name, uint8_t level);

// The accumulators of OpClass::Accum, so that code that treats each differently can switch over
// them without a `default:` (a new accumulator is then a build error there).
enum class AccumKind : uint8_t { Sum, Max, Rescale };
// Throws InternalError for an op of another class.
AccumKind accum_kind(OpKind k);

enum class GeluApprox : uint8_t { None, Tanh };

// Attributes of an op. Only the fields the op's row accepts are meaningful; the others keep
// their defaults, and codecs read and write only the accepted ones. Dims are stored normalized
// (non-negative) once the op is built.
struct Attrs {
  int64_t dim = -1;       // Reduce, Softmax
  bool keepdim = true;    // Reduce
  std::vector<int> perm;  // Transpose; empty = swap the last two dims
  double value = 0.0;     // Constant
  double eps = 1e-6;      // RmsNorm
  GeluApprox approximate = GeluApprox::None;
  double negative_slope = 0.01;    // LeakyRelu
  std::optional<double> min, max;  // Clamp
  // Mean, RmsNorm: the count the op divides by; 0 means the reduced extent. Never read from or
  // written to files: only the verifier's scaled instance sets it (to the full-size count), so
  // that a shrunk instance divides exactly as the full one does (docs/verifier.md, "Scaling").
  int64_t count = 0;

  bool operator==(const Attrs&) const = default;
};

// The permutation a Transpose op applies: attrs.perm, or a swap of the last two dims if empty.
inline std::vector<int> transpose_perm(const Attrs& attrs, size_t rank) {
  if (!attrs.perm.empty()) return attrs.perm;
  std::vector<int> p(rank);
  for (size_t i = 0; i < rank; ++i) p[i] = static_cast<int>(i);
  if (rank >= 2) std::swap(p[rank - 1], p[rank - 2]);
  return p;
}

}  // namespace kiln
