// The attention lowering: match_attention (the contract is in
// include/kiln/codegen/lowerings/attention.h), then the plan, its cost and its emission.
#include "kiln/codegen/lowerings/attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "../cost_util.h"
#include "../emit_internal.h"
#include "kiln/codegen/schedule.h"

namespace kiln {

namespace {

bool is_16bit(DType d) {
  return d == DType::F16 || d == DType::BF16;
}

// The last two extents of a tile whose leading extents are all 1.
bool matrix_tile(const Shape& s, int64_t& rows, int64_t& cols) {
  if (s.size() < 2) return false;
  for (size_t i = 0; i + 2 < s.size(); ++i)
    if (s[i] != 1) return false;
  rows = s[s.size() - 2];
  cols = s.back();
  return true;
}

bool scalar_tile(const Shape& s) {
  for (int64_t e : s)
    if (e != 1) return false;
  return true;
}

bool swaps_last_two(const BlockOp& tr) {
  const int r = static_cast<int>(tr.shape.size());
  if (tr.attrs.perm.empty()) return r >= 2;
  if (static_cast<int>(tr.attrs.perm.size()) != r) return false;
  for (int i = 0; i + 2 < r; ++i)
    if (tr.attrs.perm[i] != i) return false;
  return tr.attrs.perm[r - 2] == r - 1 && tr.attrs.perm[r - 1] == r - 2;
}

class Matcher {
 public:
  Matcher(const BlockGraph& bg, const Target& t, bool lossy_f16, bool lossy_bf16)
      : bg_(bg), t_(t), lossy_f16_(lossy_f16), lossy_bf16_(lossy_bf16) {}

  bool run(AttentionPlan& plan) {
    if (t_.arch != Arch::Sm90a) return false;
    if (bg_.loop.size() > 1 || bg_.grid.empty() || bg_.grid.size() > 3) return false;
    has_loop_ = bg_.loop.size() == 1;
    plan_ = &plan;
    plan.grid = bg_.grid;
    role_.assign(bg_.ops.size(), Role::None);

    OperandTiles o;
    if (!products(plan, o) || !reductions(plan, o) || !render(plan, o)) return false;
    plan.pv_op = mm2_;
    nt_ = o.nt;
    online(plan);
    // A last chunk of fewer than 64 keys is masked by setting its extra scores to -inf before the
    // running max, which only the online form's exp(a (s - m)), a > 0, maps to 0.
    if (plan.keys % 64 && !plan.online) return false;
    return true;
  }

 private:
  // What products() found: the operand tiles, the keys per tile and the stage of the loop body.
  struct OperandTiles {
    int qi = -1, ki = -1, vi = -1;
    int64_t nt = 0;
    Stage body = Stage::Invariant;
  };

  // The two products and their operands, the extents, dtypes and the runtime kernel's limits.
  bool products(AttentionPlan& plan, OperandTiles& o) {
    // The two products: mm2's A operand is elementwise in mm1's result.
    std::vector<int> mms;
    for (size_t i = 0; i < bg_.ops.size(); ++i)
      if (bg_.ops[i].kind == OpKind::MatMul) mms.push_back(static_cast<int>(i));
    if (mms.size() != 2) return false;
    mm1_ = mms[0], mm2_ = mms[1];
    role_[mm1_] = Role::Region;
    if (!region(bg_.ops[mm2_].inputs[0])) return false;
    role_[mm2_] = Role::Product;

    // Operands: Q [Mt, D] invariant; K [D, Nt] (or a transposed [Nt, D] tile); V [Nt, DV] (or
    // a transposed [DV, Nt] tile).
    const BlockOp& m1 = bg_.ops[mm1_];
    const BlockOp& m2 = bg_.ops[mm2_];
    int& qi = o.qi;
    qi = m1.inputs[0];
    if (bg_.ops[qi].kind != OpKind::Input && !row_norm(m1.inputs[0], qi, plan.q_norm)) return false;
    if (bg_.ops[qi].stage != Stage::Invariant) return false;
    role_[qi] = Role::Operand;
    int& ki = o.ki;
    int& vi = o.vi;
    if (!operand(m1.inputs[1], ki, plan.k_nmajor, &plan.k_norm)) return false;
    if (!operand(m2.inputs[1], vi, plan.v_nmajor)) return false;
    if (ki == qi || vi == qi || ki == vi) return false;
    int64_t mt, d, d2, nt2, dv, r1, c1, r2, c2;
    int64_t& nt = o.nt;
    if (!matrix_tile(bg_.ops[qi].shape, mt, d)) return false;
    if (!matrix_tile(bg_.ops[ki].shape, r1, c1) || !matrix_tile(bg_.ops[vi].shape, r2, c2))
      return false;
    d2 = plan.k_nmajor ? r1 : c1;
    nt = plan.k_nmajor ? c1 : r1;
    nt2 = plan.v_nmajor ? r2 : c2;
    dv = plan.v_nmajor ? c2 : r2;
    if (d2 != d || nt2 != nt) return false;
    int64_t sm, sn, om, on;
    if (!matrix_tile(m1.shape, sm, sn) || sm != mt || sn != nt) return false;
    if (!matrix_tile(m2.shape, om, on) || om != mt || on != dv) return false;
    plan.mt = mt, plan.d = d, plan.dv = dv;
    plan.keys = nt * (has_loop_ ? bg_.loop[0] : 1);
    o.body = has_loop_ ? Stage::Loop : Stage::Invariant;
    const Stage body = o.body;
    for (int i : {ki, vi, mm1_, mm2_})
      if (bg_.ops[i].stage != body) return false;

    // Types and the runtime kernel's shape limits.
    plan.ab = bg_.inputs[bg_.ops[qi].io].dtype;
    for (int i : {ki, vi})
      if (bg_.inputs[bg_.ops[i].io].dtype != plan.ab) return false;
    if (!is_16bit(plan.ab) || !(plan.ab == DType::F16 ? lossy_f16_ : lossy_bf16_)) return false;
    // Keys per block need not be a multiple of 64: the last chunk's extra keys are masked (online
    // chains only, checked in run()).
    if (mt % 64 || d % 64 || d > 256 || dv % 64 || dv > 256) return false;

    // The loop walks the keys of K and V; Q does not move.
    if (has_loop_) {
      if (bg_.ops[qi].fmap[0] != -1) return false;
      const int kr = static_cast<int>(bg_.inputs[bg_.ops[ki].io].shape.size());
      const int vr = static_cast<int>(bg_.inputs[bg_.ops[vi].io].shape.size());
      if (bg_.ops[ki].fmap[0] != (plan.k_nmajor ? kr - 1 : kr - 2)) return false;
      if (bg_.ops[vi].fmap[0] != (plan.v_nmajor ? vr - 2 : vr - 1)) return false;
    }
    if (!view(qi, plan.q) || !view(ki, plan.k) || !view(vi, plan.v)) return false;
    // A normalized operand's prologue ops are in the operand's stage.
    for (size_t i = 0; i < bg_.ops.size(); ++i)
      if (role_[i] == Role::Prologue && bg_.ops[i].kind != OpKind::Input &&
          bg_.ops[i].stage != (prologue_of_[static_cast<int>(i)] == qi ? Stage::Invariant : body))
        return false;

    return true;
  }

