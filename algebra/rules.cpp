// The rewrite rules (rules.h). Each finder reads one e-node and its children's classes; it never
// changes the graph (the runner applies every match of an iteration after all are found).
#include "kiln/algebra/rules.h"

#include <cmath>

#include "kiln/ir/diag.h"

namespace kiln::algebra {

namespace {

using Out = std::vector<Match>;
constexpr DType F32 = DType::F32;

const Shape& shape(const EGraph& g, ClassId c) {
  return g.cls(c).shape;
}
int64_t rank(const EGraph& g, ClassId c) {
  return static_cast<int64_t>(shape(g, c).size());
}
// Calls f on every node of kind k in class c. Finders only read the graph, so the class cannot
// change under f.
template <class F>
void each(const EGraph& g, ClassId c, OpKind k, F f) {
  for (const ENode& n : g.cls(c).nodes)
    if (n.kind == k) f(n);
}
void emit(Out& out, ClassId target, const char* rule, std::vector<RNode> rhs) {
  Match m;
  m.target = target;
  m.rhs = std::move(rhs);
  m.rule = rule;
  out.push_back(std::move(m));
}
Attrs reduce(int64_t dim, bool keepdim) {
  Attrs a;
  a.dim = dim;
  a.keepdim = keepdim;
  return a;
}
Attrs with_perm(std::vector<int> perm) {
  Attrs a;
  a.perm = std::move(perm);
  return a;
}
Attrs constant(double v) {
  Attrs a;
  a.value = v;
  return a;
}
std::vector<int> swap_last(int64_t r) {
  std::vector<int> p(r);
  for (int i = 0; i < r; ++i) p[i] = i;
  if (r >= 2) std::swap(p[r - 1], p[r - 2]);
  return p;
}
bool is_identity(const std::vector<int>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int>(i)) return false;
  return true;
}
// Extent of shape s along dim `d` of a rank-r shape it broadcasts to (1 where s has no dim).
int64_t aligned_extent(const Shape& s, int64_t r, int64_t d) {
  const int64_t off = r - static_cast<int64_t>(s.size());
  return d < off ? 1 : s[d - off];
}
// s broadcasts into rank r with extent 1 on every batch dim (all but the last two).
bool no_batch(const Shape& s, int64_t r) {
  if (static_cast<int64_t>(s.size()) > r) return false;
  for (int64_t d = 0; d + 2 < r; ++d)
    if (aligned_extent(s, r, d) != 1) return false;
  return true;
}

// The double that the verifier reads as 1/v (docs/verifier.md, "constants"): exact for a power
// of two, and the nearest double to 1/n for a whole n in [2, 2^30).
std::optional<double> exact_inverse(double v) {
  if (!std::isfinite(v) || v == 0) return std::nullopt;
  int e = 0;
  if (std::abs(std::frexp(v, &e)) == 0.5) return 1.0 / v;
  if (v >= 2 && v < double(1 << 30) && v == std::floor(v)) return 1.0 / v;
  return std::nullopt;
}
// n when v is the nearest double to 1/n for a whole n in [2, 2^30).
std::optional<int64_t> inverse_of_whole(double v) {
  if (!(v > 0 && v <= 0.5)) return std::nullopt;
  const double n = std::round(1.0 / v);
  if (n < 2 || n >= double(1 << 30) || 1.0 / n != v) return std::nullopt;
  return static_cast<int64_t>(n);
}
// a * b as a double that means the product exactly (to the verifier).
std::optional<double> exact_product(double a, double b) {
  const double p = a * b;
  if (!std::isfinite(p)) return std::nullopt;
  if (std::fma(a, b, -p) == 0) return p;
  auto na = inverse_of_whole(a), nb = inverse_of_whole(b);
  if (na && nb && *na * *nb < (int64_t(1) << 30)) return 1.0 / double(*na * *nb);
  return std::nullopt;
}

// ---- matmul ---------------------------------------------------------------------------------

// (x a) b = x (a b), both ways: the cost decides which association runs.
void matmul_assoc(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::MatMul) return;
  const ClassId l = n.kids[0], r = n.kids[1];
  each(g, l, OpKind::MatMul, [&](const ENode& m) {
    emit(out, c, "matmul-assoc",
         {{OpKind::MatMul, F32, {m.kids[1], r}, {}},
          {OpKind::MatMul, n.dtype, {m.kids[0], rhs_ref(0)}, {}}});
  });
  each(g, r, OpKind::MatMul, [&](const ENode& m) {
    emit(out, c, "matmul-assoc",
         {{OpKind::MatMul, F32, {l, m.kids[0]}, {}},
          {OpKind::MatMul, n.dtype, {rhs_ref(0), m.kids[1]}, {}}});
  });
}

