// Predefined matmuls past GEMV rows: the runtime's warp-specialized TMA + wgmma GEMM on sm_90a,
// else mma.sync tiles (batched, split-K where the tiles cannot fill the machine), and an FMA
// kernel where the operands are not tensor-core types.
#pragma once

#include "kiln/codegen/lowering.h"
#include "kiln/codegen/lowerings/gemv.h"

namespace kiln {

// Hopper: the runtime's warp-specialized TMA + wgmma GEMM (128x128x64 tiles, 6 stages). Where B
// is a transpose of an [N, K] tensor (kmajor_b_source), the GEMM reads that tensor K-major in
// place (KernelPlan::view_op) and the transpose runs no kernel.
struct WgmmaGemmKernel {
  bool b_kmajor = false;
  int64_t rows = 0;  // M, or M times the batch folded into one GEMM (folded_rows)
  KILN_LOWERING(WgmmaGemmKernel);
};

// f32 matrix-vector shapes: one side of at most 8 vectors (N <= 8 with A row-major, its batch dims
// folded into rows; or M <= 8 with a 2-D A and B read K-major through its transpose): the
// runtime's f32_rowdot (a warp per row of the large operand and K split, f32 FMA, the large
// operand read once; runtime/tf32.cuh).
struct F32RowdotKernel {
  bool n_small = false;  // S = N, W = A; else S = M, W = B^T
  int64_t s = 0, l = 0;  // the small and the large extents
  int splits = 1;
  int a_view = -1;  // the transpose op read in place as A, or -1
  KILN_LOWERING(F32RowdotKernel);
};

// f32 products of at most 16 rows by a weight stored K x N (N contiguous), the rows A's (batch
// dims folded) or a 2-D A read transposed: the runtime's f32_colstream (a thread per 4 columns
// and K split, f32 FMA, the weight read once; runtime/tf32.cuh).
struct F32ColstreamKernel {
  int64_t rows = 0;
  int splits = 1;
  int a_view = -1;  // the transpose op read in place as A, or -1
  KILN_LOWERING(F32ColstreamKernel);
};

// f32 operands (either or both; the other may be 16-bit) on sm_90a, past 2M multiply-adds where
// the streaming kernels (rowdot, colstream) decline: the runtime's
// three-pass tf32 GEMM (runtime/tf32.cuh: hi/lo splits, then the warp-specialized wgmma GEMM over
// three K segments, f32-accurate), split-K where the tiles cannot fill the SMs. Any layout: an A
// or B that is a transpose of its last two dims is read in place by the split pass (view_op for
// B; a_view for A), batched or not, and a batch runs in the same launches (3-D tensor maps).
struct Tf32x3GemmKernel {
  int64_t rows = 0;   // M, or M times the batch folded into one GEMM
  int64_t batch = 1;  // GEMMs launched one after another (B batched)
  int splits = 1;
  bool b_kmajor = false;
  int a_view = -1;  // the transpose op read in place as A, or -1
  KILN_LOWERING(Tf32x3GemmKernel);
};

// mma.sync 128x128x32 tiles (3 stages), or 64x128x32 (4 stages) for M <= 64.
struct GemmTcKernel {
  bool small = false;
  KILN_LOWERING(GemmTcKernel);
};

// 16-bit products on sm_90a whose operands TMA cannot address as stored (a weight K x N with N
// not a multiple of 8, any operand with such a K): the runtime's gemm16_staged_launch copies them
// K-major with padded rows (B always unless it is B^T [N, K] with aligned rows; A where K is not
// a multiple of 8), then runs the wgmma GEMM reading B K-major. B 2-D (a batch folds into rows);
// a transpose of an [N, K] tensor is read by the staging pass in place (view_op). Below about 8M
// multiply-adds the FMA kernel's single launch stays. Up to 64 rows the staged copies feed the
// K-major register GEMV instead, 32 rows a launch (gemv_kmajor_shape: k-splits over clusters
// fill the SMs where the GEMM's 128-row tiles would leave most of them idle).
struct StagedGemmKernel {
  int64_t rows = 0;
  bool b_kmajor = false;  // B given as the transpose of an [N, K] tensor (view_op)
  bool stage_a = false, stage_b = false;
  std::optional<GemvKmajorShape> gemv;  // decode rows: the K-major GEMV over the copies
  KILN_LOWERING(StagedGemmKernel);
};

// CUDA-core FMA, 32x32 tiles: any dtypes, any sizes.
struct FmaKernel {
  KILN_LOWERING(FmaKernel);
};

}  // namespace kiln
