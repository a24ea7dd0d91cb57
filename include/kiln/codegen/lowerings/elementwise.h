// Predefined unary and binary elementwise ops: a grid-stride loop, in 16-byte vectors where every
// non-constant input has the output's shape, else scalar with broadcast indexing.
#pragma once

#include "kiln/codegen/lowering.h"

namespace kiln {

struct ElementwiseKernel {
  bool vec = false;  // 16-byte vectors
  int v = 1;         // elements per vector (16 bytes of the narrowest non-constant operand)
  KILN_LOWERING(ElementwiseKernel);
};

// A transpose materialized by a gather: each thread reads the element its output index maps to.
struct GatherKernel {
  KILN_LOWERING(GatherKernel);
};

}  // namespace kiln
