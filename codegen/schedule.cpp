// The layout/schedule optimizer (see kiln/codegen/schedule.h).
//
// Block graphs are planned in five passes over the ops:
//   1. homes: where each tile lives (shared memory, registers, or inline in its consumer);
//   2. steps: the tile each Compute/Accumulate/Save step materializes, the single matmul or
//      reduction ("root") whose loop structure drives it, and who computes which element;
//   3. register reads: an accumulator is read from registers only by steps with the same
//      distribution at the same flat index; anything else spills it to shared memory;
//   4. levels: steps are ordered by data dependence so that one barrier separates each level,
//      and every buffer gets a live interval in levels;
//   5. memory: pipeline depth, padding, and a first-fit allocation of shared memory that reuses
//      buffers with disjoint live intervals, degrading (fewer stages, no padding, workspace
//      instead of shared memory) until it fits the target.
#include "kiln/codegen/schedule.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "kiln/ir/diag.h"

namespace kiln {

const char* tile_home_name(TileHome h) {
  switch (h) {
    case TileHome::Smem:
      return "smem";
    case TileHome::Global:
      return "global";
    case TileHome::Registers:
      return "registers";
    case TileHome::Inline:
      return "inline";
    case TileHome::Root:
      return "root";
    case TileHome::Feed:
      return "feed";
    case TileHome::Fragment:
      return "fragment";
    case TileHome::None:
      return "-";
  }
  return "?";
}

const Distribution* mma_distribution(const BlockSchedule& s, int mm) {
  if (!s.tiles[mm].mma.use) return nullptr;
  if (s.tiles[mm].dist.kind == DistKind::Mma) return &s.tiles[mm].dist;
  for (const TilePlan& t : s.tiles)
    if (t.root == mm && t.dist.kind == DistKind::Mma) return &t.dist;
  return nullptr;
}

int Distribution::slots(int threads) const {
  if (kind == DistKind::Mma) return bw * mtw * ntw * 4;
  int64_t groups = threads / group;
  return static_cast<int>((numel + groups - 1) / groups);
}

std::string Distribution::str() const {
  if (kind == DistKind::Group)
    return group == 1 ? "strided" : fmt::format("groups of {} lanes", group);
  return fmt::format("mma [{}x{}x{}] warps b{} m{} n{} k{} ({}x{}x{} m16n8 tiles/warp)", batch, m,
                     n, wb, wm, wn, ks, bw, mtw, ntw);
}

namespace {

bool is_elementwise(OpKind k) {
  OpClass c = op_info(k).cls;
  return c == OpClass::Binary || c == OpClass::Unary || c == OpClass::Constant ||
         c == OpClass::Fused;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
int64_t align_up(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}

// Shapes equal after left-padding with 1s (a flat index means the same element in both).
bool same_padded(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y) return false;
  }
  return true;
}
class BlockPlanner {
 public:
  BlockPlanner(const BlockGraph& bg, const Target& tgt, bool lossy_f16, bool lossy_bf16)
      : bg_(bg), tgt_(tgt), T_(bg.block_threads), lossy_f16_(lossy_f16), lossy_bf16_(lossy_bf16) {
    n_ = static_cast<int>(bg.ops.size());
    cons_.resize(n_);
    for (int i = 0; i < n_; ++i)
      for (int in : bg.ops[i].inputs) cons_[in].push_back(i);
    s_.tiles.resize(n_);
    s_.lossy_mma_ok = lossy_f16;
  }

  BlockSchedule run() {
    plan_homes();
    for (int round = 0; round < 64; ++round) {
      bool changed = fix_roots();
      plan_dists();
      changed |= fix_register_reads();
      if (!changed) break;
    }
    plan_dists();
    // Register-resident chains are chosen once the homes are settled; their distributions then
    // override the planner's (plan_dists applies them), and register reads are re-checked.
    if (plan_fragment_chains()) {
      // Spills decided under the old distributions (e.g. a k-split) are re-decided.
      for (TilePlan& t : s_.tiles) t.spill = false;
      for (int round = 0; round < 64; ++round) {
        plan_dists();
        if (!fix_register_reads()) break;
      }
      plan_dists();
    }
    plan_levels();
    plan_memory();
    emit_steps();
    return std::move(s_);
  }

 private:
  const BlockOp& op(int i) const { return bg_.ops[i]; }
  TilePlan& tp(int i) { return s_.tiles[i]; }
  OpClass cls(int i) const { return op_info(op(i).kind).cls; }

  bool is_root_kind(int i) const {
    if (cls(i) == OpClass::Matmul) return true;
    if (cls(i) == OpClass::Reduce) return reduce_len(i) > 1;
    return false;
  }
  int64_t reduce_len(int i) const { return op(op(i).inputs[0]).shape[op(i).attrs.dim]; }
  bool is_view(int i) const {
    return cls(i) == OpClass::Transpose || (cls(i) == OpClass::Reduce && reduce_len(i) == 1);
  }
  std::vector<int> distinct_consumers(int i) const {
    std::vector<int> c = cons_[i];
    std::sort(c.begin(), c.end());
    c.erase(std::unique(c.begin(), c.end()), c.end());
    return c;
  }

  // Does consumer c read each element of operand i exactly once?
  bool single_read(int i, int c) const {
    switch (cls(c)) {
      case OpClass::Matmul:
        return false;
      case OpClass::Binary:
      case OpClass::Unary:
      case OpClass::Fused:
        return same_padded(op(i).shape, op(c).shape);
      case OpClass::Accum:
        return same_padded(op(i).shape, op(c).shape);
      case OpClass::Reduce:
      case OpClass::Transpose:
      case OpClass::Output:
        return true;
      case OpClass::Constant:
      case OpClass::Softmax:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
      case OpClass::Input:
        return false;
    }
  }
  // Does consumer c read element f of operand i when it computes its own element f?
  bool flat_identity(int i, int c) const {
    switch (cls(c)) {
      case OpClass::Binary:
      case OpClass::Unary:
      case OpClass::Fused:
      case OpClass::Accum:
        return same_padded(op(i).shape, op(c).shape);
      case OpClass::Output:
        return true;
      case OpClass::Reduce:
        return reduce_len(c) == 1;
      case OpClass::Matmul:
      case OpClass::Transpose:
      case OpClass::Constant:
      case OpClass::Softmax:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
      case OpClass::Input:
        return false;
    }
  }

