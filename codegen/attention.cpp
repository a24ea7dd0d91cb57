// match_attention: see include/kiln/codegen/attention.h for the contract.
#include "kiln/codegen/attention.h"

#include <map>

#include "emit_util.h"

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
    int qi = m1.inputs[0];
    if (bg_.ops[qi].kind != OpKind::Input || bg_.ops[qi].stage != Stage::Invariant) return false;
    role_[qi] = Role::Operand;
    int ki = -1, vi = -1;
    if (!operand(m1.inputs[1], ki, plan.k_nmajor)) return false;
    if (!operand(m2.inputs[1], vi, plan.v_nmajor)) return false;
    if (ki == qi || vi == qi || ki == vi) return false;
    int64_t mt, d, d2, nt, nt2, dv, r1, c1, r2, c2;
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
    const Stage body = has_loop_ ? Stage::Loop : Stage::Invariant;
    for (int i : {ki, vi, mm1_, mm2_})
      if (bg_.ops[i].stage != body) return false;

    // Types and the runtime kernel's shape limits.
    plan.ab = bg_.inputs[bg_.ops[qi].io].dtype;
    for (int i : {ki, vi})
      if (bg_.inputs[bg_.ops[i].io].dtype != plan.ab) return false;
    if (!is_16bit(plan.ab) || !(plan.ab == DType::F16 ? lossy_f16_ : lossy_bf16_)) return false;
    if (mt % 64 || d % 64 || d > 256 || dv % 64 || dv > 256 || plan.keys % 64) return false;

    // The loop walks the keys of K and V; Q does not move.
    if (has_loop_) {
      if (bg_.ops[qi].fmap[0] != -1) return false;
      const int kr = static_cast<int>(bg_.inputs[bg_.ops[ki].io].shape.size());
      const int vr = static_cast<int>(bg_.inputs[bg_.ops[vi].io].shape.size());
      if (bg_.ops[ki].fmap[0] != (plan.k_nmajor ? kr - 1 : kr - 2)) return false;
      if (bg_.ops[vi].fmap[0] != (plan.v_nmajor ? vr - 2 : vr - 1)) return false;
    }
    if (!view(qi, plan.q) || !view(ki, plan.k) || !view(vi, plan.v)) return false;

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
  enum class Role { None, Operand, Region, Reduction, Product, Accum, Epilogue };

  // An input tile of the products, directly (N-major) or through a transpose of the last two
  // dims (K-major).
  bool operand(int id, int& input, bool& nmajor) {
    const BlockOp& op = bg_.ops[id];
    if (op.kind == OpKind::Input) {
      input = id, nmajor = true;
    } else if (op.kind == OpKind::Transpose && swaps_last_two(op) &&
               bg_.ops[op.inputs[0]].kind == OpKind::Input) {
      input = op.inputs[0], nmajor = false;
      role_[id] = Role::Operand;
    } else {
      return false;
    }
    role_[input] = Role::Operand;
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
      ok = true;
    } else if (!elem_ && !has_loop_ && row_of_.count(id)) {
      out = "r[" + std::to_string(row_of_[id]) + "]";
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
          vals.push_back(bind(cgen::ew_expr(to.kind, to.attrs, args), stmts));
        }
        out = vals.back();
      } else {
        out = bind(cgen::ew_expr(op.kind, op.attrs, xs), stmts);
      }
      if (!elem_) role_[id] = Role::Epilogue;
      ok = true;
    }
    if (ok) memo_[id] = out;
    return ok;
  }

  // Epilogue values are [.., Mt, DV] or [.., Mt, 1] tiles (or scalars).
  bool epilogue_shape(const Shape& s) const {
    if (scalar_tile(s)) return true;
    int64_t a, b;
    return matrix_tile(s, a, b) && a == plan_->mt && (b == plan_->dv || b == 1);
  }

  std::string bind(const std::string& e, std::vector<std::string>& stmts) {
    std::string v = (elem_ ? "e" : "t") + std::to_string(stmts.size());
    stmts.push_back("const float " + v + " = " + e + ";");
    return v;
  }

  const BlockGraph& bg_;
  const Target& t_;
  bool lossy_f16_, lossy_bf16_;
  bool has_loop_ = false;
  bool elem_ = true;
  bool uses_o_ = false;
  int mm1_ = -1, mm2_ = -1;
  AttentionPlan* plan_ = nullptr;
  std::vector<Role> role_;
  std::map<int, int> row_of_;  // reduction op -> row feed index
  std::map<int, std::string> memo_;
};

}  // namespace

std::optional<AttentionPlan> match_attention(const BlockGraph& bg, const Target& t, bool lossy_f16,
                                             bool lossy_bf16) {
  AttentionPlan plan;
  Matcher m(bg, t, lossy_f16, lossy_bf16);
  if (!m.run(plan)) return std::nullopt;
  return plan;
}

}  // namespace kiln
