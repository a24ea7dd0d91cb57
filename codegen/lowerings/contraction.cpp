// The contraction lowering: match_contraction (the contract is in
// include/kiln/codegen/lowerings/contraction.h), then the plan, its cost and its emission.
#include "kiln/codegen/lowerings/contraction.h"

#include <map>

#include "../cost_util.h"
#include "../emit_internal.h"
#include "kiln/codegen/schedule.h"
#include "matmul_view.h"

namespace kiln {

namespace {

bool is_16bit(DType d) {
  return d == DType::F16 || d == DType::BF16;
}

// The matcher: fills `plan` while walking the graph; every check failure returns false.
class Matcher {
 public:
  Matcher(const BlockGraph& bg, const Target& t) : bg_(bg), t_(t) {}

  bool run(ContractionPlan& plan) {
    if (t_.arch != Arch::Sm90a) return false;
    if (bg_.loop.size() > 1 || bg_.grid.empty()) return false;
    has_loop_ = bg_.loop.size() == 1;
    int saver = -1;
    for (size_t i = 0; i < bg_.ops.size(); ++i)
      if (bg_.ops[i].kind == OpKind::Output) {
        if (saver >= 0) return false;  // one output only
        saver = static_cast<int>(i);
      }
    if (saver < 0) return false;
    const BlockOp& sv = bg_.ops[saver];
    const TensorDesc& od = bg_.outputs[sv.io];
    if (od.shape.size() != 2 || sv.shape.size() != 2) return false;
    for (int f : sv.fmap)
      if (f != -1) return false;
    // The grid dims that tile the output's rows (gi) and columns (gj); any other must be 1.
    for (size_t g = 0; g < bg_.grid.size(); ++g) {
      if (sv.imap[g] == 0)
        gi_ = static_cast<int>(g);
      else if (sv.imap[g] == 1)
        gj_ = static_cast<int>(g);
      else if (bg_.grid[g] != 1)
        return false;
    }
    tile_ = sv.shape;
    plan.m = od.shape[0];
    plan.n = od.shape[1];
    plan.out = od.dtype;
    plan_ = &plan;
    std::string r;
    if (!expr(sv.inputs[0], r)) return false;
    plan.result = r;
    if (plan.a < 0) return false;
    const TensorDesc& a = bg_.inputs[plan.a];
    plan.k = a.shape[1];
    plan.ab = a.dtype;
    if (plan.lowrank) return lowrank(plan);
    if (plan.b.empty() || plan.b.size() > 2) return false;
    const Shape bshape = plan.b_kmajor ? Shape{plan.n, plan.k} : Shape{plan.k, plan.n};
    for (int b : plan.b)
      if (bg_.inputs[b].dtype != a.dtype || bg_.inputs[b].shape != bshape) return false;
    if (a.dtype == DType::F32) {
      // f32 operands: the three-pass tf32 GEMM with this epilogue, one weight, past 2M
      // multiply-adds (Tf32x3GemmKernel's rule; the block graph otherwise runs the product on
      // the CUDA cores).
      if (plan.b.size() != 1 || plan.m * plan.n * plan.k < (int64_t(1) << 21) || plan.row_sumsq)
        return false;
      plan.f32x3_splits = cost::f32x3_splits(plan.m, plan.n, plan.k, t_.sm_count, 1);
      return true;
    }
    if (!is_16bit(a.dtype) || plan.k % 8) return false;
    // B's stored rows must be 16-byte aligned for TMA (N long, or K where B^T is read in
    // place); the output's rows need not be (direct stores).
    if ((plan.n % 8 == 0 || plan.b_kmajor) && !cgen::wgmma_hang_shape(plan.n, plan.k) &&
        plan.m >= 128 && plan.n >= 128 && !plan.row_sumsq)
      return true;
    if (plan.m <= 32)
      plan.gemv = gemv_tma_shape(plan.m, plan.n, plan.k, int(plan.b.size()), t_, plan.b_kmajor);
    if (!plan.gemv && plan.m <= 32 && plan.b_kmajor)
      plan.gemv_kmajor =
          gemv_kmajor_shape(plan.m, plan.n, plan.k, t_, int64_t(plan.b.size()), plan.row_sumsq);
    return plan.gemv.has_value() || plan.gemv_kmajor.has_value();
  }

