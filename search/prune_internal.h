// The parts of the Pruner (prune.h), one concept each: the canonical form, the set of known
// subexpressions of the spec, the two refutation models, and the Z3 prover. Internal to
// kiln_search; docs/pruning.md explains why each is sound.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/search/absexpr.h"
#include "kiln/search/prune.h"

namespace kiln::search::detail {

// The canonical form (canonical() in prune.h). The smart constructors take canonical operands
// and return the canonical form of the operation applied to them; operator() canonicalizes any
// expression, memoized. Every rewrite is an instance of the axioms, so the result is equal to
// the input under them.
class Canon {
 public:
  explicit Canon(const PrunerOptions& opt) : opt_(opt) {}
  AbsExpr operator()(AbsExpr e);

  AbsExpr one() const { return AbsExpr::constant(1); }
  AbsExpr constant(double v) const;
  AbsExpr add(std::vector<AbsExpr> terms);
  AbsExpr mul(std::vector<AbsExpr> factors);
  AbsExpr div(AbsExpr n, AbsExpr d);
  AbsExpr sum(int64_t count, AbsExpr x);
  AbsExpr opaque(const std::string& fn, std::vector<AbsExpr> args, int64_t count);

 private:
  PrunerOptions opt_;
  std::unordered_map<const AbsNode*, AbsExpr> memo_;
};

// Known subexpressions of the roots, as canonical forms: the roots, all their (raw and canonical)
// subterms, and what the axioms make subterms of equal forms (sub-multisets of sums and
// products, a sum's body moved onto some of its factors, a quotient split over its numerator's
// terms and factors, ...). Everything in the set is provably a subexpression of a root.
class KnownSubexprs {
 public:
  KnownSubexprs(Canon& canon, const std::vector<AbsExpr>& roots, size_t cap);
  // Is the canonical expression c known to be a subexpression? Also sum(d, x) when sum(n, x)
  // is known and d divides n (the same for the max-reduction).
  bool contains(AbsExpr c) const;
  size_t size() const { return set_.size(); }
  const std::unordered_set<AbsExpr>& elements() const { return set_; }
  bool truncated() const { return truncated_; }

 private:
  void add(AbsExpr c);
  void expand(AbsExpr c);
  Canon& canon_;
  size_t cap_;
  bool truncated_ = false;
  std::unordered_set<AbsExpr> set_;
  std::vector<AbsExpr> work_;
  std::unordered_map<const AbsNode*, std::vector<int64_t>> sum_counts_, max_counts_;
};

// Model 1: the set of inputs, constants (but 1), opaque functions (but the max-reduction), exp
// and add an expression uses. Every axiom keeps it (both sides of each equation use the same set),
// and the arguments of an operation use a subset of what it uses, so a ⊑ b implies set(a) ⊆ set(b).
class AtomModel {
 public:
  explicit AtomModel(const PrunerOptions& opt) : opt_(opt) {}
  const std::vector<uint32_t>& of(AbsExpr e);  // sorted ids
  // True when e's set is not contained in root's: e ⋢ root.
  bool refutes(AbsExpr e, AbsExpr root);

 private:
  uint32_t id(const std::string& atom);
  PrunerOptions opt_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::unordered_map<const AbsNode*, std::vector<uint32_t>> memo_;
};

// Model 2: expressions as polynomials with natural coefficients over atoms, where sum(n, x) is
// σ_n·x with σ_n = Π σ_p^v_p(n) over the prime factors of n (formal counts: σ_i·σ_j = σ_ij and
// σ_1 = 1, so a sum of a sum folds, while x + x = 2x stays apart from sum(2, x)), exp(x) and
// each opaque f(x) is an atom carrying x's polynomial, and div(x, y) = x · Π_a inv_a^deg_a(y).
// A model of every axiom; its
// subexpression relation (docs/pruning.md) refutes e ⊑ root when e's polynomial is neither
// "inside" root's (e·q ≤ root coefficientwise for a monomial q), nor inside the argument of a
// function root applies, nor made of atoms root divides by (no more often than it does).
class PolyModel {
 public:
  explicit PolyModel(const PrunerOptions& opt) : opt_(opt) {}
  // Prepares a root; false if its polynomial is too big (then it refutes nothing).
  bool add_root(AbsExpr root);
  // True when e ⋢ root in the model, for root added earlier.
  bool refutes(AbsExpr e, AbsExpr root);
  // True when a and b have different values in the model, so a = b is not provable.
  bool distinguishes(AbsExpr a, AbsExpr b);

 private:
  using Mono = std::vector<std::pair<int, int>>;        // (atom, exponent > 0), sorted by atom
  using Poly = std::vector<std::pair<Mono, uint64_t>>;  // sorted by monomial, coefficients > 0
  struct Atom {
    enum Kind : uint8_t { Input, Const, Count, Exp, Fn, Inv } kind;
    std::string name;        // Input, Const, Fn; Count: the prime
    std::vector<int> polys;  // Exp, Fn: argument polynomials
    int base = -1;           // Inv: the inverted atom
    int64_t count = 0;       // Fn "max": the elements reduced (max(i, max(j, x)) folds to i·j)
  };
  struct Target {
    int poly = -1;
    std::vector<int> inner;  // argument polynomials of every function reachable
    // For each atom b, the highest exponent of inv_b in a reachable polynomial (INT_MAX when
    // inv of inv_b is reachable too): how often root may divide by b.
    std::unordered_map<int, int> den_bound;
    std::vector<std::pair<int, int64_t>> maxes;  // (argument, count) of every max reachable
  };

  int of(AbsExpr e);  // polynomial id, -1 if too big (or a coefficient overflows)
  int intern(Poly p);
  int atom(Atom a);
  int atom_poly(int atom);  // the polynomial of one atom
  int padd(int a, int b);
  int pmul(int a, int b);
  int count_monomial(int64_t n);  // σ_n
  int inverse_monomial(int p);    // Π_a inv_a^deg_a(p), as a polynomial
  bool leq(int u, int w) const;   // ∃ monomial q: u·q ≤ w coefficientwise

  PrunerOptions opt_;
  std::vector<Poly> polys_;
  std::map<Poly, int> poly_ids_;
  std::vector<Atom> atoms_;
  std::map<std::tuple<Atom::Kind, std::string, std::vector<int>, int, int64_t>, int> atom_ids_;
  std::unordered_map<const AbsNode*, int> memo_;
  std::unordered_map<const AbsNode*, Target> targets_;
  std::unordered_map<int64_t, int> counts_;  // n -> σ_n
};

// The axioms in Z3 (docs/pruning.md "Encoding"), on one incremental solver.
class Z3Prover {
 public:
  Z3Prover(const PrunerOptions& opt, const std::vector<AbsExpr>& roots);
  ~Z3Prover();
  // e ⊑ one of the roots. Yes: unsat; No: a counter-model; Unknown: timeout or gave up.
  Verdict subexpr_of_roots(AbsExpr e, double* ms);
  Verdict subexpr(AbsExpr a, AbsExpr b, double* ms);
  Verdict equivalent(AbsExpr a, AbsExpr b, double* ms);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace kiln::search::detail