  // Row reductions of region values and the accumulators; loop values reach the epilogue only
  // through accumulators.
  bool reductions(AttentionPlan& plan, const OperandTiles& o) {
    const Stage body = o.body;
    const int64_t mt = plan.mt;
    // Row reductions of region values, each feeding accumulators only (or, without a loop, the
    // epilogue directly); accumulators of the second product and of those reductions.
    for (size_t i = 0; i < bg_.ops.size(); ++i) {
      const BlockOp& op = bg_.ops[i];
      if (role_[i] != Role::None) continue;
      if (op.kind == OpKind::Sum || op.kind == OpKind::Mean) {
        const int in = op.inputs[0];
        if (!region(in) || op.stage != body) return false;
        const int r = static_cast<int>(bg_.ops[in].shape.size());
        int64_t a, b;
        if (op.attrs.dim != r - 1 || !op.attrs.keepdim || !matrix_tile(op.shape, a, b) || a != mt ||
            b != 1)
          return false;
        role_[i] = Role::Reduction;
        row_of_[static_cast<int>(i)] = plan.rows++;
      }
    }
    for (size_t i = 0; i < bg_.ops.size(); ++i) {
      const BlockOp& op = bg_.ops[i];
      if (op.kind == OpKind::AccumMax || op.kind == OpKind::AccumRescale) return false;
      if (op.kind != OpKind::AccumSum) continue;
      const int in = op.inputs[0];
      if (in != mm2_ && role_[in] != Role::Reduction) return false;
      role_[i] = Role::Accum;
    }
    // Values produced in the loop reach the epilogue only through accumulators.
    if (has_loop_)
      for (size_t i = 0; i < bg_.ops.size(); ++i)
        for (int in : bg_.ops[i].inputs) {
          const bool loop_value = role_[in] == Role::Region || role_[in] == Role::Product ||
                                  role_[in] == Role::Reduction;
          const bool reader = role_[i] == Role::Region || role_[i] == Role::Reduction ||
                              role_[i] == Role::Product || role_[i] == Role::Accum;
          if (loop_value && !reader) return false;
        }

    return true;
  }

  // The elementwise map, the row feeds, the savers and their epilogues.
  bool render(AttentionPlan& plan, const OperandTiles& o) {
    const BlockOp& m2 = bg_.ops[mm2_];
    const int64_t nt = o.nt;
    // The elementwise map, the row feeds.
    memo_.clear();
    elem_ = true;
    if (!expr(m2.inputs[0], plan.p, plan.elem_statements)) return false;
    plan.feeds.resize(plan.rows);
    for (auto [op, j] : row_of_) {
      const BlockOp& red = bg_.ops[op];
      std::string f;
      if (!expr(red.inputs[0], f, plan.elem_statements)) return false;
      if (red.kind == OpKind::Mean) f = "(" + f + ") * " + cgen::flit(1.0 / nt);
      plan.feeds[j] = f;
    }

    // The savers and their epilogues.
    elem_ = false;
    int savers = 0;
    for (size_t i = 0; i < bg_.ops.size(); ++i) {
      const BlockOp& op = bg_.ops[i];
      if (op.kind != OpKind::Output) continue;
      ++savers;
      for (int f : op.fmap)
        if (f != -1) return false;
      if (!store(op, plan)) return false;
    }
    if (savers == 0) return false;
    // Everything else must be an epilogue value some saver rendered, a constant or an operand.
    for (size_t i = 0; i < bg_.ops.size(); ++i) {
      const OpClass c = op_info(bg_.ops[i].kind).cls;
      if (role_[i] == Role::None && c != OpClass::Constant && bg_.ops[i].kind != OpKind::Output)
        return false;
    }
    return true;
  }

 private:
  enum class Role { None, Operand, Prologue, Region, Reduction, Product, Accum, Epilogue };

  // An input tile of the products, directly (N-major) or through a transpose of the last two
  // dims (K-major). With `norm`, the transposed tile may be a row norm of the input (row_norm):
  // K stored keys x D, each key normalized over D (the runtime's key factors); an N-major tile's
  // rows are not keys, so it is never normalized there.
  bool operand(int id, int& input, bool& nmajor, AttentionNorm* norm = nullptr) {
    const BlockOp& op = bg_.ops[id];
    if (op.kind == OpKind::Input) {
      input = id, nmajor = true;
    } else if (op.kind == OpKind::Transpose && swaps_last_two(op) &&
               bg_.ops[op.inputs[0]].kind == OpKind::Input) {
      input = op.inputs[0], nmajor = false;
      role_[id] = Role::Operand;
    } else if (norm && op.kind == OpKind::Transpose && swaps_last_two(op) &&
               row_norm(op.inputs[0], input, *norm)) {
      nmajor = false;
      role_[id] = Role::Operand;
    } else {
      return false;
    }
    role_[input] = Role::Operand;
    return true;
  }

  // Whether op `i` is an input tile holding one value per column of a `cols`-wide row, the same
  // for every block and iteration (rms_norm's weight: a [cols] tensor read whole).
  bool column_weight(int i, int64_t cols) const {
    const BlockOp& b = bg_.ops[i];
    if (b.kind != OpKind::Input || b.shape.empty() || b.shape.back() != cols) return false;
    for (size_t d = 0; d + 1 < b.shape.size(); ++d)
      if (b.shape[d] != 1) return false;
    for (int m : b.imap)
      if (m >= 0) return false;
    for (int f : b.fmap)
      if (f >= 0) return false;
    const TensorDesc& td = bg_.inputs[b.io];
    return numel(td.shape) == cols;
  }

