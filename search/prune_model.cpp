// The fast path's No side: two models of the axioms in which "subexpression" is decidable.
//
// A model is an interpretation of the sort, the functions and the subexpression predicate that
// satisfies every axiom the prover asserts. If a ⊑ b fails in one, the axioms cannot prove
// a ⊑ b, so pruning on it never drops a candidate the axioms would keep (docs/pruning.md
// "Refutation models" checks each axiom against each model).
#include <algorithm>

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
// Model 2: Boolean polynomials.

int PolyModel::intern(Poly p) {
  auto it = poly_ids_.find(p);
  if (it != poly_ids_.end()) return it->second;
  int id = static_cast<int>(polys_.size());
  polys_.push_back(p);
  poly_ids_.emplace(std::move(p), id);
  return id;
}

int PolyModel::atom(Atom a) {
  auto key = std::make_tuple(a.kind, a.name, a.polys, a.base);
  auto it = atom_ids_.find(key);
  if (it != atom_ids_.end()) return it->second;
  int id = static_cast<int>(atoms_.size());
  atoms_.push_back(std::move(a));
  atom_ids_.emplace(std::move(key), id);
  return id;
}

int PolyModel::atom_poly(int a) {
  return intern(Poly{Mono{{a, 1}}});
}

int PolyModel::padd(int a, int b) {
  if (a < 0 || b < 0) return -1;
  const Poly &p = polys_[a], &q = polys_[b];
  Poly r;
  std::set_union(p.begin(), p.end(), q.begin(), q.end(), std::back_inserter(r));
  if (r.size() > opt_.max_monomials) return -1;
  return intern(std::move(r));
}

namespace {

std::vector<std::pair<int, int>> mono_mul(const std::vector<std::pair<int, int>>& a,
                                          const std::vector<std::pair<int, int>>& b) {
  std::vector<std::pair<int, int>> r;
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

// w / m if m divides w.
bool mono_div(const std::vector<std::pair<int, int>>& w, const std::vector<std::pair<int, int>>& m,
              std::vector<std::pair<int, int>>& q) {
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

}  // namespace

int PolyModel::pmul(int a, int b) {
  if (a < 0 || b < 0) return -1;
  const Poly &p = polys_[a], &q = polys_[b];
  if (p.size() * q.size() > opt_.max_monomials * 8) return -1;
  Poly r;
  r.reserve(p.size() * q.size());
  for (const Mono& x : p)
    for (const Mono& y : q) r.push_back(mono_mul(x, y));
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  if (r.size() > opt_.max_monomials) return -1;
  return intern(std::move(r));
}

int PolyModel::inverse_monomial(int p) {
  if (p < 0) return -1;
  std::map<int, int> deg;  // atom -> highest exponent in p
  for (const Mono& m : polys_[p])
    for (const auto& [a, e] : m) deg[a] = std::max(deg[a], e);
  Mono inv;
  for (const auto& [a, e] : deg) {
    // With merged constants div(x, κ) = mul(x, κ), so κ is its own inverse here.
    bool kappa = atoms_[a].kind == Atom::Const && atoms_[a].name == "κ";
    int ia = kappa ? a : atom(Atom{Atom::Inv, {}, {}, a});
    inv.emplace_back(ia, e);
  }
  std::sort(inv.begin(), inv.end());
  // Merge equal atoms (κ may meet an inverse atom of the same id only if it is itself).
  Mono merged;
  for (const auto& [a, e] : inv) {
    if (!merged.empty() && merged.back().first == a)
      merged.back().second += e;
    else
      merged.emplace_back(a, e);
  }
  return intern(Poly{merged});
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
        r = atom_poly(atom(Atom{Atom::Input, e.name(), {}, -1}));
        break;
      case AbsKind::Const:
        if (e.value() == 1.0)
          r = intern(Poly{Mono{}});
        else
          r = atom_poly(
              atom(Atom{Atom::Const,
                        opt_.merge_constants || e.is_any_constant() ? std::string("κ")
                                                                    : fmt::format("{}", e.value()),
                        {},
                        -1}));
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
        r = atom_poly(atom(Atom{Atom::Exp, {}, {a[0]}, -1}));
        break;
      case AbsKind::Sum:
        r = a[0];  // sums are forgotten
        break;
      case AbsKind::Opaque: {
        if (e.name() == "max" && e.count() > 0) {
          // max(1, x) = x and max(i, max(j, x)) = max(i·j, x): the max atom is idempotent.
          const Poly& p = polys_[a[0]];
          bool is_max = p.size() == 1 && p[0].size() == 1 && p[0][0].second == 1 &&
                        atoms_[p[0][0].first].kind == Atom::Fn &&
                        atoms_[p[0][0].first].name == "max";
          if (e.count() == 1 || is_max) {
            r = a[0];
            break;
          }
        }
        if ((e.name() == "maximum" || e.name() == "minimum") && a.size() == 2 &&
            polys_[a[1]] < polys_[a[0]])
          std::swap(a[0], a[1]);  // commutative
        r = atom_poly(atom(Atom{Atom::Fn, e.name(), a, -1}));
        break;
      }
    }
  memo_.emplace(e.node(), r);
  return r;
}

bool PolyModel::leq(int u, int w) const {
  const Poly &U = polys_[u], &W = polys_[w];
  Mono q;
  for (const Mono& wm : W) {
    if (!mono_div(wm, U[0], q)) continue;
    bool all = true;
    for (size_t i = 1; i < U.size() && all; ++i)
      all = std::binary_search(W.begin(), W.end(), mono_mul(U[i], q));
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
    std::vector<int> stack;
    auto push_poly = [&](int p) {
      for (const Mono& m : polys_[p])
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
          push_poly(p);
        }
      if (at.kind == Atom::Inv) {
        t.den_atoms.push_back(at.base);
        stack.push_back(at.base);
      }
      // κ is its own inverse (div(x, κ) = mul(x, κ)), so where it appears it may have been a
      // denominator.
      if (at.kind == Atom::Const && at.name == "κ") t.den_atoms.push_back(a);
    }
    std::sort(t.den_atoms.begin(), t.den_atoms.end());
    t.den_atoms.erase(std::unique(t.den_atoms.begin(), t.den_atoms.end()), t.den_atoms.end());
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
  // The model's relation: e ⊑ root iff e's polynomial is inside root's, or inside the argument
  // of a function root applies (at any depth), or made only of atoms root divides by.
  if (leq(p, t.poly)) return false;
  for (int q : t.inner)
    if (leq(p, q)) return false;
  bool all_den = true;
  for (const Mono& m : polys_[p])
    for (const auto& [a, k] : m)
      all_den &= std::binary_search(t.den_atoms.begin(), t.den_atoms.end(), a);
  return !all_den;
}

bool PolyModel::distinguishes(AbsExpr a, AbsExpr b) {
  int p = of(a), q = of(b);
  return p >= 0 && q >= 0 && p != q;  // polynomials are interned: equal ones share an id
}

}  // namespace kiln::search::detail
