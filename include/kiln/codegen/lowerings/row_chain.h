// Graph-defined row chains in registers: a block graph whose every value is a full row of N
// elements (per row, or the same for every row: a weight, also a [N, 1] column), one value per
// row (a reduction over the row, a row times a column, saved as an [M] or [M, 1] output) or a
// constant, computed from rows of its inputs by elementwise ops and sums, means and maxima over
// the row (linear_mean's X·v after its rewrite, a row-dot per output): the search's fusions of
// rms_norm, layer_norm and softmax over the row, and of chains of them (norm -> residual add ->
// norm). The generic block-graph kernel stages every tile in shared memory with barriers between
// steps; this kernel holds each row in registers (8-element chunks loaded with 16-byte vector
// loads, chunk c of a row at thread c % T), reduces with warp shuffles and one barrier per
// reduction (kiln::cg::row_reduce: per-warp partials in a shared slot of that reduction), and
// walks the rows of its block one after another. On sm_90a a row may be split over a
// thread-block cluster of C CTAs (few rows, long rows: C SMs take the row in instead of one),
// each reduction then publishing its partials into every CTA of the cluster through distributed
// shared memory before one cluster barrier. The value of every element is the block graph's
// (same ops in float32, same rounding of inputs and outputs; sums in another order); only the
// placement differs.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/codegen/lowering.h"

namespace kiln {

struct RowChainKernel {
  // What a block op's value is, per row of the block.
  enum class Kind : uint8_t {
    Row,     // N elements that differ per row ([R, N] tiles)
    Weight,  // N elements shared by every row ([N] inputs and what only they feed)
    Scalar,  // one value per row ([R, 1]: a reduction over the row)
    Const,   // one value for the block (constants)
    Out,     // an output saver
  };
  int64_t rows = 1;        // R: rows per block (the block graph's tile)
  int64_t n = 0;           // N: elements per row, a multiple of 8
  int64_t blocks = 1;      // G: the block graph's blocks, one row group each
  int cluster = 1;         // C: CTAs splitting each row group (a cluster; the grid is G x C)
  int threads = 32;        // T: threads per CTA
  int chunks = 1;          // K: 8-element chunks of a row per thread (the last ones may be empty)
  int reductions = 0;      // block reductions per row
  std::vector<Kind> kind;  // per block op
  KILN_LOWERING(RowChainKernel);
};

}  // namespace kiln