// x (a ± b) = x a ± x b and (a ± b) y = a y ± b y (operands of one shape: no broadcast).
void matmul_distribute(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::MatMul) return;
  for (int side : {0, 1}) {
    const ClassId s = n.kids[side], o = n.kids[1 - side];
    for (OpKind k : {OpKind::Add, OpKind::Sub})
      each(g, s, k, [&](const ENode& e) {
        const ClassId a = e.kids[0], b = e.kids[1];
        if (shape(g, a) != shape(g, s) || shape(g, b) != shape(g, s)) return;
        auto mm = [&](ClassId t) {
          return side == 1 ? RNode{OpKind::MatMul, F32, {o, t}, {}}
                           : RNode{OpKind::MatMul, F32, {t, o}, {}};
        };
        emit(out, c, "matmul-distribute",
             {mm(a), mm(b), {k, n.dtype, {rhs_ref(0), rhs_ref(1)}, {}}});
      });
  }
}

// x a ± x b = x (a ± b) and a y ± b y = (a ± b) y: one matmul instead of two.
void matmul_factor(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::Add && n.kind != OpKind::Sub) return;
  const ClassId p = n.kids[0], q = n.kids[1];
  if (shape(g, p) != shape(g, c) || shape(g, q) != shape(g, c)) return;
  each(g, p, OpKind::MatMul, [&](const ENode& m1) {
    each(g, q, OpKind::MatMul, [&](const ENode& m2) {
      if (m1.kids[0] == m2.kids[0] && shape(g, m1.kids[1]) == shape(g, m2.kids[1]))
        emit(out, c, "matmul-factor",
             {{n.kind, F32, {m1.kids[1], m2.kids[1]}, {}},
              {OpKind::MatMul, n.dtype, {m1.kids[0], rhs_ref(0)}, {}}});
      if (m1.kids[1] == m2.kids[1] && shape(g, m1.kids[0]) == shape(g, m2.kids[0]))
        emit(out, c, "matmul-factor",
             {{n.kind, F32, {m1.kids[0], m2.kids[0]}, {}},
              {OpKind::MatMul, n.dtype, {rhs_ref(0), m1.kids[1]}, {}}});
    });
  });
}

// ---- reductions -----------------------------------------------------------------------------

// sum_n (x t)[m, n] = (x (sum_n t[:, n]))[m], sum_m (x t)[m, n] = ((sum_m x[m, :]) t)[n], and a
// batch dim of x that t does not have likewise: a sum over a matmul's output dim moves onto the
// operand that dim comes from (linear_mean: one pass over W instead of a GEMM).
void sum_through_matmul(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::Sum) return;
  const ClassId p = n.kids[0];
  const int64_t d = n.attrs.dim, r = rank(g, p);
  const bool keep = n.attrs.keepdim;
  if (shape(g, p)[d] == 1) return;  // a sum of one element (reduce-unit-dim)
  each(g, p, OpKind::MatMul, [&](const ENode& m) {
    const ClassId x = m.kids[0], t = m.kids[1];
    const int64_t rx = rank(g, x), rt = rank(g, t);
    std::vector<RNode> rhs;
    if (d == r - 1) {
      rhs.push_back({OpKind::Sum, F32, {t}, reduce(rt - 1, true)});
      rhs.push_back({OpKind::MatMul, keep ? n.dtype : F32, {x, rhs_ref(0)}, {}});
    } else if (d == r - 2) {
      rhs.push_back({OpKind::Sum, F32, {x}, reduce(rx - 2, true)});
      rhs.push_back({OpKind::MatMul, keep ? n.dtype : F32, {rhs_ref(0), t}, {}});
    } else {
      if (rt != 2 || rx != r) return;  // a batch dim of x alone (t broadcast over it)
      rhs.push_back({OpKind::Sum, F32, {x}, reduce(d, true)});
      rhs.push_back({OpKind::MatMul, keep ? n.dtype : F32, {rhs_ref(0), t}, {}});
    }
    if (!keep) rhs.push_back({OpKind::Sum, n.dtype, {rhs_ref(1)}, reduce(d, false)});
    emit(out, c, "sum-through-matmul", std::move(rhs));
  });
}