  // Whether op `id` is a row norm of an input tile X: X * h(ss), ss the sum (or mean) over X's
  // last dim of X^2 (square(X) or X * X), h any elementwise function of ss and constants
  // (rms_norm without a weight: X / sqrt(ss / n + eps), maybe times a scale the algebra moved
  // onto it), at most one column weight multiplied on (column_weight: rms_norm's); X itself is
  // only multiplied, divided or negated (the factor's expression is the same op applied to the
  // factor, with X's place taken by 1). The plan gets the factor as float32 C++ over `ss`, the sum
  // of squares, and the weight's input; the ops become Prologue (the runtime computes the factors
  // and scales S); X's op is `input`.
  bool row_norm(int id, int& input, AttentionNorm& nm) {
    const BlockOp& op = bg_.ops[id];
    const OpClass c = op_info(op.kind).cls;
    if ((c != OpClass::Binary && c != OpClass::Fused) || nm.on) return false;
    // X: down the chain of same-shape elementwise ops to an input tile.
    int x = id;
    while (bg_.ops[x].kind != OpKind::Input) {
      const OpClass xc = op_info(bg_.ops[x].kind).cls;
      if (xc != OpClass::Unary && xc != OpClass::Binary && xc != OpClass::Fused) return false;
      int next = -1;
      for (int in : bg_.ops[x].inputs)
        if (bg_.ops[in].shape == op.shape && op_info(bg_.ops[in].kind).cls != OpClass::Constant) {
          next = in;
          break;
        }
      if (next < 0) return false;
      x = next;
    }
    int64_t rows, cols;
    if (!matrix_tile(op.shape, rows, cols)) return false;
    std::vector<int> marked;
    nm.statements.clear();
    // The factor side: values of shape [.., rows, 1] made of ss and constants.
    std::map<int, std::string> memo;
    std::function<bool(int, std::string&)> side = [&](int i, std::string& out) {
      if (auto it = memo.find(i); it != memo.end()) return out = it->second, true;
      const BlockOp& b = bg_.ops[i];
      const OpClass bc = op_info(b.kind).cls;
      int64_t r1, c1;
      if (bc == OpClass::Constant) {
        out = cgen::flit(b.attrs.value);
      } else if ((b.kind == OpKind::Sum || b.kind == OpKind::Mean) && b.attrs.keepdim &&
                 b.attrs.dim == static_cast<int>(b.shape.size()) - 1 &&
                 matrix_tile(b.shape, r1, c1) && r1 == rows && c1 == 1) {
        const BlockOp& sq = bg_.ops[b.inputs[0]];
        const bool squares = (sq.kind == OpKind::Square && sq.inputs[0] == x) ||
                             (sq.kind == OpKind::Mul && sq.inputs[0] == x && sq.inputs[1] == x);
        if (!squares) return false;
        out = b.kind == OpKind::Mean ? "(ss * " + cgen::flit(1.0 / double(cols)) + ")" : "ss";
        marked.push_back(b.inputs[0]);
      } else if ((bc == OpClass::Unary || bc == OpClass::Binary || bc == OpClass::Fused) &&
                 matrix_tile(b.shape, r1, c1) && r1 == rows && c1 == 1) {
        std::vector<std::string> xs;
        for (int in : b.inputs) {
          std::string e;
          if (!side(in, e)) return false;
          xs.push_back(e);
        }
        out = apply_block_op<std::string>(
            b, xs,
            [&](OpKind k, const Attrs& at, const std::vector<std::string>& a) {
              return bind(cgen::ew_expr(k, at, a), nm.statements, "n");
            },
            [](double v) { return cgen::flit(v); });
      } else {
        return false;
      }
      if (bc != OpClass::Constant) marked.push_back(i);
      memo[i] = out;
      return true;
    };
    // The ops from X up to `id`, linear in X: every step that reads X (or a value linear in it)
    // is X * f, f * X, X / f or -X with f free of X, so the value is X * factor.
    struct Val {
      std::string e;  // the value, or its factor where linear
      bool lin = false;
      int weight = -1;  // a per-column weight: its input op
    };
    // One elementwise step over values of the form above; `broken` once one is not.
    bool broken = false;
    auto step = [&](OpKind k, const Attrs& at, const std::vector<Val>& xs) {
      Val v;
      std::vector<std::string> args;
      int lins = 0, weights = 0;
      for (const Val& x : xs) {
        args.push_back(x.e);
        lins += x.lin ? 1 : 0;
        weights += x.weight >= 0 ? 1 : 0;
      }
      if (weights > 0) {
        // X * factor times a weight per column (rms_norm's weight): at most one, multiplied.
        if (weights != 1 || lins != 1 || k != OpKind::Mul || nm.weight_io >= 0)
          return broken = true, v;
        const Val& w = xs[0].weight >= 0 ? xs[0] : xs[1];
        v = xs[0].lin ? xs[0] : xs[1];
        nm.weight_io = bg_.ops[w.weight].io;
        marked.push_back(w.weight);
      } else if (lins == 0) {
        v.e = bind(cgen::ew_expr(k, at, args), nm.statements, "n");
      } else if (lins == 1 &&
                 (k == OpKind::Mul || k == OpKind::Neg || (k == OpKind::Div && xs[0].lin))) {
        v.lin = true;
        v.e = bind(cgen::ew_expr(k, at, args), nm.statements, "n");
      } else {
        broken = true;
      }
      return v;
    };
    std::map<int, Val> lin_memo;
    std::function<bool(int, Val&)> value = [&](int i, Val& out) -> bool {
      if (i == x) return out = {"1.0f", true}, true;
      if (auto it = lin_memo.find(i); it != lin_memo.end()) return out = it->second, true;
      const BlockOp& b = bg_.ops[i];
      if (b.shape != op.shape) {
        out.lin = false;
        if (column_weight(i, cols)) return out.weight = i, true;
        return side(i, out.e);
      }
      const OpClass bc = op_info(b.kind).cls;
      if (bc != OpClass::Unary && bc != OpClass::Binary && bc != OpClass::Fused) return false;
      std::vector<Val> vals;
      for (int in : b.inputs) {
        Val v;
        if (!value(in, v)) return false;
        vals.push_back(v);
      }
      const Val v = apply_block_op<Val>(b, vals, step, [](double c) {
        return Val{cgen::flit(c), false};
      });
      // (not linear: a same-shape value free of X is not a row factor)
      if (broken || !v.lin) return false;
      out = v;
      lin_memo[i] = out;
      marked.push_back(i);
      return true;
    };
    Val top;
    if (!value(id, top) || !top.lin) return false;
    nm.factor = top.e;
    nm.on = true;
    input = x;
    role_[id] = Role::Prologue;
    prologue_of_[id] = x;
    for (int i : marked) role_[i] = Role::Prologue, prologue_of_[i] = x;
    return true;
  }

  // Whether op `id` is elementwise in mm1's result (and constants), marking it.
  bool region(int id) {
    if (role_[id] == Role::Region) return true;
    const BlockOp& op = bg_.ops[id];
    const OpClass c = op_info(op.kind).cls;
    if (c != OpClass::Unary && c != OpClass::Binary && c != OpClass::Fused) return false;
    if (op.shape != bg_.ops[mm1_].shape) return false;
    bool any = false;
    for (int in : op.inputs) {
      const BlockOp& io = bg_.ops[in];
      if (op_info(io.kind).cls == OpClass::Constant) continue;
      if (!region(in)) return false;
      any = true;
    }
    if (!any) return false;
    role_[id] = Role::Region;
    return true;
  }

