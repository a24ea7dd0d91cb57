// Shrinking a pair of graphs to a smaller instance of the same structure, so that verifying a
// candidate for a 1024x8192x8192 matmul costs milliseconds, not minutes.
//
// Every tensor dim and every block-graph tile dim of both graphs is a *slot*. Slots that must
// have the same extent for the graphs to type-check are unified into one *symbolic dim* (a
// class): matmul inner dims, broadcast-aligned dims of equal extent, the dims an op keeps, a
// tile dim and the device dim it is cut from, an output tile and the dims it is saved to, the
// inputs of the two graphs by name and their outputs by position. A class's *unit* u is the gcd
// of the extents of all its slots, so every slot is a whole number of units and every tile of
// every block graph starts at a unit boundary: the index i along a class splits into (i / u,
// i % u), the structure (grid, loop, maps, which tile an element lands in) acts on i / u only,
// and every op treats the offsets i % u alike. Scaling replaces u by a smaller u' in every slot
// of the class: grid extents, loop ranges and every map stay as they are, tiles shrink. The
// shrunk instance computes the full one restricted to offsets < u' within each unit;
// docs/verifier.md argues when that preserves (in)equivalence.
//
// Prefix cutting (ScaleOptions::prefix) also reduces the number of units of a class with many:
// where, in every block graph, one grid dim (else one loop dim) partitions the class and nothing
// else, that dim is divided by h (keeping >= 2 blocks or iterations); where nothing partitions
// it, its tiles shrink h-fold. The instance is then the full one restricted to the first U/h
// units, which the same block-to-unit assignment covers; it rescues candidates whose tiles are
// 1 wide along a huge dim (a block per row), where the unit is 1.
//
// Counts: mean and rms_norm keep dividing by their full-size count in the shrunk instance
// (Attrs::count), and no constant is touched, so the instance is exactly the full one with the
// offsets >= u' deleted from every reduction (docs/verifier.md has the argument).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/interp/eval_core.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln::verifier {

// Rebuilds g through KernelGraphBuilder and BlockGraphBuilder from its non-derived fields
// (input shapes and dtypes, ops, attrs, block graph grids, loops, maps and thread graphs),
// re-deriving every shape and stage and re-checking every invariant. Throws UserError where the
// builders do. Used to scale graphs and to build mutants.
KernelGraph rebuild_graph(const KernelGraph& g);

// An estimate of the element operations one evaluation of g costs (matmul: m*n*k MACs; block
// graphs: blocks x iterations x tile work). Saturates at 2^62.
double estimate_work(const KernelGraph& g);
double estimate_op_work(const KernelGraph& g, size_t op);
// The same for a partial evaluation (blocks and rows that the plan runs).
double estimate_work(const KernelGraph& g, const interp::EvalPlan& plan);

struct DimScale {
  int64_t unit = 1, scaled_unit = 1;  // full index i <-> (i / unit) * scaled_unit + i % unit
};

struct ScaledPair {
  KernelGraph a, b;
  bool scaled = false;                          // some class shrank
  std::vector<std::vector<DimScale>> out_dims;  // per output position, per dim
  std::string description;  // "[4096 -> 128 (u 128 -> 4)] ...", one entry per shrunk class

  // The full-size multi-index of an element of the scaled output `output`.
  std::vector<int64_t> full_index(int output, const std::vector<int64_t>& scaled) const;
};

struct ScaleOptions {
  int64_t unit = 4;     // u' for every class whose unit is larger
  bool prefix = false;  // also cut the number of units (see below)
};

// Scales a and b together (their inputs must agree by name and their outputs by position in
// shape; verify() checks that first). With nothing to shrink, returns copies and scaled = false.
ScaledPair scale_pair(const KernelGraph& a, const KernelGraph& b, const ScaleOptions& opt = {});

}  // namespace kiln::verifier
