// Element types and shapes shared by every level of the IR.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

enum class DType : uint8_t { F16, BF16, F32 };

const char* dtype_name(DType t);                              // "f16", "bf16", "f32"
std::optional<DType> dtype_from_name(std::string_view name);  // also float16/bfloat16/float32
int dtype_bytes(DType t);

// Largest tensor we accept (elements). Bounds allocation whatever a file says.
inline constexpr int64_t kMaxElements = int64_t(1) << 40;
inline constexpr int kMaxRank = 4;
// A block graph's loop iterations per block, and blocks x iterations of one kernel: beyond these a
// graph is rejected as not sane (every evaluation walks every block and iteration).
inline constexpr int64_t kMaxLoopIterations = int64_t(1) << 24;
inline constexpr int64_t kMaxBlockIterations = int64_t(1) << 36;
// Ops of one thread graph (a fused elementwise chain in registers).
inline constexpr int kMaxThreadOps = 64;

// A shape: up to 4 positive extents (block tiles and kernel tensors alike); [] is a scalar.
using Shape = std::vector<int64_t>;

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 4096]"

// NumPy broadcast of two shapes (aligned from the right; 1 stretches). nullopt if they clash.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// Row-major strides of a shape.
std::vector<int64_t> strides_of(const Shape& s);

}  // namespace kiln