 private:
  // A contraction whose only product is a low-rank term: 16-bit operands of one type, a shape
  // the chain kernel runs. Beside a full-rank weight (LoRA's X W + (X A) B) the block kernel
  // stays: every CTA computes the small T there either way, and the chain kernel was not
  // reliably faster than the block kernel's pipelined k-loop (LoRA with W [K, N]: 4.22 us against
  // 4.55 on one H200, 5.07 against 4.57 on another, same binaries; with W^T [N, K] 4.05 against
  // 3.69; session 20). The runtime kernel takes W (kHasW, tested) for when that changes.
  bool lowrank(ContractionPlan& plan) const {
    const LowRankTerm& lr = *plan.lowrank;
    if (!plan.b.empty() || plan.row_sumsq || !is_16bit(plan.ab)) return false;
    const Shape l0 = lr.a_kmajor ? Shape{lr.r, plan.k} : Shape{plan.k, lr.r};
    if (bg_.inputs[lr.a].shape != l0) return false;
    for (int io : {lr.a, lr.b})
      if (bg_.inputs[io].dtype != plan.ab) return false;
    plan.lowrank_shape = lowrank_shape(plan.m, plan.n, plan.k, lr.r, lr.a_kmajor, lr.b_kmajor, t_);
    return plan.lowrank_shape.has_value();
  }

  // The tensor dim a grid dim must map to for an iterator of the given role.
  bool grid_maps(const BlockOp& in, int row_dim, int col_dim) const {
    for (size_t g = 0; g < bg_.grid.size(); ++g) {
      int want = -1;
      if (static_cast<int>(g) == gi_) want = row_dim;
      if (static_cast<int>(g) == gj_) want = col_dim;
      if (bg_.grid[g] == 1 && want == -1) continue;  // a unit dim may map anywhere
      if (in.imap[g] != want) return false;
    }
    return true;
  }
  bool loop_maps(const BlockOp& in, int dim) const {
    if (!has_loop_) return in.fmap.empty();
    return in.fmap.size() == 1 && in.fmap[0] == dim;
  }

  // Whether `a` is the contraction's activation A [M, K] (rows by gi, K by the loop), registering
  // it on first sight (every matmul and the row sums of squares must agree on it).
  bool activation(const BlockOp& a) {
    if (a.kind != OpKind::Input || bg_.inputs[a.io].shape.size() != 2) return false;
    if (!grid_maps(a, 0, -1) || !loop_maps(a, 1) || bg_.inputs[a.io].shape[0] != plan_->m)
      return false;
    if (plan_->a >= 0 && plan_->a != a.io) return false;
    plan_->a = a.io;
    return true;
  }

  // The input under op `id` read as a 2-D tile, or under a 2-D transpose of one (kmajor); null
  // where it is neither.
  const BlockOp* input_or_transposed(int id, bool& kmajor) const {
    const BlockOp* p = &bg_.ops[id];
    kmajor = false;
    if (p->kind == OpKind::Transpose && p->inputs.size() == 1 && p->shape.size() == 2 &&
        transpose_perm(p->attrs, 2) == std::vector<int>{1, 0}) {
      kmajor = true;
      p = &bg_.ops[p->inputs[0]];
    }
    if (p->kind != OpKind::Input || bg_.inputs[p->io].shape.size() != 2) return nullptr;
    return p;
  }