  // ---- 1. homes ------------------------------------------------------------------------------
  void plan_homes() {
    for (int i = 0; i < n_; ++i) {
      TilePlan& t = tp(i);
      const BlockOp& o = op(i);
      OpClass c = cls(i);
      std::vector<int> dc = distinct_consumers(i);
      if (c == OpClass::Input) {
        t.home = TileHome::Smem;
        continue;
      }
      if (c == OpClass::Output) {
        t.home = TileHome::None;
        continue;
      }
      if (c == OpClass::Accum) {
        t.home = TileHome::Registers;
        continue;
      }
      if (c == OpClass::Constant || is_view(i)) {
        t.home = TileHome::Inline;
        continue;
      }
      bool only_accums = !dc.empty();
      bool all_flat = true;
      for (int k : dc) {
        only_accums &= cls(k) == OpClass::Accum;
        all_flat &= flat_identity(i, k);
      }
      if (only_accums && all_flat) {
        t.home = TileHome::Feed;
        continue;
      }
      if (dc.size() > 1 && dc.size() <= 4 && cheap_over_stored(i)) {
        // A single unary/binary op of stored input tiles, read once per element by each of a
        // few consumers of its stage: recomputed in each (two shared-memory reads cost less than
        // a float32 tile written, synchronized and read back, and the tile's bytes).
        bool ok = true;
        for (int k : dc)
          ok &= cls(k) != OpClass::Matmul && single_read(i, k) &&
                (op(k).stage == o.stage || (cls(k) == OpClass::Accum && o.stage != Stage::Post));
        if (ok) {
          t.home = TileHome::Inline;
          continue;
        }
      }
      if (dc.size() == 1) {
        int k = dc[0];
        bool same_stage =
            op(k).stage == o.stage || (cls(k) == OpClass::Accum && o.stage != Stage::Post);
        if (is_elementwise(o.kind) && single_read(i, k) && same_stage) {
          t.home = TileHome::Inline;
          continue;
        }
        if (is_root_kind(i) && flat_identity(i, k) && same_stage &&
            (is_elementwise(op(k).kind) || cls(k) == OpClass::Output || cls(k) == OpClass::Accum ||
             is_view(k))) {
          t.home = TileHome::Root;
          continue;
        }
      }
      t.home = TileHome::Smem;
      t.note = dc.empty() ? "unused" : "";
    }
    // The max operand of accum_rescale is read at broadcast positions: it must be stored.
    for (int i = 0; i < n_; ++i)
      if (op(i).kind == OpKind::AccumRescale) {
        int m = op(i).inputs[1];
        if (!same_padded(op(m).shape, op(i).shape) && cls(m) != OpClass::Input &&
            cls(m) != OpClass::Constant && tp(m).home != TileHome::Registers)
          tp(m).home = TileHome::Smem;
      }
  }

  bool cheap_over_stored(int i) const {
    if (cls(i) != OpClass::Unary && cls(i) != OpClass::Binary) return false;
    for (int in : op(i).inputs)
      if (cls(in) != OpClass::Input && cls(in) != OpClass::Constant) return false;
    return true;
  }

  bool is_task_top(int i) const {
    TileHome h = s_.tiles[i].home;
    return (h == TileHome::Smem && cls(i) != OpClass::Input) || h == TileHome::Global ||
           h == TileHome::Feed || h == TileHome::Fragment || cls(i) == OpClass::Output;
  }

  // Ops whose value a step evaluates: the top, and operands reached through Inline/Root homes.
  void collect_tree(int i, std::vector<int>& out, bool top) const {
    if (!top) {
      TileHome h = s_.tiles[i].home;
      if (h != TileHome::Inline && h != TileHome::Root) return;
    }
    if (std::find(out.begin(), out.end(), i) == out.end()) out.push_back(i);
    for (int in : op(i).inputs) collect_tree(in, out, false);
  }
  // Leaves of a step's tree (stored tiles, registers) and the root.
  struct Tree {
    std::vector<int> nodes;
    int root = -1;
    std::vector<int> reg_leaves;
    std::vector<int> smem_leaves;
  };
  Tree tree_of(int top) const {
    Tree t;
    collect_tree(top, t.nodes, true);
    for (int i : t.nodes) {
      bool here_root = (i == top && is_root_kind(i) && cls(i) != OpClass::Output) ||
                       (i != top && s_.tiles[i].home == TileHome::Root);
      if (here_root && t.root < 0) t.root = i;
      for (int in : op(i).inputs) {
        TileHome h = s_.tiles[in].home;
        if (h == TileHome::Registers) {
          if (s_.tiles[in].spill)
            t.smem_leaves.push_back(in);
          else
            t.reg_leaves.push_back(in);
        } else if (h == TileHome::Smem || h == TileHome::Global) {
          t.smem_leaves.push_back(in);
        }
      }
    }
    return t;
  }
  // Is the path from node i up to the step top flat-identity at every edge?
  bool flat_path(int i, int top, const std::vector<int>& nodes) const {
    if (i == top) return true;
    for (int c : cons_[i]) {
      if (std::find(nodes.begin(), nodes.end(), c) == nodes.end()) continue;
      if (!flat_identity(i, c)) return false;
      if (!flat_path(c, top, nodes)) return false;
    }
    return true;
  }

  // ---- 2. one root per step ------------------------------------------------------------------
  bool fix_roots() {
    bool changed = false;
    for (int top = 0; top < n_; ++top) {
      if (!is_task_top(top)) continue;
      std::vector<int> nodes;
      collect_tree(top, nodes, true);
      bool have = is_root_kind(top) && cls(top) != OpClass::Output;
      for (int i : nodes) {
        if (i == top || tp(i).home != TileHome::Root) continue;
        if (have || !flat_path(i, top, nodes)) {
          tp(i).home = TileHome::Smem;
          changed = true;
        } else {
          have = true;
        }
      }
      // An inline op under a root is recomputed per use of the root's inner loop; fine for
      // reductions (each element read once), never reached for matmuls (operands are stored).
    }
    return changed;
  }