// A reduction over a dim of extent 1, keeping it, is its operand.
void reduce_unit_dim(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (op_info(n.kind).cls != OpClass::Reduce || !n.attrs.keepdim ||
      shape(g, n.kids[0])[n.attrs.dim] != 1)
    return;
  Match m;
  m.target = c;
  m.same = n.kids[0];
  m.rule = "reduce-unit-dim";
  out.push_back(std::move(m));
}

// sum_d(transpose_p(x)) = transpose_p(sum_{p[d]}(x)) (kept dims; max likewise): W's rows summed
// where the written graph sums Wᵀ's columns.
void reduce_through_transpose(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if ((n.kind != OpKind::Sum && n.kind != OpKind::Max) || !n.attrs.keepdim ||
      shape(g, n.kids[0])[n.attrs.dim] == 1)
    return;
  each(g, n.kids[0], OpKind::Transpose, [&](const ENode& t) {
    const std::vector<int>& p = t.attrs.perm;
    emit(out, c, "reduce-through-transpose",
         {{n.kind, F32, {t.kids[0]}, reduce(p[n.attrs.dim], true)},
          {OpKind::Transpose, n.dtype, {rhs_ref(0)}, with_perm(p)}});
  });
}

// sum_d(x * s) = sum_d(x) * s for s constant along d (div likewise): the scale on the smaller
// side.
void scale_out_of_sum(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::Sum || !n.attrs.keepdim) return;
  const ClassId p = n.kids[0];
  const int64_t r = rank(g, p), d = n.attrs.dim;
  for (OpKind k : {OpKind::Mul, OpKind::Div})
    each(g, p, k, [&](const ENode& e) {
      for (int side : {0, 1}) {
        if (k == OpKind::Div && side == 1) break;
        const ClassId x = e.kids[side], s = e.kids[1 - side];
        if (shape(g, x) != shape(g, p) || rank(g, s) > r || aligned_extent(shape(g, s), r, d) != 1)
          continue;
        RNode top{k, n.dtype, {rhs_ref(0), s}, {}};
        if (side == 1) top.kids = {s, rhs_ref(0)};
        emit(out, c, "scale-out-of-sum", {{OpKind::Sum, F32, {x}, reduce(d, true)}, top});
      }
    });
}

// ---- scales and constants -------------------------------------------------------------------

// (x w) * s = (x * s) w where s is constant along n (a scalar, a per-row [m, 1]), and
// = x (w * s) where s is constant along m (a scalar, a per-column [n]); div by s likewise.
void scale_into_matmul(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::Mul && n.kind != OpKind::Div) return;
  for (int side : {0, 1}) {
    if (n.kind == OpKind::Div && side == 1) break;
    const ClassId p = n.kids[side], s = n.kids[1 - side];
    // s must broadcast: one as large as p is not a scale of it (x * y with x = [1, n] would
    // otherwise scale a whole weight).
    if (shape(g, p) != shape(g, c) || numel(shape(g, s)) >= numel(shape(g, p))) continue;
    const int64_t r = rank(g, p);
    const Shape& ss = shape(g, s);
    if (!no_batch(ss, r)) continue;
    const bool rows = aligned_extent(ss, r, r - 1) == 1;
    const bool cols = aligned_extent(ss, r, r - 2) == 1;
    each(g, p, OpKind::MatMul, [&](const ENode& m) {
      auto scaled = [&](ClassId a) {
        return side == 0 ? RNode{n.kind, F32, {a, s}, {}} : RNode{n.kind, F32, {s, a}, {}};
      };
      if (rows)
        emit(out, c, "scale-into-matmul",
             {scaled(m.kids[0]), {OpKind::MatMul, n.dtype, {rhs_ref(0), m.kids[1]}, {}}});
      if (cols)
        emit(out, c, "scale-into-matmul",
             {scaled(m.kids[1]), {OpKind::MatMul, n.dtype, {m.kids[0], rhs_ref(0)}, {}}});
    });
  }
}

