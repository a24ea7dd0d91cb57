// The axioms in Z3, and the queries the fast path leaves open.
//
// Encoding (docs/pruning.md "Encoding"): one uninterpreted sort Expr; add, mul, div: Expr² →
// Expr; exp and each opaque unary function: Expr → Expr; sum and the max-reduction: Int × Expr
// → Expr (the count is a Z3 integer: sum(i, sum(j, x)) = sum(i·j, x) is instantiated only with
// numerals, so the product is a numeral again); subexpr: Expr² → Bool. Every axiom is a
// quantified formula with explicit patterns, chosen so that e-matching only rewrites terms that
// exist. The subexpression axioms are asserted in their goal-directed form
//   subexpr(f(x, y), w) → subexpr(x, w) ∧ subexpr(y, w)
// (transitivity composed with "an operand is a subexpression"), seeded with subexpr(r, r) for
// each root r: it derives exactly the facts subexpr(t, r) that reflexivity + transitivity +
// operand rules derive, without the cubic closure of transitivity over every pair of terms.
#include <chrono>

#include <z3++.h>

#include "kiln/ir/diag.h"
#include "prune_internal.h"

namespace kiln::search::detail {

namespace {

bool is_max_reduce(AbsExpr e) {
  return e.kind() == AbsKind::Opaque && e.count() > 0 && e.name() == "max";
}

}  // namespace

struct Z3Prover::State {
  PrunerOptions opt;
  z3::context c;
  z3::solver s;
  z3::sort T;
  z3::func_decl add, mul, div, exp, sum, maxr, sub;
  z3::expr one, kappa;
  std::map<std::string, z3::func_decl> fn1, fn2;
  std::map<std::string, z3::expr> leaves;
  std::unordered_map<const AbsNode*, z3::expr> memo;
  std::vector<z3::expr> roots;
  int64_t queries = 0;  // names the guard literal of each query

  explicit State(const PrunerOptions& o)
      : opt(o),
        s(c),
        T(c.uninterpreted_sort("Expr")),
        add(c.function("add", T, T, T)),
        mul(c.function("mul", T, T, T)),
        div(c.function("div", T, T, T)),
        exp(c.function("exp", T, T)),
        sum(c.function("sum", c.int_sort(), T, T)),
        maxr(c.function("maxr", c.int_sort(), T, T)),
        sub(c.function("subexpr", T, T, c.bool_sort())),
        one(c.constant("one", T)),
        kappa(c.constant("κ", T)) {
    z3::params p(c);
    p.set("timeout", opt.timeout_ms);
    if (opt.z3_rlimit > 0) p.set("rlimit", opt.z3_rlimit);
    s.set(p);
  }

  // ∀ vars. body, triggered by each of `patterns` (each a multi-pattern: a list of terms).
  z3::expr forall(const std::vector<z3::expr>& vars, const z3::expr& body,
                  const std::vector<std::vector<z3::expr>>& patterns) {
    std::vector<Z3_app> bound;
    for (const z3::expr& v : vars)
      bound.push_back(reinterpret_cast<Z3_app>(static_cast<Z3_ast>(v)));
    std::vector<Z3_pattern> pats;
    for (const auto& terms : patterns) {
      std::vector<Z3_ast> t;
      for (const z3::expr& e : terms) t.push_back(e);
      pats.push_back(Z3_mk_pattern(c, static_cast<unsigned>(t.size()), t.data()));
    }
    Z3_ast q = Z3_mk_forall_const(c, 0, static_cast<unsigned>(bound.size()), bound.data(),
                                  static_cast<unsigned>(pats.size()), pats.data(), body);
    c.check_error();
    return z3::expr(c, q);
  }

  // Both the equation and the trigger on each side, so e-matching can rewrite either way.
  void equation(const std::vector<z3::expr>& vars, const z3::expr& lhs, const z3::expr& rhs,
                bool both_ways = true) {
    std::vector<std::vector<z3::expr>> pats{{lhs}};
    if (both_ways) pats.push_back({rhs});
    s.add(forall(vars, lhs == rhs, pats));
  }

