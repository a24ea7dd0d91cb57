// The candidate generator: from a spec to μGraph kernels, one search decision at a time.
//
// The generator works on a *primitive graph*: the spec with every composite op expanded into
// block-level primitives (rms_norm -> square, sum, scale, add eps, sqrt, div [, mul w];
// softmax -> max, sub, exp, sum, div; mean -> sum, scale). Every dim of every tensor gets a
// *label* (dims that must be partitioned alike share one), which is what grids, loops, imaps,
// fmaps and omaps are chosen over. The decisions, each a level of the search tree
// (docs/search.md):
//   1. a variant: a base graph (the spec's, or one the algebra pass extracted from its e-graph,
//      kiln/algebra/algebra.h), a set of rewrites that enable fusion (hoisting a row scale out
//      of a matmul, `matmul(x / r, W) = matmul(x, W) / r`) and at most one split of a reduced label
//      into S parts (split-K / split-KV: each reduction over it becomes a partial reduction with
//      a new leading dim, plus a kernel-level `sum` over that dim);
//   2. a partition of the variant's ops into kernels: contiguous segments of one canonical
//      topological order, so each grouping is generated once; a group is a graph-defined kernel
//      (or, for a single op, a predefined one), its input tensors being whatever crosses the cut;
//   3. for each graph-defined group a schedule: which labels the grid partitions and how many
//      ways (divisors), which label the for-loop walks and its range, the block size. Lowering a
//      group under a schedule derives imaps, fmaps and omaps from the labels, turns reductions
//      over the loop label into per-iteration partials plus accumulators, fuses elementwise
//      chains into thread graphs, and checks everything through BlockGraphBuilder::finish(target)
//      (exact shared-memory and register feasibility).
// Everything here is deterministic: the same spec and options give the same sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/ir/kernel_graph.h"
#include "kiln/ir/magnitude.h"
#include "kiln/ir/target.h"

namespace kiln::search {

// ---------------------------------------------------------------------------------------------
// The primitive graph.

struct PNode {
  OpKind kind = OpKind::Input;  // Input for graph inputs, else a kernel-level primitive op
  std::vector<int> inputs;      // node ids
  Attrs attrs;
  Shape shape;  // for a partial reduction: [split] + the reduction's shape
  DType dtype = DType::F32;
  std::string name;      // device tensor name if it lands in device memory
  int split = 0;         // > 0: a partial reduction (sum/max/matmul) split `split` ways over its
                         // reduced label; the parts stack along a new leading dim
  bool combine = false;  // the kernel-level sum over a partial's leading dim
};

struct PGraph {
  std::string name, doc;
  std::vector<PNode> nodes;           // topological
  std::vector<int> inputs;            // node ids, in spec order
  std::vector<int> outputs;           // node ids, in spec order
  std::vector<std::string> rewrites;  // what made this variant, for reports
  // Labels: labels[n][d] is the label of dim d of node n (-1: extent 1 / broadcast).
  std::vector<std::vector<int>> labels;
  std::vector<int64_t> label_extent;
  // label_ambiguous[l]: some node has two dims of label l (one tensor in two roles, e.g. X and
  // X^T in X X^T). A block reads each tensor through one iterator (one imap, one fmap), which
  // cannot slice two of its dims at once, so such a label is never gridded, looped or split.
  std::vector<bool> label_ambiguous;
  int split_label = -1;  // the label split S ways, if any
  int64_t split_parts = 0;
  int base = 0;  // which base graph of enumerate_variants it came from (0: the spec as written)

  bool ambiguous(int label) const { return label >= 0 && label_ambiguous[label]; }

