// The fast path's No side: two models of the axioms in which "subexpression" is decidable.
//
// A model is an interpretation of the sort, the functions and the subexpression predicate that
// satisfies every axiom the prover asserts. If a ⊑ b fails in one, the axioms cannot prove
// a ⊑ b, so pruning on it never drops a candidate the axioms would keep (docs/pruning.md
// "Refutation models" checks each axiom against each model).
#include <algorithm>
#include <climits>

#include "kiln/ir/diag.h"
#include "prune_internal.h"

namespace kiln::search::detail {

// ---------------------------------------------------------------------------------------------
// Model 1: atom sets.

uint32_t AtomModel::id(const std::string& atom) {
  auto [it, fresh] = ids_.emplace(atom, static_cast<uint32_t>(ids_.size()));
  return it->second;
}

const std::vector<uint32_t>& AtomModel::of(AbsExpr e) {
  auto it = memo_.find(e.node());
  if (it != memo_.end()) return it->second;
  std::vector<uint32_t> s;
  for (AbsExpr a : e.args()) {
    const std::vector<uint32_t>& t = of(a);
    s.insert(s.end(), t.begin(), t.end());
  }
  switch (e.kind()) {
    case AbsKind::Input:
      s.push_back(id("input " + e.name()));
      break;
    case AbsKind::Const:
      // 1 is not an atom: mul(x, 1) = x removes it. Merged constants are one atom κ.
      if (e.value() == 1.0) break;
      s.push_back(id(opt_.merge_constants || e.is_any_constant()
                         ? std::string("κ")
                         : fmt::format("const {}", e.value())));
      break;
    case AbsKind::Add:
      s.push_back(id("add"));
      break;
    case AbsKind::Exp:
      s.push_back(id("exp"));
      break;
    case AbsKind::Opaque:
      // Not the max-reduction: max(1, x) = x removes it, as sum(1, x) = x removes sum.
      if (e.count() == 0) s.push_back(id("fn " + e.name()));
      break;
    default:
      // mul, div and sum are not atoms: mul(x, 1) = x, div(x, κ) = mul(x, κ) and sum(1, x) = x
      // remove them.
      break;
  }
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return memo_.emplace(e.node(), std::move(s)).first->second;
}

bool AtomModel::refutes(AbsExpr e, AbsExpr root) {
  const std::vector<uint32_t>& a = of(e);
  const std::vector<uint32_t>& b = of(root);
  return !std::includes(b.begin(), b.end(), a.begin(), a.end());
}

// ---------------------------------------------------------------------------------------------
// Model 2: polynomials with natural coefficients.

namespace {

using Mono = std::vector<std::pair<int, int>>;

Mono mono_mul(const Mono& a, const Mono& b) {
  Mono r;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a[i].first < b[j].first)) {
      r.push_back(a[i++]);
    } else if (i == a.size() || b[j].first < a[i].first) {
      r.push_back(b[j++]);
    } else {
      r.emplace_back(a[i].first, a[i].second + b[j].second);
      ++i, ++j;
    }
  }
  return r;
}

// q = w / m if m divides w.
bool mono_div(const Mono& w, const Mono& m, Mono& q) {
  q.clear();
  size_t j = 0;
  for (const auto& [a, e] : w) {
    if (j < m.size() && m[j].first < a) return false;  // m has an atom w lacks
    int k = e;
    if (j < m.size() && m[j].first == a) {
      if (m[j].second > e) return false;
      k = e - m[j].second;
      ++j;
    }
    if (k > 0) q.emplace_back(a, k);
  }
  return j == m.size();
}

// Coefficients are bounded well below 2^64 so that sums of them cannot overflow unnoticed;
// a polynomial with a bigger one is "too big" and refutes nothing.
constexpr uint64_t kMaxCoeff = uint64_t(1) << 62;

template <typename P>
bool normalize(P& r) {  // sorts by monomial and adds up equal ones; false on overflow
  std::sort(r.begin(), r.end());
  size_t k = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (k > 0 && r[k - 1].first == r[i].first) {
      r[k - 1].second += r[i].second;
      if (r[k - 1].second > kMaxCoeff) return false;
    } else {
      if (k != i) r[k] = std::move(r[i]);  // (a self-move would empty the monomial)
      ++k;
    }
  }
  r.resize(k);
  return true;
}

}  // namespace

int PolyModel::intern(Poly p) {
  auto it = poly_ids_.find(p);
  if (it != poly_ids_.end()) return it->second;
  int id = static_cast<int>(polys_.size());
  polys_.push_back(p);
  poly_ids_.emplace(std::move(p), id);
  return id;
}

int PolyModel::atom(Atom a) {
  auto key = std::make_tuple(a.kind, a.name, a.polys, a.base, a.count);
  auto it = atom_ids_.find(key);
  if (it != atom_ids_.end()) return it->second;
  int id = static_cast<int>(atoms_.size());
  atoms_.push_back(std::move(a));
  atom_ids_.emplace(std::move(key), id);
  return id;
}