  // The 2-D view of input op `id`'s tensor and its tile origin per grid index.
  bool view(int id, AttentionView& v) {
    const BlockOp& op = bg_.ops[id];
    const Shape& dims = bg_.inputs[op.io].shape;
    const int r = static_cast<int>(dims.size());
    if (r < 2 || static_cast<int>(op.shape.size()) != r) return false;
    v.io = op.io;
    v.cols = dims[r - 1];
    v.rows = 1;
    for (int i = 0; i < r - 1; ++i) v.rows *= dims[i];
    if (v.cols % 8 || v.rows >= (int64_t(1) << 31) || v.cols >= (int64_t(1) << 31)) return false;
    // Along dim d the tile starts at (g * L_d + l) * t_d (block_graph.h), l = 0 here.
    for (size_t g = 0; g < bg_.grid.size(); ++g) {
      const int dm = op.imap[g];
      if (dm < 0) continue;
      const int64_t step = op.shape[dm] * (has_loop_ && op.fmap[0] == dm ? bg_.loop[0] : 1);
      if (dm == r - 1) {
        v.col_coef[g] = step;
      } else {
        int64_t stride = 1;  // rows between consecutive indices of dim dm
        for (int e = dm + 1; e < r - 1; ++e) stride *= dims[e];
        v.row_coef[g] = step * stride;
      }
    }
    return true;
  }

  // A saver's address rule and epilogue.
  bool store(const BlockOp& sv, AttentionPlan& plan) {
    AttentionStore st;
    st.io = sv.io;
    const TensorDesc& od = bg_.outputs[sv.io];
    st.dtype = od.dtype;
    int64_t a, b;
    if (!matrix_tile(sv.shape, a, b) || a != plan.mt || (b != plan.dv && b != 1)) return false;
    st.row = b == 1 && plan.dv != 1;
    const int ro = static_cast<int>(od.shape.size());
    const int rt = static_cast<int>(sv.shape.size());
    if (ro < 2 || ro < rt) return false;
    st.ld = od.shape[ro - 1];
    if (!st.row && (st.ld % 2)) return false;  // column pairs are stored together
    for (size_t g = 0; g < bg_.grid.size(); ++g) {
      const int dm = sv.imap[g];
      if (dm < 0) continue;
      const int td = dm - (ro - rt);  // the tile dim aligned with output dim dm
      const int64_t ext = td >= 0 ? sv.shape[td] : 1;
      int64_t stride = 1;
      for (int e = dm + 1; e < ro; ++e) stride *= od.shape[e];
      st.base_coef[g] = ext * stride;
    }
    memo_.clear();
    uses_o_ = false;
    if (!expr(sv.inputs[0], st.result, st.statements)) return false;
    if (st.row && uses_o_) return false;
    plan.stores.push_back(std::move(st));
    return true;
  }

  // Renders op `id` as a float expression: in the elementwise map (elem_) over `s`, else in the
  // epilogue over `o` and `r[j]`.
  bool expr(int id, std::string& out, std::vector<std::string>& stmts) {
    if (auto it = memo_.find(id); it != memo_.end()) {
      out = it->second;
      return true;
    }
    const BlockOp& op = bg_.ops[id];
    const OpClass c = op_info(op.kind).cls;
    bool ok = false;
    if (c == OpClass::Constant) {
      out = cgen::flit(op.attrs.value);
      per_row_.insert(out);
      ok = true;
    } else if (elem_ && id == mm1_) {
      out = "s";
      ok = true;
    } else if (!elem_ && ((has_loop_ && op.kind == OpKind::AccumSum && op.inputs[0] == mm2_) ||
                          (!has_loop_ && id == mm2_))) {
      out = "o";
      uses_o_ = true;
      ok = true;
    } else if (!elem_ && has_loop_ && op.kind == OpKind::AccumSum) {
      auto it = row_of_.find(op.inputs[0]);
      if (it == row_of_.end()) return false;
      out = "r[" + std::to_string(it->second) + "]";
      per_row_.insert(out);
      ok = true;
    } else if (!elem_ && !has_loop_ && row_of_.count(id)) {
      out = "r[" + std::to_string(row_of_[id]) + "]";
      per_row_.insert(out);
      ok = true;
    } else if (c == OpClass::Unary || c == OpClass::Binary || c == OpClass::Fused) {
      if (elem_ ? role_[id] != Role::Region : !epilogue_shape(op.shape)) return false;
      std::vector<std::string> xs;
      for (int in : op.inputs) {
        std::string x;
        if (!expr(in, x, stmts)) return false;
        xs.push_back(x);
      }
      if (c == OpClass::Fused) {
        std::vector<std::string> vals = xs;
        for (const ThreadOp& to : op.thread->ops) {
          std::vector<std::string> args;
          for (int r : to.inputs) args.push_back(vals[r]);
          vals.push_back(apply(to.kind, to.attrs, args, stmts));
        }
        out = vals.back();
      } else {
        out = apply(op.kind, op.attrs, xs, stmts);
      }
      if (!elem_) role_[id] = Role::Epilogue;
      ok = true;
    }
    if (ok) memo_[id] = out;
    return ok;
  }

  // ---- The online form's two conditions (attention.h) ----

  // A region value as a function of s: the constant b, a s + b (Affine) or b exp(a s) (Exp).
  struct Form {
    enum Kind { Unknown, Const, Affine, Exp } kind = Unknown;
    double a = 0, b = 0;
  };

  static Form apply_form(OpKind k, const Attrs&, const std::vector<Form>& x) {
    using F = Form;
    auto known = [](double v) { return std::isfinite(v); };
    auto make = [&](F::Kind kind, double a, double b) {
      return known(a) && known(b) ? F{kind, a, b} : F{};
    };
    auto scale = [&](const F& f, double c) {  // f * c
      return f.kind == F::Unknown ? F{} : make(f.kind, f.kind == F::Exp ? f.a : f.a * c, f.b * c);
    };
    for (const F& f : x)
      if (f.kind == F::Unknown) return F{};
    switch (k) {
      case OpKind::Neg:
        return scale(x[0], -1.0);
      case OpKind::Exp:
        if (x[0].kind == F::Const) return make(F::Const, 0, std::exp(x[0].b));
        if (x[0].kind == F::Affine) return make(F::Exp, x[0].a, std::exp(x[0].b));
        return F{};
      case OpKind::Add:
      case OpKind::Sub: {
        const double sg = k == OpKind::Sub ? -1.0 : 1.0;
        if (x[0].kind == F::Exp || x[1].kind == F::Exp) return F{};
        const F::Kind kind = x[0].kind == F::Const && x[1].kind == F::Const ? F::Const : F::Affine;
        return make(kind, x[0].a + sg * x[1].a, x[0].b + sg * x[1].b);
      }
      case OpKind::Mul:
        if (x[1].kind == F::Const) return scale(x[0], x[1].b);
        if (x[0].kind == F::Const) return scale(x[1], x[0].b);
        if (x[0].kind == F::Exp && x[1].kind == F::Exp)
          return make(F::Exp, x[0].a + x[1].a, x[0].b * x[1].b);
        return F{};
      case OpKind::Div:
        if (x[1].kind == F::Const) return x[1].b != 0 ? scale(x[0], 1.0 / x[1].b) : F{};
        if (x[1].kind == F::Exp && x[1].b != 0) {
          if (x[0].kind == F::Exp) return make(F::Exp, x[0].a - x[1].a, x[0].b / x[1].b);
          if (x[0].kind == F::Const) return make(F::Exp, -x[1].a, x[0].b / x[1].b);
        }
        return F{};
      default:
        return F{};
    }
  }

