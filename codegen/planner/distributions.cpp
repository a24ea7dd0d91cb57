// The block planner (block_planner.h). Pass 2 and 3: who computes which element (lane groups, mma
// warp partitions, register-resident fragment chains), and which accumulators must spill because a
// reader has another distribution.
#include "block_planner.h"

namespace kiln::planner {

Distribution BlockPlanner::group_dist(int64_t numel, int64_t red_len) const {
  Distribution d;
  d.kind = DistKind::Group;
  d.numel = numel;
  int g = 1;
  if (red_len >= 8) {
    while (g < 32 && numel * g * 2 <= T_ && g * 2 <= red_len) g *= 2;
    // Few long rows (e.g. a decode row's sum of squares): more than a warp per output while
    // every lane keeps at least 8 elements; the warps of a group combine through shared memory.
    if (g == 32)
      while (g * 2 <= T_ && numel * g * 2 <= T_ && g * 2 * 8 <= red_len) g *= 2;
  }
  d.group = g;
  return d;
}

BlockPlanner::Operand BlockPlanner::resolve_operand(int i) const {
  Operand r;
  int cur = i;
  while (s_.tiles[cur].home == TileHome::Inline && cls(cur) == OpClass::Transpose) {
    const std::vector<int>& p = op(cur).attrs.perm;
    int rk = static_cast<int>(p.size());
    bool swap_last = rk >= 2 && p[rk - 1] == rk - 2 && p[rk - 2] == rk - 1;
    for (int d = 0; d < rk - 2; ++d) swap_last &= p[d] == d;
    if (!swap_last) r.clean = false;
    r.swapped = !r.swapped;
    cur = op(cur).inputs[0];
  }
  r.leaf = cur;
  if (s_.tiles[cur].home == TileHome::Inline) r.clean = false;
  return r;
}

MmaPlan BlockPlanner::plan_mma(int i) const {
  MmaPlan p;
  const BlockOp& o = op(i);
  const Shape& a = op(o.inputs[0]).shape;
  const Shape& b = op(o.inputs[1]).shape;
  int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
  if (K < 8 || N < 8 || M * N * K < 2048) return p;
  Operand oa = resolve_operand(o.inputs[0]), ob = resolve_operand(o.inputs[1]);
  DType da = operand_dtype(oa), db = operand_dtype(ob);
  auto ok16 = [&](DType d) {
    return d == DType::F16 ? lossy_f16_ : d == DType::BF16 ? lossy_bf16_ : false;
  };
  if (da != DType::F32 && db != DType::F32) {
    if (da != db) return p;
    p.dtype = da;
  } else if (da != DType::F32 && ok16(da)) {
    p.dtype = da, p.lossy = true;
  } else if (db != DType::F32 && ok16(db)) {
    p.dtype = db, p.lossy = true;
  } else {
    return p;
  }
  p.use = true;
  auto ldm_ok = [&](const Operand& x, DType d) {
    if (!x.clean || cls(x.leaf) != OpClass::Input || d != p.dtype) return false;
    const TilePlan& t = s_.tiles[x.leaf];
    int64_t pitch = t.strides.empty() ? op(x.leaf).shape.back() : t.strides[t.strides.size() - 2];
    return op(x.leaf).shape.size() >= 2 && pitch % 8 == 0;
  };
  // A: M x K. Row-major via ldmatrix needs K % 16; transposed needs M % 16 too.
  if (ldm_ok(oa, da) && K % 16 == 0) {
    if (!oa.swapped) p.a_ldmatrix = true;
    if (oa.swapped && M % 16 == 0) p.a_ldmatrix = true, p.a_trans = true;
  }
  if (ldm_ok(ob, db) && K % 16 == 0 && N % 8 == 0) p.b_ldmatrix = true, p.b_nk = ob.swapped;
  return p;
}

bool BlockPlanner::mma_partition(int64_t B, int64_t M, int64_t N, int64_t K, bool allow_ks,
                                 int reg_cap, Distribution& out) const {
  int W = T_ / 32;
  int64_t MT = ceil_div(M, 16), NT = ceil_div(N, 8), KST = ceil_div(K, 16);
  double best = 1e300;
  bool found = false;
  std::vector<int> divs;
  for (int d = 1; d <= W; ++d)
    if (W % d == 0) divs.push_back(d);
  for (int wb : divs)
    for (int wm : divs)
      for (int wn : divs)
        for (int ks : divs) {
          if (int64_t(wb) * wm * wn * ks != W) continue;
          if (ks > 1 && !allow_ks) continue;
          if (wb > B || wm > MT || wn > NT || ks > KST) continue;
          int64_t bw = ceil_div(B, wb), mtw = ceil_div(MT, wm), ntw = ceil_div(NT, wn);
          int64_t kst = ceil_div(KST, ks);
          int64_t regs = bw * mtw * ntw * 4;
          if (regs > reg_cap) continue;
          double mmas = double(bw * mtw * ntw * kst);
          double loads = double(bw * kst) * (mtw + (ntw + 1) / 2);
          double cost = mmas + 0.5 * loads + (ks > 1 ? 8.0 : 0.0) + (ntw % 2 ? 0.25 * kst : 0);
          if (cost < best - 1e-9) {
            best = cost;
            found = true;
            out = Distribution{};
            out.kind = DistKind::Mma;
            out.numel = B * M * N;
            out.batch = B, out.m = M, out.n = N;
            out.wb = wb, out.wm = wm, out.wn = wn, out.ks = ks;
            out.bw = int(bw), out.mtw = int(mtw), out.ntw = int(ntw);
          }
        }
  // Fewer warps than W (idle warps) when the product is tiny.
  if (!found) {
    for (int wb : divs)
      for (int wm : divs)
        for (int wn : divs) {
          if (int64_t(wb) * wm * wn > W || wb > B || wm > MT || wn > NT) continue;
          int64_t bw = ceil_div(B, wb), mtw = ceil_div(MT, wm), ntw = ceil_div(NT, wn);
          if (bw * mtw * ntw * 4 > reg_cap) continue;
          double cost = double(bw * mtw * ntw * KST);
          if (cost < best) {
            best = cost;
            found = true;
            out = Distribution{};
            out.kind = DistKind::Mma;
            out.numel = B * M * N;
            out.batch = B, out.m = M, out.n = N;
            out.wb = wb, out.wm = wm, out.wn = wn, out.ks = 1;
            out.bw = int(bw), out.mtw = int(mtw), out.ntw = int(ntw);
          }
        }
  }
  return found;
}

Distribution BlockPlanner::step_dist(int top, const Tree& t) {
  if (t.root >= 0) {
    int r = t.root;
    if (cls(r) == OpClass::Reduce) return group_dist(numel(op(r).shape), reduce_len(r));
    // Matmul root.
    TilePlan& rp = tp(r);
    rp.mma = plan_mma(r);
    if (rp.mma.use) {
      const Shape& os = op(r).shape;
      int64_t M = os[os.size() - 2], N = os.back(), B = numel(os) / (M * N);
      int64_t K = op(op(r).inputs[0]).shape.back();
      // k-split only when the matmul feeds accum_sum directly (partials add up at the end).
      bool direct = top == r && tp(r).home == TileHome::Feed;
      for (int c : distinct_consumers(r)) direct &= op(c).kind == OpKind::AccumSum;
      Distribution d;
      if (mma_partition(B, M, N, K, direct, 64, d)) return d;
      // A product too large for 64 fragment floats per thread still runs on tensor cores
      // with up to 128: the FMA fallback ran an attention step 15-25x slower (gqa bs16
      // candidates with 128- and 256-key iterations: 785 and 1295 us against 45).
      if (mma_partition(B, M, N, K, direct, 128, d)) return d;
      rp.mma.use = false;
    }
    // FMAs: few elements with a long K (a matrix times a vector, X v) split K over lane groups
    // like a reduction; one thread per element walking K serially ran linear_mean's X v at 8% of
    // DRAM peak (37.5 us for 8 MB in ncu, H100).
    return group_dist(numel(op(r).shape), op(op(r).inputs[0]).shape.back());
  }
  if (!t.reg_leaves.empty()) return tp(t.reg_leaves[0]).dist;
  return group_dist(numel(op(top).shape), 1);
}

void BlockPlanner::plan_dists() {
  // Accumulators folding a stored tile: one element per thread, strided.
  for (int i = 0; i < n_; ++i)
    if (cls(i) == OpClass::Accum && tp(op(i).inputs[0]).home != TileHome::Feed)
      tp(i).dist = group_dist(numel(op(i).shape), 1);
  for (int top = 0; top < n_; ++top) {
    if (!is_task_top(top)) continue;
    Tree t = tree_of(top);
    Distribution d = step_dist(top, t);
    auto chain = chain_dists_.find(top);
    if (chain != chain_dists_.end()) d = chain->second;
    tp(top).dist = d;
    tp(top).root = t.root;
    if (t.root >= 0) tp(t.root).dist = d;
    if (tp(top).home == TileHome::Feed)
      for (int c : distinct_consumers(top)) tp(c).dist = d;
  }
}

Distribution BlockPlanner::rows_dist(int64_t B, int64_t M, int64_t N, int wb, int wm) {
  Distribution d;
  d.kind = DistKind::Mma;
  d.batch = B, d.m = M, d.n = N, d.numel = B * M * N;
  d.wb = wb, d.wm = wm, d.wn = 1, d.ks = 1;
  d.bw = static_cast<int>(ceil_div(B, wb));
  d.mtw = static_cast<int>(ceil_div(ceil_div(M, 16), wm));
  d.ntw = static_cast<int>(ceil_div(N, 8));
  return d;
}

bool BlockPlanner::chain_consumer_ok(int p, int c) const {
  if (tp_const(c).home != TileHome::Feed || op(c).stage != Stage::Loop) return false;
  int rank = static_cast<int>(op(p).shape.size());
  if (cls(c) == OpClass::Matmul) {
    if (op(c).inputs[0] != p || op(c).inputs[1] == p || !tp_const(c).mma.use) return false;
    std::vector<int> dc = distinct_consumers(c);
    if (dc.size() != 1 || op(dc[0]).kind != OpKind::AccumSum) return false;
    // No batch broadcast of p: the product's batch is p's.
    const Shape& os = op(c).shape;
    int64_t Mc = os[os.size() - 2], Nc = os.back();
    return numel(os) / (Mc * Nc) * Mc == numel(op(p).shape) / op(p).shape.back() &&
           os.size() == op(p).shape.size();
  }
  if (cls(c) != OpClass::Reduce || op(c).attrs.dim != rank - 1) return false;
  if (op(c).kind != OpKind::Sum && op(c).kind != OpKind::Mean && op(c).kind != OpKind::Max)
    return false;
  for (int a : distinct_consumers(c))
    if (op(a).kind != OpKind::AccumSum && op(a).kind != OpKind::AccumMax) return false;
  return true;
}

bool BlockPlanner::plan_fragment_chains() {
  bool any = false;
  const int W = T_ / 32;
  for (int p = 0; p < n_; ++p) {
    TilePlan& t = tp(p);
    if (t.home != TileHome::Smem || op(p).stage != Stage::Loop || t.root < 0) continue;
    int r = t.root;
    if (cls(r) != OpClass::Matmul || !tp(r).mma.use || !same_padded(op(r).shape, op(p).shape))
      continue;
    const Shape& ss = op(r).shape;
    if (ss.size() < 2) continue;
    int64_t M = ss[ss.size() - 2], N = ss.back(), B = numel(ss) / (M * N);
    int64_t K = op(op(r).inputs[0]).shape.back();
    if (N % 16) continue;
    std::vector<int> dc = distinct_consumers(p);
    bool ok = !dc.empty();
    bool has_mm = false;
    for (int c : dc) {
      ok &= chain_consumer_ok(p, c);
      has_mm |= cls(c) == OpClass::Matmul;
    }
    if (!ok || !has_mm) continue;
    // Warps along batch and m16 tiles only; fewest mma per warp, registers bounded.
    int64_t MT = ceil_div(M, 16);
    double best = 1e300;
    int bwb = 0, bwm = 0;
    for (int wb = 1; wb <= W; ++wb)
      for (int wm = 1; wb * wm <= W; ++wm) {
        if (W % (wb * wm) || wb > B || wm > MT) continue;
        int64_t rows = ceil_div(B, wb) * ceil_div(MT, wm);
        int64_t regs = rows * ceil_div(N, 8) * 4;
        double mmas = double(rows) * ceil_div(N, 8) * ceil_div(K, 16);
        bool fits = regs <= 64;
        for (int c : dc) {
          if (cls(c) != OpClass::Matmul) continue;
          int64_t Nc = op(c).shape.back();
          regs += rows * ceil_div(Nc, 8) * 4;
          fits &= rows * ceil_div(Nc, 8) * 4 <= 64;
          mmas += double(rows) * ceil_div(Nc, 8) * (N / 16);
        }
        if (!fits || regs > 128) continue;
        if (mmas < best - 1e-9) best = mmas, bwb = wb, bwm = wm;
      }
    if (bwb == 0) continue;
    t.home = TileHome::Fragment;
    t.note = "register-resident (A fragments of its consumers)";
    chain_dists_[p] = rows_dist(B, M, N, bwb, bwm);
    for (int c : dc) {
      int64_t Nc = cls(c) == OpClass::Matmul ? op(c).shape.back() : 1;
      Distribution d = rows_dist(B, M, Nc, bwb, bwm);
      if (cls(c) != OpClass::Matmul) d.ntw = 1, d.numel = B * M;
      chain_dists_[c] = d;
    }
    any = true;
  }
  return any;
}

bool BlockPlanner::fix_register_reads() {
  bool changed = false;
  for (int top = 0; top < n_; ++top) {
    if (!is_task_top(top)) continue;
    Tree t = tree_of(top);
    const Distribution& d = tp(top).dist;
    for (int r : t.reg_leaves) {
      TilePlan& rp = tp(r);
      bool ok = rp.dist == d && rp.dist.ks == 1 && numel(op(r).shape) == d.numel;
      // Every edge from r to the top must be flat-identity, and r must not sit under the
      // root's inner loop (a reduction's input or a matmul's operand).
      for (int c : cons_[r]) {
        if (std::find(t.nodes.begin(), t.nodes.end(), c) == t.nodes.end()) continue;
        ok &= flat_identity(r, c) && flat_path(c, top, t.nodes);
        if (t.root >= 0 && c == t.root) ok = false;
      }
      if (!ok && !rp.spill) {
        rp.spill = true;
        changed = true;
      }
    }
  }
  // k-split accumulators and accumulators that feed matmuls are always spilled.
  for (int i = 0; i < n_; ++i)
    if (tp(i).home == TileHome::Registers && tp(i).dist.kind == DistKind::Mma &&
        tp(i).dist.ks > 1 && !tp(i).spill) {
      tp(i).spill = true;
      changed = true;
    }
  return changed;
}

}  // namespace kiln::planner
