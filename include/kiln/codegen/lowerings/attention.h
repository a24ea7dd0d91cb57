// Recognizing a graph-defined kernel that is attention's two-contraction chain, so that the
// emitter can run it through the runtime's TMA + wgmma attention kernel (runtime/attention.cuh)
// instead of the generic block-graph kernel (mma.sync, one barrier per pipeline stage).
//
// The match is on semantics, not on names. Per block, with Q the block's invariant input tile
// [Mt, D], and per loop iteration K [D, Nt] and V [Nt, DV] (either may be read through a
// transpose of a [Nt, D] / [DV, Nt] input tile), the block graph must compute
//   S = Q K;   P = f(S) elementwise;   r_j = sum (or mean) over the keys of g_j(S)
//   O = accum_sum(P V);   R_j = accum_sum(r_j)
// and save elementwise functions of O and the R_j (row values broadcast along O's columns),
// where Q may also be a row norm of the input tile (X * h(sum of X^2 over D)) and K the transpose
// of such a norm of a [Nt, D] tile (rms-normed queries and keys: their factors scale S),
// where f and g_j are elementwise expressions of S and constants, and the loop walks the keys of
// K and V in lock step (no loop: one iteration). Every op of the graph must be one of these.
// The lowering keeps the block graph's grid (each block's tiles, its key range and its outputs
// are the same); within a block it walks the keys in chunks of its own size and splits the Mt
// rows over CTAs of 64, which changes only the float summation order.
//
// Online (max-subtracted) form: where f(s) = k exp(a s) with a > 0, every g_j(s) = k_j exp(a s)
// with the same a, and every saved value is homogeneous of degree 0 in (O, R_j) jointly
// (unchanged when all of them are multiplied by one positive factor: O / R_0 is), the kernel
// computes f(s - m) and g_j(s - m) with m the running row max of S and rescales O and the R_j when
// m grows (runtime/attention.cuh). Each accumulator is then the one the block graph defines times
// exp(-a m), which the saved values cancel: the same real numbers, with P <= k instead of an
// exponential of unbounded range. The matcher proves both conditions on the graph (Form and
// degree below), so the rewrite is exact, not assumed. Only the online form may split one block's
// keys over the CTAs of a cluster (its partials combine by the same rescaling).
//
// P is rounded to the operand type for the second product, so the plan exists only where that
// rounding is allowed (lossy_f16 / lossy_bf16 for f16 / bf16 operands: every graph output
// downstream of the kernel is 16-bit, resp. bf16; the generic planner's rule for tensor cores on
// float32 operands).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "kiln/codegen/lowering.h"
#include "kiln/ir/block_graph.h"
#include "kiln/ir/target.h"

namespace kiln {

// Where a block's tile of one input starts, as a box origin of the input's 2-D view (rows =
// product of all dims but the last, cols = the last dim): row = sum_g row_coef[g] * g and
// col = sum_g col_coef[g] * g over the grid index g (the loop's first iteration).
struct AttentionView {
  int io = -1;  // block-graph input index
  int64_t rows = 0, cols = 0;
  std::array<int64_t, 3> row_coef{0, 0, 0}, col_coef{0, 0, 0};
};

// One saved output: value(O at (m, n), R_j at row m) or, for a row output, value(R_j at row m),
// stored at out + base + m * ld (+ n), base = sum_g base_coef[g] * g.
struct AttentionStore {
  int io = -1;       // block-graph output index
  bool row = false;  // a [.., Mt, 1] tile: one value per row
  DType dtype = DType::F16;
  int64_t ld = 0;
  std::array<int64_t, 3> base_coef{0, 0, 0};
  std::vector<std::string> statements;  // float32 C++ over `o` and `r[j]`
  std::string result;
};

// A row norm of an operand (Q's rows, or K's keys with K stored keys x D): each row x stands for
// x * factor(ss), ss the row's sum of squares in float32. The runtime does not rewrite the tiles:
// it computes the factors from shared memory and scales S's rows and columns by them. With a
// weight (rms_norm's, per column of the row: x * factor(ss) * w), the weights of Q's and K's
// norms both multiply Q's columns instead (S sums over those columns), which the runtime rewrites
// once in shared memory.
struct AttentionNorm {
  bool on = false;
  std::vector<std::string> statements;  // float32 C++ over `ss`: locals, then
  std::string factor;
  int weight_io = -1;  // block-graph input index of the weight, or -1
};

struct AttentionPlan {
  AttentionView q, k, v;
  AttentionNorm q_norm, k_norm;  // Q [Mt, D] over D; K (K-major only) over D
  bool k_nmajor = true;          // K stored D x keys (keys contiguous); else keys x D
  bool v_nmajor = true;          // V stored keys x DV; else DV x keys
  DType ab = DType::F16;
  int64_t mt = 0, d = 0, dv = 0;
  int64_t keys = 0;                          // keys per block: loop range x keys per iteration
  std::vector<int64_t> grid;                 // the block graph's grid (1..3 dims)
  int rows = 0;                              // row feeds r_j
  std::vector<std::string> elem_statements;  // float32 C++ over `s`: locals, then
  std::string p;                             // f(s), the second product's A operand
  std::vector<std::string> feeds;            // g_j(s), already scaled for a mean
  std::vector<AttentionStore> stores;
  bool online = false;            // the max-subtracted form (above)
  double exp_scale = 0;           // its a
  double p_coef = 0;              // k of f(s) = k exp(a s)
  std::vector<double> feed_coef;  // k_j of g_j(s) = k_j exp(a s)
  int pv_op = -1;                 // the block op of the second product (its A operand is P)
};

// The plan when bg is such a chain and the target can run it (sm_90a; Q, K, V of one 16-bit type;
// Mt a multiple of 64; D and DV multiples of 64 up to 256; keys per block a multiple of 64; the
// inner dims of the three inputs multiples of 8 for TMA), else nullopt.
std::optional<AttentionPlan> match_attention(const BlockGraph& bg, const Target& t, bool lossy_f16,
                                             bool lossy_bf16);

// The lowering: the runtime's TMA + wgmma attention kernel, each block of the graph as mt / 64
// row tiles, each tile as `cluster` CTAs of a thread-block cluster that split its keys (online
// form only), each CTA of key_split consumer warpgroups that split its keys again, keys in chunks
// of `chunk`.
struct AttentionKernel {
  AttentionPlan a;
  int chunk = 64, stages = 4, min_blocks = 2, key_split = 1, cluster = 1;
  // A tile's chunks (the last may be partial) and the keys of its last one (masked below chunk).
  int64_t chunks() const { return (a.keys + chunk - 1) / chunk; }
  int64_t last_keys() const { return a.keys - (chunks() - 1) * chunk; }
  KILN_LOWERING(AttentionKernel);
};

}  // namespace kiln