  // Applies op `op` (elementwise or fused) to its inputs' abstract values: apply(kind, attrs,
  // args) per step; constants give `leaf`.
  template <class V, class Apply, class Const>
  static V apply_block_op(const BlockOp& op, const std::vector<V>& ins, Apply apply, Const leaf) {
    if (op.kind != OpKind::Fused) return apply(op.kind, op.attrs, ins);
    std::vector<V> vals = ins;
    for (const ThreadOp& to : op.thread->ops) {
      if (to.kind == OpKind::Constant) {
        vals.push_back(leaf(to.attrs.value));
        continue;
      }
      std::vector<V> args;
      for (int r : to.inputs) args.push_back(vals[r]);
      vals.push_back(apply(to.kind, to.attrs, args));
    }
    return vals.back();
  }

  Form form(int id, std::map<int, Form>& memo) const {
    if (auto it = memo.find(id); it != memo.end()) return it->second;
    const BlockOp& op = bg_.ops[id];
    Form f;
    if (id == mm1_) {
      f = {Form::Affine, 1.0, 0.0};
    } else if (op.kind == OpKind::Constant) {
      f = {Form::Const, 0.0, op.attrs.value};
    } else if (role_[id] == Role::Region) {
      std::vector<Form> ins;
      for (int in : op.inputs) ins.push_back(form(in, memo));
      f = apply_block_op<Form>(op, ins, apply_form, [](double v) {
        return Form{Form::Const, 0.0, v};
      });
    }
    memo[id] = f;
    return f;
  }

  // The degree of an epilogue value in (O, R_j) jointly, for a common positive factor: v(l O,
  // l R) = l^d v(O, R) for every l > 0; nullopt where there is none.
  using Degree = std::optional<int>;
  static Degree apply_degree(OpKind k, const Attrs&, const std::vector<Degree>& x) {
    for (const Degree& d : x)
      if (!d) return std::nullopt;
    switch (k) {
      case OpKind::Neg:
      case OpKind::Relu:  // positively homogeneous
        return x[0];
      case OpKind::Square:
        return 2 * *x[0];
      case OpKind::Reciprocal:
        return -*x[0];
      case OpKind::Mul:
        return *x[0] + *x[1];
      case OpKind::Div:
        return *x[0] - *x[1];
      case OpKind::Add:
      case OpKind::Sub:
      case OpKind::Maximum:
      case OpKind::Minimum:
        return *x[0] == *x[1] ? x[0] : std::nullopt;
      default:  // any other function of scale-free values is scale-free
        for (const Degree& d : x)
          if (*d != 0) return std::nullopt;
        return 0;
    }
  }

  Degree degree(int id) const {
    const BlockOp& op = bg_.ops[id];
    if (op.kind == OpKind::Constant) return 0;
    if (has_loop_ ? op.kind == OpKind::AccumSum : (id == mm2_ || row_of_.count(id))) return 1;
    const OpClass c = op_info(op.kind).cls;
    if (c != OpClass::Unary && c != OpClass::Binary && c != OpClass::Fused) return std::nullopt;
    std::vector<Degree> ins;
    for (int in : op.inputs) ins.push_back(degree(in));
    return apply_block_op<Degree>(op, ins, apply_degree, [](double) { return Degree(0); });
  }

  // Sets plan.online where f and the feeds are k exp(a s) with one a > 0 and every saved value
  // has degree 0.
  void online(AttentionPlan& plan) const {
    std::map<int, Form> memo;
    const Form p = form(bg_.ops[mm2_].inputs[0], memo);
    if (p.kind != Form::Exp || !(p.a > 0) || p.b == 0) return;
    std::vector<double> feeds(plan.rows, 0.0);
    for (auto [red, j] : row_of_) {
      const Form g = form(bg_.ops[red].inputs[0], memo);
      if (g.kind != Form::Exp || g.a != p.a) return;
      feeds[j] = g.b * (bg_.ops[red].kind == OpKind::Mean ? 1.0 / double(nt_) : 1.0);
    }
    for (const BlockOp& op : bg_.ops)
      if (op.kind == OpKind::Output && degree(op.inputs[0]) != Degree(0)) return;
    plan.online = true;
    plan.exp_scale = p.a;
    plan.p_coef = p.b;
    plan.feed_coef = std::move(feeds);
  }

  // Epilogue values are [.., Mt, DV] or [.., Mt, 1] tiles (or scalars).
  bool epilogue_shape(const Shape& s) const {
    if (scalar_tile(s)) return true;
    int64_t a, b;
    return matrix_tile(s, a, b) && a == plan_->mt && (b == plan_->dv || b == 1);
  }

  // An elementwise op bound to a new temporary. In the epilogue, values made of row feeds and
  // constants only are the same along a row (per_row_), and a division by one of them multiplies
  // by its reciprocal (cgen::div_by_uniform): one division per row, which the compiler shares
  // between the row's column pairs, where IEEE divisions per element (each with its own
  // slow-path branch) measured about 1 us of a 25 us attention (gqa bs 16, H100, session 17).
  std::string apply(OpKind k, const Attrs& attrs, const std::vector<std::string>& xs,
                    std::vector<std::string>& stmts) {
    auto row = [&](const std::string& x) { return per_row_.count(x) > 0; };
    const bool all_row = !elem_ && std::all_of(xs.begin(), xs.end(), row);
    const bool by_row = !elem_ && k == OpKind::Div && !all_row && row(xs[1]);
    const std::string v =
        bind(by_row ? cgen::div_by_uniform(xs[0], xs[1]) : cgen::ew_expr(k, attrs, xs), stmts);
    if (all_row) per_row_.insert(v);
    return v;
  }

  // A local for e appended to stmts, named after its index there (prefix: e for S's elementwise
  // region, t for the epilogue, n for a row norm's factor).
  std::string bind(const std::string& e, std::vector<std::string>& stmts,
                   const char* prefix = nullptr) {
    std::string v = (prefix ? prefix : elem_ ? "e" : "t") + std::to_string(stmts.size());
    stmts.push_back("const float " + v + " = " + e + ";");
    return v;
  }

