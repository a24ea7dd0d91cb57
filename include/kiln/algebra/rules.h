// The rewrite rules of the kernel-graph algebra (docs/algebra.md lists them with their laws).
//
// A rule looks at one e-node of one class and proposes matches: a right-hand side (new nodes over
// existing classes) equal to that class. Rules are sound in the reals; where a law holds only for
// some values (a constant folded exactly, a shift constant along the summed dim) the rule checks
// it. The verifier proves every extracted graph against the spec anyway (search.cpp), and each
// rule's test proves an instance of it (tests/algebra/rules_test.cpp).
//
// Dtypes: the node a match makes equal to its class is stored as that class is; every other new
// node is float32 (an intermediate the written graph did not have: its range is not the written
// one's, so it must not be rounded to 16 bits).
#pragma once

#include <string>
#include <vector>

#include "kiln/algebra/egraph.h"

namespace kiln::algebra {

// A node of a right-hand side: kids are classes (>= 0) or earlier nodes of the same side
// (rhs_ref(k) for the k-th).
struct RNode {
  OpKind kind;
  DType dtype;
  std::vector<int64_t> kids;
  Attrs attrs;
};
constexpr int64_t rhs_ref(int k) {
  return -1 - k;
}

struct Match {
  ClassId target = 0;
  std::vector<RNode> rhs;  // its last node equals `target`; empty: `same` does
  ClassId same = 0;
  std::string rule;
};

struct Rule {
  const char* name;
  const char* law;  // the equation, in words (docs/algebra.md, `kiln` trace lines)
  // Appends the matches of node n of class c.
  void (*find)(const EGraph& g, ClassId c, const ENode& n, std::vector<Match>& out);
};

// Every rule, in a fixed order.
const std::vector<Rule>& all_rules();
const Rule* rule_named(const std::string& name);

// Builds m's right side and merges it into its target. False when it changes nothing, or is
// refused: a side that does not type (infer_op_shape), or one whose shape or dtype is not the
// target's.
bool apply_match(EGraph& g, const Match& m);

}  // namespace kiln::algebra
