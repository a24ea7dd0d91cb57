// The Pruner: cache, fast path, then Z3 (prune.h).
#include "kiln/search/prune.h"

#include <chrono>
#include <mutex>
#include <unordered_set>

#include "kiln/ir/diag.h"
#include "prune_internal.h"

namespace kiln::search {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::No:
      return "no";
    case Verdict::Yes:
      return "yes";
    case Verdict::Unknown:
      return "unknown";
  }
  return "?";
}

const char* decided_by_name(DecidedBy d) {
  switch (d) {
    case DecidedBy::Cache:
      return "cache";
    case DecidedBy::Syntax:
      return "syntax";
    case DecidedBy::Atoms:
      return "atoms";
    case DecidedBy::Polynomial:
      return "polynomial";
    case DecidedBy::Z3:
      return "z3";
    case DecidedBy::Z3Unknown:
      return "z3-unknown";
    case DecidedBy::Disabled:
      return "disabled";
  }
  return "?";
}

std::string PrunerStats::str() const {
  return fmt::format(
      "queries {} | cache hits {} | fast: syntax yes {}, atoms no {}, polynomial no {} ({:.1f} "
      "ms) | z3: {} calls, {} yes, {} no, {} unknown, {:.1f} ms (max {:.1f}), {} skipped | "
      "known subexpressions {}",
      queries, cache_hits, syntax_yes, atoms_no, poly_no, fast_ms, z3_calls, z3_yes, z3_no,
      z3_unknown, z3_ms, z3_max_ms, z3_skipped, closure_size);
}

AbsExpr canonical(AbsExpr e, const PrunerOptions& opt) {
  detail::Canon c(opt);
  return c(e);
}