  // Whether op `id` (a Post-stage matmul, or any without a loop) is the low-rank term
  // ((A L0) L1)[m, n]: L0 [K, R] read whole along R and by the loop along K (or the transpose of
  // an [R, K] input), its product with A summed over the loop (or, without one, the product
  // itself), then multiplied by L1 [R, N] tiled along N by gj and whole along R (or the transpose
  // of an [N, R] input). One such term per kernel, named v1.
  bool lowrank_operand(int id, std::string& out) {
    const BlockOp& op = bg_.ops[id];
    if (op.inputs.size() != 2 || op.shape != tile_) return false;
    int inner = op.inputs[0];
    if (has_loop_) {
      const BlockOp& acc = bg_.ops[inner];
      if (acc.kind != OpKind::AccumSum || acc.inputs.size() != 1) return false;
      inner = acc.inputs[0];
      if (bg_.ops[inner].stage != Stage::Loop) return false;
    }
    const BlockOp& xa = bg_.ops[inner];
    if (xa.kind != OpKind::MatMul || xa.inputs.size() != 2) return false;
    bool ak = false, bk = false;
    const BlockOp* l0 = input_or_transposed(xa.inputs[1], ak);
    const BlockOp* l1 = input_or_transposed(op.inputs[1], bk);
    if (l0 == nullptr || l1 == nullptr) return false;
    // L0 [K, R]: K by the loop; L0' [R, K]: K by the loop (dim 1); neither gridded.
    if (!grid_maps(*l0, -1, -1) || !loop_maps(*l0, ak ? 1 : 0)) return false;
    // L1 [R, N]: columns by gj; L1' [N, R]: rows by gj; not by the loop.
    if (!grid_maps(*l1, -1, bk ? 0 : 1) || !loop_maps(*l1, -1)) return false;
    const Shape& s0 = bg_.inputs[l0->io].shape;
    const Shape& s1 = bg_.inputs[l1->io].shape;
    const int64_t r = ak ? s0[0] : s0[1];
    if ((bk ? s1[1] : s1[0]) != r || (bk ? s1[0] : s1[1]) != plan_->n) return false;
    // Whole along R: the tiles hold every rank column.
    if (bg_.ops[inner].shape.back() != r || op.shape.size() != 2) return false;
    const LowRankTerm term{l0->io, l1->io, r, ak, bk};
    if (plan_->lowrank) {
      const LowRankTerm& o = *plan_->lowrank;
      if (o.a != term.a || o.b != term.b || o.a_kmajor != ak || o.b_kmajor != bk) return false;
    }
    if (!activation(bg_.ops[xa.inputs[0]])) return false;
    plan_->lowrank = term;
    out = "v1";
    return true;
  }

  // The accumulator of matmul op `mm` (A x B_j over the whole K): its index j, registering A
  // and B_j on first sight.
  bool matmul_operand(int mm, std::string& out) {
    const BlockOp& op = bg_.ops[mm];
    if (op.inputs.size() != 2) return false;
    const BlockOp& a = bg_.ops[op.inputs[0]];
    // B may be the transpose of an [N, K] tile (W^T of an nn.Linear weight W).
    bool kmajor = false;
    const BlockOp* bp = input_or_transposed(op.inputs[1], kmajor);
    if (bp == nullptr) return false;
    const BlockOp& b = *bp;
    // B [K, N]: columns by gj, K by the loop; B^T [N, K]: rows by gj, K by the loop.
    if (kmajor ? !grid_maps(b, -1, 0) || !loop_maps(b, 1)
               : !grid_maps(b, -1, 1) || !loop_maps(b, 0))
      return false;
    // One layout for every weight (the runtime kernels take one).
    if (!plan_->b.empty() && plan_->b_kmajor != kmajor) return false;
    if (!activation(a)) return false;
    plan_->b_kmajor = kmajor;
    for (size_t j = 0; j < plan_->b.size(); ++j)
      if (plan_->b[j] == b.io) {
        out = "v" + std::to_string(j);
        return true;
      }
    plan_->b.push_back(b.io);
    out = "v" + std::to_string(plan_->b.size() - 1);
    return true;
  }

