// Abstract-expression pruning: is a tensor's abstract expression a subexpression of the spec's?
//
// Mirage's pruning (OSDI'25 §4.3): a partial μGraph can only grow into one equivalent to the spec
// if every tensor it computes is, as an abstract expression (absexpr.h), a subexpression of the
// spec's output expression under a set of axioms (commutativity, associativity, distributivity,
// division and summation rules, and the subexpression rules). A Pruner holds the spec's output
// expressions and answers that question for candidate expressions:
//   1. a cache keyed by expression ids;
//   2. a fast path: a canonical form (AC-flattened, sums folded, divisions lifted) looked up in
//      a precomputed set of known subexpressions of the spec (Yes), and two cheap models of the
//      axioms in which the relation fails (No): the set of inputs, constants and non-polynomial
//      functions used, and a polynomial model (docs/pruning.md proves both sound);
//   3. Z3, for what is left: the axioms as quantified formulas over an uninterpreted sort, one
//      incremental solver holding them and the spec's expressions, a push/pop per query, and a
//      timeout per query.
// Pruning must never drop a candidate that can lead to the spec, so only a proof of "not a
// subexpression" prunes: Z3 timeouts and "unknown" keep the candidate (Verdict::Unknown).
// All methods are thread-safe (one lock per Pruner; the fast path is short).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/ir/kernel_graph.h"
#include "kiln/search/absexpr.h"

namespace kiln::search {

enum class Verdict : uint8_t {
  No,       // proven not a subexpression: prune
  Yes,      // proven a subexpression
  Unknown,  // undecided (Z3 timeout, or Z3 disabled): keep
};
const char* verdict_name(Verdict v);

// Who decided a query.
enum class DecidedBy : uint8_t {
  Cache,
  Syntax,      // canonical form found among the spec's known subexpressions (or equal forms)
  Atoms,       // uses an input, constant or function the target lacks
  Polynomial,  // the polynomial model refutes it
  Z3,          // Z3 proved it (Yes) or found a counter-model (No)
  Z3Unknown,   // Z3 timed out or gave up
  Disabled,    // neither the fast path nor Z3 could decide (Z3 off, or its budget spent)
};
const char* decided_by_name(DecidedBy d);

struct Answer {
  Verdict verdict = Verdict::Unknown;
  DecidedBy by = DecidedBy::Disabled;
};

struct PrunerOptions {
  // Expressions deeper than this are Unknown (keep) and a spec deeper than this prunes nothing:
  // the canonical forms and the models recurse over the expression, and a 100,000-node chain
  // overflowed the stack. Pruning only saves work, so keeping is always sound.
  uint32_t max_depth = 2000;
  bool fast_path = true;      // the syntactic and model checks before Z3
  bool use_z3 = true;         // ask Z3 what the fast path leaves open (else Unknown)
  unsigned timeout_ms = 200;  // per Z3 query; a timeout answers Unknown (keep)
  // Total Z3 time per Pruner; once spent, what the fast path leaves open is Unknown (keep)
  // without asking Z3. Queries Z3 cannot settle run to the timeout, and a search may ask many.
  double z3_budget_ms = 30000;
  // Expressions bigger than this (DAG nodes of the canonical form), or with an add or mul of
  // more than z3_max_arity operands, are not sent to Z3: with many terms, associativity and
  // commutativity make e-matching explode, and Z3 overshoots its timeout by seconds. They stay
  // Unknown (keep).
  size_t z3_max_nodes = 32;
  size_t z3_max_arity = 4;
  // Z3's deterministic resource limit per query (0: none). Unlike the timeout it does not
  // depend on machine load, and Z3 honours it promptly; 300k is about 50-150 ms of e-matching.
  // The timeout stays as a wall-clock backstop.
  unsigned z3_rlimit = 300000;
  // Every constant but 1 is one symbol κ (so 1/n and n, or 1e-6 and 1e-5, are not told apart),
  // with div(x, κ) = mul(x, κ). A coarser abstraction: never prunes more, robust to how a
  // generator spells a scale. Off: constants are distinct symbols by value.
  bool merge_constants = true;
  // Also assert the subexpression axioms in their textbook form (reflexive, transitive,
  // x ⊑ f(x, y) for every f) next to the goal-directed form the prover relies on. Same answers,
  // slower; for tests that the two agree.
  bool textbook_axioms = false;
  size_t max_closure = 200000;  // cap on the fast path's set of known subexpressions of the spec
  size_t max_expand = 16;       // distribute mul over add only up to this many product terms
  size_t max_monomials = 512;   // the polynomial model gives up on bigger polynomials
};

struct PrunerStats {
  int64_t queries = 0;     // check/subexpr/equivalent calls
  int64_t cache_hits = 0;  // answered from the cache
  int64_t syntax_yes = 0;  // fast path: canonical form known to be a subexpression
  int64_t atoms_no = 0;    // fast path: refuted by the atom sets
  int64_t poly_no = 0;     // fast path: refuted by the polynomial model
  int64_t z3_calls = 0, z3_yes = 0, z3_no = 0, z3_unknown = 0;
  int64_t z3_skipped = 0;           // left Unknown: Z3 budget spent or expression too big
  double z3_ms = 0, z3_max_ms = 0;  // wall time inside Z3's check()
  double fast_ms = 0;               // wall time in the fast path (misses included)
  size_t closure_size = 0;          // known subexpressions of the spec
  int64_t fast_answers() const { return syntax_yes + atoms_no + poly_no; }
  std::string str() const;  // one line, for logs and reports
};

class Pruner {
 public:
  // roots: the spec's output expressions. A query asks whether an expression is a subexpression
  // of at least one of them.
  explicit Pruner(std::vector<AbsExpr> roots, PrunerOptions opt = {});
  // The roots are the abstract expressions of spec's outputs, plus `equal_roots`: outputs of
  // programs exactly equal to the spec that the axioms cannot relate to it (a cancelled
  // normalization shift, generator.h). More roots only ever keep more, so they must be equal to
  // the spec for the search to stay focused, never for soundness (the verifier decides that).
  static Pruner for_spec(const KernelGraph& spec, PrunerOptions opt = {},
                         std::vector<AbsExpr> equal_roots = {});
  Pruner(Pruner&&) noexcept;
  Pruner& operator=(Pruner&&) noexcept;
  ~Pruner();

  // Is e a subexpression of a root under the axioms? Never No for a subexpression.
  Answer query(AbsExpr e);
  Verdict check(AbsExpr e) { return query(e).verdict; }
  // The search's question: false only when e is proven not to be a subexpression.
  bool keep(AbsExpr e) { return check(e) != Verdict::No; }

  // The relation between two arbitrary expressions (tests, diagnostics): a ⊑ b, and a = b,
  // under the same axioms. Cached; Z3 answers them on the same solver (push/pop).
  Answer subexpr(AbsExpr a, AbsExpr b);
  Answer equivalent(AbsExpr a, AbsExpr b);

  const std::vector<AbsExpr>& roots() const;
  const PrunerOptions& options() const;
  PrunerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The canonical form of the fast path (docs/pruning.md): equal to e under the axioms, with add
// and mul flattened and sorted, sums folded and moved outwards over products, divisions lifted
// to the top of products, products distributed over sums (up to opt.max_expand terms) and, with
// opt.merge_constants, constants merged. canonical(a) == canonical(b) proves a = b (the
// converse does not hold).
AbsExpr canonical(AbsExpr e, const PrunerOptions& opt = {});

}  // namespace kiln::search
