// Reductions, softmax and rms_norm of predefined ops: a block or a warp per row when the reduced
// dim is innermost, else a thread per column; long-row rms_norm in 16-byte vectors with the row in
// registers, and an elementwise producer taken over as its prologue.
#pragma once

#include "kiln/codegen/lowering.h"

namespace kiln {

// rms_norm over rows of at least 2048 elements, a block per row, 16-byte vectors, the row held in
// registers between the sum of squares and the scaling. Where its input comes from a vector
// elementwise op whose other readers all run later, that op runs inside this kernel (prologue):
// the row kernel forms its output from its inputs, stores it only if something else reads it.
struct RmsRowsKernel {
  int v = 8;              // elements per 16-byte vector
  bool prologue = false;  // an elementwise producer runs inside this kernel
  bool stores = false;    // ... and its output is stored too
  KILN_LOWERING(RmsRowsKernel);
};

// A reduction over the innermost dim: a block per row (rows of 2048 or more) or a warp per row.
struct RowKernel {
  bool block = false;
  KILN_LOWERING(RowKernel);
};

// A reduction over an outer dim: a thread per column.
struct ColumnKernel {
  KILN_LOWERING(ColumnKernel);
};

}  // namespace kiln