  // Renders op `id` (a Post-stage value, or Invariant without a loop) as a float expression.
  bool expr(int id, std::string& out) {
    if (auto it = memo_.find(id); it != memo_.end()) {
      out = it->second;
      return true;
    }
    const BlockOp& op = bg_.ops[id];
    const OpClass c = op_info(op.kind).cls;
    bool ok = false;
    if (op.kind == OpKind::AccumSum && has_loop_) {
      const BlockOp& in = bg_.ops[op.inputs[0]];
      if (in.kind == OpKind::MatMul) {
        ok = in.stage == Stage::Loop && op.shape == tile_ && matmul_operand(op.inputs[0], out);
      } else if (row_sum_of_squares(op)) {
        plan_->row_sumsq = true;
        out = "rs";
        ok = true;
      }
    } else if (op.kind == OpKind::MatMul && (op.stage == Stage::Post || !has_loop_) &&
               lowrank_operand(id, out)) {
      ok = true;
    } else if (op.kind == OpKind::MatMul && !has_loop_) {
      ok = op.shape == tile_ && matmul_operand(id, out);
    } else if (op.kind == OpKind::Input) {
      // An operand of the epilogue broadcast to [M, N], read at the output element.
      std::array<int64_t, 2> strides;
      if (epilogue_input(op, strides)) {
        size_t e = 0;
        while (e < plan_->epi_inputs.size() && plan_->epi_inputs[e] != op.io) ++e;
        if (e == plan_->epi_inputs.size()) {
          plan_->epi_inputs.push_back(op.io);
          plan_->epi_strides.push_back(strides);
        }
        out = "e" + std::to_string(e);
        ok = true;
      }
    } else if (c == OpClass::Constant) {
      out = cgen::flit(op.attrs.value);
      ok = true;
    } else if (c == OpClass::Unary || c == OpClass::Binary || c == OpClass::Fused) {
      // Elementwise over shapes that broadcast to the tile: the value at the output element is
      // the expression of its operands' values there.
      if (!broadcasts_to_tile(op.shape)) return false;
      std::vector<std::string> xs;
      for (int in : op.inputs) {
        const BlockOp& io = bg_.ops[in];
        if (!broadcasts_to_tile(io.shape)) return false;
        std::string s;
        if (!expr(in, s)) return false;
        xs.push_back(s);
      }
      if (c == OpClass::Fused) {
        const ThreadGraph& tg = *op.thread;
        std::vector<std::string> vals = xs;
        for (const ThreadOp& to : tg.ops) {
          std::vector<std::string> args;
          for (int r : to.inputs) args.push_back(vals[r]);
          vals.push_back(bind(cgen::ew_expr(to.kind, to.attrs, args)));
        }
        out = vals.back();
      } else {
        out = bind(cgen::ew_expr(op.kind, op.attrs, xs));
      }
      ok = true;
    }
    if (ok) memo_[id] = out;
    return ok;
  }

  // Whether accumulator `acc` is the sum over K of square(A) per row: accum_sum of a keepdim sum
  // over the tile's last dim of square(x) or x * x, x the A input read as the matmuls read it.
  // A is known by then or taken here (the matmuls must then agree).
  bool row_sum_of_squares(const BlockOp& acc) {
    const BlockOp& sum = bg_.ops[acc.inputs[0]];
    if (sum.kind != OpKind::Sum || sum.stage != Stage::Loop || !sum.attrs.keepdim ||
        sum.inputs.size() != 1 || acc.shape != Shape{tile_[0], 1})
      return false;
    const BlockOp& sq = bg_.ops[sum.inputs[0]];
    if (sum.attrs.dim != 1 && sum.attrs.dim != -1) return false;
    int x = -1;
    if (sq.kind == OpKind::Square && sq.inputs.size() == 1) x = sq.inputs[0];
    if (sq.kind == OpKind::Mul && sq.inputs.size() == 2 && sq.inputs[0] == sq.inputs[1])
      x = sq.inputs[0];
    if (x < 0) return false;
    return activation(bg_.ops[x]);
  }

  // Whether a tile of shape s broadcasts (numpy rules, right-aligned) to the output tile.
  bool broadcasts_to_tile(const Shape& s) const {
    if (s.size() > tile_.size()) return false;
    const size_t off = tile_.size() - s.size();
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] != 1 && s[i] != tile_[off + i]) return false;
    return true;
  }

  // Whether input op `in` is an epilogue operand: a tensor of rank <= 2 that broadcasts to [M, N]
  // (each dim the full extent or 1), tiled by the grid along its full dims, not by the loop.
  // Fills its element strides along m and n.
  bool epilogue_input(const BlockOp& in, std::array<int64_t, 2>& strides) const {
    const TensorDesc& d = bg_.inputs[in.io];
    const int64_t ext[2] = {plan_->m, plan_->n};
    if (d.shape.size() > 2 || in.shape.size() > 2) return false;
    if (has_loop_ ? in.fmap != std::vector<int>{-1} : !in.fmap.empty()) return false;
    const size_t off = 2 - d.shape.size(), toff = 2 - in.shape.size();
    int dim_of[2] = {-1, -1};  // the tensor dim along m and n, -1 where broadcast
    int64_t stride = 1;
    strides = {0, 0};
    for (int i = static_cast<int>(d.shape.size()) - 1; i >= 0; --i) {
      const size_t o = off + static_cast<size_t>(i);
      const int64_t tile_dim = o >= toff ? in.shape[o - toff] : 1;
      if (d.shape[i] == ext[o] && ext[o] != 1) {
        if (tile_dim != tile_[o]) return false;
        dim_of[o] = i;
        strides[o] = stride;
      } else if (d.shape[i] != 1 || tile_dim != 1) {
        return false;
      }
      stride *= d.shape[i];
    }
    return grid_maps(in, dim_of[0], dim_of[1]);
  }