namespace {

enum class Query : uint8_t { Roots, Subexpr, Equivalent };

struct CacheKey {
  Query q;
  uint32_t a, b;
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const {
    return (static_cast<size_t>(k.a) * 0x9e3779b97f4a7c15ull) ^ (static_cast<size_t>(k.b) << 2) ^
           static_cast<size_t>(k.q);
  }
};

// The widest add or mul in e.
size_t max_arity(AbsExpr e) {
  size_t m = 0;
  std::unordered_set<const AbsNode*> seen;
  std::vector<AbsExpr> stack{e};
  while (!stack.empty()) {
    AbsExpr t = stack.back();
    stack.pop_back();
    if (!seen.insert(t.node()).second) continue;
    if (t.kind() == AbsKind::Add || t.kind() == AbsKind::Mul) m = std::max(m, t.arity());
    for (AbsExpr a : t.args()) stack.push_back(a);
  }
  return m;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct Pruner::Impl {
  PrunerOptions opt;
  std::vector<AbsExpr> roots;
  std::mutex mu;
  detail::Canon canon;
  detail::AtomModel atoms;
  detail::PolyModel poly;
  std::unique_ptr<detail::KnownSubexprs> known;  // of the roots
  std::unordered_map<const AbsNode*, std::unique_ptr<detail::KnownSubexprs>> known_of;
  std::unique_ptr<detail::Z3Prover> z3;  // created on the first query that needs it
  std::unordered_map<CacheKey, Answer, CacheKeyHash> cache;
  PrunerStats stats;
  bool too_deep = false;  // some root is deeper than opt.max_depth: every answer is Unknown

  // Unknown without looking, for expressions the recursive passes must not walk.
  bool out_of_depth(std::initializer_list<AbsExpr> es) const {
    if (too_deep) return true;
    for (AbsExpr e : es)
      if (e.depth() > opt.max_depth) return true;
    return false;
  }

  Impl(std::vector<AbsExpr> r, const PrunerOptions& o)
      : opt(o), roots(std::move(r)), canon(o), atoms(o), poly(o) {
    KILN_ASSERT(!roots.empty(), "a pruner needs at least one root");
    for (AbsExpr e : roots) {
      KILN_ASSERT(!e.null(), "null root");
      too_deep |= e.depth() > opt.max_depth;
    }
    if (opt.fast_path && !too_deep) {
      known = std::make_unique<detail::KnownSubexprs>(canon, roots, opt.max_closure);
      stats.closure_size = known->size();
      for (AbsExpr e : roots) poly.add_root(e);
    }
  }

  // Z3 may be asked about these expressions: enabled, budget left, small enough.
  bool z3_allowed(std::initializer_list<AbsExpr> es) {
    if (!opt.use_z3) return false;
    bool small = true;
    for (AbsExpr e : es)
      small &= e.dag_size() <= opt.z3_max_nodes && max_arity(e) <= opt.z3_max_arity;
    if (stats.z3_ms < opt.z3_budget_ms && small) return true;
    ++stats.z3_skipped;
    return false;
  }

  detail::Z3Prover& prover() {
    if (!z3) z3 = std::make_unique<detail::Z3Prover>(opt, canonical_roots());
    return *z3;
  }

  // Z3 sees canonical forms when the fast path is on: the canonicalization has already done
  // the rewriting it would otherwise have to search for.
  std::vector<AbsExpr> canonical_roots() {
    if (!opt.fast_path) return roots;
    std::vector<AbsExpr> c;
    for (AbsExpr r : roots) c.push_back(canon(r));
    return c;
  }

  Answer from_z3(Verdict v, double ms) {
    ++stats.z3_calls;
    stats.z3_ms += ms;
    stats.z3_max_ms = std::max(stats.z3_max_ms, ms);
    if (v == Verdict::Yes) ++stats.z3_yes;
    if (v == Verdict::No) ++stats.z3_no;
    if (v == Verdict::Unknown) ++stats.z3_unknown;
    return {v, v == Verdict::Unknown ? DecidedBy::Z3Unknown : DecidedBy::Z3};
  }

  // Looks up k, else computes it with f and remembers it (also under the canonical key `ck`
  // when the fast path produced one).
  template <typename F>
  Answer cached(CacheKey k, F f) {
    ++stats.queries;
    auto it = cache.find(k);
    if (it != cache.end()) {
      ++stats.cache_hits;
      return {it->second.verdict, DecidedBy::Cache};
    }
    Answer a = f();
    cache.emplace(k, a);
    return a;
  }

  Answer roots_query(AbsExpr e) {
    AbsExpr c = e;
    if (opt.fast_path) {
      auto t0 = std::chrono::steady_clock::now();
      c = canon(e);
      Answer a = fast_roots(e, c);
      stats.fast_ms += ms_since(t0);
      if (a.by != DecidedBy::Disabled) return a;
      // Expressions with one canonical form share an answer.
      auto it = cache.find({Query::Roots, c.id(), 0});
      if (it != cache.end() && c != e) {
        ++stats.cache_hits;
        return {it->second.verdict, DecidedBy::Cache};
      }
    }
    Answer a{Verdict::Unknown, DecidedBy::Disabled};
    if (z3_allowed({c})) {
      double ms = 0;
      Verdict v = prover().subexpr_of_roots(c, &ms);
      a = from_z3(v, ms);
    }
    if (c != e) cache.emplace(CacheKey{Query::Roots, c.id(), 0}, a);
    return a;
  }

  Answer fast_roots(AbsExpr e, AbsExpr c) {
    if (known->contains(c)) {
      ++stats.syntax_yes;
      return {Verdict::Yes, DecidedBy::Syntax};
    }
    bool by_atoms = true;
    for (AbsExpr r : roots) {
      if (atoms.refutes(e, r)) continue;
      by_atoms = false;
      if (!poly.refutes(e, r)) return {Verdict::Unknown, DecidedBy::Disabled};
    }
    ++(by_atoms ? stats.atoms_no : stats.poly_no);
    return {Verdict::No, by_atoms ? DecidedBy::Atoms : DecidedBy::Polynomial};
  }

  Answer subexpr_query(AbsExpr a, AbsExpr b) {
    AbsExpr ca = a, cb = b;
    if (opt.fast_path) {
      auto t0 = std::chrono::steady_clock::now();
      ca = canon(a), cb = canon(b);
      auto& k = known_of[b.node()];
      if (!k)
        k = std::make_unique<detail::KnownSubexprs>(canon, std::vector<AbsExpr>{b},
                                                    opt.max_closure);
      Answer r{Verdict::Unknown, DecidedBy::Disabled};
      if (k->contains(ca)) {
        ++stats.syntax_yes;
        r = {Verdict::Yes, DecidedBy::Syntax};
      } else if (atoms.refutes(a, b)) {
        ++stats.atoms_no;
        r = {Verdict::No, DecidedBy::Atoms};
      } else if (poly.add_root(b), poly.refutes(a, b)) {
        ++stats.poly_no;
        r = {Verdict::No, DecidedBy::Polynomial};
      }
      stats.fast_ms += ms_since(t0);
      if (r.by != DecidedBy::Disabled) return r;
    }
    if (!z3_allowed({ca, cb})) return {Verdict::Unknown, DecidedBy::Disabled};
    double ms = 0;
    Verdict v = prover().subexpr(ca, cb, &ms);
    return from_z3(v, ms);
  }

  Answer equivalent_query(AbsExpr a, AbsExpr b) {
    AbsExpr ca = a, cb = b;
    if (opt.fast_path) {
      auto t0 = std::chrono::steady_clock::now();
      ca = canon(a), cb = canon(b);
      Answer r{Verdict::Unknown, DecidedBy::Disabled};
      if (ca == cb) {
        ++stats.syntax_yes;
        r = {Verdict::Yes, DecidedBy::Syntax};
      } else if (atoms.of(a) != atoms.of(b)) {
        ++stats.atoms_no;
        r = {Verdict::No, DecidedBy::Atoms};
      } else if (poly.distinguishes(a, b)) {
        ++stats.poly_no;
        r = {Verdict::No, DecidedBy::Polynomial};
      }
      stats.fast_ms += ms_since(t0);
      if (r.by != DecidedBy::Disabled) return r;
    }
    if (!z3_allowed({ca, cb})) return {Verdict::Unknown, DecidedBy::Disabled};
    double ms = 0;
    Verdict v = prover().equivalent(ca, cb, &ms);
    return from_z3(v, ms);
  }
};

Pruner::Pruner(std::vector<AbsExpr> roots, PrunerOptions opt)
    : impl_(std::make_unique<Impl>(std::move(roots), opt)) {}

Pruner Pruner::for_spec(const KernelGraph& spec, PrunerOptions opt,
                        std::vector<AbsExpr> equal_roots) {
  std::vector<AbsExpr> t = abstract_tensors(spec);
  std::vector<AbsExpr> roots;
  for (int id : spec.outputs) roots.push_back(t.at(id));
  for (AbsExpr& e : equal_roots) roots.push_back(e);
  return Pruner(std::move(roots), opt);
}

Pruner::Pruner(Pruner&&) noexcept = default;
Pruner& Pruner::operator=(Pruner&&) noexcept = default;
Pruner::~Pruner() = default;

Answer Pruner::query(AbsExpr e) {
  KILN_ASSERT(!e.null(), "query of a null expression");
  if (impl_->out_of_depth({e})) return {};
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->cached({Query::Roots, e.id(), 0}, [&] { return impl_->roots_query(e); });
}

Answer Pruner::subexpr(AbsExpr a, AbsExpr b) {
  KILN_ASSERT(!a.null() && !b.null(), "subexpr of a null expression");
  if (impl_->out_of_depth({a, b})) return {};
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->cached({Query::Subexpr, a.id(), b.id()},
                       [&] { return impl_->subexpr_query(a, b); });
}

Answer Pruner::equivalent(AbsExpr a, AbsExpr b) {
  KILN_ASSERT(!a.null() && !b.null(), "equivalent of a null expression");
  if (impl_->out_of_depth({a, b})) return {};
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->cached({Query::Equivalent, a.id(), b.id()},
                       [&] { return impl_->equivalent_query(a, b); });
}

const std::vector<AbsExpr>& Pruner::roots() const {
  return impl_->roots;
}
const PrunerOptions& Pruner::options() const {
  return impl_->opt;
}
PrunerStats Pruner::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace kiln::search