int PolyModel::atom_poly(int a) {
  return intern(Poly{{Mono{{a, 1}}, 1}});
}

int PolyModel::padd(int a, int b) {
  if (a < 0 || b < 0) return -1;
  Poly r = polys_[a];
  r.insert(r.end(), polys_[b].begin(), polys_[b].end());
  if (!normalize(r) || r.size() > opt_.max_monomials) return -1;
  return intern(std::move(r));
}

int PolyModel::pmul(int a, int b) {
  if (a < 0 || b < 0) return -1;
  const Poly &p = polys_[a], &q = polys_[b];
  if (p.size() * q.size() > opt_.max_monomials * 8) return -1;
  Poly r;
  r.reserve(p.size() * q.size());
  for (const auto& [x, cx] : p)
    for (const auto& [y, cy] : q) {
      if (cx > kMaxCoeff / cy) return -1;
      r.emplace_back(mono_mul(x, y), cx * cy);
    }
  if (!normalize(r) || r.size() > opt_.max_monomials) return -1;
  return intern(std::move(r));
}

int PolyModel::count_monomial(int64_t count) {
  auto it = counts_.find(count);
  if (it != counts_.end()) return it->second;
  int64_t n = count;
  Mono m;
  for (int64_t p = 2; p * p <= n; ++p) {
    int e = 0;
    while (n % p == 0) n /= p, ++e;
    if (e > 0) m.emplace_back(atom(Atom{Atom::Count, std::to_string(p), {}, -1, 0}), e);
  }
  if (n > 1) m.emplace_back(atom(Atom{Atom::Count, std::to_string(n), {}, -1, 0}), 1);
  std::sort(m.begin(), m.end());
  int id = intern(Poly{{m, 1}});
  counts_.emplace(count, id);
  return id;
}

int PolyModel::inverse_monomial(int p) {
  if (p < 0) return -1;
  std::map<int, int> deg;  // atom -> highest exponent in p
  for (const auto& [m, k] : polys_[p])
    for (const auto& [a, e] : m) deg[a] = std::max(deg[a], e);
  Mono inv;
  for (const auto& [a, e] : deg) {
    // With merged constants div(x, κ) = mul(x, κ), so κ is its own inverse here.
    bool kappa = atoms_[a].kind == Atom::Const && atoms_[a].name == "κ";
    inv.emplace_back(kappa ? a : atom(Atom{Atom::Inv, {}, {}, a, 0}), e);
  }
  std::sort(inv.begin(), inv.end());
  return intern(Poly{{inv, 1}});
}

int PolyModel::of(AbsExpr e) {
  auto it = memo_.find(e.node());
  if (it != memo_.end()) return it->second;
  std::vector<int> a;
  bool too_big = false;
  for (AbsExpr x : e.args()) {
    a.push_back(of(x));
    too_big |= a.back() < 0;
  }
  int r = -1;
  if (!too_big) switch (e.kind()) {
      case AbsKind::Input:
        r = atom_poly(atom(Atom{Atom::Input, e.name(), {}, -1, 0}));
        break;
      case AbsKind::Const:
        if (e.value() == 1.0)
          r = intern(Poly{{Mono{}, 1}});
        else
          r = atom_poly(
              atom(Atom{Atom::Const,
                        opt_.merge_constants || e.is_any_constant() ? std::string("κ")
                                                                    : fmt::format("{}", e.value()),
                        {},
                        -1,
                        0}));
        break;
      case AbsKind::Add:
        r = a[0];
        for (size_t i = 1; i < a.size(); ++i) r = padd(r, a[i]);
        break;
      case AbsKind::Mul:
        r = a[0];
        for (size_t i = 1; i < a.size(); ++i) r = pmul(r, a[i]);
        break;
      case AbsKind::Div:
        r = pmul(a[0], inverse_monomial(a[1]));
        break;
      case AbsKind::Exp:
        r = atom_poly(atom(Atom{Atom::Exp, {}, {a[0]}, -1, 0}));
        break;
      case AbsKind::Sum:
        r = pmul(a[0], count_monomial(e.count()));
        break;
      case AbsKind::Opaque: {
        if (e.name() == "max" && e.count() > 0) {
          // max(1, x) = x and max(i, max(j, x)) = max(i·j, x): counts of nested maxes multiply.
          const Poly& p = polys_[a[0]];
          int inner = p.size() == 1 && p[0].second == 1 && p[0].first.size() == 1 &&
                              p[0].first[0].second == 1
                          ? p[0].first[0].first
                          : -1;
          if (e.count() == 1) {
            r = a[0];
          } else if (inner >= 0 && atoms_[inner].kind == Atom::Fn && atoms_[inner].count > 0) {
            int64_t n;
            if (!__builtin_mul_overflow(atoms_[inner].count, e.count(), &n))
              r = atom_poly(atom(Atom{Atom::Fn, "max", atoms_[inner].polys, -1, n}));
          } else {
            r = atom_poly(atom(Atom{Atom::Fn, "max", {a[0]}, -1, e.count()}));
          }
          break;
        }
        if ((e.name() == "maximum" || e.name() == "minimum") && a.size() == 2 &&
            polys_[a[1]] < polys_[a[0]])
          std::swap(a[0], a[1]);  // commutative
        r = atom_poly(atom(Atom{Atom::Fn, e.name(), a, -1, 0}));
        break;
      }
    }
  memo_.emplace(e.node(), r);
  return r;
}

