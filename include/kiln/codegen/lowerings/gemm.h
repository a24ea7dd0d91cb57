// Predefined matmuls past GEMV rows: the runtime's warp-specialized TMA + wgmma GEMM on sm_90a,
// else mma.sync tiles (batched, split-K where the tiles cannot fill the machine), and an FMA
// kernel where the operands are not tensor-core types.
#pragma once

#include "kiln/codegen/lowering.h"

namespace kiln {

// Hopper: the runtime's warp-specialized TMA + wgmma GEMM (128x128x64 tiles, 6 stages). Where B
// is a transpose of an [N, K] tensor (kmajor_b_source), the GEMM reads that tensor K-major in
// place (KernelPlan::view_op) and the transpose runs no kernel.
struct WgmmaGemmKernel {
  bool b_kmajor = false;
  int64_t rows = 0;  // M, or M times the batch folded into one GEMM (folded_rows)
  KILN_LOWERING(WgmmaGemmKernel);
};

// mma.sync 128x128x32 tiles (3 stages), or 64x128x32 (4 stages) for M <= 64.
struct GemmTcKernel {
  bool small = false;
  KILN_LOWERING(GemmTcKernel);
};

// CUDA-core FMA, 32x32 tiles: any dtypes, any sizes.
struct FmaKernel {
  KILN_LOWERING(FmaKernel);
};

}  // namespace kiln
