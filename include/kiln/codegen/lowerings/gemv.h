// Predefined matmuls of at most 32 rows of tensor-core operands: the runtime's GEMV, weight
// streamed once, register-streamed (split-K through a cluster on sm_90a or a workspace pass) or
// TMA-streamed (gemv_tma.cuh, sm_90a, large weights); a weightless rms_norm of A that nothing else
// reads is taken over as the row-rms epilogue.
#pragma once

#include <optional>
#include <string>

#include "kiln/codegen/lowering.h"

namespace kiln {

// The TMA-streamed GEMV's configuration (runtime/gemv_tma.cuh) for M <= 32 rows, from the
// planner's measured rule (codegen/lowerings/gemv.cpp, gemv_tma_shape).
struct GemvTmaShape {
  int64_t mt = 1;  // m-tiles of 8 rows (1, 2 or 4: the wgmma n of 8 MT)
  int64_t bn = 0, bk = 0, stages = 0, splits = 1;
  int64_t grid = 0;  // ceil(N / bn) * splits blocks
  int64_t smem = 0;  // dynamic shared memory per block
};
// The configuration for Y[M, N] = epi(X[M, K] W_j[K, N]) with nw (1 or 2) weights on target t,
// or nullopt where the planner keeps another kernel (not sm_90a, M > 32, weights under 8 MB, more
// than 256 columns per SM, or shapes the TMA boxes cannot take). `kmajor`: the weights are read
// K-major (W_j^T [N, K]); then weights under 8 MB qualify while each block streams <= 192 KB.
std::optional<GemvTmaShape> gemv_tma_shape(int64_t m, int64_t n, int64_t k, int nw, const Target& t,
                                           bool kmajor = false);

// The K-major register GEMV's configuration (runtime/gemv_kmajor.cuh): Y[M, N] = epi(X W^T) with W
// stored [N, K], 8 warps x unroll 4 per block of 16 columns, k split over a cluster of `splits`.
struct GemvKmajorShape {
  int64_t mt = 1;           // m-tiles of 8 rows (1, 2 or 4)
  int64_t splits = 1;       // CTAs per cluster along K (1 off sm_90a)
  int64_t max_cluster = 1;  // the kernel's CL: 8 on sm_90a (the shared slots it sizes), else 1
  int64_t grid = 0;         // ceil(N / 16) * splits
  int64_t nw = 1;           // weights streamed side by side (2: a gated pair, epi(y0, y1))
  static constexpr int kWarps = 8, kUnroll = 4;  // per 16-column block; k-steps in flight
  static constexpr int threads() { return 32 * kWarps; }
};
// nw weights side by side; rows: the epilogue takes row sums of squares (rms_norm). None where
// the kernel's static shared memory would pass 48 KB (two weights at more than 16 rows).
std::optional<GemvKmajorShape> gemv_kmajor_shape(int64_t m, int64_t n, int64_t k, const Target& t,
                                                 int64_t nw = 1, bool rows = false);
// The emitted statement `err = kiln::rt::gemv_kmajor_launch<...>(...);` for Y[m, n] =
// epi(X[m, k] W^T) with W [n, k] (row strides k, n), or epi(X W^T, X W1^T) when c.nw is 2 (w1 the
// second weight's pointer expression, else ignored): ta / to the operand and output C types,
// epi_type the functor type and epi its value expression.
std::string gemv_kmajor_launch_call(const GemvKmajorShape& c, const char* ta, const char* to,
                                    const std::string& epi_type, const std::string& x,
                                    const std::string& w, const std::string& w1,
                                    const std::string& out, int64_t m, int64_t n, int64_t k,
                                    const std::string& epi);

struct GemvKernel {
  // The register-streamed GEMV: warps along N (64 columns each) and K per block, __launch_bounds__
  // blocks per SM, k-steps of loads in flight per warp, split-K across a cluster (sm_90a, <= 8).
  int warps_n = 2, warps_k = 4, min_blocks = 2, unroll = 2;
  bool cluster = false;
  // Set where the matmul runs as the TMA-streamed GEMV instead (the fields above do not apply).
  std::optional<GemvTmaShape> tma;
  bool rms = false;  // A = rms_norm(X) is done here (KernelPlan::prologue_op)
  // B = W^T of an [N, K] tensor W read K-major in place (KernelPlan::view_op): by the TMA GEMV
  // where `tma` is set, else by the K-major register GEMV (`kmajor`; the fields above do not
  // apply).
  bool b_kmajor = false;
  std::optional<GemvKmajorShape> kmajor;
  int64_t rows = 0;  // M, or M times the batch folded into one GEMV (folded_rows)
  KILN_LOWERING(GemvKernel);
};

// sum or mean over the outer dim of a 2-D 16-bit tensor W [K, N] (W's rows summed: the
// rewrite that moves a matmul's output-dim sum onto its operand, linear_mean) as the TMA GEMV
// 1^T W with the ones row kept in shared memory (runtime GemvOnesX), sm_90a: the weight streams
// through the GEMV's ring like any weight. A plain column loop reached 2 TB/s at best
// (tests/gpu/colsum_sweep.cu).
struct ColumnSumGemvKernel {
  GemvTmaShape tma;
  KILN_LOWERING(ColumnSumGemvKernel);
};

}  // namespace kiln