  // ---- 3. distributions and register reads ---------------------------------------------------
  Distribution group_dist(int64_t numel, int64_t red_len) const {
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

  // Underlying stored operand of a matmul input, seen through Inline transposes.
  struct Operand {
    int leaf = -1;         // the stored op
    bool swapped = false;  // the matmul reads the leaf with its last two dims swapped
    bool clean = true;     // only views of the leaf (no other transposes)
  };
  Operand resolve_operand(int i) const {
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
  // dtype a matmul operand is exact in: the input tile's dtype, or F32 for computed values.
  DType operand_dtype(const Operand& o) const {
    if (cls(o.leaf) == OpClass::Input) return bg_.inputs[op(o.leaf).io].dtype;
    return DType::F32;
  }

  MmaPlan plan_mma(int i) const {
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

  // Best warp partition of a [B, M, N] x K product; ks > 1 only when allowed.
  bool mma_partition(int64_t B, int64_t M, int64_t N, int64_t K, bool allow_ks, int reg_cap,
                     Distribution& out) const {
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

  // The distribution of the step whose top is `top`, given its tree.
  Distribution step_dist(int top, const Tree& t) {
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
      return group_dist(numel(op(r).shape), 1);
    }
    if (!t.reg_leaves.empty()) return tp(t.reg_leaves[0]).dist;
    return group_dist(numel(op(top).shape), 1);
  }

  void plan_dists() {
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

  // ---- 3b. register-resident chains ----------------------------------------------------------
  // A loop tile p = elementwise(S), S = matmul on tensor cores (p's step root), whose consumers
  // are all Feed tiles of the loop that are either a matmul reading p as its A operand (feeding
  // one accum_sum) or a sum/mean/max of p's last dim, stays in S's C fragments (home Fragment):
  // the m16n8 C layout of two adjacent n8 tiles is the m16n8k16 A layout of one k step, so p is
  // packed to 16-bit A fragments in registers, and its row reductions are a quad shuffle. This
  // needs every warp to own whole rows: S and each consuming matmul are partitioned with the same
  // warps along batch and m16 tiles and none along n or k. The row reductions get the same
  // partition with n = 1 (one value per row, in fragment element 0/2 of lanes 4g).
  std::map<int, Distribution> chain_dists_;

  static Distribution rows_dist(int64_t B, int64_t M, int64_t N, int wb, int wm) {
    Distribution d;
    d.kind = DistKind::Mma;
    d.batch = B, d.m = M, d.n = N, d.numel = B * M * N;
    d.wb = wb, d.wm = wm, d.wn = 1, d.ks = 1;
    d.bw = static_cast<int>(ceil_div(B, wb));
    d.mtw = static_cast<int>(ceil_div(ceil_div(M, 16), wm));
    d.ntw = static_cast<int>(ceil_div(N, 8));
    return d;
  }

  bool chain_consumer_ok(int p, int c) const {
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

  bool plan_fragment_chains() {
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
  const TilePlan& tp_const(int i) const { return s_.tiles[i]; }

  bool fix_register_reads() {
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

  // ---- 4. steps and levels -------------------------------------------------------------------
  struct Task {
    StepKind kind;
    Phase phase;
    int op;
    std::vector<int> accums;
    std::vector<int> reads;   // buffers (op ids whose storage is read)
    std::vector<int> writes;  // buffers written (op ids; spills write the accumulator's buffer)
    int level = 0;
  };
  std::vector<Task> tasks_;

  Phase phase_of_stage(Stage s) const {
    return s == Stage::Invariant ? Phase::Pre : s == Stage::Loop ? Phase::Loop : Phase::Post;
  }

  bool reads_fragment(int i) const {
    for (int in : op(i).inputs)
      if (s_.tiles[in].home == TileHome::Fragment) return true;
    return false;
  }

  void plan_levels() {
    // Build tasks.
    for (int i = 0; i < n_; ++i) {
      TilePlan& t = tp(i);
      if (cls(i) == OpClass::Output) {
        Phase ph = op(i).stage == Stage::Loop ? Phase::Loop : Phase::Post;
        tasks_.push_back({StepKind::Save, ph, i, {}, {}, {}, 0});
      } else if (t.home == TileHome::Fragment) {
        // One step: the root matmul, p, and every consumer of p with its accumulators.
        Task k{StepKind::Accumulate, Phase::Loop, i, {}, {}, {}, 0};
        for (int c : distinct_consumers(i))
          for (int a : distinct_consumers(c)) k.accums.push_back(a);
        tasks_.push_back(k);
      } else if (t.home == TileHome::Feed && !reads_fragment(i)) {
        Task k{StepKind::Accumulate, Phase::Loop, i, {}, {}, {}, 0};
        for (int c : distinct_consumers(i))
          if (op(c).inputs[0] == i) k.accums.push_back(c);
        tasks_.push_back(k);
      } else if ((t.home == TileHome::Smem || t.home == TileHome::Global) &&
                 cls(i) != OpClass::Input && !cons_[i].empty()) {
        tasks_.push_back({StepKind::Compute, phase_of_stage(op(i).stage), i, {}, {}, {}, 0});
      }
    }
    // Accumulators whose value operand is stored (not a Feed): a step reading it.
    for (int i = 0; i < n_; ++i) {
      if (cls(i) != OpClass::Accum) continue;
      int v = op(i).inputs[0];
      if (tp(v).home == TileHome::Feed) continue;
      // Fold directly from the stored/inline value: an Accumulate step with the accum as top.
      tasks_.push_back({StepKind::Accumulate, Phase::Loop, -1, {i}, {}, {}, 0});
    }
    // Spills.
    for (int i = 0; i < n_; ++i)
      if (tp(i).home == TileHome::Registers && tp(i).spill)
        tasks_.push_back({StepKind::Spill, Phase::Post, i, {}, {}, {i}, 0});
    // Reads/writes.
    for (Task& k : tasks_) {
      std::vector<int> tops;
      if (k.kind == StepKind::Spill) continue;
      if (k.op >= 0) tops.push_back(k.op);
      if (k.op >= 0 && tp(k.op).home == TileHome::Fragment) {
        // The consumers' other operands (a matmul's B) are read by the same step.
        for (int c : distinct_consumers(k.op)) {
          std::vector<int> nodes;
          collect_tree(c, nodes, true);
          for (int i : nodes)
            for (int in : op(i).inputs) {
              TileHome h = tp(in).home;
              if (h == TileHome::Smem || h == TileHome::Global ||
                  (h == TileHome::Registers && tp(in).spill))
                k.reads.push_back(in);
            }
        }
      } else if (k.kind == StepKind::Accumulate)
        for (int a : k.accums)
          for (int in : op(a).inputs)
            if (k.op < 0 || in != k.op) tops.push_back(in);
      for (int top : tops) {
        std::vector<int> nodes;
        if (k.op >= 0 && top == k.op) {
          collect_tree(top, nodes, true);
        } else {
          collect_tree(top, nodes,
                       tp(top).home == TileHome::Inline || tp(top).home == TileHome::Root);
          if (tp(top).home != TileHome::Inline && tp(top).home != TileHome::Root)
            k.reads.push_back(top);
        }
        for (int i : nodes)
          for (int in : op(i).inputs) {
            TileHome h = tp(in).home;
            if (h == TileHome::Smem || h == TileHome::Global ||
                (h == TileHome::Registers && tp(in).spill))
              k.reads.push_back(in);
          }
      }
      if (k.kind == StepKind::Compute) k.writes.push_back(k.op);
    }
    // Levels per phase: 1 + the level of the latest producer in the same phase.
    std::map<int, const Task*> producer;
    for (Phase ph : {Phase::Pre, Phase::Loop, Phase::Post}) {
      for (Task& k : tasks_) {
        if (k.phase != ph) continue;
        int lvl = 0;
        for (int r : k.reads)
          for (const Task& p : tasks_)
            if (p.phase == ph && &p != &k &&
                std::find(p.writes.begin(), p.writes.end(), r) != p.writes.end())
              lvl = std::max(lvl, level_of(p, ph) + 1);
        k.level = lvl;
      }
    }
  }
  // Levels are computed in op order; a producer always precedes its readers in op order except
  // spills (op = accumulator id), which have no inputs in the same phase and stay at level 0.
  int level_of(const Task& p, Phase) const { return p.level; }

  int64_t num_levels(Phase ph) const {
    int64_t m = -1;
    for (const Task& k : tasks_)
      if (k.phase == ph) m = std::max<int64_t>(m, k.level);
    return m + 1;
  }

  // ---- 5. memory -----------------------------------------------------------------------------
  struct Buf {
    int op;
    bool spill;
    int64_t bytes;
    int64_t lo, hi;  // live interval in global level numbers
    bool input;
    int64_t offset = -1;
    bool global = false;
  };

  int64_t numel(const Shape& s) const { return kiln::numel(s); }

  void set_strides(int i, bool pad, bool f32, std::vector<int64_t>& strides, int64_t& bytes) {
    const Shape& sh = op(i).shape;
    int r = static_cast<int>(sh.size());
    strides.assign(r, 1);
    int eb = f32 ? 4 : dtype_bytes(bg_.inputs[op(i).io].dtype);
    if (r == 0) {
      bytes = eb;
      return;
    }
    int64_t pitch = sh.back();
    int64_t rows = numel(sh) / sh.back();
    if (pad && rows > 1) {
      int64_t rb = pitch * eb;
      if (!f32) {
        // ldmatrix reads 8 rows of 16 bytes: conflict-free when the pitch is an odd number of
        // 16-byte units.
        if (rb % 16 == 0 && (rb / 16) % 2 == 0) pitch += 16 / eb;
      } else if (pitch % 32 == 0) {
        pitch += 4;  // keeps 16-byte alignment for vector reads
      }
    }
    if (r >= 2) {
      strides[r - 2] = pitch;
      for (int d = r - 3; d >= 0; --d) strides[d] = strides[d + 1] * sh[d + 1];
    }
    bytes = align_up((r >= 2 ? strides[0] * sh[0] : pitch) * eb, 16);
  }

  bool used_by_ldmatrix(int i) const {
    for (int k = 0; k < n_; ++k) {
      if (cls(k) != OpClass::Matmul || !s_.tiles[k].mma.use) continue;
      for (int a = 0; a < 2; ++a) {
        Operand o = resolve_operand(op(k).inputs[a]);
        if (o.leaf == i && (a == 0 ? s_.tiles[k].mma.a_ldmatrix : s_.tiles[k].mma.b_ldmatrix))
          return true;
      }
    }
    return true;  // padding 16-bit tiles is cheap and helps any 16-byte row access
  }

  void choose_load_vec(int i) {
    TilePlan& t = tp(i);
    const Shape& sh = op(i).shape;
    const TensorDesc& td = bg_.inputs[op(i).io];
    int eb = dtype_bytes(td.dtype);
    int64_t last = sh.empty() ? 1 : sh.back();
    int64_t tlast = td.shape.empty() ? 1 : td.shape.back();
    int64_t pitch = sh.size() >= 2 ? t.strides[sh.size() - 2] : last;
    for (int v = 16 / eb; v >= 1; v /= 2) {
      int bytes = v * eb;
      if (last % v || tlast % v || pitch % v) continue;
      t.load_vec = v;
      t.async = bytes == 16 || bytes == 8 || bytes == 4;
      return;
    }
    t.load_vec = 1;
    t.async = false;
  }

  int64_t level_base(Phase ph) const {
    if (ph == Phase::Pre) return 0;
    if (ph == Phase::Loop) return num_levels(Phase::Pre) + 1;
    return num_levels(Phase::Pre) + num_levels(Phase::Loop) + 3;
  }

  bool try_alloc(int stages, bool pad, int64_t budget, std::vector<Buf>& bufs) {
    bufs.clear();
    int64_t loop_lo = level_base(Phase::Loop), loop_hi = level_base(Phase::Post) - 1;
    int64_t post_lo = level_base(Phase::Post);
    // Global level of each task.
    auto task_level = [&](const Task& k) { return level_base(k.phase) + k.level; };
    for (int i = 0; i < n_; ++i) {
      TilePlan& t = tp(i);
      bool stored = t.home == TileHome::Smem || t.home == TileHome::Global;
      if (!stored && !(t.home == TileHome::Registers && t.spill)) continue;
      if (stored && cls(i) != OpClass::Input && cons_[i].empty()) continue;
      Buf b{};
      b.op = i;
      b.spill = t.home == TileHome::Registers;
      b.input = cls(i) == OpClass::Input;
      std::vector<int64_t> strides;
      int64_t bytes = 0;
      bool pad_this =
          pad &&
          (b.input ? dtype_bytes(bg_.inputs[op(i).io].dtype) < 4 && used_by_ldmatrix(i) : true);
      set_strides(i, pad_this, !b.input, strides, bytes);
      if (b.spill) {
        t.spill_strides = strides;
      } else {
        t.strides = strides;
        t.bytes = bytes;
      }
      b.bytes = bytes;
      if (b.input) {
        choose_load_vec(i);
        bool loop = op(i).stage == Stage::Loop;
        t.stages = loop ? stages : 1;
        b.bytes = bytes * t.stages * (loop ? s_.coarsen : 1);
        b.lo = 0;
      }
      // Live interval.
      int64_t lo = b.input ? 0 : -1, hi = b.input ? 0 : -1;
      for (const Task& k : tasks_) {
        int64_t L = task_level(k);
        bool w = std::find(k.writes.begin(), k.writes.end(), i) != k.writes.end();
        bool r = std::find(k.reads.begin(), k.reads.end(), i) != k.reads.end();
        if (w) lo = lo < 0 ? L : std::min(lo, L), hi = std::max(hi, L);
        if (r) {
          hi = std::max(hi, L);
          if (lo < 0) lo = L;
        }
      }
      if (b.input && op(i).stage == Stage::Loop) hi = std::max(hi, loop_hi);
      if (lo < 0) lo = b.spill ? post_lo : 0;
      if (hi < lo) hi = lo;
      // A tile produced before the loop and used in it stays live through the loop.
      if (lo < loop_lo && hi >= loop_lo) hi = std::max(hi, loop_hi);
      b.lo = lo, b.hi = hi;
      b.global = t.home == TileHome::Global || (b.spill && t.spill_global);
      bufs.push_back(b);
    }
    auto place = [&](bool global) {
      std::vector<Buf*> order;
      for (Buf& b : bufs)
        if (b.global == global) order.push_back(&b);
      std::stable_sort(order.begin(), order.end(), [](const Buf* a, const Buf* b) {
        if (a->input != b->input) return a->input;
        return a->bytes > b->bytes;
      });
      std::vector<Buf*> placed;
      int64_t top = 0;
      for (Buf* b : order) {
        std::vector<std::pair<int64_t, int64_t>> busy;
        for (Buf* p : placed)
          if (!(p->hi < b->lo || b->hi < p->lo)) busy.push_back({p->offset, p->offset + p->bytes});
        std::sort(busy.begin(), busy.end());
        int64_t off = 0;
        for (auto [s, e] : busy) {
          if (off + b->bytes <= s) break;
          off = std::max(off, align_up(e, 128));
        }
        b->offset = off;
        placed.push_back(b);
        top = std::max(top, off + b->bytes);
      }
      return top;
    };
    int64_t smem = place(false);
    int64_t glob = place(true);
    s_.smem_bytes = smem;
    s_.global_bytes_per_block = glob;
    return smem <= budget;
  }

  void plan_memory() {
    BlockResources rule = block_resources(bg_);
    s_.smem_rule_bytes = rule.smem_bytes;
    s_.smem_budget = tgt_.smem_per_block;
    // Pipeline depth: aim for ~48 KB of loop-input bytes in flight per SM.
    int64_t stage_bytes = 0;
    bool any_loop_input = false;
    for (int i = 0; i < n_; ++i)
      if (cls(i) == OpClass::Input && op(i).stage == Stage::Loop) {
        any_loop_input = true;
        stage_bytes += align_up(numel(op(i).shape) * dtype_bytes(bg_.inputs[op(i).io].dtype), 16);
      }
    int64_t iters = bg_.num_iterations();
    int64_t blocks = bg_.num_blocks();
    // Coarsen tiny loop stages (only when the loop body stores nothing in shared memory, so that
    // consecutive iterations need no barrier between them).
    bool body_writes = false;
    for (const Task& k : tasks_)
      body_writes |= k.phase == Phase::Loop && k.kind == StepKind::Compute;
    int coarsen = 1;
    if (any_loop_input && !body_writes && stage_bytes > 0)
      for (int64_t u = 2; u <= 64 && u <= iters; ++u)
        if (iters % u == 0 && u * stage_bytes <= 16 * 1024 &&
            iters / u >= std::min<int64_t>(iters, 4))
          coarsen = static_cast<int>(u);
    s_.coarsen = coarsen;
    stage_bytes *= coarsen;
    iters /= coarsen;
    int64_t per_sm =
        std::max<int64_t>(1, std::min<int64_t>(ceil_div(blocks, tgt_.sm_count), 2048 / T_));
    int want = 1;
    if (any_loop_input && iters > 1) {
      // Little's law at ~3 TB/s and ~1.5 us latency: ~35 KB per SM; aim at 64 KB per SM, and at
      // least 32 KB per block (per_sm counts the fullest SM; most may hold fewer blocks). Pass 0
      // below keeps the occupancy, so deeper rings never cost blocks per SM.
      const int64_t sb = std::max<int64_t>(1, stage_bytes);
      want = static_cast<int>(std::clamp<int64_t>(
          std::max(ceil_div(64 * 1024, sb * per_sm), ceil_div(32 * 1024, sb)) + 1, 2, 8));
      want = static_cast<int>(std::min<int64_t>(want, iters));
    }
    std::vector<Buf> bufs;
    bool done = false;
    // First keep the occupancy the grid can use, then accept less.
    for (int pass = 0; pass < 2 && !done; ++pass) {
      int64_t budget = pass == 0 ? std::min<int64_t>(s_.smem_budget,
                                                     (tgt_.smem_per_block + 1024) / per_sm - 1024)
                                 : s_.smem_budget;
      // Padded rows before deeper rings: an unpadded tile whose row pitch is a multiple of
      // 128 bytes puts the 8 rows of every ldmatrix on the same banks (8-way conflicts: a gqa
      // grid that dropped the padding for a third stage ran 3.7x slower than with it and two
      // stages). A ring of one stage overlaps nothing, so two stages come before padding.
      const int min_st = std::min(want, 2);
      for (int pad = 1; pad >= 0 && !done; --pad)
        for (int st = want; st >= min_st && !done; --st)
          if (try_alloc(st, pad, budget, bufs)) {
            s_.pipeline_stages = st;
            done = true;
          }
      for (int pad = 1; pad >= 0 && !done && min_st > 1; --pad)
        if (try_alloc(1, pad, budget, bufs)) {
          s_.pipeline_stages = 1;
          done = true;
        }
    }
    // Still too big: move the largest stored non-input tiles to the workspace.
    while (!done) {
      int best = -1;
      int64_t best_bytes = -1;
      bool best_spill = false;
      for (const Buf& b : bufs)
        if (!b.input && !b.global && b.bytes > best_bytes)
          best = b.op, best_bytes = b.bytes, best_spill = b.spill;
      KILN_ASSERT(best >= 0, "input tiles alone exceed shared memory ({} bytes)", s_.smem_bytes);
      if (best_spill)
        tp(best).spill_global = true;
      else
        tp(best).home = TileHome::Global;
      s_.notes.push_back(
          fmt::format("{} moved to the workspace: shared memory is short", op(best).name));
      if (try_alloc(1, false, s_.smem_budget, bufs)) {
        s_.pipeline_stages = 1;
        done = true;
      }
    }
    for (const Buf& b : bufs) {
      if (b.spill) {
        tp(b.op).spill_offset = b.offset;
        tp(b.op).spill_live_lo = b.lo, tp(b.op).spill_live_hi = b.hi;
      } else {
        tp(b.op).offset = b.offset;
        tp(b.op).live_lo = b.lo, tp(b.op).live_hi = b.hi;
      }
    }
    // Register estimate.
    int regs = 0;
    for (int i = 0; i < n_; ++i)
      if (tp(i).home == TileHome::Registers) {
        regs += tp(i).dist.slots(T_) * (op(i).kind == OpKind::AccumRescale ? 2 : 1);
      }
    // Hoisted A fragments (MmaPlan::a_hoisted): at most 32 registers, and the estimate with
    // them at most 128, so that the kernel keeps its occupancy (ptxas adds ~90 registers of
    // addressing and temporaries to the estimate on the attention graphs).
    int budget = std::min(32, 128 - regs);
    for (int i = 0; i < n_; ++i) {
      MmaPlan& p = tp(i).mma;
      if (cls(i) != OpClass::Matmul || !p.use || !p.a_ldmatrix || op(i).stage != Stage::Loop)
        continue;
      int leaf = resolve_operand(op(i).inputs[0]).leaf;
      const Distribution* d = mma_distribution(s_, i);
      if (cls(leaf) != OpClass::Input || op(leaf).stage == Stage::Loop || !d) continue;
      int64_t kst = ceil_div(op(op(i).inputs[0]).shape.back(), 16);
      int r = static_cast<int>(d->bw * ceil_div(kst, d->ks) * d->mtw * 4);
      if (r > budget) continue;
      p.a_hoisted = true;
      budget -= r;
      regs += r;
    }
    s_.regs_estimate = regs;
  }

  // ---- steps ---------------------------------------------------------------------------------
  void emit_steps() {
    // Pre: loads of every input (loop inputs: the pipeline prologue), then invariant levels.
    for (int i = 0; i < n_; ++i)
      if (cls(i) == OpClass::Input)
        s_.steps.push_back(
            {StepKind::Load, op(i).stage == Stage::Loop ? Phase::Loop : Phase::Pre, i, {}});
    auto add_phase = [&](Phase ph, bool leading_barrier) {
      int64_t L = num_levels(ph);
      if (L == 0) return 0;
      int barriers = 0;
      for (int64_t l = 0; l < L; ++l) {
        if (l > 0 || leading_barrier) {
          s_.steps.push_back({StepKind::Barrier, ph, -1, {}});
          ++barriers;
        }
        for (const Task& k : tasks_)
          if (k.phase == ph && k.level == l) s_.steps.push_back({k.kind, ph, k.op, k.accums});
      }
      return barriers;
    };
    // Pre levels read invariant input tiles: wait for their copies and a barrier first.
    add_phase(Phase::Pre, true);
    s_.barriers_per_iteration = 1 + add_phase(Phase::Loop, false);
    // The first post level may overwrite shared memory the loop read (buffer reuse).
    add_phase(Phase::Post, true);
  }

  const BlockGraph& bg_;
  const Target& tgt_;
  int T_;
  bool lossy_f16_, lossy_bf16_;
  int n_ = 0;
  std::vector<std::vector<int>> cons_;
  BlockSchedule s_;
};

// ---- loop re-tiling ------------------------------------------------------------------------

// How a loop-stage tile depends on loop dim j: `dim` >= 0 when the tile is a slice of the k
// range the loop walks (along that tile dim); `partial` when it is a sum over its slice (a
// matmul contracting the slice, or a sum over it), so that summing it over iterations does not
// depend on how the k range is cut into iterations.
struct KSlice {
  int dim = -1;
  bool partial = false;
};

// True when cutting loop dim j's k range differently is exact for bg: every loop-stage value
// reaches the graph's outputs through accum_sum of partials only.
bool retile_exact(const BlockGraph& bg, int j) {
  const int n = static_cast<int>(bg.ops.size());
  std::vector<KSlice> ks(n);
  bool any = false;
  for (int i = 0; i < n; ++i) {
    const BlockOp& o = bg.ops[i];
    const OpClass c = op_info(o.kind).cls;
    const int r = static_cast<int>(o.shape.size());
    auto in = [&](int a) -> const KSlice& { return ks[o.inputs[a]]; };
    auto any_partial = [&] {
      for (int x : o.inputs)
        if (ks[x].partial) return true;
      return false;
    };
    if (c == OpClass::Accum) {
      if (bg.ops[o.inputs[0]].stage == Stage::Invariant && o.kind == OpKind::AccumSum)
        return false;  // a sum of an invariant tile counts the iterations
      if (o.kind != OpKind::AccumSum) {
        for (int x : o.inputs)
          if (bg.ops[x].stage == Stage::Loop) return false;
        continue;
      }
      if (!in(0).partial) return false;
      continue;
    }
    if (o.stage != Stage::Loop) continue;  // Invariant and Post tiles do not depend on j
    switch (c) {
      case OpClass::Input:
        if (j < static_cast<int>(o.fmap.size()) && o.fmap[j] >= 0) {
          ks[i].dim = o.fmap[j];
          any = true;
        }
        break;
      case OpClass::Constant:
        break;
      case OpClass::Unary:
      case OpClass::Binary:
      case OpClass::Fused: {
        if (any_partial()) return false;  // not linear in general
        int d = -1;
        for (int x : o.inputs)
          if (ks[x].dim >= 0) {
            int dd = ks[x].dim + (r - static_cast<int>(bg.ops[x].shape.size()));
            if (d >= 0 && dd != d) return false;
            d = dd;
          }
        if (d >= 0)
          for (int x : o.inputs) {
            // An operand that is not a slice must broadcast along the slice dim.
            const Shape& sh = bg.ops[x].shape;
            int dd = d - (r - static_cast<int>(sh.size()));
            if (ks[x].dim < 0 && dd >= 0 && sh[dd] != 1) return false;
          }
        ks[i].dim = d;
        break;
      }
      case OpClass::Transpose: {
        if (any_partial()) return false;
        if (in(0).dim < 0) break;
        std::vector<int> perm = o.attrs.perm;
        if (perm.empty()) {
          for (int k = 0; k < r; ++k) perm.push_back(k);
          std::swap(perm[r - 1], perm[r - 2]);
        }
        for (int k = 0; k < r; ++k)
          if (perm[k] == in(0).dim) ks[i].dim = k;
        break;
      }
      case OpClass::Matmul: {
        if (any_partial()) return false;
        const KSlice &a = in(0), &b = in(1);
        const int ra = static_cast<int>(bg.ops[o.inputs[0]].shape.size());
        const int rb = static_cast<int>(bg.ops[o.inputs[1]].shape.size());
        if (a.dim < 0 && b.dim < 0) break;
        if (a.dim != ra - 1 || b.dim != rb - 2) return false;  // only the contracted dim
        ks[i].partial = true;
        break;
      }
      case OpClass::Reduce: {
        if (any_partial()) return false;
        int d = in(0).dim;
        if (d < 0) break;
        int rd = static_cast<int>(o.attrs.dim);
        if (rd == d) {
          if (o.kind != OpKind::Sum) return false;  // mean divides by the slice, max is no sum
          ks[i].partial = true;
        } else {
          ks[i].dim = !o.attrs.keepdim && rd < d ? d - 1 : d;
        }
        break;
      }
      case OpClass::Softmax:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
      case OpClass::Output:
      case OpClass::Accum:
        return false;  // loop-stage outputs, and anything else
    }
  }
  return any;
}

// The same graph with loop dim j of range `range`; throws UserError when a tile does not divide.
BlockGraph with_loop_range(const BlockGraph& bg, int j, int64_t range, const Target& t) {
  std::vector<int64_t> loop = bg.loop;
  loop[j] = range;
  BlockGraphBuilder b(bg.grid, bg.block_threads, loop, bg.inputs);
  for (const BlockOp& o : bg.ops) {
    switch (op_info(o.kind).cls) {
      case OpClass::Input:
        b.input(o.io, o.imap, o.fmap, o.name);
        break;
      case OpClass::Output: {
        const TensorDesc& td = bg.outputs[o.io];
        b.output(o.inputs[0], o.imap, o.fmap, td.dtype, td.name, static_cast<int>(td.shape.size()),
                 o.name);
        break;
      }
      case OpClass::Fused:
        b.fused(*o.thread, o.inputs, o.name);
        break;
      case OpClass::Matmul:
      case OpClass::Transpose:
      case OpClass::Binary:
      case OpClass::Unary:
      case OpClass::Constant:
      case OpClass::Reduce:
      case OpClass::Softmax:
      case OpClass::RmsNorm:
      case OpClass::GraphDefined:
      case OpClass::Accum:
        b.op(o.kind, o.inputs, o.attrs, o.name);
        break;
    }
  }
  return std::move(b).finish(t);
}

}  // namespace

BlockSchedule plan_block_graph(const BlockGraph& bg, const Target& t, bool lossy_f16,
                               bool lossy_bf16) {
  return BlockPlanner(bg, t, lossy_f16, lossy_bf16).run();
}

std::shared_ptr<const BlockGraph> retile_loop(const BlockGraph& bg, const Target& t,
                                              int* loop_dim) {
  // One loop dim only: the innermost one of range > 1 that is exact (several k loops are rare).
  int j = -1;
  for (int d = static_cast<int>(bg.loop.size()) - 1; d >= 0 && j < 0; --d)
    if (bg.loop[d] > 1 && retile_exact(bg, d)) j = d;
  if (j < 0) return nullptr;
  // The k extent the loop walks, per block: the slice extent times the range, for any slice.
  int64_t kext = 0;
  for (const BlockOp& o : bg.ops)
    if (o.kind == OpKind::Input && o.stage == Stage::Loop && j < (int)o.fmap.size() &&
        o.fmap[j] >= 0) {
      kext = o.shape[o.fmap[j]] * bg.loop[j];
      break;
    }
  const int64_t blocks = bg.num_blocks();
  const int64_t per_sm = std::max<int64_t>(
      1, std::min<int64_t>((blocks + t.sm_count - 1) / t.sm_count, 2048 / bg.block_threads));
  // A stage of at most 20 KB, and at least four stages in the share of shared memory a block
  // gets at the occupancy the grid can use.
  const int64_t share = std::min<int64_t>(t.smem_per_block, (t.smem_per_block + 1024) / per_sm);
  const int64_t target = std::clamp<int64_t>(share / 5, 2048, 20 * 1024);
  struct Cand {
    int64_t range, stage;
    bool aligned;
    std::shared_ptr<const BlockGraph> g;
  };
  auto measure = [&](const BlockGraph& g, int64_t range) {
    Cand c{range, 0, true, nullptr};
    for (const BlockOp& o : g.ops) {
      if (o.kind == OpKind::Input && o.stage == Stage::Loop)
        c.stage += align_up(numel(o.shape) * dtype_bytes(g.inputs[o.io].dtype), 16);
      if (o.kind == OpKind::MatMul && o.stage == Stage::Loop) {
        const Shape& a = g.ops[o.inputs[0]].shape;
        c.aligned &= a.back() % 16 == 0;  // whole k16 steps: ldmatrix, no gathers
      }
    }
    return c;
  };
  const Cand orig = measure(bg, bg.loop[j]);
  auto better = [&](const Cand& x, const Cand& y) {  // is x better than y
    if (x.aligned != y.aligned) return x.aligned;
    bool xf = x.stage <= target, yf = y.stage <= target;
    if (xf != yf) return xf;
    if (xf) {
      // Both fit: the larger stage (fewer iterations), unless the ring would get too short.
      bool xl = x.range >= 4, yl = y.range >= 4;
      if (xl != yl) return xl;
      return x.stage > y.stage;
    }
    return x.stage < y.stage;
  };
  Cand best = orig;
  for (int64_t range = 1; range <= kext && range <= 4096; ++range) {
    if (kext % range || range == bg.loop[j]) continue;
    std::shared_ptr<const BlockGraph> g;
    try {
      g = std::make_shared<const BlockGraph>(with_loop_range(bg, j, range, t));
    } catch (const UserError&) {
      continue;  // a tile does not divide, or resources
    }
    Cand c = measure(*g, range);
    c.g = g;
    if (better(c, best)) best = c;
  }
  if (!best.g) return nullptr;
  if (loop_dim) *loop_dim = j;
  return best.g;
}

// ---- kernel level ---------------------------------------------------------------------------

PlanContext::PlanContext(const KernelGraph& g, const Target& t, const PlanOptions& opt,
                         const Schedule& s)
    : g(g), t(t), opt(opt), s(s) {
  const int nt = static_cast<int>(g.tensors.size());
  reach.resize(nt);
  for (int o : g.outputs) reach[o].insert(o);
  for (int k = static_cast<int>(g.ops.size()) - 1; k >= 0; --k) {
    std::set<int> r;
    for (int o : g.ops[k].outputs) r.insert(reach[o].begin(), reach[o].end());
    for (int in : g.ops[k].inputs) reach[in].insert(r.begin(), r.end());
  }
  is_output.insert(g.outputs.begin(), g.outputs.end());
  consumers.assign(nt, 0);
  for (const KernelOp& k : g.ops)
    for (int in : std::set<int>(k.inputs.begin(), k.inputs.end())) consumers[in]++;
  // Constants are folded into predefined consumers; they are materialized only when a
  // graph-defined op reads them or they are outputs.
  need_store.assign(nt, false);
  for (const KernelOp& k : g.ops)
    if (k.kind == OpKind::GraphDefined)
      for (int in : k.inputs) need_store[in] = true;
  for (int o : g.outputs) need_store[o] = true;
}

bool PlanContext::is_const(int tensor) const {
  int p = g.producer(tensor);
  return p >= 0 && g.ops[p].kind == OpKind::Constant;
}

void PlanContext::output_precision(int op, bool& f16, bool& bf16) const {
  f16 = bf16 = true;
  bool any = false;
  for (int o : g.ops[op].outputs)
    for (int r : reach[o]) {
      any = true;
      DType d = g.tensor(r).dtype;
      f16 &= d != DType::F32;
      bf16 &= d == DType::BF16;
    }
  if (!any) f16 = bf16 = false;
}

std::string KernelPlan::strategy() const {
  return std::visit([](const auto& p) { return p.describe(); }, plan);
}

namespace {

int64_t tensor_bytes(const TensorDesc& t) {
  return numel(t.shape) * dtype_bytes(t.dtype);
}

// The block plan of graph-defined op k: the layout/schedule optimizer's BlockSchedule of its
// block graph (re-tiled where that is exact and useful), whichever lowering runs the op.
std::shared_ptr<BlockSchedule> plan_block(const PlanContext& ctx, int k) {
  const KernelOp& op = ctx.g.ops[k];
  bool f16 = false, bf16 = false;
  ctx.output_precision(k, f16, bf16);
  int rdim = -1;
  std::shared_ptr<const BlockGraph> rt = retile_loop(*op.block, ctx.t, &rdim);
  auto b =
      std::make_shared<BlockSchedule>(plan_block_graph(rt ? *rt : *op.block, ctx.t, f16, bf16));
  if (rt) {
    b->retiled = rt;
    b->retile_dim = rdim;
    b->retile_from = op.block->loop[rdim];
    b->retile_to = rt->loop[rdim];
  }
  return b;
}

// The first lowering of the registry (LoweredPlan's alternatives, in order) that matches op k.
template <size_t I = 0>
bool match_first(const PlanContext& ctx, int k, KernelPlan& kp) {
  if constexpr (I == std::variant_size_v<LoweredPlan>) {
    return false;
  } else {
    using P = std::variant_alternative_t<I, LoweredPlan>;
    static_assert(Lowering<P>, "every registry entry implements the lowering contract");
    if (std::optional<P> p = P::match(ctx, k, kp)) {
      kp.plan = std::move(*p);
      return true;
    }
    return match_first<I + 1>(ctx, k, kp);
  }
}

}  // namespace

Schedule plan_schedule(const KernelGraph& g, const Target& t, const PlanOptions& opt) {
  Schedule s;
  s.arch = t.arch;
  const PlanContext ctx(g, t, opt, s);
  const int nt = static_cast<int>(g.tensors.size());
  s.tensor_offset.assign(nt, -1);
  int64_t ws = 0;
  auto alloc = [&](int64_t bytes) {
    int64_t off = ws;
    ws = align_up(ws + std::max<int64_t>(bytes, 1), 256);
    return off;
  };
  const std::set<int> is_input(g.inputs.begin(), g.inputs.end());
  for (int id = 0; id < nt; ++id) {
    if (is_input.count(id) || ctx.is_output.count(id)) continue;
    if (g.producer(id) < 0) continue;
    if (ctx.is_const(id) && !ctx.need_store[id]) continue;
    s.tensor_offset[id] = alloc(tensor_bytes(g.tensor(id)));
  }

  int64_t block_scratch = 0;
  for (size_t k = 0; k < g.ops.size(); ++k) {
    const KernelOp& op = g.ops[k];
    KernelPlan kp;
    kp.op = static_cast<int>(k);
    kp.kernel = fmt::format("k{}_{}", k, op.name);
    if (op.kind == OpKind::GraphDefined) kp.block = plan_block(ctx, static_cast<int>(k));
    const bool matched = match_first(ctx, static_cast<int>(k), kp);
    KILN_ASSERT(matched, "no lowering runs op {} ({})", op.name, op_name(op.kind));
    if (kp.prologue_op >= 0) {
      // The lowering took over its input's producer: that op gets no kernel, and its output is
      // materialized only when the kernel stores it.
      KernelPlan& pp = s.kernels[kp.prologue_op];
      pp.plan = FusedIntoKernel{kp.kernel};
      pp.fused_into = static_cast<int>(k);
      pp.grid = 0;
      pp.threads = 0;
      if (!kp.prologue_stores) s.tensor_offset[g.ops[kp.prologue_op].outputs[0]] = -1;
    }
    if (kp.as<BlockGraphKernel>())
      block_scratch = std::max(block_scratch, kp.block->global_bytes_per_block * kp.grid);
    if (kp.scratch_bytes > 0) kp.scratch_offset = alloc(kp.scratch_bytes);
    s.kernels.push_back(std::move(kp));
  }
  if (block_scratch > 0) s.block_scratch_offset = alloc(block_scratch);
  s.workspace_bytes = ws;
  return s;
}

std::string schedule_to_text(const KernelGraph& g, const Schedule& s) {
  std::string out = fmt::format("schedule for {} ({}), workspace {} bytes\n", g.name,
                                target_for(s.arch).name, s.workspace_bytes);
  for (size_t i = 0; i < g.tensors.size(); ++i)
    if (s.tensor_offset[i] >= 0)
      out += fmt::format("  workspace +{}: {} {} {}\n", s.tensor_offset[i], g.tensors[i].name,
                         dtype_name(g.tensors[i].dtype), shape_str(g.tensors[i].shape));
  for (const KernelPlan& kp : s.kernels) {
    const KernelOp& op = g.ops[kp.op];
    if (!kp.block) {
      out += fmt::format("kernel {}: {} -> {}", kp.kernel, op_name(op.kind), kp.strategy());
      if (kp.grid) out += fmt::format(", grid {} x {} threads", kp.grid, kp.threads);
      if (kp.splits > 1) out += fmt::format(", split-K {}", kp.splits);
      out += "\n";
      continue;
    }
    const BlockSchedule& b = *kp.block;
    const BlockGraph& bg = b.retiled ? *b.retiled : *op.block;
    if (!kp.as<BlockGraphKernel>())
      out += fmt::format("kernel {}: {}, grid {} x {} threads (the block plan below is not used)\n",
                         kp.kernel, kp.strategy(), kp.grid, kp.threads);
    out += fmt::format(
        "kernel {}: block graph, grid {} x {} threads, {} iterations, pipeline {} stage(s) of {} "
        "iteration(s)\n",
        kp.kernel, shape_str(bg.grid), bg.block_threads, bg.num_iterations(), b.pipeline_stages,
        b.coarsen);
    if (b.retiled)
      out += fmt::format(
          "  loop dim {} re-tiled from {} to {} iterations (tiles below are re-tiled)\n",
          b.retile_dim, b.retile_from, b.retile_to);
    out += fmt::format(
        "  shared memory {} bytes (resource rule {}; budget {}), workspace per block {}, "
        "accumulator registers ~{}/thread, {} barrier(s) per iteration{}\n",
        b.smem_bytes, b.smem_rule_bytes, b.smem_budget, b.global_bytes_per_block, b.regs_estimate,
        b.barriers_per_iteration, b.lossy_mma_ok ? ", f32 mma operands may round to f16" : "");
    for (size_t i = 0; i < bg.ops.size(); ++i) {
      const BlockOp& o = bg.ops[i];
      const TilePlan& t = b.tiles[i];
      std::string line = fmt::format("  {:<10} {:<13} {:<16} {:<9}", o.name, op_name(o.kind),
                                     shape_str(o.shape), tile_home_name(t.home));
      if (t.home == TileHome::Smem || t.home == TileHome::Global) {
        line += fmt::format(" @{} {}B", t.offset, t.bytes);
        if (t.stages > 1) line += fmt::format(" x{} stages", t.stages);
        if (!t.strides.empty() && !o.shape.empty() && o.shape.size() >= 2 &&
            t.strides[o.shape.size() - 2] != o.shape.back())
          line += fmt::format(" pitch {}", t.strides[o.shape.size() - 2]);
        if (o.kind == OpKind::Input)
          line += fmt::format(" {} {}-elem chunks", t.async ? "cp.async" : "sync", t.load_vec);
      }
      if (t.home == TileHome::Registers) {
        line += " " + t.dist.str();
        if (t.spill)
          line += fmt::format(" spilled after loop to {} @{}",
                              t.spill_global ? "workspace" : "smem", t.spill_offset);
      }
      if ((t.home == TileHome::Smem || t.home == TileHome::Global || t.home == TileHome::Feed ||
           t.home == TileHome::Fragment) &&
          o.kind != OpKind::Input)
        line += " by " + t.dist.str();
      if (o.kind == OpKind::MatMul && t.home != TileHome::Inline)
        line += t.mma.use
                    ? fmt::format(" mma.sync {}{}{}{}", dtype_name(t.mma.dtype),
                                  t.mma.a_hoisted                                   ? " A:hoisted"
                                  : t.mma.a_ldmatrix                                ? " A:ldmatrix"
                                  : b.tiles[o.inputs[0]].home == TileHome::Fragment ? " A:registers"
                                                                                    : " A:gather",
                                  t.mma.b_ldmatrix ? " B:ldmatrix" : " B:gather",
                                  t.mma.lossy ? " (f32 operand rounded)" : "")
                    : " fma";
      if (o.kind == OpKind::Output && t.root >= 0)
        line += fmt::format(" (fused {})", bg.ops[t.root].name);
      if (!t.note.empty()) line += " " + t.note;
      out += line + "\n";
    }
    std::string steps;
    for (const Step& st : b.steps) {
      const char* ph = st.phase == Phase::Pre ? "pre" : st.phase == Phase::Loop ? "loop" : "post";
      std::string what;
      switch (st.kind) {
        case StepKind::Load:
          what = "load " + bg.ops[st.op].name;
          break;
        case StepKind::Compute:
          what = "compute " + bg.ops[st.op].name;
          break;
        case StepKind::Accumulate: {
          what = "accumulate";
          for (int a : st.accums) what += " " + bg.ops[a].name;
          break;
        }
        case StepKind::Save:
          what = "save " + bg.ops[st.op].name;
          break;
        case StepKind::Spill:
          what = "spill " + bg.ops[st.op].name;
          break;
        case StepKind::Barrier:
          what = "barrier";
          break;
      }
      steps += fmt::format("{}{}:{}", steps.empty() ? "" : ", ", ph, what);
    }
    out += "  steps: " + steps + "\n";
    for (const std::string& n : b.notes) out += "  note: " + n + "\n";
  }
  return out;
}

}  // namespace kiln