  // The subexpression rules for one function: each operand is a subexpression of the
  // application. `args` are the bound operands, `app` the application.
  void operand_rules(const std::vector<z3::expr>& vars, const z3::expr& app,
                     const std::vector<z3::expr>& operands) {
    z3::expr w = c.constant("w", T);
    std::vector<z3::expr> vw = vars;
    vw.push_back(w);
    z3::expr_vector concl(c);
    for (const z3::expr& x : operands) concl.push_back(sub(x, w));
    s.add(forall(vw, z3::implies(sub(app, w), z3::mk_and(concl)), {{sub(app, w)}}));
    if (opt.textbook_axioms) {
      z3::expr_vector facts(c);
      for (const z3::expr& x : operands) facts.push_back(sub(x, app));
      s.add(forall(vars, z3::mk_and(facts), {{app}}));
    }
  }

  void axioms() {
    z3::expr x = c.constant("x", T), y = c.constant("y", T), z = c.constant("z", T);
    z3::expr i = c.int_const("i"), j = c.int_const("j");
    // add and mul: commutative, associative; mul distributes over add.
    equation({x, y}, add(x, y), add(y, x), false);
    equation({x, y, z}, add(add(x, y), z), add(x, add(y, z)));
    equation({x, y}, mul(x, y), mul(y, x), false);
    equation({x, y, z}, mul(mul(x, y), z), mul(x, mul(y, z)));
    equation({x, y, z}, mul(x, add(y, z)), add(mul(x, y), mul(x, z)));
    // Division.
    equation({x, y, z}, add(div(x, z), div(y, z)), div(add(x, y), z));
    equation({x, y, z}, mul(x, div(y, z)), div(mul(x, y), z));
    equation({x, y, z}, div(div(x, y), z), div(x, mul(y, z)));
    // Summation. Counts are positive in every expression we build.
    s.add(forall({i, x}, z3::implies(i == 1, sum(i, x) == x), {{sum(i, x)}}));
    s.add(forall({i, j, x}, z3::implies(i >= 1 && j >= 1, sum(i, sum(j, x)) == sum(i * j, x)),
                 {{sum(i, sum(j, x))}}));
    equation({i, x, y}, sum(i, add(x, y)), add(sum(i, x), sum(i, y)));
    // Unconditional: "y does not depend on the summed index" is not expressible once indices
    // are forgotten; dropping the condition only makes more things equal (docs/pruning.md).
    equation({i, x, y}, sum(i, mul(x, y)), mul(sum(i, x), y));
    equation({i, x, y}, sum(i, div(x, y)), div(sum(i, x), y));
    // 1 and the merged constant.
    equation({x}, mul(x, one), x, false);
    if (opt.merge_constants) equation({x}, div(x, kappa), mul(x, kappa), false);
    // The max-reduction, as the sum.
    s.add(forall({i, x}, z3::implies(i == 1, maxr(i, x) == x), {{maxr(i, x)}}));
    s.add(forall({i, j, x}, z3::implies(i >= 1 && j >= 1, maxr(i, maxr(j, x)) == maxr(i * j, x)),
                 {{maxr(i, maxr(j, x))}}));

    // Subexpression.
    for (const z3::func_decl& f : {add, mul, div}) operand_rules({x, y}, f(x, y), {x, y});
    operand_rules({x}, exp(x), {x});
    operand_rules({i, x}, sum(i, x), {x});
    operand_rules({i, x}, maxr(i, x), {x});
    // sum(j, x) ⊑ sum(i, x) when j divides i, since sum(i, x) = sum(i/j, sum(j, x)): a
    // consequence of the axioms above that e-matching cannot find alone (it would have to
    // invent the count i/j).
    z3::expr w = c.constant("w", T);
    for (const z3::func_decl& f : {sum, maxr})
      s.add(forall({i, j, x, w},
                   z3::implies(sub(f(i, x), w) && j >= 1 && z3::mod(i, j) == 0, sub(f(j, x), w)),
                   {{sub(f(i, x), w), f(j, x)}}));
    if (opt.textbook_axioms) {
      s.add(forall({x}, sub(x, x), {{sub(x, x)}}));
      s.add(forall({x, y, z}, z3::implies(sub(x, y) && sub(y, z), sub(x, z)),
                   {{sub(x, y), sub(y, z)}}));
    }
  }

  z3::func_decl function(const std::string& fn, size_t arity) {
    auto& table = arity == 1 ? fn1 : fn2;
    auto it = table.find(fn);
    if (it != table.end()) return it->second;
    z3::func_decl f = arity == 1 ? c.function(("fn_" + fn).c_str(), T, T)
                                 : c.function(("fn_" + fn).c_str(), T, T, T);
    table.emplace(fn, f);
    z3::expr x = c.constant("x", T), y = c.constant("y", T);
    if (arity == 1) {
      operand_rules({x}, f(x), {x});
    } else {
      operand_rules({x, y}, f(x, y), {x, y});
      if (fn == "maximum" || fn == "minimum") equation({x, y}, f(x, y), f(y, x), false);
    }
    return f;
  }