bool PolyModel::leq(int u, int w) const {
  const Poly &U = polys_[u], &W = polys_[w];
  auto coeff = [&](const Mono& m) -> uint64_t {
    auto it = std::lower_bound(W.begin(), W.end(), m,
                               [](const auto& t, const Mono& k) { return t.first < k; });
    return it != W.end() && it->first == m ? it->second : 0;
  };
  Mono q;
  for (const auto& [wm, wk] : W) {
    if (wk < U[0].second || !mono_div(wm, U[0].first, q)) continue;
    bool all = true;
    for (size_t i = 1; i < U.size() && all; ++i)
      all = coeff(mono_mul(U[i].first, q)) >= U[i].second;
    if (all) return true;
  }
  return false;
}

bool PolyModel::add_root(AbsExpr root) {
  if (targets_.count(root.node())) return targets_[root.node()].poly >= 0;
  Target t;
  t.poly = of(root);
  if (t.poly >= 0) {
    std::vector<bool> seen(atoms_.size(), false);
    std::vector<int> polys{t.poly}, stack;
    auto push_poly = [&](int p) {
      for (const auto& [m, k] : polys_[p])
        for (const auto& [a, e] : m) stack.push_back(a);
    };
    push_poly(t.poly);
    while (!stack.empty()) {
      int a = stack.back();
      stack.pop_back();
      if (seen[a]) continue;
      seen[a] = true;
      const Atom& at = atoms_[a];
      if (at.kind == Atom::Exp || at.kind == Atom::Fn)
        for (int p : at.polys) {
          t.inner.push_back(p);
          polys.push_back(p);
          push_poly(p);
        }
      if (at.kind == Atom::Fn && at.count > 0) t.maxes.emplace_back(at.polys[0], at.count);
      if (at.kind == Atom::Inv) {
        stack.push_back(at.base);
        // inv of inv_b: a quotient inside a denominator; b is not bounded.
        if (atoms_[at.base].kind == Atom::Inv) t.den_bound[atoms_[at.base].base] = INT_MAX;
      }
    }
    // κ is its own inverse (div(x, κ) = mul(x, κ)): its exponents bound how often root may
    // divide by it.
    for (int p : polys)
      for (const auto& [m, k] : polys_[p])
        for (const auto& [a, e] : m) {
          const Atom& at = atoms_[a];
          bool kappa = at.kind == Atom::Const && at.name == "κ";
          if (at.kind != Atom::Inv && !kappa) continue;
          int& bound = t.den_bound[kappa ? a : at.base];
          bound = std::max(bound, e);
        }
    std::sort(t.inner.begin(), t.inner.end());
    t.inner.erase(std::unique(t.inner.begin(), t.inner.end()), t.inner.end());
  }
  bool ok = t.poly >= 0;
  targets_.emplace(root.node(), std::move(t));
  return ok;
}

bool PolyModel::refutes(AbsExpr e, AbsExpr root) {
  auto it = targets_.find(root.node());
  KILN_ASSERT(it != targets_.end(), "root {} was not added", root.str());
  const Target& t = it->second;
  if (t.poly < 0) return false;
  int p = of(e);
  if (p < 0) return false;
  // The model's relation (docs/pruning.md): e ⊑ root iff
  // (A) e's polynomial is inside root's,
  if (leq(p, t.poly)) return false;
  // (B) or inside the argument of a function root applies, at any depth,
  for (int q : t.inner)
    if (leq(p, q)) return false;
  // (B') or e is max(c, x) and root reaches max(n, x) with c dividing n
  //      (max(n, x) = max(n/c, max(c, x))),
  const Poly& pe = polys_[p];
  if (pe.size() == 1 && pe[0].second == 1 && pe[0].first.size() == 1 &&
      pe[0].first[0].second == 1) {
    const Atom& at = atoms_[pe[0].first[0].first];
    if (at.kind == Atom::Fn && at.count > 0)
      for (const auto& [arg, n] : t.maxes)
        if (arg == at.polys[0] && n % at.count == 0) return false;
  }
  // (C) or every atom of every monomial of e is one root divides by, at most as often.
  for (const auto& [m, k] : pe)
    for (const auto& [a, x] : m) {
      auto b = t.den_bound.find(a);
      if (b == t.den_bound.end() || x > b->second) return true;
    }
  return false;
}

bool PolyModel::distinguishes(AbsExpr a, AbsExpr b) {
  int p = of(a), q = of(b);
  return p >= 0 && q >= 0 && p != q;  // polynomials are interned: equal ones share an id
}

}  // namespace kiln::search::detail