// The converse: matmul(x * s, w) = matmul(x, w) * s for s constant along x's last dim, and
// matmul(x, w * s) = matmul(x, w) * s for s constant along w's rows (div likewise).
void scale_out_of_matmul(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::MatMul) return;
  for (int operand : {0, 1}) {
    const ClassId a0 = n.kids[operand];
    const int64_t r = rank(g, a0);
    for (OpKind k : {OpKind::Mul, OpKind::Div})
      each(g, a0, k, [&](const ENode& e) {
        for (int side : {0, 1}) {
          if (k == OpKind::Div && side == 1) break;
          const ClassId a = e.kids[side], s = e.kids[1 - side];
          const Shape& ss = shape(g, s);
          if (shape(g, a) != shape(g, a0) || !no_batch(ss, r) || numel(ss) >= numel(shape(g, a)))
            continue;
          // Constant along the contracted dim: x's last, w's second to last.
          if (aligned_extent(ss, r, operand == 0 ? r - 1 : r - 2) != 1) continue;
          RNode mm{OpKind::MatMul, F32, {a, n.kids[1]}, {}};
          if (operand == 1) mm.kids = {n.kids[0], a};
          RNode top{k, n.dtype, {rhs_ref(0), s}, {}};
          if (side == 1) top.kids = {s, rhs_ref(0)};
          emit(out, c, "scale-out-of-matmul", {mm, top});
        }
      });
  }
}

// x / c = x * (1/c) where 1/c is exact (a power of two, or 1/n for whole n: the verifier reads
// the nearest double to 1/n as 1/n).
void div_by_constant(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::Div) return;
  each(g, n.kids[1], OpKind::Constant, [&](const ENode& k) {
    if (auto inv = exact_inverse(k.attrs.value))
      emit(out, c, "div-by-constant",
           {{OpKind::Constant, F32, {}, constant(*inv)},
            {OpKind::Mul, n.dtype, {n.kids[0], rhs_ref(0)}, {}}});
  });
}

// (x * c1) * c2 = x * (c1 c2) where the product is exact.
void fold_constants(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::Mul) return;
  for (int side : {0, 1}) {
    const ClassId m = n.kids[side], k2 = n.kids[1 - side];
    each(g, k2, OpKind::Constant, [&](const ENode& c2) {
      each(g, m, OpKind::Mul, [&](const ENode& inner) {
        for (int s2 : {0, 1})
          each(g, inner.kids[1 - s2], OpKind::Constant, [&](const ENode& c1) {
            if (auto p = exact_product(c1.attrs.value, c2.attrs.value))
              emit(out, c, "fold-constants",
                   {{OpKind::Constant, F32, {}, constant(*p)},
                    {OpKind::Mul, n.dtype, {inner.kids[s2], rhs_ref(0)}, {}}});
          });
      });
    });
  }
}

// ---- transposes -----------------------------------------------------------------------------

// (a b)ᵀ = bᵀ aᵀ, both ways (transposes of the last two dims).
void transpose_of_matmul(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind == OpKind::Transpose && n.attrs.perm == swap_last(rank(g, c)))
    each(g, n.kids[0], OpKind::MatMul, [&](const ENode& m) {
      const ClassId a = m.kids[0], b = m.kids[1];
      emit(out, c, "transpose-of-matmul",
           {{OpKind::Transpose, F32, {b}, with_perm(swap_last(rank(g, b)))},
            {OpKind::Transpose, F32, {a}, with_perm(swap_last(rank(g, a)))},
            {OpKind::MatMul, n.dtype, {rhs_ref(0), rhs_ref(1)}, {}}});
    });
  if (n.kind == OpKind::MatMul)
    each(g, n.kids[0], OpKind::Transpose, [&](const ENode& tb) {
      if (tb.attrs.perm != swap_last(rank(g, n.kids[0]))) return;
      each(g, n.kids[1], OpKind::Transpose, [&](const ENode& ta) {
        if (ta.attrs.perm != swap_last(rank(g, n.kids[1]))) return;
        emit(out, c, "transpose-of-matmul",
             {{OpKind::MatMul, F32, {ta.kids[0], tb.kids[0]}, {}},
              {OpKind::Transpose, n.dtype, {rhs_ref(0)}, with_perm(swap_last(rank(g, c)))}});
      });
    });
}

