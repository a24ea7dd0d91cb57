// The block graph: what one thread block of a graph-defined kernel does, and the thread graphs
// (elementwise chains in registers) inside it.
//
// Semantics (the interpreter, the verifier and the emitter all implement exactly this):
// - The grid has 1 to 3 dims; every block runs the same graph with its own grid index.
// - The for-loop has 0 to 3 dims with ranges; iterations run in row-major order of the loop
//   index (dim 0 outermost). With no loop dims there is one iteration.
// - An Input op loads a tile of device input `io`. For tensor dim d, let G_d be the extent of the
//   grid dim whose imap entry is d (1 if none) and L_d the range of the loop dim whose fmap entry
//   is d (1 if none). The tile extent is t_d = T_d / (G_d * L_d) (must divide exactly) and the
//   tile starts at (g * L_d + l) * t_d where g and l are the block's grid index and the current
//   loop index along those dims. imap/fmap entries of -1 replicate. At most one grid dim and at
//   most one loop dim map to each tensor dim.
// - Every other op computes a tile from tiles, with the kernel-level op semantics applied to the
//   tile (NumPy broadcast for elementwise ops; reductions over a tile dim).
// - Stages: an Input whose fmap is all -1 is Invariant (the same tile every iteration), any
//   other Input is Loop. A compute op is Loop if any input is Loop, Post if any input is Post
//   (mixing Loop and Post is an error), else Invariant. An accumulator takes a Loop or Invariant
//   tile and yields a Post tile:
//     accum_sum(v)        = sum over iterations of v
//     accum_max(v)        = elementwise max over iterations of v
//     accum_rescale(v, m) = sum_i v_i * exp(m_i - M) with M = max_i m_i (m broadcasts to v);
//                           the online-softmax form: combined with accum_max(m) and accum_sum it
//                           expresses flash attention with max subtraction.
// - An Output op saves a tile to device output `io`. The output tensor has rank >= the tile's;
//   the tile aligns with its trailing dims (leading dims have tile extent 1). omap (one entry per
//   grid dim) and fmap (one per loop dim) say which output dim each grid / loop dim covers, with
//   the same offset rule as inputs; output extent E_d = t_d * G_d * L_d. A Loop-stage tile is
//   saved every iteration and every loop dim of range > 1 must be mapped; a Post or Invariant
//   tile is saved once after the loop and its fmap must be all -1. Every grid dim of extent > 1
//   must be mapped, so that no two blocks write the same element.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "kiln/ir/ops.h"
#include "kiln/ir/target.h"
#include "kiln/ir/types.h"

namespace kiln {

struct TensorDesc {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  bool operator==(const TensorDesc&) const = default;
};

enum class Stage : uint8_t { Invariant, Loop, Post };
const char* stage_name(Stage s);

// A chain of elementwise ops a thread applies in registers. Operand references: 0..num_inputs-1
// are the thread graph's inputs, num_inputs + j is the result of ops[j]. The last op's result
// is the thread graph's single output. Ops must be of level kThread (elementwise or constant).
struct ThreadOp {
  OpKind kind;
  std::vector<int> inputs;
  Attrs attrs;
  bool operator==(const ThreadOp&) const = default;
};

struct ThreadGraph {
  int num_inputs = 0;
  std::vector<ThreadOp> ops;
  bool operator==(const ThreadGraph&) const = default;
};

// Checks a thread graph (operand refs in range and earlier, op kinds allowed at thread level,
// arities, at least one op). Throws UserError(Structure/Op).
void check_thread_graph(const ThreadGraph& tg);

struct BlockOp {
  OpKind kind;
  std::string name;         // unique within the block graph
  std::vector<int> inputs;  // indices of earlier ops in BlockGraph::ops
  Attrs attrs;
  int io = -1;            // Input: index into BlockGraph::inputs; Output: into ::outputs
  std::vector<int> imap;  // Input: imap; Output: omap. One entry per grid dim.
  std::vector<int> fmap;  // Input/Output: one entry per loop dim
  std::shared_ptr<const ThreadGraph> thread;  // Fused only
  // Derived by the builder.
  Shape shape;  // the tile this op produces (Output: the tile it saves)
  Stage stage = Stage::Invariant;
};

struct BlockGraph {
  std::vector<int64_t> grid;  // 1..3 extents
  int block_threads = 128;
  std::vector<int64_t> loop;        // 0..3 ranges
  std::vector<TensorDesc> inputs;   // device tensors read (names are the kernel op's inputs)
  std::vector<TensorDesc> outputs;  // device tensors written, shapes derived from the savers
  std::vector<BlockOp> ops;         // topological order

  int64_t num_blocks() const;
  int64_t num_iterations() const;
};

struct BlockResources {
  int64_t smem_bytes = 0;
  int regs_per_thread = 0;
};
// The exact resource rule of target.h.
BlockResources block_resources(const BlockGraph& bg);

// Builds a BlockGraph, checking every invariant as ops are added. Each method throws UserError
// (codes Map, Shape, Op, Structure, Resource) naming the op; it returns the new op's index.
class BlockGraphBuilder {
 public:
  BlockGraphBuilder(std::vector<int64_t> grid, int block_threads, std::vector<int64_t> loop,
                    std::vector<TensorDesc> inputs);

  int input(int io, std::vector<int> imap, std::vector<int> fmap, std::string name = {});
  int op(OpKind kind, std::vector<int> inputs, Attrs attrs = {}, std::string name = {});
  int fused(ThreadGraph tg, std::vector<int> inputs, std::string name = {});
  // Saves `value` as a new device output (index = number of earlier output() calls).
  // rank < 0 means the tile's rank.
  int output(int value, std::vector<int> omap, std::vector<int> fmap, DType dtype,
             std::string tensor_name, int rank = -1, std::string name = {});

  // Checks the whole graph (at least one output, resources fit `target`) and returns it.
  BlockGraph finish(const Target& target = default_target()) &&;

  const BlockGraph& peek() const { return g_; }

 private:
  int push(BlockOp op);
  BlockGraph g_;
  // Names taken so far, so that building stays linear in the number of ops (a file may hold a
  // million block ops).
  std::unordered_set<std::string> op_names_, output_names_;
};

}  // namespace kiln