  const BlockGraph& bg_;
  const Target& t_;
  bool lossy_f16_, lossy_bf16_;
  bool has_loop_ = false;
  int64_t nt_ = 0;  // keys per tile (a mean's divisor)
  bool elem_ = true;
  bool uses_o_ = false;
  int mm1_ = -1, mm2_ = -1;
  AttentionPlan* plan_ = nullptr;
  std::vector<Role> role_;
  std::map<int, int> row_of_;       // reduction op -> row feed index
  std::map<int, int> prologue_of_;  // prologue op -> the input op it normalizes
  std::map<int, std::string> memo_;
  std::set<std::string> per_row_;  // epilogue values the same along a row (apply)
};

}  // namespace

std::optional<AttentionPlan> match_attention(const BlockGraph& bg, const Target& t, bool lossy_f16,
                                             bool lossy_bf16) {
  AttentionPlan plan;
  Matcher m(bg, t, lossy_f16, lossy_bf16);
  if (!m.run(plan)) return std::nullopt;
  return plan;
}

// The runtime attention kernel's configuration for a matched chain, from H100 measurements
// (tests/gpu/attention_bench.cu, gqa shapes): CTAs of 64 rows (a graph block of mt rows runs as
// mt / 64 CTAs; more, smaller CTAs filled the SMs better than two row groups per CTA), 64-key
// chunks, 4 stages. With at least one CTA per SM, one consumer warpgroup each and two CTAs per
// SM where shared memory and the O accumulators (dv / 2 floats per thread) allow; with fewer
// CTAs than SMs, two consumer warpgroups per CTA that split its chunks (a ring each), so that
// each SM still runs two.
std::optional<AttentionKernel> AttentionKernel::match(const PlanContext& ctx, int k,
                                                      KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  const Target& t = ctx.t;
  if (op.kind != OpKind::GraphDefined || !ctx.opt.lowerings) return std::nullopt;
  bool f16 = false, bf16 = false;
  ctx.output_precision(k, f16, bf16);
  std::optional<AttentionPlan> m = match_attention(*op.block, t, f16, bf16);
  if (!m) return std::nullopt;
  AttentionKernel p{std::move(*m)};
  const AttentionPlan& a = p.a;
  int64_t blocks = 1;
  for (int64_t e : a.grid) blocks *= e;
  const int64_t tiles = blocks * (a.mt / 64);
  const int64_t q_bytes = 64 * a.d * 2, stage = (a.d + a.dv) * 64 * 2;
  p.chunk = 64;
  const int64_t chunks = p.chunks();  // the last one may be partial
  // Few row tiles (decode): an online chain splits each tile's keys over the CTAs of a cluster
  // (up to 8, the portable size) while the CTAs still fit one per SM in one wave, each keeping at
  // least 4 chunks (the ring's pipeline has something to overlap). Clusters of 8 one-SM CTAs
  // fill at most half the SMs: a cluster must fit one GPC, and on the H100 16 such clusters (128
  // CTAs) ran as two waves (attention_softmax: 13.0 us, against 8.4 as 16 clusters of 4).
  p.cluster = 1;
  auto fits = [&](int c) { return tiles * c <= (c >= 8 ? t.sm_count / 2 : t.sm_count); };
  // The CTAs of a cluster take floor shares of the chunks (differing by at most one), so any
  // chunk count splits (17 chunks over 4 CTAs: 4, 4, 4, 5).
  // (The cluster's exchange carries one row feed: chains with more stay one CTA per tile.)
  while (a.online && a.rows <= 1 && p.cluster < 8 && fits(p.cluster * 2) &&
         chunks / (p.cluster * 2) >= 4)
    p.cluster *= 2;
  kp.grid = tiles * p.cluster;
  // Two consumers splitting a CTA's keys: online chains only (the runtime's static_assert), where
  // each CTA walks at least 16 chunks, or 5 under a cluster split. Measured on an H100 (session
  // 17): without a cluster, short chains ran faster with one consumer (2 / 3 chunks per CTA 3.33
  // / 3.68 us against 3.61 / 3.81) and long ones with two (32 per CTA, gqa bs 8: 15.5 against
  // 18.2; 64, bs 16: 25.0 against 32.3); under clusters, with the pushed exchange, two
  // consumers ran 5-6 chunks per CTA (attention_keys3000) in 6.73 us against 6.90, 8 (gqa bs 1)
  // in 7.00 against 7.12, and 8 under clusters of 4 (attention_softmax) alike (7.14).
  const int64_t min_split = p.cluster > 1 ? 5 : 16;
  p.key_split = a.online && kp.grid < t.sm_count && chunks / p.cluster >= min_split ? 2 : 1;
  // Row norms' warpgroup leaves two consumers 200 registers each, too few for O's DV / 2
  // accumulators beside two S and two P buffers past DV 128.
  if ((a.q_norm.on || a.k_norm.on) && a.dv > 128) p.key_split = 1;
  // Shared memory: Q, a ring per consumer and, with a cluster, the receive area of the pushed
  // exchange (every CTA's partial of this CTA's share of O's n8 blocks plus one row unit, 2 KB a
  // unit) where it fits beside the rings; else the exchange pulls from the idle rings (the
  // runtime's AttnCfg::kPush makes the same test). 4 stages, or 3 where that lets the receive
  // area fit (bs 1: 3 and 4 stages ran alike), or where the rings need it.
  const int64_t recv =
      p.cluster > 1 ? p.cluster * ((a.dv / 8 + p.cluster - 1) / p.cluster + 1) * 2048 : 0;
  // With row norms, the factors of Q's rows and of every stage's keys and Q's column weights
  // (AttnCfg::kNormBytes).
  const bool norm = a.q_norm.on || a.k_norm.on;
  auto rings = [&](int stages) {
    return q_bytes + p.key_split * stages * stage +
           (norm ? (64 + p.key_split * stages * 64 + a.d) * 4 : 0);
  };
  // + 1024 for alignment and the kernel's static mbarriers (AttnCfg::kStaticBytes): a
  // configuration that filled the limit with dynamic bytes alone would fail to launch.
  auto room = [&](int64_t bytes) { return bytes + 1024 + 512 <= t.smem_per_block; };
  auto choose_stages = [&]() {
    for (int st = 4; st >= 3; --st)
      if (room(rings(st) + recv)) return st;
    for (int st = 4; st >= 3; --st)
      if (room(rings(st))) return st;
    return 0;
  };
  p.stages = choose_stages();
  if (p.stages == 0) {
    p.key_split = 1;
    p.stages = choose_stages();
  }
  if (p.stages == 0) p.stages = 3;  // over the limit: the runtime's static_assert says so
  const int64_t smem = rings(p.stages) + (room(rings(p.stages) + recv) ? recv : 0) + 1024;
  // Row norms add a normalizer warpgroup (AttnCfg::kNormWG), whose registers two CTAs per SM
  // would take from the consumers.
  p.min_blocks =
      p.key_split == 1 && a.dv <= 128 && 2 * (smem + 1024) <= t.smem_per_block && !norm ? 2 : 1;
  kp.smem = smem;
  kp.threads = 128 * (1 + p.key_split + (norm ? 1 : 0));
  return p;
}

std::string AttentionKernel::describe() const {
  const std::string norms = a.q_norm.on && a.k_norm.on ? ", row norms of Q and K applied to S"
                            : a.q_norm.on              ? ", row norms of Q applied to S"
                            : a.k_norm.on              ? ", row norms of K applied to S"
                                                       : "";
  const bool weighted = a.q_norm.weight_io >= 0 || a.k_norm.weight_io >= 0;
  return fmt::format(
      "wgmma attention{}{} ({} rows x {} keys per block as {} tile(s) of 64 rows{}, D {}, DV {}, "
      "{}-key chunks, {} stages, {} consumer warpgroup(s) per CTA, {} CTA(s)/SM)",
      a.online ? ", online softmax" : "",
      norms + (weighted ? " (their weights on Q's columns)" : ""), a.mt, a.keys, a.mt / 64,
      cluster > 1 ? fmt::format(" x a cluster of {} CTAs over the keys", cluster) : "", a.d, a.dv,
      chunk, stages, key_split, min_blocks);
}

// The runtime attention kernel: blocks x mt / 64 CTAs of 64 rows, each walking its keys in chunks;
// the tensor cores do S and O (2 x 64 x keys x (d + dv) flops per CTA). Effective per-SM rates from
// the H100 timings of tests/gpu/attention_bench.cu (gqa shapes): 50% of the tensor-core peak
// with two CTAs per SM (one's exp overlaps the other's wgmma), 40% with one; plus a pipeline
// fill (A and the first chunks in flight) per wave.
KernelCost AttentionKernel::cost(const CostContext& x) const {
  const KernelOp& op = x.op;
  const KernelPlan& kp = x.kp;
  const Target& t = x.t;
  const CostConstants& k = cost_constants(t.arch);
  KernelCost c;
  c.name = op.name;
  c.graph_defined = true;
  c.lowered = true;
  c.blocks = kp.grid;
  c.blocks_per_sm = min_blocks;
  const int64_t slots = int64_t(t.sm_count) * min_blocks;
  c.waves = (c.blocks + slots - 1) / slots;
  c.pipeline_stages = stages;
  c.round_trips = 1;
  const BlockGraph& bg = *op.block;
  for (const AttentionView* v : {&a.q, &a.k, &a.v}) {
    const TensorDesc& td = bg.inputs[v->io];
    c.dram_read += double(numel(td.shape)) * dtype_bytes(td.dtype);
  }
  for (const TensorDesc& td : bg.outputs)
    c.dram_write += double(numel(td.shape)) * dtype_bytes(td.dtype);
  // The largest CTA share of the tile's chunks sets the time (floor shares differ by one).
  const int64_t cta_chunks = (chunks() + cluster - 1) / cluster;
  const double cta_flops = 2.0 * 64 * double(cta_chunks * chunk) * double(a.d + a.dv);
  c.tc_flops = 2.0 * 64 * double(a.keys) * double(a.d + a.dv) * double(c.blocks / cluster);
  c.iterations = cta_chunks;
  // Consumer warpgroups per SM (CTAs per SM x consumers per CTA) share its tensor cores; a CTA
  // whose consumers split its keys finishes in 1 / key_split of its work's time.
  const int64_t ctas = std::min<int64_t>(min_blocks, (c.blocks + t.sm_count - 1) / t.sm_count);
  const int64_t active = ctas * key_split;
  const double eff = active >= 2 ? 0.5 : 0.4;
  const double sm_rate = t.tc_flops_per_s / t.sm_count * eff;
  const double t_cta = cta_flops * double(ctas) / sm_rate;
  cost::finish_times(c, t, k, 1.0, 1.0);
  c.t_tc = double(c.waves) * t_cta;
  c.t_fill = k.dram_latency_s * double(c.waves);
  c.bound = c.t_tc >= c.t_dram ? "tensor" : "dram";
  // A cluster's exchange: the partials pushed through distributed shared memory and a cluster
  // barrier, about a DRAM latency.
  if (cluster > 1) c.t_fixed += k.dram_latency_s;
  // Row norms: the consumers' first softmax waits for the normalizers' factors of the first chunks
  // (measured 0.9 us later than without norms on an H200, session 22) and each later chunk for its
  // own (about 0.1 us a chunk): 8.5 us for the rms-normed gqa shapes against 6.6 without norms.
  if (a.q_norm.on || a.k_norm.on)
    c.t_fixed += k.dram_latency_s + (a.k_norm.on ? 0.1e-6 * double(cta_chunks) : 0.0);
  c.time = c.t_launch + c.t_fixed + std::max(c.t_tc, c.t_dram) + c.t_fill;
  return c;
}

using namespace cgen;

namespace {

// sum_g coef[g] * g over the block graph's grid indices (b0, b1, b2), as C++.
std::string affine(const std::array<int64_t, 3>& coef, int dims) {
  std::string e;
  for (int g = 0; g < dims; ++g)
    if (coef[g] != 0) e += fmt::format("{}{}ll * b{}", e.empty() ? "" : " + ", coef[g], g);
  return e.empty() ? "0" : e;
}

}  // namespace

// A graph-defined op that is attention's two-contraction chain (attention.h): a functor with the
// box coordinates, the elementwise map, the row feeds and the savers, and a launch of the
// runtime's attention kernel on (blocks x mt / 64) CTAs of 64 rows.
void AttentionKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  const std::string fn = "AttnFn_" + kp.kernel;
  const int dims = static_cast<int>(a.grid.size());
  const int64_t sub = a.mt / 64;
  const int R = std::max(1, a.rows);
  Code& K = x.kernels;
  K.f("// {}: {}", kp.kernel, kp.strategy());
  K.open(fmt::format("struct {} {{", fn));
  K.f("static constexpr int kRows = {};", a.rows);
  K.f("static constexpr bool kOnline = {};", a.online ? "true" : "false");
  K.f("static constexpr float kExpScale = {};", flit(a.online ? a.exp_scale : 1.0));
  K.f("static constexpr float kPCoef = {};", flit(a.online ? a.p_coef : 1.0));
  // Row norms of Q's rows and K's keys (runtime: the normalizer warpgroup's factors scale S).
  K.f("static constexpr bool kNormA = {};", a.q_norm.on ? "true" : "false");
  K.f("static constexpr bool kNormK = {};", a.k_norm.on ? "true" : "false");
  for (auto [name, nm] : {std::pair{"norm_a", &a.q_norm}, std::pair{"norm_k", &a.k_norm}}) {
    K.open(fmt::format("__device__ __forceinline__ float {}(float ss) const {{", name));
    K.line("(void)ss;");
    for (const std::string& st : nm->statements) K.line(st);
    K.f("return {};", nm->on ? nm->factor : "1.0f");
    K.close();
  }
  K.open(fmt::format(
      "__device__ __forceinline__ void online_feeds(float p, float (&r)[{}]) const {{", R));
  K.line("(void)p; (void)r;");
  if (a.online)
    for (int j = 0; j < a.rows; ++j) {
      const double ratio = a.feed_coef[j] / a.p_coef;
      if (ratio == 1.0)
        K.f("r[{}] += p;", j);
      else
        K.f("r[{}] += p * {};", j, flit(ratio));
    }
  K.close();
  for (size_t i = 0; i < a.stores.size(); ++i) K.f("{}* out{};", ctype(a.stores[i].dtype), i);
  // The norms' weights (after the outputs in the functor's initializer): their product per
  // column multiplies Q's columns (the runtime's kColWeights).
  std::vector<int> weights;
  for (const AttentionNorm* nm : {&a.q_norm, &a.k_norm})
    if (nm->weight_io >= 0) weights.push_back(nm->weight_io);
  const BlockGraph& wbg = *op.block;
  for (size_t i = 0; i < weights.size(); ++i)
    K.f("const {}* nw{};", ctype(wbg.inputs[weights[i]].dtype), i);
  K.f("static constexpr bool kColWeights = {};", weights.empty() ? "false" : "true");
  K.open("__device__ __forceinline__ float col_weight(int d) const {");
  K.line("(void)d;");
  std::string wprod = "1.0f";
  for (size_t i = 0; i < weights.size(); ++i)
    wprod = i == 0 ? fmt::format("kiln::rt::to_f32(nw{}[d])", i)
                   : fmt::format("{} * kiln::rt::to_f32(nw{}[d])", wprod, i);
  K.f("return {};", wprod);
  K.close();
  // CTA (bx, by, bz) is sub-tile bx % sub of graph block (bx / sub, by, bz).
  auto block_index = [&]() {
    K.f("const int64_t b0 = bx / {0}, b1 = by, b2 = bz, sub = bx % {0};", sub);
    K.line("(void)b0; (void)b1; (void)b2; (void)sub;");
  };
  K.open("__device__ __forceinline__ kiln::rt::AttnCoords coords(int bx, int by, int bz) const {");
  block_index();
  K.line("kiln::rt::AttnCoords c;");
  K.f("c.a_row = int({} + sub * 64);", affine(a.q.row_coef, dims));
  K.f("c.a_col = int({});", affine(a.q.col_coef, dims));
  K.f("c.k_row = int({});", affine(a.k.row_coef, dims));
  K.f("c.k_col = int({});", affine(a.k.col_coef, dims));
  K.f("c.v_row = int({});", affine(a.v.row_coef, dims));
  K.f("c.v_col = int({});", affine(a.v.col_coef, dims));
  K.line("return c;");
  K.close();
  K.open(fmt::format("__device__ __forceinline__ float elem(float s, float (&r)[{}]) const {{", R));
  K.line("(void)r;");
  for (const std::string& st : a.elem_statements) K.line(st);
  for (int j = 0; j < a.rows; ++j) K.f("r[{}] += {};", j, a.feeds[j]);
  K.f("return {};", a.p);
  K.close();
  K.open(fmt::format(
      "__device__ __forceinline__ void store2(int bx, int by, int bz, int m, int n, float o0, "
      "float o1, const float (&r)[{}]) const {{",
      R));
  K.line("(void)r; (void)n; (void)o0; (void)o1;");
  block_index();
  K.line("const int64_t row = m + sub * 64;");
  K.line("(void)row;");
  for (size_t i = 0; i < a.stores.size(); ++i) {
    const AttentionStore& st = a.stores[i];
    if (st.row) continue;
    K.open("{");
    K.open("auto f = [&](float o) {");
    K.line("(void)o;");
    for (const std::string& l : st.statements) K.line(l);
    K.f("return {};", st.result);
    K.close("};");
    K.f("{}* p = out{} + ({} + row * {}ll + n);", ctype(st.dtype), i, affine(st.base_coef, dims),
        st.ld);
    if (st.dtype == DType::F32)
      K.line("*reinterpret_cast<float2*>(p) = make_float2(f(o0), f(o1));");
    else
      K.f("*reinterpret_cast<uint32_t*>(p) = kiln::rt::pack2<{}>(f(o0), f(o1));", ctype(st.dtype));
    K.close();
  }
  K.close();
  K.open(fmt::format(
      "__device__ __forceinline__ void store_row(int bx, int by, int bz, int m, const float "
      "(&r)[{}]) const {{",
      R));
  K.line("(void)r;");
  block_index();
  K.line("const int64_t row = m + sub * 64;");
  K.line("(void)row;");
  for (size_t i = 0; i < a.stores.size(); ++i) {
    const AttentionStore& st = a.stores[i];
    if (!st.row) continue;
    K.open("{");
    for (const std::string& l : st.statements) K.line(l);
    K.f("out{}[{} + row * {}ll] = kiln::rt::from_f32<{}>({});", i, affine(st.base_coef, dims),
        st.ld, ctype(st.dtype), st.result);
    K.close();
  }
  K.close();
  K.close("};");
  K.line("");

