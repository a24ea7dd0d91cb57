// The block planner (block_planner.h). Pass 5: pipeline depth, padding, load vectors and the
// first-fit allocation of shared memory (or the workspace) over live intervals.
#include "block_planner.h"

namespace kiln::planner {

void BlockPlanner::set_strides(int i, bool pad, bool f32, std::vector<int64_t>& strides,
                               int64_t& bytes) {
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

bool BlockPlanner::used_by_ldmatrix(int i) const {
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

void BlockPlanner::choose_load_vec(int i) {
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

bool BlockPlanner::try_alloc(int stages, bool pad, int64_t budget, std::vector<Buf>& bufs) {
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

void BlockPlanner::plan_memory() {
  BlockResources rule = block_resources(bg_);
  s_.smem_rule_bytes = rule.smem_bytes;
  s_.smem_budget = tgt_.smem_per_block - kStaticSmemBytes;
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
  for (const Task& k : tasks_) body_writes |= k.phase == Phase::Loop && k.kind == StepKind::Compute;
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
    int64_t budget =
        pass == 0 ? std::min<int64_t>(s_.smem_budget, (tgt_.smem_per_block + 1024) / per_sm - 1024)
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

}  // namespace kiln::planner
