// The block emitter (block_emitter.h). Tensor-core products: mma.sync over warp partitions,
// ldmatrix operands, hoisted A fragments and register-resident fragment chains.
#include "block_emitter.h"

namespace kiln::cgen {

void BlockEmitter::emit_fragment_chain(int p) {
  const TilePlan& t = tp(p);
  const Distribution& d = t.dist;
  c_->f("// {} = {} {} in registers (mma fragments of {})", nm(p), op_name(op(p).kind),
        shape_str(op(p).shape), nm(t.root));
  c_->open("{");
  mma_block(t.root, d, "fr", /*fresh=*/true);
  if (p != t.root) {
    LazyDecls decls;
    std::vector<std::string> idx =
        open_fragment_loops(p, d, -1, "q", 4, "((q >> 1) << 3)", " + (q & 1)", decls);
    emit_after_decls(decls, [&] {
      Ctx cx;
      cx.body = c_;
      cx.root = t.root;
      cx.root_val = "fr[bi][i][jn].x[q]";
      std::string v = compute(p, idx, cx);
      c_->f("fr[bi][i][jn].x[q] = {};", v);
    });
    for (int k = 0; k < kFragmentScopes; ++k) c_->close();
  }
  std::vector<int> cons;
  for (size_t c = 0; c < bg_.ops.size(); ++c)
    for (int in : op(c).inputs)
      if (in == p) {
        cons.push_back(static_cast<int>(c));
        break;
      }
  for (int c : cons) {
    std::vector<int> accs;
    for (size_t a = 0; a < bg_.ops.size(); ++a)
      if (cls(a) == OpClass::Accum && op(a).inputs[0] == c) accs.push_back(static_cast<int>(a));
    if (cls(c) == OpClass::Matmul) {
      KILN_ASSERT(accs.size() == 1, "fragment matmul {} must feed one accumulator", nm(c));
      mma_block(c, tp(c).dist, "acc_" + nm(accs[0]), /*fresh=*/false);
      continue;
    }
    const Distribution& dr = tp(c).dist;
    bool is_max = op(c).kind == OpKind::Max;
    // A reduction read only by accumulators of its own kind (sum or mean into accum_sum, max
    // into accum_max) finishes its quad shuffle once, after the loop: each lane folds its own
    // columns every iteration, and sums of sums (maxima of maxima) regroup exactly. A sum of
    // per-iteration maxima does not, so mixed kinds shuffle every iteration.
    bool defer = true;
    for (size_t k = 0; k < bg_.ops.size(); ++k)
      for (int in : op(k).inputs)
        if (in == c && (cls(k) != OpClass::Accum ||
                        op(k).kind != (is_max ? OpKind::AccumMax : OpKind::AccumSum)))
          defer = false;
    if (defer)
      for (int a : accs) quad_pending_.push_back({a, dr});
    c_->f("// {} = {} of {} over its last dim, from the fragments", nm(c), op_name(op(c).kind),
          nm(p));
    open_row_half_loops(dr);
    c_->f("float rs = {};", is_max ? "-__int_as_float(0x7f800000)" : "0.0f");
    c_->line("#pragma unroll");
    c_->open(fmt::format("for (int jn = 0; jn < {}; ++jn) {{", d.ntw));
    if (is_max)
      c_->line("rs = fmaxf(rs, fmaxf(fr[bi][i][jn].x[2 * h], fr[bi][i][jn].x[2 * h + 1]));");
    else
      c_->line("rs += fr[bi][i][jn].x[2 * h] + fr[bi][i][jn].x[2 * h + 1];");
    c_->close();
    if (!defer) c_->f("rs = kiln::cg::group_{}<4>(rs);", is_max ? "max" : "sum");
    if (op(c).kind == OpKind::Mean) c_->f("rs = rs / {};", flit(double(d.n)));
    for (int a : accs) {
      std::string acc = fmt::format("acc_{}[bi][i][0].x[2 * h]", nm(a));
      if (op(a).kind == OpKind::AccumMax)
        c_->f("{0} = fmaxf({0}, rs);", acc);
      else
        c_->f("{} += rs;", acc);
    }
    for (int k = 0; k < kRowHalfScopes; ++k) c_->close();
  }
  c_->close();
}

void BlockEmitter::gather_fragment(const char* loader, const char* T, const char* frag, int operand,
                                   const Shape& out, const std::vector<std::string>& bidx,
                                   const char* rn, const char* cn, int64_t R, int64_t C) {
  c_->open(
      fmt::format("kiln::cg::{}<{}>({}, lane, [&](int r_, int c_) -> float {{", loader, T, frag));
  c_->f("const int {0} = {0}0 + r_, {1} = {1}0 + c_;", rn, cn);
  c_->f("if ({} >= {} || {} >= {}) return 0.0f;", rn, R, cn, C);
  Ctx cx;
  cx.body = c_;
  std::string v = value(operand, matmul_operand_index(operand, out, bidx, rn, cn), cx);
  c_->f("return {};", v);
  c_->close("});");
}

BlockEmitter::MmaOperand BlockEmitter::resolve(int i) const {
  MmaOperand r;
  int cur = i;
  while (tp(cur).home == TileHome::Inline && cls(cur) == OpClass::Transpose) {
    r.swapped = !r.swapped;
    cur = op(cur).inputs[0];
  }
  r.leaf = cur;
  return r;
}

std::string BlockEmitter::leaf_batch_ptr(const MmaOperand& mo, const Shape& out,
                                         const std::vector<std::string>& out_batch) const {
  const BlockOp& l = op(mo.leaf);
  const TilePlan& t = tp(mo.leaf);
  Shape lb(l.shape.begin(), l.shape.end() - 2);
  Shape ob(out.begin(), out.end() - 2);
  std::vector<std::string> bi = bcast_index(lb, ob, out_batch);
  std::vector<int64_t> bs(t.strides.begin(), t.strides.end() - 2);
  std::string ptr = (l.stage == Stage::Loop ? "c_" : "s_") + l.name;
  std::string off = offset_expr(bi, bs);
  return off == "0" ? ptr : fmt::format("{} + {}", ptr, off);
}

bool BlockEmitter::f32_rows(const MmaOperand& mo, int64_t K) const {
  const TilePlan& t = tp(mo.leaf);
  bool stored = t.home == TileHome::Smem || t.home == TileHome::Global ||
                (t.home == TileHome::Registers && t.spill);
  if (mo.swapped || !stored || op(mo.leaf).kind == OpKind::Input || K % 2) return false;
  if (op(mo.leaf).shape.size() < 2) return false;
  const std::vector<int64_t>& st = t.home == TileHome::Registers ? t.spill_strides : t.strides;
  for (size_t d = 0; d + 1 < st.size(); ++d)
    if (st[d] % 2) return false;
  return true;
}

std::string BlockEmitter::f32_batch_ptr(const MmaOperand& mo, const Shape& out,
                                        const std::vector<std::string>& out_batch) const {
  const BlockOp& l = op(mo.leaf);
  const TilePlan& t = tp(mo.leaf);
  const std::vector<int64_t>& st = t.home == TileHome::Registers ? t.spill_strides : t.strides;
  Shape lb(l.shape.begin(), l.shape.end() - 2);
  Shape ob(out.begin(), out.end() - 2);
  std::vector<std::string> bi = bcast_index(lb, ob, out_batch);
  std::vector<int64_t> bs(st.begin(), st.end() - 2);
  std::string ptr = (t.home == TileHome::Registers ? "sp_" : "s_") + l.name;
  std::string off = offset_expr(bi, bs);
  return off == "0" ? ptr : fmt::format("{} + {}", ptr, off);
}

void BlockEmitter::mma_block(int mm, const Distribution& d, const std::string& frag, bool fresh) {
  const BlockOp& o = op(mm);
  const MmaPlan& p = tp(mm).mma;
  int a = o.inputs[0], b = o.inputs[1];
  const Shape& out = o.shape;
  int64_t M = d.m, N = d.n, K = op(a).shape.back();
  int64_t KST = cdiv(K, 16), kstw = cdiv(KST, d.ks);
  int64_t MT = cdiv(M, 16), NT = cdiv(N, 8);
  const char* T = ctype(p.dtype);
  Shape ob(out.begin(), out.end() - 2);
  if (fresh) {
    c_->f("kiln::rt::FragC {}[{}][{}][{}];", frag, d.bw, d.mtw, d.ntw);
    c_->f(
        "for (int a_ = 0; a_ < {}; ++a_) for (int b_ = 0; b_ < {}; ++b_) for (int c_ = 0; c_ "
        "< {}; ++c_) {}[a_][b_][c_].zero();",
        d.bw, d.mtw, d.ntw, frag);
  }
  c_->f("// {} on tensor cores ({}), {}", o.name, T, d.str());
  std::vector<std::string> bidx = open_kstep_loops(d, kstw, K, ob);
  c_->f("kiln::rt::FragA fa[{}];", d.mtw);
  c_->f("kiln::rt::FragB fb[{}];", d.ntw);
  // A fragments.
  MmaOperand oa = resolve(a), obr = resolve(b);
  // The hoisted fragments belong to mma_distribution's partition; a step that ran this
  // matmul in another one (none does today) reloads A itself.
  const Distribution* hd = p.a_hoisted ? mma_distribution(bs_, mm) : nullptr;
  const bool hoisted = hd && d == *hd;
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int i = 0; i < {}; ++i) {{", d.mtw));
  c_->f("const int m0 = (wm * {} + i) * 16;", d.mtw);
  c_->open(fmt::format("if (m0 < {}) {{", M));
  if (tp(a).home == TileHome::Fragment) {
    // k step kk is n8 tiles 2kk and 2kk + 1 of the producer's C fragments `fr` (same warps,
    // same m16 tiles): C elements {0,1} / {2,3} are A rows g / g + 8.
    c_->f("const kiln::rt::FragC& c0_ = fr[bi][i][2 * kk];");
    c_->f("const kiln::rt::FragC& c1_ = fr[bi][i][2 * kk + 1];");
    c_->f("fa[i].x[0] = kiln::rt::pack2<{}>(c0_.x[0], c0_.x[1]);", T);
    c_->f("fa[i].x[1] = kiln::rt::pack2<{}>(c0_.x[2], c0_.x[3]);", T);
    c_->f("fa[i].x[2] = kiln::rt::pack2<{}>(c1_.x[0], c1_.x[1]);", T);
    c_->f("fa[i].x[3] = kiln::rt::pack2<{}>(c1_.x[2], c1_.x[3]);", T);
  } else if (hoisted) {
    c_->f("fa[i] = ha_{}[bi][kk][i];", o.name);
  } else if (p.a_ldmatrix) {
    ldmatrix_a(mm, oa, M, bidx, "fa[i]");
  } else if (f32_rows(oa, K)) {
    c_->f("kiln::cg::load_a_f32<{}, {}, {}, {}>(fa[i], {}, m0, k0, lane);", T, M, K,
          f32_pitch(oa.leaf), f32_batch_ptr(oa, out, bidx));
  } else {
    gather_fragment("load_a_fn", T, "fa[i]", a, out, bidx, "m", "k", M, K);
  }
  c_->close();
  c_->close();
  // B fragments.
  bool pairs = p.b_ldmatrix && !p.b_nk && d.ntw % 2 == 0 && N % 16 == 0;
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int jn = 0; jn < {}; jn += {}) {{", d.ntw, pairs ? 2 : 1));
  c_->f("const int n0 = (wn * {} + jn) * 8;", d.ntw);
  c_->open(fmt::format("if (n0 < {}) {{", N));
  if (p.b_ldmatrix) {
    const TilePlan& lt = tp(obr.leaf);
    int64_t pitch = lt.strides[lt.strides.size() - 2];
    std::string base = leaf_batch_ptr(obr, out, bidx);
    if (p.b_nk)
      c_->f("kiln::cg::load_b_nk1<{}>(fb[jn], {}, k0, n0, lane);", pitch, base);
    else if (pairs)
      c_->f("kiln::cg::load_b_kn2<{}>(fb[jn], fb[jn + 1], {}, k0, n0, lane);", pitch, base);
    else
      c_->f("kiln::cg::load_b_kn1<{}>(fb[jn], {}, k0, n0, lane);", pitch, base);
  } else {
    gather_fragment("load_b_fn", T, "fb[jn]", b, out, bidx, "k", "n", K, N);
  }
  c_->close();
  c_->close();
  // Products.
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int i = 0; i < {}; ++i) {{", d.mtw));
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int jn = 0; jn < {}; ++jn) {{", d.ntw));
  c_->f(
      "if ((wm * {} + i) < {} && (wn * {} + jn) < {}) kiln::rt::mma_16816<{}>({}[bi][i][jn], "
      "fa[i], fb[jn]);",
      d.mtw, MT, d.ntw, NT, T, frag);
  c_->close();
  c_->close();
  for (int k = 0; k < kKstepScopes; ++k) c_->close();  // b, bi, k0, kk, warp, block
}

std::vector<std::string> BlockEmitter::open_kstep_loops(const Distribution& d, int64_t kstw,
                                                        int64_t K, const Shape& ob) {
  c_->open("{");
  emit_warp_coords(d);
  c_->open(fmt::format("if (warp < {}) {{", d.wb * d.wm * d.wn * d.ks));
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int kk = 0; kk < {}; ++kk) {{", kstw));
  c_->f("const int k0 = (wk * {} + kk) * 16;", kstw);
  c_->open(fmt::format("if (k0 < {}) {{", K));
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int bi = 0; bi < {}; ++bi) {{", d.bw));
  c_->f("const int b = wb * {} + bi;", d.bw);
  c_->open(fmt::format("if (b < {}) {{", d.batch));
  std::vector<std::string> bidx = unravel(*c_, "b", ob, "bb");
  return bidx;
}

void BlockEmitter::ldmatrix_a(int mm, const MmaOperand& oa, int64_t M,
                              const std::vector<std::string>& bidx, const std::string& dst) {
  const TilePlan& lt = tp(oa.leaf);
  int64_t pitch = lt.strides[lt.strides.size() - 2];
  std::string base = leaf_batch_ptr(oa, op(mm).shape, bidx);
  if (tp(mm).mma.a_trans)
    c_->f("kiln::cg::load_a_cols<{}>({}, {}, m0, k0, lane);", pitch, dst, base);
  else
    c_->f("kiln::cg::load_a_rows<{}, {}>({}, {}, m0, k0, lane);", M, pitch, dst, base);
}

void BlockEmitter::emit_hoisted_a(int mm, const Distribution& d) {
  const BlockOp& o = op(mm);
  MmaOperand oa = resolve(o.inputs[0]);
  int64_t M = d.m, K = op(o.inputs[0]).shape.back();
  int64_t kstw = cdiv(cdiv(K, 16), d.ks);
  Shape ob(o.shape.begin(), o.shape.end() - 2);
  c_->f("// {}'s A fragments: {} is loop-invariant, loaded once into registers", o.name,
        nm(oa.leaf));
  c_->f("kiln::rt::FragA ha_{}[{}][{}][{}];", o.name, d.bw, kstw, d.mtw);
  std::vector<std::string> bidx = open_kstep_loops(d, kstw, K, ob);
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int i = 0; i < {}; ++i) {{", d.mtw));
  c_->f("const int m0 = (wm * {} + i) * 16;", d.mtw);
  c_->open(fmt::format("if (m0 < {}) {{", M));
  ldmatrix_a(mm, oa, M, bidx, fmt::format("ha_{}[bi][kk][i]", o.name));
  for (int k = 0; k < kKstepScopes + 2; ++k) c_->close();
}

void BlockEmitter::finish_quad(int a, const Distribution& dr) {
  bool is_max = op(a).kind == OpKind::AccumMax;
  c_->f("// {}: the quad {} its fragment rows deferred from the loop", nm(a),
        is_max ? "maximum of" : "sum of");
  open_row_half_loops(dr);
  c_->f("acc_{0}[bi][i][0].x[2 * h] = kiln::cg::group_{1}<4>(acc_{0}[bi][i][0].x[2 * h]);", nm(a),
        is_max ? "max" : "sum");
  for (int k = 0; k < kRowHalfScopes; ++k) c_->close();
}

void BlockEmitter::open_row_half_loops(const Distribution& dr) {
  c_->open("{");
  emit_warp_coords(dr);
  c_->open(fmt::format("if (warp < {}) {{", dr.wb * dr.wm));
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int bi = 0; bi < {}; ++bi) {{", dr.bw));
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int i = 0; i < {}; ++i) {{", dr.mtw));
  c_->line("#pragma unroll");
  c_->open("for (int h = 0; h < 2; ++h) {");
}

void BlockEmitter::emit_warp_coords(const Distribution& d) {
  c_->line("const int warp = tid >> 5, lane = tid & 31;");
  c_->line("(void)lane;");
  c_->f("const int wk = warp % {};", d.ks);
  c_->f("const int wn = (warp / {}) % {};", d.ks, d.wn);
  c_->f("const int wm = (warp / {}) % {};", d.ks * d.wn, d.wm);
  c_->f("const int wb = warp / {};", d.ks * d.wn * d.wm);
  c_->line("(void)wk; (void)wn; (void)wm; (void)wb;");
}

std::vector<std::string> BlockEmitter::open_fragment_loops(int top, const Distribution& d, int root,
                                                           const char* inner, int inner_count,
                                                           const std::string& row_expr,
                                                           const std::string& col_expr,
                                                           LazyDecls& lazy) {
  c_->open("{");
  if (root >= 0) mma_block(root, d, "fr", /*fresh=*/true);
  emit_warp_coords(d);
  c_->open(fmt::format("if (warp < {}) {{", d.wb * d.wm * d.wn * d.ks));
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int bi = 0; bi < {}; ++bi) {{", d.bw));
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int i = 0; i < {}; ++i) {{", d.mtw));
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int jn = 0; jn < {}; ++jn) {{", d.ntw));
  c_->line("#pragma unroll");
  c_->open(fmt::format("for (int {0} = 0; {0} < {1}; ++{0}) {{", inner, inner_count));
  c_->f("const int b = wb * {} + bi;", d.bw);
  c_->f("const int row = (wm * {} + i) * 16 + (lane >> 2) + {};", d.mtw, row_expr);
  c_->f("const int col = (wn * {} + jn) * 8 + ((lane & 3) << 1){};", d.ntw, col_expr);
  c_->open(fmt::format("if (b < {} && row < {} && col < {}) {{", d.batch, d.m, d.n));
  lazy.add("int", "o", fmt::format("(b * {} + row) * {} + col", d.m, d.n));
  return unravel(lazy, "o", op(top).shape, "i");
}

void BlockEmitter::run_mma_elements(int top, const Distribution& d, int root, const Sink& sink) {
  LazyDecls decls;
  std::vector<std::string> idx =
      open_fragment_loops(top, d, root, "q", 4, "((q >> 1) << 3)", " + (q & 1)", decls);
  emit_after_decls(decls, [&] {
    Ctx cx;
    cx.body = c_;
    if (root >= 0) {
      cx.root = root;
      cx.root_val = "fr[bi][i][jn].x[q]";
    }
    cx.reg = [&](int i) { return fmt::format("acc_{}[bi][i][jn].x[q]", nm(i)); };
    sink(cx, idx, "[bi][i][jn].x[q]");
  });
  for (int k = 0; k < kFragmentScopes; ++k) c_->close();
}

void BlockEmitter::run_mma_pairs(int top, const Distribution& d, int root, const PairSink& sink) {
  LazyDecls decls;
  std::vector<std::string> idx = open_fragment_loops(top, d, root, "h", 2, "(h << 3)", "", decls);
  emit_after_decls(decls, [&] {
    Ctx c0, c1;
    c0.body = c1.body = c_;
    if (root >= 0) {
      c0.root = c1.root = root;
      c0.root_val = "fr[bi][i][jn].x[2 * h]";
      c1.root_val = "fr[bi][i][jn].x[2 * h + 1]";
    }
    c0.reg = [&](int r) { return fmt::format("acc_{}[bi][i][jn].x[2 * h]", nm(r)); };
    c1.reg = [&](int r) { return fmt::format("acc_{}[bi][i][jn].x[2 * h + 1]", nm(r)); };
    sink(c0, c1, idx);
  });
  for (int k = 0; k < kFragmentScopes; ++k) c_->close();
}

}  // namespace kiln::cgen