  std::string bind(const std::string& e) {
    std::string v = "t" + std::to_string(plan_->epi_statements.size());
    plan_->epi_statements.push_back("const float " + v + " = " + e + ";");
    return v;
  }

  const BlockGraph& bg_;
  const Target& t_;
  bool has_loop_ = false;
  int gi_ = -1, gj_ = -1;
  Shape tile_;
  ContractionPlan* plan_ = nullptr;
  std::map<int, std::string> memo_;
};

}  // namespace

int64_t lowrank_smem_bytes(int mt, int rt, int nc, bool a_kmajor, bool b_kmajor, int64_t k,
                           int splits) {
  // Mirrors runtime/lowrank.cuh (LowrankSmem, lowrank_k_chunk) without W: the k-range of X and of
  // A and the CTA's columns of B, 16-bit with pitches padded by 8 elements, then the warps' f32
  // partials of T, their sum, the cluster's partials (one slot per rank) and their sum, each MP
  // rows of pitch RP + 4 floats, and 16 bytes for the exchange's mbarrier.
  const int64_t mp = 16 * mt, rp = 16 * rt;
  const int64_t kc = cgen::cdiv(cgen::cdiv(k, splits), 16) * 16;
  const int64_t ap = a_kmajor ? kc + 8 : rp + 8, bp = b_kmajor ? rp + 8 : nc + 8;
  const int64_t elems = mp * (kc + 8) + (a_kmajor ? rp : kc) * ap + (b_kmajor ? nc : rp) * bp;
  return (elems * 2 + 15) / 16 * 16 + (4 + 1 + splits + 1) * mp * (rp + 4) * 4 + 16;
}

std::optional<LowRankShape> lowrank_shape(int64_t m, int64_t n, int64_t k, int64_t r, bool a_kmajor,
                                          bool b_kmajor, const Target& t) {
  if (t.arch != Arch::Sm90a) return std::nullopt;
  if (m < 1 || m > 32 || r < 8 || r > 64 || r % 8 || k < 8 || k % 8 || n < 8 || n % 8)
    return std::nullopt;
  LowRankShape s;
  s.mt = static_cast<int>(cgen::cdiv(m, 16));
  s.rt = static_cast<int>(cgen::cdiv(r, 16));
  // Measured on an H200 (tests/gpu/lowrank_sweep.cu, session 20): M16 K4096 R16 N4096 ran 4.70 us
  // at 8 splits of 32 KB (5.50 at 4 of 64 KB); M32 K1024 R64 N2056 8.45 at 4 splits of 48 KB
  // (9.31 at 8, 9.38 at 2). Session 21's kernel, another H200: 3.86 at 8 (4.56 at 4, 4.24 at
  // 16); 6.70 at 4 (7.65 at 8, 7.33 at 2, 9.89 at 16).
  while (s.splits < 8 &&
         cgen::cdiv(cgen::cdiv(k, s.splits), 16) * 16 * 16 * (s.mt + s.rt) * 2 > 48 * 1024)
    s.splits *= 2;
  // Wider column blocks while they still leave at least 64 CTAs (N-major B rows of 128 bytes
  // instead of 64; fewer clusters re-reading X and L0): lowrank 4.70 us at 64 columns, 5.58 at 32,
  // 5.19 at 128.
  const auto ctas = [&](int nc) { return cgen::cdiv(cgen::cdiv(n, nc), s.splits) * s.splits; };
  while (s.nc < 128 && ctas(2 * s.nc) >= 64) s.nc *= 2;
  while (s.nc < 128 && cgen::cdiv(n, s.nc) > t.sm_count) s.nc *= 2;
  s.grid = ctas(s.nc);
  s.smem = lowrank_smem_bytes(s.mt, s.rt, s.nc, a_kmajor, b_kmajor, k, s.splits);
  if (s.smem > t.smem_per_block) return std::nullopt;
  return s;
}