  z3::expr leaf(const std::string& name) {
    auto it = leaves.find(name);
    if (it != leaves.end()) return it->second;
    z3::expr e = c.constant(name.c_str(), T);
    leaves.emplace(name, e);
    return e;
  }

  // Must run outside a query (run): it may declare functions and assert their axioms.
  z3::expr encode(AbsExpr e) {
    auto it = memo.find(e.node());
    if (it != memo.end()) return it->second;
    std::vector<z3::expr> a;
    for (AbsExpr x : e.args()) a.push_back(encode(x));
    z3::expr r(c);
    switch (e.kind()) {
      case AbsKind::Input:
        r = leaf("in:" + e.name());
        break;
      case AbsKind::Const:
        if (e.value() == 1.0)
          r = one;
        else if (opt.merge_constants || e.is_any_constant())
          r = kappa;
        else
          r = leaf(fmt::format("const:{}", e.value()));
        break;
      case AbsKind::Add:
      case AbsKind::Mul: {
        z3::func_decl f = e.kind() == AbsKind::Add ? add : mul;
        r = a[0];
        for (size_t k = 1; k < a.size(); ++k) r = f(r, a[k]);
        break;
      }
      case AbsKind::Div:
        r = div(a[0], a[1]);
        break;
      case AbsKind::Exp:
        r = exp(a[0]);
        break;
      case AbsKind::Sum:
        r = sum(c.int_val(e.count()), a[0]);
        break;
      case AbsKind::Opaque:
        if (is_max_reduce(e))
          r = maxr(c.int_val(e.count()), a[0]);
        else if (a.size() == 1)
          r = function(e.name(), 1)(a[0]);
        else
          r = function(e.name(), 2)(a[0], a[1]);
        break;
    }
    memo.emplace(e.node(), r);
    return r;
  }

  // One query: are `assertions` unsatisfiable together with the axioms and roots? They are
  // guarded by a fresh literal that check() assumes, and retired (the literal asserted false)
  // afterwards. Not push/pop: push() internalizes and propagates what was asserted before it
  // with Z3's resource limit suspended, so neither the timeout nor the rlimit bounds it, and
  // on large roots (two chained residual + rms_norm blocks) the first push never returned.
  // Under check() all of that work is bounded.
  Verdict run(const std::vector<z3::expr>& assertions, double* ms) {
    z3::expr guard = c.bool_const(fmt::format("query!{}", queries++).c_str());
    for (const z3::expr& a : assertions) s.add(z3::implies(guard, a));
    z3::expr_vector assume(c);
    assume.push_back(guard);
    auto t0 = std::chrono::steady_clock::now();
    z3::check_result r = s.check(assume);
    *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    s.add(!guard);
    switch (r) {
      case z3::unsat:
        return Verdict::Yes;
      case z3::sat:
        return Verdict::No;
      default:
        return Verdict::Unknown;
    }
  }
};

Z3Prover::Z3Prover(const PrunerOptions& opt, const std::vector<AbsExpr>& roots)
    : s_(std::make_unique<State>(opt)) {
  s_->axioms();
  for (AbsExpr r : roots) {
    z3::expr t = s_->encode(r);
    s_->roots.push_back(t);
    s_->s.add(s_->sub(t, t));
  }
}

Z3Prover::~Z3Prover() = default;

Verdict Z3Prover::subexpr_of_roots(AbsExpr e, double* ms) {
  z3::expr t = s_->encode(e);
  z3::expr_vector any(s_->c);
  for (const z3::expr& r : s_->roots) any.push_back(s_->sub(t, r));
  return s_->run({!z3::mk_or(any)}, ms);
}

Verdict Z3Prover::subexpr(AbsExpr a, AbsExpr b, double* ms) {
  z3::expr ta = s_->encode(a), tb = s_->encode(b);
  return s_->run({s_->sub(tb, tb), !s_->sub(ta, tb)}, ms);
}

Verdict Z3Prover::equivalent(AbsExpr a, AbsExpr b, double* ms) {
  z3::expr ta = s_->encode(a), tb = s_->encode(b);
  return s_->run({ta != tb}, ms);
}

}  // namespace kiln::search::detail
