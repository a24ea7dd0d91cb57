// The block-level half of the layout/schedule optimizer's output: for a graph-defined op, where
// each block op's tile lives, which threads compute which element, the tensor-core plan of each
// matmul, the cp.async pipeline, the order of steps and their barriers (see schedule.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/ir/block_graph.h"
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

// Shared memory a generated block kernel may declare statically besides its dynamic smem_bytes
// (the cross-warp reduction scratch is 128 bytes). The planner keeps it under the per-block
// maximum, and the launch raises the dynamic limit once dynamic + static passes 48 KB (a kernel
// of exactly 48 KB dynamic failed to launch on an H100 in session 13).
constexpr int64_t kStaticSmemBytes = 1024;

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
  // What the target allows per block, less kStaticSmemBytes: the kernel's static arrays (a
  // reduction scratch) count against the same limit.
  int64_t smem_budget = 0;
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

// The layout/schedule optimizer's plan of block graph bg on target t. lossy_f16 / lossy_bf16: every
// graph output the op reaches is f16 / bf16, so float32 tensor-core operands may be rounded to
// that type.
BlockSchedule plan_block_graph(const BlockGraph& bg, const Target& t, bool lossy_f16,
                               bool lossy_bf16);

// The re-tiled block graph plan_schedule runs for bg (see BlockSchedule::retiled), or null when
// re-tiling is not exact for bg or would not shorten the pipeline's stages usefully.
// `loop_dim` receives the re-tiled loop dim.
std::shared_ptr<const BlockGraph> retile_loop(const BlockGraph& bg, const Target& t,
                                              int* loop_dim = nullptr);

}  // namespace kiln