// transpose_q(transpose_p(x)) = transpose_{p∘q}(x), and x itself when that is the identity.
void transpose_of_transpose(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::Transpose) return;
  each(g, n.kids[0], OpKind::Transpose, [&](const ENode& t) {
    std::vector<int> q(n.attrs.perm.size());
    for (size_t i = 0; i < q.size(); ++i) q[i] = t.attrs.perm[n.attrs.perm[i]];
    if (is_identity(q)) {
      Match m;
      m.target = c;
      m.same = t.kids[0];
      m.rule = "transpose-of-transpose";
      out.push_back(std::move(m));
    } else {
      emit(out, c, "transpose-of-transpose",
           {{OpKind::Transpose, n.dtype, {t.kids[0]}, with_perm(q)}});
    }
  });
}

// transpose(f(x)) = f(transpose(x)), transpose(x ⊙ y) = transpose(x) ⊙ transpose(y) (an operand
// of one element stays as it is): a transpose moves toward the matmul operand it can become.
void transpose_through_elementwise(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::Transpose) return;
  const ClassId in = n.kids[0];
  for (const ENode& e : g.cls(in).nodes) {
    const OpClass k = op_info(e.kind).cls;
    if (k != OpClass::Unary && k != OpClass::Binary) continue;
    std::vector<RNode> rhs;
    std::vector<int64_t> operands;
    bool ok = true;
    for (ClassId x : e.kids) {
      if (shape(g, x) == shape(g, in)) {
        rhs.push_back({OpKind::Transpose, F32, {x}, n.attrs});
        operands.push_back(rhs_ref(static_cast<int>(rhs.size()) - 1));
      } else if (numel(shape(g, x)) == 1 && rank(g, x) <= rank(g, in)) {
        operands.push_back(x);
      } else {
        ok = false;
      }
    }
    if (!ok) continue;
    rhs.push_back({e.kind, n.dtype, operands, e.attrs});
    emit(out, c, "transpose-through-elementwise", std::move(rhs));
  }
}

// ---- exp ------------------------------------------------------------------------------------

// exp(a) * exp(b) = exp(a + b), exp(a) / exp(b) = exp(a - b): one exp instead of two (exact;
// the verifier's exp is a homomorphism).
void exp_combine(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::Mul && n.kind != OpKind::Div) return;
  each(g, n.kids[0], OpKind::Exp, [&](const ENode& ea) {
    each(g, n.kids[1], OpKind::Exp, [&](const ENode& eb) {
      const OpKind k = n.kind == OpKind::Mul ? OpKind::Add : OpKind::Sub;
      emit(out, c, "exp-combine",
           {{k, F32, {ea.kids[0], eb.kids[0]}, {}}, {OpKind::Exp, n.dtype, {rhs_ref(0)}, {}}});
    });
  });
}