std::optional<ContractionPlan> match_contraction(const BlockGraph& bg, const Target& t) {
  ContractionPlan plan;
  Matcher m(bg, t);
  if (!m.run(plan)) return std::nullopt;
  return plan;
}

std::optional<ContractionKernel> ContractionKernel::match(const PlanContext& ctx, int k,
                                                          KernelPlan& kp) {
  const KernelOp& op = ctx.g.ops[k];
  if (op.kind != OpKind::GraphDefined || !ctx.opt.lowerings) return std::nullopt;
  std::optional<ContractionPlan> c = match_contraction(*op.block, ctx.t);
  if (!c) return std::nullopt;
  if (const std::optional<LowRankShape>& v = c->lowrank_shape) {
    // Few rows times a low-rank chain: one launch, T = X A per cluster (runtime/lowrank.cuh).
    kp.splits = v->splits;
    kp.grid = v->grid;
    kp.threads = 128;
    kp.smem = v->smem;
  } else if (const std::optional<GemvTmaShape>& v = c->gemv) {
    // Decode rows: the TMA GEMV streams the weights once (runtime/gemv_tma.cuh).
    kp.splits = static_cast<int>(v->splits);
    kp.grid = v->grid;
    kp.threads = c->row_sumsq ? 192 : 160;  // + the rows warp
    kp.smem = v->smem;
  } else if (const std::optional<GemvKmajorShape>& v = c->gemv_kmajor) {
    // Decode rows, one or two K-major weights: the K-major register GEMV (gemv_kmajor.cuh).
    kp.splits = static_cast<int>(v->splits);
    kp.grid = v->grid;
    kp.threads = GemvKmajorShape::threads();
    kp.smem = 0;
  } else if (c->f32x3_splits > 0) {
    // f32: the split pass's pairs and the partials live in the kernel's workspace.
    const int64_t kpad = cgen::cdiv(c->k, 32) * 32;
    kp.splits = c->f32x3_splits;
    kp.grid = std::min<int64_t>(cgen::cdiv(c->m, 128) * cgen::cdiv(c->n, 128) * kp.splits,
                                ctx.t.sm_count);
    kp.threads = 384;
    kp.smem = kp.block->smem_bytes;
    kp.scratch_bytes =
        (c->m + c->n) * 2 * kpad * 4 + (kp.splits > 1 ? kp.splits * c->m * c->n * 4 : 0);
  } else {
    kp.grid = cgen::cdiv(c->m, 128) * cgen::cdiv(c->n, 128);
    kp.threads = 384;
    kp.smem = kp.block->smem_bytes;
  }
  return ContractionKernel{std::move(*c)};
}

std::string ContractionKernel::describe() const {
  const char* plural = c.b.size() > 1 ? "s" : "";
  if (const std::optional<LowRankShape>& v = c.lowrank_shape)
    return fmt::format("low-rank chain contraction (rank {}, {} columns per CTA, cluster {})",
                       c.lowrank->r, v->nc, v->splits);
  if (const std::optional<GemvTmaShape>& v = c.gemv)
    return fmt::format("gemv tma contraction ({} weight{}{}, {}x{} s{}, {} split{})", c.b.size(),
                       plural, c.b_kmajor ? " K-major" : "", v->bn, v->bk, v->stages, v->splits,
                       v->splits > 1 ? "s" : "");
  if (const std::optional<GemvKmajorShape>& v = c.gemv_kmajor)
    return fmt::format("gemv k-major contraction ({} weight{}, {} warps x 16 columns, cluster {})",
                       c.b.size(), plural, GemvKmajorShape::kWarps, v->splits);
  if (c.f32x3_splits > 0)
    return fmt::format("tf32x3 contraction ({}128x128x32 tiles{})", c.b_kmajor ? "K-major, " : "",
                       c.f32x3_splits > 1 ? fmt::format(", split-k {}", c.f32x3_splits) : "");
  return fmt::format("wgmma_ws contraction ({} weight{}{}, 128x128x64 tiles)", c.b.size(), plural,
                     c.b_kmajor ? " K-major" : "");
}

KernelCost ContractionKernel::cost(const CostContext& x) const {
  if (c.f32x3_splits > 0) {
    const std::vector<TensorDesc>& in = x.op.block->inputs;
    double bytes = 0;
    for (const TensorDesc& t : in) bytes += double(numel(t.shape)) * dtype_bytes(t.dtype);
    KernelCost k = cost::f32x3_gemm_cost(x.op.name, c.m, c.n, c.k, 1, c.f32x3_splits, bytes,
                                         double(c.m) * double(c.n) * dtype_bytes(c.out), x.t);
    k.graph_defined = true;
    return k;
  }
  return cost::contraction_cost(x.op.name, c, x.op.block->inputs, x.t);
}