  bool is_const(int n) const { return nodes[n].kind == OpKind::Constant; }
  // Label reduced by node n (sum/max over a dim, matmul contraction); -1 if none.
  int reduced_label(int n) const;
  // Dtype of node n's device tensor (partials are float32).
  DType device_dtype(int n) const { return nodes[n].split > 0 ? DType::F32 : nodes[n].dtype; }
};

// Expands a spec (a kernel graph of predefined ops) into primitives, drops the nodes no output
// depends on (inputs stay), and labels the dims.
PGraph expand_spec(const KernelGraph& spec);
// The primitive graph of a kernel graph that has only primitive predefined ops (what the algebra
// pass extracts, algebra.h), every node stored in its tensor's dtype.
PGraph primitive_graph(const KernelGraph& g);
// Recomputes labels of a graph after a rewrite.
void assign_labels(PGraph& g);
// Per node: its magnitude at std 1 (magnitude.h). A split partial sums its share of the reduced
// extent; a combine sums over the split.
std::vector<Magnitude> node_magnitudes(const PGraph& g);
// The first exp, not of x - max(x), whose argument may pass f32's exp range at std 1 (the
// magnitudes of node_magnitudes); -1 if none.
int overflowing_exp(const PGraph& g, const std::vector<Magnitude>& mags);
// Why a spec may have no correct kernel at std-1 inputs, for a user whose search shipped
// nothing: one sentence per output whose magnitude passes its own dtype's range (an f16 output
// past 65504: the float64 reference itself does not fit) and per exp whose argument may pass
// f32's exp range. Empty when the magnitudes see no such cause (which proves nothing either way:
// a magnitude may be unknown).
std::vector<std::string> range_hints(const KernelGraph& spec);

struct VariantOptions {
  // The algebra pass (algebra.h: an e-graph of the spec's primitive graph, saturated under these
  // limits; its extracted graphs are the search's bases, each verified against the spec first).
  bool algebra = true;
  int algebra_graphs = 4;  // bases, the spec as written included
  int algebra_iterations = 8;
  int64_t algebra_nodes = 4000;
  double algebra_seconds = 2.0;  // at most; the search gives it at most 5% of its limit
  bool hoist_scales = true;
  bool split = true;
  int max_split = 64;           // largest S
  int64_t min_split_tile = 16;  // a split leaves at least this many elements per part
};
// Every variant of the bases (the spec's primitive graph first, then the algebra pass's graphs):
// for each base every subset of the hoisting rewrites (a row scale out of a matmul), each with no
// split or one split of a reduced label that is not ambiguous, every subset's unsplit form before
// any split; round-robin over the bases, so the first is the first base's plain form. Each
// variant's `base` says which base it came from.
std::vector<PGraph> enumerate_variants(const std::vector<PGraph>& bases, const VariantOptions& opt);
// The variants of one base.
std::vector<PGraph> enumerate_variants(const PGraph& base, const VariantOptions& opt);

// A partition: groups of non-constant node ids, each a contiguous segment of `order`.
struct Partition {
  std::vector<std::vector<int>> groups;
};
// The canonical topological order (combine nodes as late as possible) and every partition of it
// into at most max_groups contiguous segments, in a fixed order. Partitions that keep a partial
// and its combine in one group are left out (the split would be pointless).
std::vector<int> canonical_order(const PGraph& g);
std::vector<Partition> enumerate_partitions(const PGraph& g, int max_groups);
// The same partitions, each as its cut positions in `order` (a group starts at each), without
// materialising them: a 100,000-node graph has ~1,300 of them, 540 MB as groups.
std::vector<std::vector<size_t>> enumerate_partition_cuts(const PGraph& g,
                                                          const std::vector<int>& order,
                                                          int max_groups);
Partition partition_at(const std::vector<int>& order, const std::vector<size_t>& cuts);

// ---------------------------------------------------------------------------------------------
// Groups and schedules.

struct GridDim {
  int label;
  int64_t parts;
  bool operator==(const GridDim&) const = default;
};

struct Schedule {
  std::vector<GridDim> grid;  // empty: a grid of one block
  int loop_label = -1;
  int64_t loop_range = 1;
  int block_threads = 128;
  std::string str(const PGraph& g) const;
};

// The device tensors a group reads (external node ids, in first-use order) and writes.
struct GroupIO {
  std::vector<int> inputs, outputs;
};
GroupIO group_io(const PGraph& g, const std::vector<int>& group);

struct ScheduleOptions {
  int max_grid_dims = 3;
  int64_t max_blocks = 1 << 16;
  int max_schedules = 20000;  // per group
  std::vector<int> block_threads = {128, 256};
};
// Every schedule of a group that respects the labels (gridded labels appear in every output
// and are not reduced in the group, except the split label of a partial group, which is gridded
// exactly split_parts ways; ambiguous labels are neither gridded nor looped; loop ranges and grid
// parts are divisors). Deterministic order.
std::vector<Schedule> enumerate_schedules(const PGraph& g, const std::vector<int>& group,
                                          const ScheduleOptions& opt);

// Why a lowering was rejected.
enum class LowerFailure : uint8_t {
  None,
  Stage,     // a loop-body tile meets a post-loop tile, or a loop tile is saved unmapped
  Map,       // a reduction over a gridded label, an output missing a gridded label, bad tiles
  Resource,  // shared memory or registers exceed the target (BlockGraphBuilder::finish)
  Ops,       // more block ops than allowed
};
const char* lower_failure_name(LowerFailure f);

struct Lowered {
  LowerFailure failure = LowerFailure::None;
  std::string message;                      // the builder's diagnostic when it failed
  std::shared_ptr<const BlockGraph> block;  // when it succeeded
};
// Lowers one group under one schedule into a block graph checked against `target`.
Lowered lower_group(const PGraph& g, const std::vector<int>& group, const Schedule& s,
                    const Target& target, int max_block_ops = 64);
// Re-emits an unfused block graph (inputs, compute ops, savers) with the lowering's thread-level
// fusion (single-use elementwise producers fold into their elementwise consumer, constants into
// every elementwise consumer), checked by finish(target).
Lowered fuse_block(const BlockGraph& bg, const Target& target, int max_block_ops = 64);

// ---------------------------------------------------------------------------------------------
// Assembly.

// One kernel of a candidate: either a graph-defined block graph for a group, or a predefined
// op (a group of one node, block == nullptr).
struct KernelChoice {
  std::vector<int> group;
  std::shared_ptr<const BlockGraph> block;
};
// Whether node n can be its own predefined kernel: not a partial, and either the kernel-level
// dtype rule applied to its inputs' device dtypes gives its own device dtype, or n is an
// intermediate that expand_spec widened to f32 (its kernel states that dtype).
bool predefined_ok(const PGraph& g, int n);
// Builds the μGraph of a partition with one choice per group, through KernelGraphBuilder.
KernelGraph assemble(const PGraph& g, const std::vector<KernelChoice>& kernels, Arch arch);
// One kernel alone, as the search costs a choice: a graph of the group's input tensors (and, for
// a predefined op, its constants) and that kernel, whose outputs are the graph's.
KernelGraph kernel_alone(const PGraph& g, const KernelChoice& kc, Arch arch);

// A canonical fingerprint of a μGraph: equal for graphs that differ only in names.
std::string fingerprint(const KernelGraph& g);

}  // namespace kiln::search