  std::vector<std::string> outs;
  for (const AttentionStore& st : a.stores) outs.push_back(x.ptr(op.outputs[st.io]));
  for (int io : weights) outs.push_back(x.ptr(op.inputs[io]));
  int64_t g[3] = {1, 1, 1};
  for (int d = 0; d < dims; ++d) g[d] = a.grid[d];
  auto view = [](const AttentionView& v) {
    return fmt::format("kiln::rt::AttnView{{{}ll, {}ll, {}ll}}", v.rows, v.cols, v.cols);
  };
  Code& L = x.launch;
  L.open("{");
  const bool masked = last_keys() < chunk, norm = a.q_norm.on || a.k_norm.on;
  L.f("using Cfg = kiln::rt::AttnCfg<{}, 1, {}, {}, {}, {}, {}, {}, {}, {}, {}{}>;", ctype(a.ab),
      a.d, a.dv, chunk, stages, a.k_nmajor ? "true" : "false", a.v_nmajor ? "true" : "false",
      min_blocks, key_split, cluster,
      norm     ? fmt::format(", {}, true", masked ? "true" : "false")
      : masked ? ", true"
               : "");
  L.f("const {} f{{{}}};", fn, fmt::join(outs, ", "));
  L.f("err = kiln::rt::attn_launch<Cfg>({}, {}, {}, {}, {}, {}, dim3({}, {}, {}), {}, f, stream, "
      "{});",
      x.ptr(op.inputs[a.q.io]), view(a.q), x.ptr(op.inputs[a.k.io]), view(a.k),
      x.ptr(op.inputs[a.v.io]), view(a.v), g[0] * sub, g[1], g[2], chunks(), last_keys());
  L.line("if (err != cudaSuccess) return err;");
  L.close();
}

}  // namespace kiln