using namespace cgen;

// A graph-defined op that is a GEMM with an elementwise epilogue (contraction.h): an epilogue
// functor evaluated at each output element, and a launch of the runtime's warp-specialized
// TMA + wgmma GEMM (128 x 128 x 64 tiles, 4 stages for one weight, 3 for two).
void ContractionKernel::emit(GraphCtx& x, const KernelOp& op, const KernelPlan& kp) const {
  const BlockGraph& bg = *op.block;
  const std::string epi = "Epi_" + kp.kernel;
  Code& K = x.kernels;
  if (c.lowrank)
    K.f("// {}: {} = epilogue(v0 = 0, v1 = (A[{}, {}] L0[{}, {}]) L1[{}, {}]) ({})", kp.kernel,
        bg.outputs[0].name, c.m, c.k, c.k, c.lowrank->r, c.lowrank->r, c.n, kp.strategy());
  else
    K.f("// {}: {} = epilogue(A[{}, {}] x B[{}, {}]{}) ({})", kp.kernel, bg.outputs[0].name, c.m,
        c.k, c.k, c.n, c.b_kmajor ? ", B given as B^T, read K-major" : "", kp.strategy());
  K.open(fmt::format("struct {} {{", epi));
  for (size_t e = 0; e < c.epi_inputs.size(); ++e)
    K.f("const {}* e{}_ptr;", ctype(bg.inputs[c.epi_inputs[e]].dtype), e);
  if (c.gemv || c.gemv_kmajor) {
    // The GEMV's epilogue interface (runtime/gemv.cuh): one more argument, the row's sum of
    // squares, which this functor does not ask for.
    K.f("static constexpr bool kRowSumSq = {};", c.row_sumsq ? "true" : "false");
    K.open(
        "__device__ __forceinline__ float operator()(float v0, float v1, int m, int n, float rs) "
        "const {");
    K.line("(void)rs;");
  } else {
    K.open("__device__ __forceinline__ float operator()(float v0, float v1, int m, int n) const {");
  }
  K.line("(void)v0; (void)v1; (void)m; (void)n;");
  for (size_t e = 0; e < c.epi_inputs.size(); ++e) {
    // Along n the stride is 1 (n is the last dim) or 0 (broadcast).
    const std::array<int64_t, 2>& st = c.epi_strides[e];
    std::vector<std::string> terms;
    if (st[0] != 0) terms.push_back(fmt::format("int64_t(m) * {}", st[0]));
    if (st[1] != 0) terms.push_back("n");
    K.f("const float e{0} = kiln::rt::to_f32(e{0}_ptr[{1}]);", e,
        terms.empty() ? std::string("0") : fmt::format("{}", fmt::join(terms, " + ")));
  }
  for (const std::string& st : c.epi_statements) K.line(st);
  K.f("return {};", c.result);
  K.close();
  K.close("};");
  K.line("");

  const int nb = static_cast<int>(c.b.size());
  const int stages = nb == 1 ? 6 : 4;  // the measured best (runtime/wgmma.cuh, WgmmaGemmWS)
  // The weights' row stride: N, or K for B^T [N, K] (read K-major in place).
  const int64_t ldb = c.b_kmajor ? c.k : c.n;
  std::vector<std::string> epi_args;
  for (int e : c.epi_inputs) epi_args.push_back(x.ptr(op.inputs[e]));
  Code& L = x.launch;
  L.open("{");
  if (const std::optional<LowRankShape>& v = c.lowrank_shape) {
    // Every operand read in place, in its own layout (the flags); no full-rank weight (kHasW
    // false: X stands in for the unused W pointer).
    const LowRankTerm& lr = *c.lowrank;
    const std::string xp = x.ptr(op.inputs[c.a]);
    L.f("err = kiln::rt::lowrank_launch<{}, {}, {}, {}, {}, {}, {}, false, false, {}>({}, {}, {}, "
        "{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, stream, {}{{{}}});",
        ctype(c.ab), ctype(c.out), v->mt, v->rt, v->nc, lr.a_kmajor, lr.b_kmajor, epi, xp, c.k,
        x.ptr(op.inputs[lr.a]), lr.a_kmajor ? c.k : lr.r, x.ptr(op.inputs[lr.b]),
        lr.b_kmajor ? lr.r : c.n, xp, c.k, x.ptr(op.outputs[0]), c.n, c.m, c.n, c.k, lr.r,
        v->splits, epi, fmt::join(epi_args, ", "));
    L.line("if (err != cudaSuccess) return err;");
    L.close();
    return;
  }
  if (const std::optional<GemvTmaShape>& v = c.gemv) {
    L.f("err = kiln::rt::gemv_tma_launch<{}, {}, {}, {}, {}, {}, {}, 1, {}{}>({}, {}, {}, {}, {}, "
        "{}, {}, {}, {}, {}, {}, stream, {}{{{}}});",
        ctype(c.ab), ctype(c.out), v->mt, nb, v->bn, v->bk, v->stages, epi,
        c.b_kmajor ? ", true" : "", x.ptr(op.inputs[c.a]), c.k, x.ptr(op.inputs[c.b[0]]),
        x.ptr(op.inputs[c.b[nb - 1]]), ldb, x.ptr(op.outputs[0]), c.n, c.m, c.n, c.k, v->splits,
        epi, fmt::join(epi_args, ", "));
    L.line("if (err != cudaSuccess) return err;");
    L.close();
    return;
  }
  if (const std::optional<GemvKmajorShape>& v = c.gemv_kmajor) {
    L.line(gemv_kmajor_launch_call(*v, ctype(c.ab), ctype(c.out), epi, x.ptr(op.inputs[c.a]),
                                   x.ptr(op.inputs[c.b[0]]), x.ptr(op.inputs[c.b[nb - 1]]),
                                   x.ptr(op.outputs[0]), c.m, c.n, c.k,
                                   fmt::format("{}{{{}}}", epi, fmt::join(epi_args, ", "))));
    L.line("if (err != cudaSuccess) return err;");
    L.close();
    return;
  }
  if (c.f32x3_splits > 0) {
    // f32 operands: the three-pass tf32 GEMM; with split-K the epilogue runs in the partials' sum.
    L.f("err = kiln::rt::gemm_f32x3_launch({}, {}, false, {}, {}, {}, {}, {}, {}, {}, {}, {}, ws + "
        "{}, {}{{{}}}, stream);",
        x.ptr(op.inputs[c.a]), c.k, x.ptr(op.inputs[c.b[0]]), ldb, c.b_kmajor ? "true" : "false",
        x.ptr(op.outputs[0]), c.n, c.m, c.n, c.k, c.f32x3_splits, kp.scratch_offset, epi,
        fmt::join(epi_args, ", "));
    L.line("if (err != cudaSuccess) return err;");
    L.close();
    return;
  }
  // One weight runs ping-pong (each consumer warpgroup a whole tile, the epilogue of one beside
  // the other's wgmmas; runtime/wgmma.cuh). Measured on an H200, same call: 4096^3 f16 190.4 us
  // against 196.3; 512 x 14336 x 4096 bf16 with silu(x + bias), 101.5 against 110.8 (H100).
  const std::string cfg = nb == 1      ? fmt::format("{}, 1, {}, 1, {}, true", ctype(c.ab), stages,
                                                c.b_kmajor ? "true" : "false")
                          : c.b_kmajor ? fmt::format("{}, 2, {}, 2, true", ctype(c.ab), stages)
                                       : fmt::format("{}, 2, {}", ctype(c.ab), stages);
  L.f("err = kiln::rt::wgmma_ws_gemm_launch<kiln::rt::WgmmaGemmWS<{}>, {}, {}>({}, {}, "
      "{}, {}, {}, {}, {}, {}, {}, {}, {}{{{}}}, stream);",
      cfg, ctype(c.out), epi, x.ptr(op.inputs[c.a]), c.k, x.ptr(op.inputs[c.b[0]]),
      x.ptr(op.inputs[c.b[nb - 1]]), ldb, x.ptr(op.outputs[0]), c.n, c.m, c.n, c.k, epi,
      fmt::join(epi_args, ", "));
  L.line("if (err != cudaSuccess) return err;");
  L.close();
}

}  // namespace kiln
