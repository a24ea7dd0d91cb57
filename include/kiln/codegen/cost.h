// The cost model's per-kernel half: the constants, one kernel's modeled cost, and the shared
// formulas each lowering (kiln/codegen/lowerings.h) costs its plan with. The search's graph-level
// model (kiln/search/cost_model.h) sums these over a kernel graph; every formula and constant is
// in docs/cost-model.md.
#pragma once

#include <string>

#include "kiln/ir/kernel_graph.h"
#include "kiln/ir/target.h"

namespace kiln {

// Model constants that the target description does not carry (docs/cost-model.md).
struct CostConstants {
  double l2_bytes_per_s;               // L2 -> SM bandwidth (every load, hit or miss)
  double smem_bytes_per_s;             // aggregate shared-memory bandwidth
  double dram_saturation = 0.6;        // fraction of SMs that must be busy to saturate DRAM
  double fixed_s = 0.8e-6;             // per-kernel latency: first loads, epilogue, drain
  double dram_latency_s = 1.0e-6;      // loaded DRAM round trip (Little's law)
  double iteration_s = 0.07e-6;        // per loop iteration of one block: barrier, wait, issue
  double iteration_warp_s = 0.03e-6;   // per loop iteration, per warp of the block
  double predefined_efficiency = 0.6;  // generic kernels of predefined ops (gemm_tc, fma, ...)
  // Block-graph matmuls on the CUDA cores (f32 operands): fraction of the FMA rate reached (H200,
  // session 18: batched f32 products of 8 x 256 x 512 x 384 and 128 x 128 x 256 x 512 ran at
  // 9.6 and 7.4 TFLOP/s of 60).
  double fma_matmul_efficiency = 0.14;
  double gemv_efficiency = 0.97;  // the runtime GEMV (M <= 32): fraction of copy bandwidth
  // Fraction of SMs the TMA GEMV needs busy to saturate DRAM: each holds a 128 KB ring in flight
  // (H100 sweep, docs/runtime.md: 64 blocks stream 2.77 TB/s, 72 and 96 blocks 2.7).
  double gemv_tma_saturation = 0.45;
  double row_efficiency = 0.85;  // elementwise, gather and row-reduction kernels (fitted)
  int dram_granule = 64;         // bytes fetched per DRAM access (a sector)
  double run_overhead = 8;       // DRAM bytes lost per contiguous run (fitted)
  double l2_capacity = 50e6;     // L2 bytes: larger tensors stream through it
  double l2_miss = 0.33;  // re-reads by other blocks of a tensor larger than L2 that miss (fitted)
  double mma_sync_fraction = 1.0;  // generic block kernels' tensor rate / the target's (wgmma)
  // One k16 step of a warp's dependent mma.sync chain in a generic block kernel (the step's
  // fragment loads, then its mma into the same accumulators): operands by ldmatrix / by scalar
  // gathers (a transposed or unaligned view). Fitted to H100 timings (docs/cost-model.md).
  double mma_step_s = 0.045e-6;
  double mma_gather_step_s = 0.07e-6;
  // One step of a thread's dependent multiply-add (add, max) chain over a reduced extent in a
  // generic block kernel: its shared-memory loads, conversions and the FMA.
  double fma_step_s = 0.016e-6;
  // A batch of plain (not cp.async) tile copies, up to 16 chunks a thread, in a generic block
  // kernel: its loads, then its shared-memory stores. Fitted to 300 x 1001 by 1001 x 515 f16
  // (13 iterations of 3 such batches: 71 us on an H200, session 25).
  double plain_copy_trip_s = 1.8e-6;
};
const CostConstants& cost_constants(Arch a);

struct KernelCost {
  std::string name;
  bool graph_defined = false;
  bool lowered = false;  // a graph-defined kernel run as a runtime kernel (contraction, attention)
  int64_t blocks = 1, iterations = 1, waves = 1;
  int blocks_per_sm = 1;
  int pipeline_stages = 1, coarsen = 1;  // the emitter's cp.async ring (codegen/schedule.h)
  double inflight_bytes = 0;             // DRAM bytes one block keeps in flight
  int64_t round_trips = 0;               // dependent DRAM round trips of one block
  int64_t smem_per_block = 0;
  int regs_per_thread = 0;
  double dram_read = 0, dram_write = 0, l2_bytes = 0, smem_bytes = 0;  // bytes
  double tc_flops = 0, cuda_flops = 0;
  // Seconds.
  double t_dram = 0, t_lat = 0, t_l2 = 0, t_smem = 0, t_tc = 0, t_cuda = 0, t_iter = 0;
  // Generic block kernels: the longest warp's dependent chain of mma.sync k16 steps and CUDA-core
  // multiply-adds over the whole kernel, per wave: latency no number of blocks hides.
  double t_chain = 0;
  double t_fill = 0, t_launch = 0, t_fixed = 0, time = 0;
  std::string bound;  // the largest term: dram, latency, l2, smem, tensor, cuda, loop, chain
};

struct BlockSchedule;
struct KernelPlan;

// The modeled cost of kernel-graph op `op` of g run as plan kp (what the emitter emits for it):
// each lowering's own cost of its plan. No lowering is matched again here.
KernelCost plan_cost(const KernelGraph& g, const KernelOp& op, const Target& t,
                     const KernelPlan& kp);

// Graph-defined op `op` as the generic block-graph kernel, under block plan `plan` (its tiles'
// homes, pipeline and re-tiled loop) or, when null, under the model's assumptions (a ring of one
// stage, every non-register tile staged).
KernelCost block_graph_cost(const KernelOp& op, const Target& t, const BlockSchedule* plan);

// Predefined op `op` of g with no plan (the planner refused the graph): a generic kernel at the
// efficiency of its kind, on a grid that covers the machine.
KernelCost unplanned_cost(const KernelGraph& g, const KernelOp& op, const Target& t);

}  // namespace kiln
