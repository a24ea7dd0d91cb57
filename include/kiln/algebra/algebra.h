// The algebra pass (issue 17): which kernel graph to compute, before the μGraph search decides
// how. One entry point, rewrite(): load the written graph into an e-graph (egraph.h), saturate it
// with the rules (rules.h) under explicit limits, and extract a few distinct graphs: the one the
// cost below finds cheapest and structurally different ones near it, with the graph as written
// always first (docs/algebra.md). The search verifies each against the spec before any of its
// candidates can rank (search.cpp) and explores them all (docs/search.md, docs/algebra.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/algebra/egraph.h"
#include "kiln/algebra/rules.h"
#include "kiln/ir/deadline.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln::algebra {

// A graph of primitive predefined ops (the search's primitive graph without splits): what the
// pass reads and writes. Nodes are topological; inputs and outputs are node ids; every node keeps
// the dtype it is stored in.
struct TermNode {
  OpKind kind = OpKind::Input;
  Attrs attrs;
  std::vector<int> inputs;
  Shape shape;
  DType dtype = DType::F32;
  std::string name;
};
struct TermGraph {
  std::string name, doc;
  std::vector<TermNode> nodes;
  std::vector<int> inputs, outputs;
};
// A kernel graph of predefined ops as a term graph (every tensor's dtype kept). Throws
// InternalError on a graph-defined op.
TermGraph term_graph(const KernelGraph& g);
// The graph as a kernel graph of predefined ops (each node one op, its dtype explicit), for the
// verifier and the trace. Throws UserError when a node does not type.
KernelGraph to_kernel_graph(const TermGraph& g, Arch arch = Arch::Sm90a);

struct Limits {
  int max_iterations = 8;
  size_t max_nodes = 4000;  // e-nodes; at least twice the written graph's are always allowed
  double max_seconds = 2.0;
  Deadline deadline;  // the caller's, when it comes earlier
};
enum class Stop : uint8_t { Saturated, IterationLimit, NodeLimit, TimeLimit };
const char* stop_name(Stop s);

struct IterationStats {
  size_t matches = 0, applied = 0, nodes = 0, classes = 0;
  double seconds = 0;
};
struct SaturationReport {
  Stop stop = Stop::Saturated;
  std::vector<IterationStats> iterations;
  size_t nodes = 0, classes = 0;
  double seconds = 0;
  std::map<std::string, int64_t> applied;  // unions made, by rule
};
// Runs the rules to a fixed point or a limit. Deterministic for the same graph and limits unless
// the time limit stops it.
SaturationReport saturate(EGraph& g, const Limits& limits,
                          const std::vector<Rule>& rules = all_rules());

// The extraction cost of one op, in modeled microseconds on an H100: bytes at the copy rate, a
// matmul's flops at the tensor-core (16-bit operands) or FMA rate, plus a per-op overhead, so
// that fewer ops win ties. A transpose costs half its bytes (the emitter reads many in place).
double op_cost(OpKind kind, const Shape& out, DType out_dtype, const std::vector<Shape>& in,
               const std::vector<DType>& in_dtypes);

struct Extracted {
  TermGraph graph;
  double cost_us = 0;                 // op_cost summed over the graph's ops
  std::vector<std::string> rewrites;  // "rule at A, B": the nodes each rule made
  std::vector<std::string> rules;     // the rules used, sorted, each once
  bool as_written = false;
};
struct AlgebraOptions {
  Limits limits;
  int max_graphs = 4;  // the graph as written included
  // Graphs modeled at most this many times the written one's cost are kept: op_cost is coarse
  // (it knows nothing of fusion), and the search's cost model decides among them.
  double max_cost_ratio = 1.5;
  const std::vector<Rule>* rules = nullptr;  // nullptr: all_rules()
  // Keep extracted graphs that cost more than the written one too (tests of the rules).
  bool keep_costlier = false;
};
struct AlgebraResult {
  SaturationReport saturation;
  size_t initial_nodes = 0;
  // graphs[0] is the graph as written; the others, cheapest first (op_cost), each different
  // from every other and modeled at most max_cost_ratio times the written one.
  std::vector<Extracted> graphs;
  double seconds = 0;           // the whole pass
  std::string summary() const;  // one line: stop reason, nodes, iterations, graphs, time
};
AlgebraResult rewrite(const TermGraph& g, const AlgebraOptions& opt);

// Indices of `rule_sets` (one per candidate graph, in order of preference) with each graph that
// uses a set of rules not seen before first, then the others, each group in the given order: the
// bases should differ in what they compute, not only in where a scale sits.
std::vector<size_t> new_rules_first(const std::vector<std::vector<std::string>>& rule_sets);

}  // namespace kiln::algebra
