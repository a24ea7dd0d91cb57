// The layout/schedule optimizer: decides how each kernel of a μGraph runs before the emitter
// writes any CUDA. For a graph-defined op it fixes, for every block op, where its tile lives
// (shared memory at an offset with a padded row pitch, a per-block slice of the workspace when
// shared memory is short, registers for accumulators, or nowhere: recomputed inline in its single
// consumer), which threads compute which element (a distribution: strided elements, lane groups
// for reductions, or the mma.sync fragment layout of a warp partition), whether a matmul runs on
// tensor cores, the cp.async pipeline depth of loop inputs, the order of steps and the barriers
// between them. For the kernel graph it places intermediate tensors in the workspace and picks a
// strategy for every predefined op.
//
// The emitter implements exactly what the schedule says; the schedule never changes semantics,
// only placement and order (block_graph.h's comment is the semantics).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/codegen/attention.h"
#include "kiln/codegen/contraction.h"
#include "kiln/ir/kernel_graph.h"
#include "kiln/ir/target.h"

namespace kiln {

// Where a block op's tile lives.
enum class TileHome : uint8_t {
  Smem,       // shared memory at TilePlan::offset (input tiles in their dtype, others float32)
  Global,     // a per-block slice of the workspace (float32), when shared memory is short
  Registers,  // an accumulator, held by the threads its distribution names
  Inline,     // recomputed where read: elementwise chains, transposes, size-1 reductions
  Root,       // a matmul/reduction computed inside its single consumer's step (epilogue fusion)
  Feed,       // consumed only by accumulators: computed inside the accumulation step
  Fragment,   // a loop tile elementwise in a matmul's result, kept in that matmul's mma C
              // fragments: its consumers (matmuls reading it as their A operand, reductions of
              // its last dim, all feeding accumulators) run in the same step from registers
  None,       // output savers
};
const char* tile_home_name(TileHome h);

// Which thread computes which element of a step's tile.
enum class DistKind : uint8_t {
  Group,  // element o belongs to lane group o % (T / group), slot o / (T / group); the group's
          // `group` lanes cooperate (reductions) and its first lane holds the value
  Mma,    // the accumulator fragments of an m16n8k16 warp partition of a [batch, m, n] product
};
struct Distribution {
  DistKind kind = DistKind::Group;
  int group = 1;
  int64_t numel = 1;  // elements of the tile (Group) / of the product (Mma)
  // Mma: product extents, warps along (batch, m16 tiles, n8 tiles, k), tiles per warp.
  int64_t batch = 1, m = 1, n = 1;
  int wb = 1, wm = 1, wn = 1, ks = 1;
  int bw = 1, mtw = 1, ntw = 1;
  int slots(int threads) const;  // registers per thread for one float per element
  bool operator==(const Distribution&) const = default;
  std::string str() const;
};

// A matmul on tensor cores.
struct MmaPlan {
  bool use = false;
  DType dtype = DType::F16;  // operand type of the mma (f16 or bf16)
  bool a_ldmatrix = false, b_ldmatrix = false;
  bool a_trans = false;  // A is read as a transposed view (ldmatrix.trans)
  bool b_nk = false;     // B is read as a transposed view (N x K rows, plain ldmatrix)
  bool lossy = false;    // a float32 operand is rounded to `dtype`
  // A loop matmul whose A operand is a loop-invariant tile read by ldmatrix: its A fragments are
  // loaded once before the loop and stay in registers (when they fit the register allowance).
  bool a_hoisted = false;
};

struct TilePlan {
  TileHome home = TileHome::Inline;
  int64_t offset = -1;           // Smem: byte offset in dynamic shared memory; Global: in slice
  int64_t bytes = 0;             // one stage
  int stages = 1;                // Loop-stage input tiles: pipeline depth
  std::vector<int64_t> strides;  // element strides of the stored tile (last dim may be padded)
  int load_vec = 0;              // Input: elements per copy chunk
  bool async = false;            // Input: chunks are cp.async copies
  Distribution dist;             // Registers, and the step that computes Feed/Root/Smem tiles
  MmaPlan mma;                   // matmuls computed on tensor cores
  bool spill = false;            // Registers: copied to shared memory after the loop
  int64_t spill_offset = -1;
  bool spill_global = false;
  std::vector<int64_t> spill_strides;
  int root = -1;  // Smem/Global/Feed tiles and savers: the matmul/reduction their step runs
  // Live interval of the stored buffer (and of the spill buffer) in barrier levels: buffers whose
  // intervals intersect never share bytes.
  int64_t live_lo = -1, live_hi = -1, spill_live_lo = -1, spill_live_hi = -1;
  std::string note;
};

enum class Phase : uint8_t { Pre, Loop, Post };
enum class StepKind : uint8_t {
  Load,        // issue the copies of input tile `op` (invariant: once; loop: prefetch)
  Compute,     // materialize tile `op` (Smem/Global)
  Accumulate,  // evaluate feed `op` and fold it into accumulators `accums`
  Save,        // output saver `op`
  Spill,       // copy accumulator `op` from registers to shared memory
  Barrier,     // __syncthreads()
};
struct Step {
  StepKind kind;
  Phase phase;
  int op = -1;
  std::vector<int> accums;
};

struct BlockSchedule {
  // Loop re-tiling. When set, the kernel runs this block graph instead of the op's own: the same
  // ops (same indices, names, maps) with loop dim `retile_dim` re-tiled to a different range, so
  // that every tile split by that loop dim has a different extent along it. Plans only
  // re-tile when it is exact: every value the loop reads along that dim reaches the accumulators
  // through k-sums only (accum_sum of matmuls contracting it, or sums over it), so the same
  // products are summed over the same k in the same k order, only grouped into different
  // iterations. Chosen so that one pipeline stage is small enough to keep several stages in flight
  // (a 64 KB weight tile becomes four 16 KB stages) and mma k extents are multiples of 16.
  // `tiles` and `steps` describe this graph; the cost of the op is unchanged.
  std::shared_ptr<const BlockGraph> retiled;
  int retile_dim = -1;
  int64_t retile_from = 0, retile_to = 0;  // the loop range of that dim, before and after
  std::vector<TilePlan> tiles;             // one per block op
  std::vector<Step> steps;                 // Pre steps, then the loop body, then Post steps
  int pipeline_stages = 1;
  // Loop iterations per pipeline stage: a stage holds the input tiles of `coarsen` consecutive
  // iterations, so fine-grained loops pay one wait and one barrier per stage, not per iteration.
  int coarsen = 1;
  int64_t smem_bytes = 0;       // dynamic shared memory of the kernel
  int64_t smem_rule_bytes = 0;  // what the resource rule counts
  int64_t smem_budget = 0;      // what the target allows
  int64_t global_bytes_per_block = 0;
  int regs_estimate = 0;  // accumulator and fragment floats per thread
  bool lossy_mma_ok = false;
  int barriers_per_iteration = 0;
  std::vector<std::string> notes;
};

// The warp partition tensor-core matmul `mm` runs in: its own when it is computed in its own
// step (Feed), else that of the step it is the root of (an Smem tile's or a fragment chain's);
// nullptr when it does not run on tensor cores.
const Distribution* mma_distribution(const BlockSchedule& s, int mm);

// How one kernel-graph op runs.
// Which kernel a plan emits: the emitter and the cost model switch over it (no default), so a
// new kind is a build error wherever it is not handled. KernelPlan::strategy describes it in words
// (with its configuration) for listings and comments only; nothing matches on that text.
enum class Strategy : uint8_t {
  Unplanned,
  // Graph-defined ops.
  BlockGraph,          // the generic block-graph kernel (emit_block.cpp)
  GemvTmaContraction,  // a GEMM with an epilogue at decode rows: the TMA GEMV (contraction.h)
  WgmmaContraction,    // a GEMM with an epilogue: the warp-specialized wgmma GEMM (contraction.h)
  Attention,           // attention's two-contraction chain (attention.h)
  // Predefined ops.
  Fill,                  // a constant that must be stored
  Folded,                // a constant folded into its readers: no kernel
  FusedInto,             // runs inside another op's kernel (KernelPlan::fused_into): no kernel
  ElementwiseVec,        // 16-byte vectors, same shapes
  ElementwiseBroadcast,  // scalar loop with broadcast indexing
  Gather,                // transpose
  RowPerBlock,           // reduction / softmax / rms_norm over the innermost dim, a block a row
  RowPerBlockVec,        // rms_norm, a block a row, in 16-byte vectors (maybe with a prologue)
  RowPerWarp,            // the same, a warp a row
  ColumnPerThread,       // reduction over an outer dim
  Gemv,                  // matmul of M <= 32 rows: the register GEMV, or the TMA GEMV (gemv_tma)
  WgmmaGemm,             // matmul: the runtime's wgmma GEMM (sm_90a)
  GemmTc128,             // matmul: mma.sync 128x128x32 tiles
  GemmTc64,              // matmul: mma.sync 64x128x32 tiles (M <= 64)
  Fma,                   // matmul without tensor cores
};

struct KernelPlan {
  int op = -1;
  std::string kernel;  // CUDA symbol stem, unique in the file
  Strategy kind = Strategy::Unplanned;
  std::string strategy;  // kind in words: "elementwise v8", "gemm_tc 128x128x32 s3", ...
  std::shared_ptr<BlockSchedule> block;  // graph-defined ops
  // Graph-defined ops that are a GEMM with an elementwise epilogue (contraction.h): run through
  // the runtime's wgmma mainloop instead of the generic block kernel (strategy "wgmma_ws
  // contraction"); `block` is still planned, for the listing and the resource rule.
  std::shared_ptr<const ContractionPlan> contraction;
  // Graph-defined ops that are attention's two-contraction chain (attention.h): run through the
  // runtime's TMA + wgmma attention kernel (strategy "wgmma attention"), each block of the graph
  // as mt / 64 CTAs of attn_key_split consumer warpgroups that split its keys, keys in chunks of
  // attn_chunk.
  std::shared_ptr<const AttentionPlan> attention;
  int attn_chunk = 64, attn_stages = 4, attn_min_blocks = 2, attn_key_split = 1;
  // Predefined matmul / reductions: launch parameters the emitter needs.
  int64_t grid = 0;
  int threads = 0;
  int64_t smem = 0;
  int splits = 1;                          // gemv split-K
  int gemv_warps_n = 2, gemv_warps_k = 4;  // gemv block: warps along N (64 columns each) and K
  int gemv_min_blocks = 2;                 // gemv __launch_bounds__ blocks per SM
  int gemv_unroll = 2;                     // gemv k-steps of loads in flight per warp
  bool gemv_cluster = false;               // gemv split-K across a cluster (sm_90a, splits <= 8)
  // Set where a predefined matmul runs as the TMA-streamed GEMV (runtime gemv_tma.cuh, sm_90a;
  // its splits, grid and smem are also in the fields above and below). The gemv_warps_* /
  // unroll / min_blocks / cluster fields above do not apply to it.
  std::optional<GemvTmaShape> gemv_tma;
  // Fusion across kernel-graph ops (predefined ops only). fused_into >= 0: this op has no kernel
  // of its own; the kernel of op fused_into does its work. prologue_op >= 0: this kernel does
  // the work of op prologue_op on its inputs (a weightless rms_norm before a GEMV, an elementwise
  // op before a row rms_norm), and stores that op's output too when prologue_stores.
  int fused_into = -1;
  int prologue_op = -1;
  bool prologue_stores = false;
  int64_t scratch_offset = -1;  // workspace bytes the kernel needs for itself
  int64_t scratch_bytes = 0;
};

struct Schedule {
  Arch arch = Arch::Sm90a;
  std::vector<KernelPlan> kernels;     // one per kernel-graph op, in order
  std::vector<int64_t> tensor_offset;  // workspace byte offset per tensor, -1 if not there
  int64_t workspace_bytes = 0;
  int64_t block_scratch_offset = -1;  // start of per-block Global tiles (shared by kernels)
};

// The re-tiled block graph plan_schedule runs for bg (see BlockSchedule::retiled), or null when
// re-tiling is not exact for bg or would not shorten the pipeline's stages usefully.
// `loop_dim` receives the re-tiled loop dim.
std::shared_ptr<const BlockGraph> retile_loop(const BlockGraph& bg, const Target& t,
                                              int* loop_dim = nullptr);

struct PlanOptions {
  // Run graph-defined kernels that match a runtime lowering (contraction.h, attention.h) through
  // the runtime's wgmma kernels on sm_90a. The CPU simulator turns it off: it runs only the
  // generic block-graph kernels.
  bool lowerings = true;
};

// Plans every kernel of g for target t. Throws UserError(Unsupported) for what the emitter cannot
// implement (none known), never for valid graphs.
Schedule plan_schedule(const KernelGraph& g, const Target& t, const PlanOptions& opt = {});

// The schedule as text: one paragraph per kernel, for the .cu header and `kiln emit --schedule`.
std::string schedule_to_text(const KernelGraph& g, const Schedule& s);

}  // namespace kiln
