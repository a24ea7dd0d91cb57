// Recognizing a graph-defined kernel that is a GEMM with a fused elementwise epilogue, so that
// the emitter can run it through the runtime's warp-specialized TMA + wgmma mainloop
// (runtime/wgmma.cuh) instead of the generic block-graph kernel.
//
// The match is on semantics, not on names: the block graph must compute, for every element of
// its single output,
//   out[m, n] = f(sum_k A[m, k] B_0[k, n], ..., sum_k A[m, k] B_{j}[k, n], E_0[m, n], ...)
// with one or two weights B_j sharing the activation A, f an elementwise expression of the
// accumulators, of tensors E_i broadcast to [M, N] (an [M, N] tensor, a bias [N] or [1, N], a
// per-row [M, 1], a scalar) and of constants. Each B_j is a [K, N] input tile, or the transpose of
// an [N, K] input tile (PyTorch's nn.Linear weight, which the runtime reads K-major in place:
// no transpose is materialised). The block graph's own tiling
// (grid, loop, tile sizes) is a schedule choice that the lowering replaces with the runtime's
// 128 x 128 x 64 tiles; the value of every output element is unchanged (up to float
// reassociation of the k-sum, as with any tiling).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "kiln/codegen/lowering.h"
#include "kiln/codegen/lowerings/gemv.h"
#include "kiln/ir/block_graph.h"
#include "kiln/ir/target.h"

namespace kiln {

// The low-rank term of a contraction: v1 = ((A B_lr0) B_lr1)[m, n] with A the contraction's
// activation [M, K], `a` a [K, R] input (or, a_kmajor, the transpose of an [R, K] one) and `b` an
// [R, N] input (or, b_kmajor, the transpose of an [N, R] one), for few rows and a small rank: the
// runtime's low-rank chain kernel (runtime/lowrank.cuh) computes T = A B_lr0 once per cluster
// (k split over its CTAs, the partials exchanged through distributed shared memory) and every
// CTA its columns of T B_lr1. Planned only as the contraction's sole product (no B_j beside it).
struct LowRankTerm {
  int a = -1, b = -1;  // block-graph input indices
  int64_t r = 0;       // the rank
  bool a_kmajor = false, b_kmajor = false;
};

// The low-rank chain kernel's configuration: rows in m16 tiles (mt <= 2), the rank in 16-wide
// tiles (rt <= 4), nc output columns per CTA of 128 threads, K split over clusters of `splits`
// CTAs; `smem` bytes of dynamic shared memory (runtime/lowrank.cuh, LowrankSmem).
struct LowRankShape {
  int mt = 1, rt = 1, nc = 32, splits = 1;
  int64_t grid = 0, smem = 0;
};

struct ContractionPlan {
  int a = -1;                   // block-graph input index of A [M, K]
  std::vector<int> b;           // block-graph input indices of B_0 (, B_1) [K, N]
  std::vector<int> epi_inputs;  // block-graph input indices of the E_i, in order
  // Per E_i, its element strides along m and n (0 along a broadcast dim): E_i at [m, n] is
  // element m * epi_strides[i][0] + n * epi_strides[i][1].
  std::vector<std::array<int64_t, 2>> epi_strides;
  bool b_kmajor = false;  // the B_j are given as B_j^T [N, K] (every one of them)
  // The epilogue reads `rs`, the row's sum of squares of A over K (a block graph that sums
  // square(A) beside the matmul: rms_norm(X) W with the scaling deferred to the epilogue). Only
  // the GEMVs provide it (Epi::kRowSumSq: the TMA GEMV's rows warp, the K-major register GEMV's
  // X loads).
  bool row_sumsq = false;
  int64_t m = 0, n = 0, k = 0;
  DType ab = DType::F16;   // operand dtype (f16 or bf16; f32 on the tf32 path)
  DType out = DType::F16;  // output dtype
  // The epilogue as float32 C++ statements over `v0`, `v1` (the accumulators of B_0, B_1) and
  // `e0`, `e1`, ... (the E_i at [m, n], already converted to float); the value is `result`.
  std::vector<std::string> epi_statements;
  std::string result;
  // Set for M <= 32: the contraction runs as the TMA-streamed GEMV (weights read once, at copy
  // speed) instead of the 128 x 128 tiled GEMM.
  std::optional<GemvTmaShape> gemv;
  // Set instead for M <= 32 and one weight read K-major where gemv_tma_shape gives none (weights
  // under 8 MB in few blocks, N not a multiple of 8): the K-major register GEMV
  // (runtime/gemv_kmajor.cuh), with the same epilogue functor.
  std::optional<GemvKmajorShape> gemv_kmajor;
  // f32 operands (one weight, past 2M multiply-adds): the three-pass tf32 GEMM (runtime/tf32.cuh)
  // with the epilogue functor, split K this many ways (0: not this path).
  int f32x3_splits = 0;
  // Set where the epilogue reads a low-rank term as v1 (then b is empty and v0 = 0): the
  // low-rank chain kernel with `lowrank_shape`.
  std::optional<LowRankTerm> lowrank;
  std::optional<LowRankShape> lowrank_shape;
};

// The low-rank chain kernel's configuration for M rows, rank R, K and N (A, B read K-major as the
// flags say), or nullopt where it cannot run (M > 32, R > 64, K, R or N not multiples of 8,
// shared memory over the target's limit, not sm_90a). The split is the fewest CTAs per cluster
// (1, 2, 4, 8) whose k-range of X and A fits 48 KB; nc the widest column block (32, 64, 128) that
// leaves at least 64 CTAs, and wide enough that the CTAs do not outnumber the SMs (measured:
// contraction.cpp).
std::optional<LowRankShape> lowrank_shape(int64_t m, int64_t n, int64_t k, int64_t r, bool a_kmajor,
                                          bool b_kmajor, const Target& t);
// The shared-memory bytes runtime/lowrank.cuh's LowrankSmem computes without W (mirrored here).
int64_t lowrank_smem_bytes(int mt, int rt, int nc, bool a_kmajor, bool b_kmajor, int64_t k,
                           int splits);

// The plan when bg is such a contraction and the target can run it (sm_90a; A and B f16 or bf16
// of one type; K a multiple of 8; either M, N at least 128 and N a multiple of 8, so the 128 x 128
// tiles are not mostly padding, or M at most 32 where gemv_tma_shape gives a configuration or
// one weight is read K-major), else nullopt.
std::optional<ContractionPlan> match_contraction(const BlockGraph& bg, const Target& t);

// The lowering: the contraction as the runtime's wgmma GEMM, or at decode rows (c.gemv) as the
// TMA GEMV, with the epilogue as a functor.
struct ContractionKernel {
  ContractionPlan c;
  KILN_LOWERING(ContractionKernel);
};

}  // namespace kiln
