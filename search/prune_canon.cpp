// The fast path's Yes side: the canonical form and the known subexpressions of the spec.
//
// Canonical forms follow one orientation of the axioms (docs/pruning.md "Canonical form"):
//   add/mul: flattened, operands sorted structurally, mul(x, 1) = x;
//   sum:     sum(1, x) = x, sum(i, sum(j, x)) = sum(i·j, x), pushed into add's terms, pulled
//            out of products (sum(i, x)·y = sum(i, x·y)) and into a quotient's numerator;
//   div:     lifted to the top of products (x·(y/z) = (x·y)/z, (x/y)/z = x/(y·z)), quotients of
//            one denominator in a sum combined (x/z + y/z = (x + y)/z);
//   mul over add: distributed, up to max_expand product terms;
//   constants: with merge_constants every constant but 1 is κ, and x/κ = x·κ.
#include <algorithm>

#include "kiln/ir/diag.h"
#include "prune_internal.h"

namespace kiln::search::detail {

namespace {

bool is_one(AbsExpr e) {
  return e.kind() == AbsKind::Const && e.value() == 1.0;
}

bool is_max_reduce(AbsExpr e) {
  return e.kind() == AbsKind::Opaque && e.count() > 0 && e.name() == "max";
}

bool is_commutative_fn(const std::string& fn) {
  return fn == "maximum" || fn == "minimum";
}

void sort_structurally(std::vector<AbsExpr>& v) {
  std::sort(v.begin(), v.end(), structural_less);
}

// Calls f(subset) for every sub-multiset of v (by position) with lo <= size <= hi.
template <typename F>
void for_subsets(const std::vector<AbsExpr>& v, size_t lo, size_t hi, F f) {
  size_t n = v.size();
  if (n > 12) return;  // 4096 subsets per node at most; wider nodes are left to Z3
  std::vector<AbsExpr> s;
  for (uint32_t mask = 1; mask < (1u << n); ++mask) {
    size_t k = static_cast<size_t>(__builtin_popcount(mask));
    if (k < lo || k > hi) continue;
    s.clear();
    for (size_t i = 0; i < n; ++i)
      if (mask & (1u << i)) s.push_back(v[i]);
    f(s);
  }
}

}  // namespace

AbsExpr Canon::constant(double v) const {
  if (v == 1.0) return one();
  return opt_.merge_constants ? AbsExpr::any_constant() : AbsExpr::constant(v);
}

AbsExpr Canon::operator()(AbsExpr e) {
  auto it = memo_.find(e.node());
  if (it != memo_.end()) return it->second;
  AbsExpr r;
  std::vector<AbsExpr> a;
  for (AbsExpr x : e.args()) a.push_back((*this)(x));
  switch (e.kind()) {
    case AbsKind::Input:
      r = e;
      break;
    case AbsKind::Const:
      r = e.is_any_constant() ? e : constant(e.value());
      break;
    case AbsKind::Add:
      r = add(a);
      break;
    case AbsKind::Mul:
      r = mul(a);
      break;
    case AbsKind::Div:
      r = div(a[0], a[1]);
      break;
    case AbsKind::Exp:
      r = AbsExpr::exp(a[0]);
      break;
    case AbsKind::Sum:
      r = sum(e.count(), a[0]);
      break;
    case AbsKind::Opaque:
      r = opaque(e.name(), a, e.count());
      break;
  }
  memo_.emplace(e.node(), r);
  return r;
}

AbsExpr Canon::sum(int64_t c, AbsExpr x) {
  if (c == 1) return x;
  int64_t cc;
  switch (x.kind()) {
    case AbsKind::Sum:
      if (!__builtin_mul_overflow(c, x.count(), &cc)) return sum(cc, x.arg(0));
      break;
    case AbsKind::Add: {
      std::vector<AbsExpr> t;
      for (AbsExpr a : x.args()) t.push_back(sum(c, a));
      return add(t);
    }
    case AbsKind::Div:
      return div(sum(c, x.arg(0)), x.arg(1));
    default:
      break;
  }
  return AbsExpr::sum(c, x);
}

AbsExpr Canon::add(std::vector<AbsExpr> in) {
  std::vector<AbsExpr> terms;
  for (AbsExpr a : in) {
    if (a.kind() == AbsKind::Add)
      for (AbsExpr t : a.args()) terms.push_back(t);
    else
      terms.push_back(a);
  }
  // x/z + y/z = (x + y)/z: group quotients by denominator.
  std::vector<AbsExpr> out, dens;
  std::unordered_map<const AbsNode*, std::vector<AbsExpr>> nums;
  for (AbsExpr t : terms) {
    if (t.kind() != AbsKind::Div) {
      out.push_back(t);
      continue;
    }
    auto& n = nums[t.arg(1).node()];
    if (n.empty()) dens.push_back(t.arg(1));
    n.push_back(t.arg(0));
  }
  for (AbsExpr d : dens) {
    std::vector<AbsExpr>& n = nums[d.node()];
    if (n.size() == 1) {
      out.push_back(AbsExpr::div(n[0], d));
    } else {
      // Numerators of canonical quotients are never quotients, so this add only flattens.
      out.push_back(AbsExpr::div(add(n), d));
    }
  }
  KILN_ASSERT(!out.empty(), "add of nothing");
  if (out.size() == 1) return out[0];
  sort_structurally(out);
  return AbsExpr::add_n(out);
}

AbsExpr Canon::mul(std::vector<AbsExpr> in) {
  int64_t count = 1;
  std::vector<AbsExpr> factors, dens, work = std::move(in);
  while (!work.empty()) {
    AbsExpr a = work.back();
    work.pop_back();
    if (is_one(a)) continue;
    int64_t cc;
    switch (a.kind()) {
      case AbsKind::Mul:
        for (AbsExpr f : a.args()) work.push_back(f);
        continue;
      case AbsKind::Sum:
        if (__builtin_mul_overflow(count, a.count(), &cc)) break;
        count = cc;
        work.push_back(a.arg(0));
        continue;
      case AbsKind::Div:
        work.push_back(a.arg(0));
        dens.push_back(a.arg(1));
        continue;
      default:
        break;
    }
    factors.push_back(a);
  }
  // Distribute over the add factors if the expansion stays small.
  size_t terms = 1;
  std::vector<AbsExpr> plain, sums;
  for (AbsExpr f : factors) {
    if (f.kind() == AbsKind::Add) {
      sums.push_back(f);
      terms *= f.arity();
      if (terms > opt_.max_expand) break;
    } else {
      plain.push_back(f);
    }
  }
  AbsExpr core;
  if (!sums.empty() && terms <= opt_.max_expand) {
    std::vector<AbsExpr> products;
    std::vector<size_t> pick(sums.size(), 0);
    for (;;) {
      std::vector<AbsExpr> f = plain;
      for (size_t i = 0; i < sums.size(); ++i) f.push_back(sums[i].arg(pick[i]));
      products.push_back(mul(f));
      size_t i = 0;
      while (i < sums.size() && ++pick[i] == sums[i].arity()) pick[i++] = 0;
      if (i == sums.size()) break;
    }
    core = add(products);
  } else if (factors.empty()) {
    core = one();
  } else if (factors.size() == 1) {
    core = factors[0];
  } else {
    sort_structurally(factors);
    core = AbsExpr::mul_n(factors);
  }
  if (count > 1) core = sum(count, core);
  if (!dens.empty()) core = div(core, mul(dens));
  return core;
}

AbsExpr Canon::div(AbsExpr n, AbsExpr d) {
  if (is_one(d)) return n;
  if (opt_.merge_constants) {
    // x/κ = x·κ, and x/(κ·y) = (x/κ)/y = (x·κ)/y.
    if (d.is_any_constant()) return mul({n, d});
    if (d.kind() == AbsKind::Mul) {
      std::vector<AbsExpr> k, rest;
      for (AbsExpr f : d.args()) (f.is_any_constant() ? k : rest).push_back(f);
      if (!k.empty()) {
        k.push_back(n);
        if (rest.empty()) return mul(k);
        return div(mul(k), rest.size() == 1 ? rest[0] : AbsExpr::mul_n(rest));
      }
    }
  }
  if (n.kind() == AbsKind::Div) return div(n.arg(0), mul({n.arg(1), d}));
  if (n.kind() == AbsKind::Add) {
    bool has_div = false;
    for (AbsExpr t : n.args()) has_div |= t.kind() == AbsKind::Div;
    if (has_div) {
      std::vector<AbsExpr> t;
      for (AbsExpr a : n.args()) t.push_back(div(a, d));
      return add(t);
    }
  }
  return AbsExpr::div(n, d);
}

AbsExpr Canon::opaque(const std::string& fn, std::vector<AbsExpr> args, int64_t count) {
  if (fn == "max" && count > 0) {
    if (count == 1) return args[0];
    int64_t cc;
    if (is_max_reduce(args[0]) && !__builtin_mul_overflow(count, args[0].count(), &cc))
      return opaque(fn, {args[0].arg(0)}, cc);
  }
  if (is_commutative_fn(fn) && args.size() == 2) sort_structurally(args);
  return AbsExpr::opaque(fn, std::move(args), count);
}

// ---------------------------------------------------------------------------------------------

KnownSubexprs::KnownSubexprs(Canon& canon, const std::vector<AbsExpr>& roots, size_t cap)
    : canon_(canon), cap_(cap) {
  for (AbsExpr r : roots) {
    // Every raw subterm (its canonical form): the factored forms the canonical form may have
    // distributed away.
    std::unordered_set<const AbsNode*> seen;
    std::vector<AbsExpr> stack{r};
    while (!stack.empty()) {
      AbsExpr e = stack.back();
      stack.pop_back();
      if (!seen.insert(e.node()).second) continue;
      add(canon_(e));
      for (AbsExpr a : e.args()) stack.push_back(a);
    }
  }
  while (!work_.empty()) {
    AbsExpr c = work_.back();
    work_.pop_back();
    expand(c);
  }
}

void KnownSubexprs::add(AbsExpr c) {
  if (set_.size() >= cap_) {
    truncated_ = true;
    return;
  }
  if (!set_.insert(c).second) return;
  work_.push_back(c);
  if (c.kind() == AbsKind::Sum) sum_counts_[c.arg(0).node()].push_back(c.count());
  if (is_max_reduce(c)) max_counts_[c.arg(0).node()].push_back(c.count());
}

// Adds what the axioms make a subexpression of c. Each rule cites the equation that exposes the
// new term as an operand of a form equal to c.
void KnownSubexprs::expand(AbsExpr c) {
  for (AbsExpr a : c.args()) add(a);
  std::vector<AbsExpr> args = c.args();
  switch (c.kind()) {
    case AbsKind::Add: {
      // Associativity and commutativity: any sub-multiset of the terms.
      for_subsets(args, 2, args.size() - 1,
                  [&](const std::vector<AbsExpr>& s) { add(canon_.add(s)); });
      // sum(n, x) + sum(n, y) = sum(n, x + y), so x + y is a subexpression.
      for_subsets(args, 2, args.size(), [&](const std::vector<AbsExpr>& s) {
        if (s[0].kind() != AbsKind::Sum) return;
        std::vector<AbsExpr> bodies;
        for (AbsExpr t : s) {
          if (t.kind() != AbsKind::Sum || t.count() != s[0].count()) return;
          bodies.push_back(t.arg(0));
        }
        add(canon_.add(bodies));
      });
      // x·f + y·f = (x + y)·f: a factor common to several terms.
      std::unordered_map<const AbsNode*, std::vector<size_t>> with;
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i].kind() != AbsKind::Mul) continue;
        std::unordered_set<const AbsNode*> once;
        for (AbsExpr f : args[i].args())
          if (once.insert(f.node()).second) with[f.node()].push_back(i);
      }
      for (auto& [f, terms] : with) {
        if (terms.size() < 2) continue;
        std::vector<AbsExpr> quotients;
        for (size_t i : terms) {
          std::vector<AbsExpr> rest;
          bool dropped = false;
          for (AbsExpr g : args[i].args()) {
            if (!dropped && g.node() == f) {
              dropped = true;
              continue;
            }
            rest.push_back(g);
          }
          quotients.push_back(canon_.mul(rest));
        }
        add(canon_.add(quotients));
      }
      break;
    }
    case AbsKind::Mul:
      for_subsets(args, 2, args.size() - 1,
                  [&](const std::vector<AbsExpr>& s) { add(canon_.mul(s)); });
      break;
    case AbsKind::Sum: {
      // sum(n, x·y) = sum(n, x)·y: the sum may sit on any sub-multiset of the factors.
      AbsExpr b = c.arg(0);
      if (b.kind() == AbsKind::Mul)
        for_subsets(b.args(), 1, b.arity() - 1, [&](const std::vector<AbsExpr>& s) {
          add(canon_.sum(c.count(), canon_.mul(s)));
        });
      break;
    }
    case AbsKind::Div: {
      AbsExpr n = c.arg(0), d = c.arg(1);
      // sum(k, x)/d = sum(k, x/d).
      int64_t k = 1;
      AbsExpr core = n;
      if (n.kind() == AbsKind::Sum) {
        k = n.count();
        core = n.arg(0);
        add(canon_.div(core, d));
      }
      // (x·y)/d = x·(y/d), also with the sum on y: sum(k, x·y)/d = x·(sum(k, y)/d).
      if (core.kind() == AbsKind::Mul)
        for_subsets(core.args(), 1, core.arity() - 1, [&](const std::vector<AbsExpr>& s) {
          AbsExpr m = canon_.mul(s);
          add(canon_.div(m, d));
          if (k > 1) add(canon_.div(canon_.sum(k, m), d));
        });
      // (x + y)/d = x/d + y/d.
      if (n.kind() == AbsKind::Add)
        for (AbsExpr t : n.args()) add(canon_.div(t, d));
      // x/(y·z) = (x/y)/z.
      if (d.kind() == AbsKind::Mul)
        for_subsets(d.args(), 1, d.arity() - 1,
                    [&](const std::vector<AbsExpr>& s) { add(canon_.div(n, canon_.mul(s))); });
      break;
    }
    default:
      break;
  }
}

bool KnownSubexprs::contains(AbsExpr c) const {
  if (set_.count(c)) return true;
  // sum(n, x) = sum(n/d, sum(d, x)) when d divides n, so sum(d, x) ⊑ sum(n, x); the same for
  // the max-reduction.
  const auto* index = c.kind() == AbsKind::Sum ? &sum_counts_
                      : is_max_reduce(c)       ? &max_counts_
                                               : nullptr;
  if (!index) return false;
  auto it = index->find(c.arg(0).node());
  if (it == index->end()) return false;
  for (int64_t n : it->second)
    if (n % c.count() == 0) return true;
  return false;
}

}  // namespace kiln::search::detail
