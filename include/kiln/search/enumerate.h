// Op-by-op block-graph enumeration (Mirage-style), pruned by abstract expressions.
//
// The lowering of generator.h turns a group's primitive ops into one block graph per schedule.
// This enumerator instead *builds* block graphs for a group one op at a time, from a vocabulary
// of block ops derived from the whole spec (every primitive op kind of the variant with its
// attributes, reductions also with keepdim, and the accumulators accum_sum / accum_max when the
// schedule has a loop), over the tiles the group is fed (one input iterator per tensor that
// crosses the group's boundary, imaps and fmaps from the schedule's labels, plus the group's
// constants). Each state is a partial block graph:
//   - a new op is generated only in canonical order (see below), and never twice with the same
//     kind, attributes and operands (common subexpressions are not duplicated);
//   - its shape, dtype and stage are checked by BlockGraphBuilder (failures: "shape", "stage");
//   - its abstract expression (absexpr.h) must be a subexpression of the spec's outputs under
//     the axioms (prune.h: syntactic fast path, then Z3); a proof of the contrary prunes it,
//     reason "absexpr";
//   - the same against the group's own outputs (every op of a complete graph feeds a saver),
//     reason "absexpr_group" (fast path only);
//   - an op whose expression equals (canonical form) one already in the graph is "redundant".
// A state is complete when, for every output of the group, some tile's canonical expression
// equals the output node's; its savers are then added with the lowering's omaps and the graph
// must pass BlockGraphBuilder::finish(target). A complete graph with an op no saver depends on
// is dropped ("dead": the same graph without it is generated too). Complete graphs are not
// extended. The verifier remains the final judge of every candidate.
//
// Canonical order: an op's key is (vocabulary index, operand op indices). A sequence is
// generated only if every op placed after the point where a new op's operands all exist has a
// smaller key than the new op: of the topological orders of one DAG, only the one that always
// places the smallest ready op first is generated.
//
// The search is iterative deepening on the number of compute ops (1..max_ops), so the smallest
// complete graphs are met first, under a state budget; everything is deterministic.
//
// What is enumerated depends only on which labels the grid partitions and which the loop walks
// (tile extents only change counts, and `sum(a, sum(b, x)) = sum(ab, x)`), so the result is a
// list of *recipes* that instantiate() replays on any schedule of the same class.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/ir/block_graph.h"
#include "kiln/search/absexpr.h"
#include "kiln/search/generator.h"

namespace kiln::search {

class Pruner;

// One op of the vocabulary.
struct VocabOp {
  OpKind kind;
  Attrs attrs;
  bool operator==(const VocabOp&) const = default;
  std::string str() const;  // "mul", "sum(dim 1, keepdim 0)"
};
// The vocabulary for a variant (loop: whether the schedule has a loop). Fixed order.
std::vector<VocabOp> block_vocabulary(const PGraph& g, bool loop);

// A complete enumerated block graph, schedule-independent: the ops after the fed inputs and
// constants (operands index the builder's ops) and, per group output, the tile it saves.
struct BlockRecipe {
  struct Op {
    VocabOp op;
    std::vector<int> inputs;
  };
  std::vector<Op> ops;
  std::vector<int> saves;  // per GroupIO::outputs
  std::string str() const;
};

// One enumerated state, for traces: its parent (index into EnumResult::states_log, -1 for the
// start), the op it added (an index into EnumResult::vocab, and its operands), and why it was
// pruned ("" if it was not). Kept as numbers: a trace holds hundreds of thousands of them.
struct EnumState {
  int parent = -1;
  int vocab = -1;
  std::vector<int> inputs;
  std::string_view pruned;  // a reason name (static storage)
  bool complete = false;    // a complete block graph
  // "mul(0, 1)", with " -> complete" for a complete one.
  std::string detail(const std::vector<VocabOp>& vocab) const;
};

struct EnumOptions {
  int max_ops = 8;             // compute ops added to the fed tiles (savers not counted)
  int64_t max_states = 1500;   // states per enumeration (one group, one schedule class)
  int max_results = 8;         // complete recipes kept
  std::vector<VocabOp> extra;  // extra vocabulary (tests: an op the spec lacks)
  bool record_states = true;   // fill EnumResult::states (for the trace)
  // Also require every tile to be a subexpression of one of the *group's* outputs (reason
  // "absexpr_group"; fast path only, no Z3). Sound for complete graphs without dead ops: each
  // op feeds a saver, so its expression is a subexpression of that saver's.
  bool group_roots = true;
};

struct EnumResult {
  std::vector<BlockRecipe> recipes;       // in the order found
  std::map<std::string, int64_t> pruned;  // by reason
  int64_t states = 0;                     // states generated (pruned ones included)
  int64_t out_of_order = 0;               // extensions not generated because of the canonical order
  int64_t cse = 0;                        // extensions not generated: same op on the same operands
  bool budget_hit = false;                // max_states reached or stop() said so
  std::vector<VocabOp> vocab;             // the vocabulary enumerated from (EnumState::vocab)
  std::vector<EnumState> states_log;
};

// The fewest compute ops the lowering of `group` would need under a schedule with a loop or
// not (its ops plus an accumulator per reduction): a cheap lower bound for skipping groups.
int group_op_count(const PGraph& g, const std::vector<int>& group, bool loop);

// Enumerates block graphs for `group` under the class of schedule `s`. exprs: the abstract
// expression of every node of g (the targets are the group outputs'). pruner may be null (no
// absexpr pruning). stop() is polled every state.
EnumResult enumerate_block_graphs(const PGraph& g, const std::vector<int>& group, const Schedule& s,
                                  const std::vector<AbsExpr>& exprs, Pruner* pruner,
                                  const Target& target, const EnumOptions& opt,
                                  const std::function<bool()>& stop = {});

// Replays a recipe on schedule s (same class as the one it was found on), adds the savers,
// checks with finish(target), then applies the lowering's thread-level fusion (fuse_block).
Lowered instantiate(const PGraph& g, const std::vector<int>& group, const Schedule& s,
                    const BlockRecipe& r, const Target& target, int max_block_ops);

}  // namespace kiln::search
