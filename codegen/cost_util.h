// The cost model's shared formulas (codegen/cost.cpp; docs/cost-model.md), for the lowerings'
// cost functions.
#pragma once

#include <string>
#include <vector>

#include "kiln/codegen/cost.h"
#include "kiln/codegen/lowerings/contraction.h"

namespace kiln::cost {

// Useful bytes per DRAM byte for a tile whose contiguous run is `run` bytes.
double coalescing(double run, const CostConstants& k);
// Contiguous bytes of a tile inside a row-major tensor.
double contiguous_run(const Shape& tile, const Shape& tensor, int bytes);
int64_t pad(int64_t x, int64_t m);
// Tensor-core flops of a (batched) matmul, its extents padded to the mma shape.
double matmul_tc_flops(const Shape& a, const Shape& b, const Shape& out);
// Fills c's times, bound and total from its byte and flop counts: dram_u, comp_u are the
// fractions of DRAM bandwidth and of the SMs' rates the kernel reaches; tc_u of the target's
// tensor-core rate (generic kernels use mma.sync, not wgmma).
void finish_times(KernelCost& c, const Target& t, const CostConstants& k, double dram_u,
                  double comp_u, double tc_u = 1.0);
// The fractions of DRAM bandwidth and of the SMs' rates reached by `blocks` blocks at efficiency
// e, DRAM saturating once `saturation` of the SMs are busy.
void grid_utilization(double blocks, const Target& t, double e, double saturation, double& dram_u,
                      double& comp_u);
// A split-K kernel's last pass: one more dependent DRAM round trip.
void add_split_round_trip(KernelCost& c, const CostConstants& k);
// The K-major register GEMV (runtime/gemv_kmajor.cuh) of an [m, k] A by an [n, k] weight with
// shape v: c arrives with its name and DRAM bytes set; a_bytes is A's size, which every 16-column
// block reads through L2. Shared by the predefined GEMV and the decode contraction.
KernelCost gemv_kmajor_cost(KernelCost c, double a_bytes, int64_t m, int64_t n, int64_t k,
                            const GemvKmajorShape& v, const Target& t);
// The runtime's three-pass tf32 GEMM (runtime/tf32.cuh, gemm_f32x3_launch) of `batch` products of
// [rows, k] by [k, n] with `splits` K splits: one split pass (read the operands, in_bytes, write
// their hi/lo pairs), the GEMM over three K segments at tf32's rate (half the 16-bit tensor rate)
// reading the pairs, the partials' sum with split-K; out_bytes written.
KernelCost f32x3_gemm_cost(const std::string& name, int64_t rows, int64_t n, int64_t k,
                           int64_t batch, int splits, double in_bytes, double out_bytes,
                           const Target& t);
// The split-K factor of runtime/tf32.cuh's gemm_f32x3_splits for `sms` SMs.
int f32x3_splits(int64_t rows, int64_t n, int64_t k, int sms, int64_t batch);

// The runtime's wgmma GEMM (or, with p.gemv, the TMA GEMV) running contraction p; `inputs` are
// the tensors p's input indices refer to.
KernelCost contraction_cost(const std::string& name, const ContractionPlan& p,
                            const std::vector<TensorDesc>& inputs, const Target& t);

}  // namespace kiln::cost