// exp(x - m) / sum_d exp(x - m) = exp(x) / sum_d exp(x) for m constant along d (softmax's
// expansion, a hand-written max): the shift-free form that the attention lowering runs online,
// max-subtracted where that is safe. exp(x) is of unbounded range: its new nodes are float32.
void cancel_shift(const EGraph& g, ClassId c, const ENode& n, Out& out) {
  if (n.kind != OpKind::Div) return;
  const ClassId e = n.kids[0], l = n.kids[1];
  each(g, l, OpKind::Sum, [&](const ENode& s) {
    if (s.kids[0] != e || !s.attrs.keepdim) return;
    const int64_t d = s.attrs.dim;
    each(g, e, OpKind::Exp, [&](const ENode& x) {
      each(g, x.kids[0], OpKind::Sub, [&](const ENode& sub) {
        const ClassId v = sub.kids[0], m = sub.kids[1];
        const Shape& vs = shape(g, v);
        const int64_t r = static_cast<int64_t>(vs.size());
        if (vs != shape(g, e) || rank(g, m) > r || aligned_extent(shape(g, m), r, d) != 1) return;
        emit(out, c, "cancel-shift",
             {{OpKind::Exp, F32, {v}, {}},
              {OpKind::Sum, F32, {rhs_ref(0)}, reduce(d, true)},
              {OpKind::Div, n.dtype, {rhs_ref(0), rhs_ref(1)}, {}}});
      });
    });
  });
}

}  // namespace

const std::vector<Rule>& all_rules() {
  static const std::vector<Rule> rules = {
      {"matmul-assoc", "(x a) b = x (a b)", matmul_assoc},
      {"matmul-distribute", "x (a + b) = x a + x b", matmul_distribute},
      {"matmul-factor", "x a + x b = x (a + b)", matmul_factor},
      {"sum-through-matmul", "sum_n (x t) = x (sum_n t), sum_m (x t) = (sum_m x) t",
       sum_through_matmul},
      {"reduce-unit-dim", "sum_d(x) = x where x has extent 1 along d (kept)", reduce_unit_dim},
      {"reduce-through-transpose", "sum_d(xᵀ) = (sum_{p[d]} x)ᵀ (max likewise)",
       reduce_through_transpose},
      {"scale-out-of-sum", "sum_d(x * s) = sum_d(x) * s, s constant along d", scale_out_of_sum},
      {"scale-into-matmul", "(x w) * s = (x * s) w = x (w * s) where s allows it",
       scale_into_matmul},
      {"scale-out-of-matmul", "(x * s) w = (x w) * s where s allows it", scale_out_of_matmul},
      {"div-by-constant", "x / c = x * (1/c), 1/c exact", div_by_constant},
      {"fold-constants", "(x * c1) * c2 = x * (c1 c2), exact", fold_constants},
      {"transpose-of-matmul", "(a b)ᵀ = bᵀ aᵀ", transpose_of_matmul},
      {"transpose-of-transpose", "(xᵖ)ᵠ = x^(p∘q)", transpose_of_transpose},
      {"transpose-through-elementwise", "f(x)ᵀ = f(xᵀ), (x ⊙ y)ᵀ = xᵀ ⊙ yᵀ",
       transpose_through_elementwise},
      {"exp-combine", "exp(a) exp(b) = exp(a + b), exp(a) / exp(b) = exp(a - b)", exp_combine},
      {"cancel-shift", "exp(x - m) / sum_d exp(x - m) = exp(x) / sum_d exp(x), m constant along d",
       cancel_shift},
  };
  return rules;
}

const Rule* rule_named(const std::string& name) {
  for (const Rule& r : all_rules())
    if (name == r.name) return &r;
  return nullptr;
}

bool apply_match(EGraph& g, const Match& m) {
  if (m.rhs.empty()) return g.merge(m.target, m.same, m.rule);
  std::vector<ClassId> made;
  for (const RNode& r : m.rhs) {
    ENode n;
    n.kind = r.kind;
    n.dtype = r.dtype;
    n.attrs = r.attrs;
    for (int64_t k : r.kids) {
      KILN_ASSERT(k >= 0 || -1 - k < static_cast<int64_t>(made.size()),
                  "rule {}: a right side refers to a later node", m.rule);
      n.kids.push_back(k >= 0 ? static_cast<ClassId>(k) : made[-1 - k]);
    }
    try {
      made.push_back(g.add(std::move(n), m.rule));
    } catch (const UserError&) {
      return false;  // does not type: a broadcast the rule's conditions did not foresee
    }
  }
  const EClass& top = g.cls(made.back());
  const EClass& target = g.cls(m.target);
  if (top.shape != target.shape || top.dtype != target.dtype) return false;
  return g.merge(m.target, made.back(), m.rule);
}

}  // namespace kiln::algebra
