// Properties of the layout/schedule optimizer over the examples and random μGraphs: shared
// memory stays within the target's budget, buffers that share bytes are never live at once,
// every stored tile has a home, steps only compute tiles with a home, and register tiles are
// read from registers only in their own distribution.
#include <gtest/gtest.h>

#include <filesystem>

#include <fmt/format.h>

#include "kiln/codegen/emit.h"
#include "kiln/codegen/lowerings.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/json_io.h"
#include "kiln/ir/print.h"
#include "random_graphs.h"

namespace kiln {
namespace {

void check_block(const BlockGraph& bg, const BlockSchedule& s, const Target& t,
                 const std::string& who) {
  SCOPED_TRACE(who);
  EXPECT_LE(s.smem_bytes, t.smem_per_block);
  EXPECT_GE(s.pipeline_stages, 1);
  EXPECT_LE(s.pipeline_stages, std::max<int64_t>(1, bg.num_iterations()));
  struct B {
    int64_t off, bytes, lo, hi;
    bool global;
    std::string name;
  };
  std::vector<B> bufs;
  for (size_t i = 0; i < bg.ops.size(); ++i) {
    const BlockOp& o = bg.ops[i];
    const TilePlan& p = s.tiles[i];
    if (o.kind == OpKind::Input) {
      EXPECT_EQ(p.home, TileHome::Smem) << o.name;
      EXPECT_GE(p.offset, 0) << o.name;
      EXPECT_TRUE(p.load_vec >= 1 && o.shape.empty() ? true : o.shape.back() % p.load_vec == 0);
      EXPECT_EQ(p.offset % 16, 0) << o.name;
    }
    if ((p.home == TileHome::Smem || p.home == TileHome::Global) && p.offset >= 0) {
      int64_t bytes = p.bytes * (o.kind == OpKind::Input ? p.stages : 1);
      bufs.push_back({p.offset, bytes, p.live_lo, p.live_hi, p.home == TileHome::Global, o.name});
      if (p.home == TileHome::Smem) {
        EXPECT_LE(p.offset + bytes, s.smem_bytes) << o.name;
      }
      // Strides cover the tile: the last element lies inside the buffer.
      int64_t last = 0;
      for (size_t d = 0; d < o.shape.size(); ++d) last += (o.shape[d] - 1) * p.strides[d];
      int eb = o.kind == OpKind::Input ? dtype_bytes(bg.inputs[o.io].dtype) : 4;
      EXPECT_LE((last + 1) * eb, p.bytes) << o.name;
    }
    if (p.home == TileHome::Registers) {
      EXPECT_EQ(op_info(o.kind).cls, OpClass::Accum) << o.name;
      EXPECT_GE(p.dist.slots(bg.block_threads), 1) << o.name;
      EXPECT_EQ(p.dist.numel, numel(o.shape)) << o.name;
      if (p.spill)
        bufs.push_back({p.spill_offset, p.bytes > 0 ? p.bytes : numel(o.shape) * 4, p.spill_live_lo,
                        p.spill_live_hi, p.spill_global, o.name + "(spill)"});
    }
  }
  for (size_t a = 0; a < bufs.size(); ++a)
    for (size_t b = a + 1; b < bufs.size(); ++b) {
      const B &x = bufs[a], &y = bufs[b];
      if (x.global != y.global) continue;
      bool bytes_overlap = x.off < y.off + y.bytes && y.off < x.off + x.bytes;
      bool live_overlap = !(x.hi < y.lo || y.hi < x.lo);
      EXPECT_FALSE(bytes_overlap && live_overlap)
          << x.name << " [" << x.off << ", +" << x.bytes << ") live " << x.lo << ".." << x.hi
          << " and " << y.name << " [" << y.off << ", +" << y.bytes << ") live " << y.lo << ".."
          << y.hi;
    }
  for (const Step& st : s.steps) {
    if (st.kind == StepKind::Compute) {
      TileHome h = s.tiles[st.op].home;
      EXPECT_TRUE(h == TileHome::Smem || h == TileHome::Global) << bg.ops[st.op].name;
    }
    if (st.kind == StepKind::Accumulate) {
      for (int a : st.accums) EXPECT_EQ(s.tiles[a].home, TileHome::Registers);
    }
  }
}

void check_graph(const KernelGraph& g, const Target& t) {
  Schedule s = plan_schedule(g, t);
  ASSERT_EQ(s.kernels.size(), g.ops.size());
  for (const KernelPlan& kp : s.kernels) {
    const KernelOp& op = g.ops[kp.op];
    if (op.kind != OpKind::GraphDefined) continue;
    ASSERT_TRUE(kp.block);
    // A re-tiled schedule describes the re-tiled graph: same ops, same grid, other loop range.
    const BlockGraph& bg = kp.block->retiled ? *kp.block->retiled : *op.block;
    if (kp.block->retiled) {
      ASSERT_EQ(bg.ops.size(), op.block->ops.size());
      EXPECT_EQ(bg.grid, op.block->grid);
      for (size_t i = 0; i < bg.ops.size(); ++i) {
        EXPECT_EQ(bg.ops[i].kind, op.block->ops[i].kind);
        EXPECT_EQ(bg.ops[i].stage, op.block->ops[i].stage);
        if (bg.ops[i].stage == Stage::Post) EXPECT_EQ(bg.ops[i].shape, op.block->ops[i].shape);
      }
      EXPECT_EQ(bg.loop[kp.block->retile_dim], kp.block->retile_to);
    }
    check_block(bg, *kp.block, t, g.name + "/" + op.name);
  }
  // Workspace placements do not overlap.
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (size_t i = 0; i < g.tensors.size(); ++i)
    if (s.tensor_offset[i] >= 0)
      spans.push_back(
          {s.tensor_offset[i],
           s.tensor_offset[i] + numel(g.tensors[i].shape) * dtype_bytes(g.tensors[i].dtype)});
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first);
  for (auto [a, b] : spans) EXPECT_LE(b, s.workspace_bytes);
  EXPECT_FALSE(schedule_to_text(g, s).empty());
}

TEST(Schedule, ExamplesFitAndBuffersDoNotOverlap) {
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(KILN_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".json") continue;
    KernelGraph g = load_graph_file(e.path().string());
    for (Arch a : {Arch::Sm90a, Arch::Sm80}) {
      SCOPED_TRACE(e.path().filename().string());
      try {
        check_graph(g, target_for(a));
      } catch (const UserError& err) {
        ADD_FAILURE() << err.render();
      }
    }
  }
}

TEST(Schedule, RandomGraphsFitAndBuffersDoNotOverlap) {
  for (int i = 0; i < 300; ++i) {
    testing::RandomGraphs gen(5000 + i);
    KernelGraph g = gen.next(fmt::format("g{}", i));
    SCOPED_TRACE(to_text(g));
    check_graph(g, default_target());
    check_graph(g, target_for(Arch::Sm80));
  }
}

// The decode GEMV shape of the benchmark gets tensor cores with ldmatrix on both operands, a
// multi-stage cp.async pipeline and one barrier per iteration.
TEST(Schedule, DecodeMatmulUsesTensorCoresAndPipeline) {
  KernelGraph g =
      load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/rmsnorm_linear.mugraph.json");
  Schedule s = plan_schedule(g, default_target());
  const BlockSchedule& b = *s.kernels[0].block;
  const BlockGraph& bg = *g.ops[0].block;
  EXPECT_GE(b.pipeline_stages, 3);
  EXPECT_EQ(b.barriers_per_iteration, 1);
  for (size_t i = 0; i < bg.ops.size(); ++i)
    if (bg.ops[i].kind == OpKind::MatMul) {
      EXPECT_TRUE(b.tiles[i].mma.use);
      EXPECT_TRUE(b.tiles[i].mma.a_ldmatrix);
      EXPECT_TRUE(b.tiles[i].mma.b_ldmatrix);
    } else if (bg.ops[i].kind == OpKind::Input) {
      EXPECT_TRUE(b.tiles[i].async);
      EXPECT_EQ(b.tiles[i].load_vec * dtype_bytes(bg.inputs[bg.ops[i].io].dtype), 16);
    }
}

// A weight-streaming loop whose one iteration reads a 72 KB tile is re-tiled into stages of at
// most 20 KB with whole k16 steps and at least three stages in flight; flash attention
// (accum_max, accum_rescale) is never re-tiled.
TEST(Schedule, LargeLoopTilesAreRetiledIntoPipelineStages) {
  std::vector<TensorDesc> in = {{"X", {8, 16384}, DType::F16}, {"W", {16384, 2304}, DType::F16}};
  BlockGraphBuilder b({2, 72}, 128, {16}, in);
  int x = b.input(0, {0, -1}, {1}, "in_X");
  int w = b.input(1, {-1, 1}, {0}, "in_W");
  int m = b.op(OpKind::MatMul, {x, w}, {}, "O_it");
  int acc = b.op(OpKind::AccumSum, {m}, {}, "O_acc");
  b.output(acc, {0, 1}, {-1}, DType::F16, "O");
  auto bg = std::make_shared<BlockGraph>(std::move(b).finish());
  int dim = -1;
  std::shared_ptr<const BlockGraph> rt = retile_loop(*bg, default_target(), &dim);
  ASSERT_TRUE(rt);
  EXPECT_EQ(dim, 0);
  EXPECT_GT(rt->loop[0], 16);
  int64_t stage = 0;
  for (const BlockOp& o : rt->ops)
    if (o.kind == OpKind::Input) stage += numel(o.shape) * 2;
  EXPECT_LE(stage, 20 * 1024);
  EXPECT_EQ(rt->ops[x].shape.back() % 16, 0);
  KernelGraph g = load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/gqa.mugraph.json");
  for (const KernelOp& op : g.ops)
    if (op.kind == OpKind::GraphDefined) EXPECT_FALSE(retile_loop(*op.block, default_target()));
}

int op_index(const BlockGraph& bg, const std::string& name) {
  for (size_t i = 0; i < bg.ops.size(); ++i)
    if (bg.ops[i].name == name) return static_cast<int>(i);
  ADD_FAILURE() << "no block op " << name;
  return 0;
}

// exp(Q·K) feeding both P·V and its row sums stays in the mma fragments: no shared-memory tile,
// whole rows per warp for both matmuls, the row sums in the same partition with n = 1.
TEST(Schedule, AttentionKeepsPInRegisters) {
  KernelGraph g = load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/gqa.mugraph.json");
  Schedule s = plan_schedule(g, default_target());
  const BlockSchedule& b = *s.kernels[0].block;
  const BlockGraph& bg = *g.ops[0].block;
  const TilePlan& p = b.tiles[op_index(bg, "p")];
  EXPECT_EQ(p.home, TileHome::Fragment);
  EXPECT_EQ(p.offset, -1);
  ASSERT_EQ(p.dist.kind, DistKind::Mma);
  EXPECT_EQ(p.dist.wn, 1);
  EXPECT_EQ(p.dist.ks, 1);
  const TilePlan& pv = b.tiles[op_index(bg, "pv")];
  EXPECT_EQ(pv.dist.wb, p.dist.wb);
  EXPECT_EQ(pv.dist.wm, p.dist.wm);
  EXPECT_EQ(pv.dist.wn, 1);
  const TilePlan& acc_l = b.tiles[op_index(bg, "acc_l")];
  EXPECT_EQ(acc_l.dist.kind, DistKind::Mma);
  EXPECT_EQ(acc_l.dist.n, 1);
  EXPECT_FALSE(acc_l.spill);
  EXPECT_EQ(b.barriers_per_iteration, 1);
  int chain_steps = 0;
  for (const Step& st : b.steps)
    if (st.kind == StepKind::Accumulate && st.op == op_index(bg, "p")) ++chain_steps;
  EXPECT_EQ(chain_steps, 1);
  // Q is loop-invariant: its A fragments are loaded once and stay in registers.
  const TilePlan& qk = b.tiles[op_index(bg, "s")];
  EXPECT_TRUE(qk.mma.a_hoisted);
  ASSERT_NE(mma_distribution(b, op_index(bg, "s")), nullptr);
  EXPECT_EQ(*mma_distribution(b, op_index(bg, "s")), p.dist);
  EXPECT_FALSE(pv.mma.a_hoisted);  // P changes every iteration
  EXPECT_LE(b.regs_estimate, 128);
}

// A μGraph of tests/data planned for the default target: its first kernel's block schedule and
// the block graph that schedule describes (re-tiled or not).
struct PlannedDataGraph {
  KernelGraph g;
  Schedule s;
  explicit PlannedDataGraph(const std::string& name)
      : g(load_graph_file(std::string(KILN_SOURCE_DIR) + "/tests/data/" + name)),
        s(plan_schedule(g, default_target())) {}
  const BlockSchedule& b() const { return *s.kernels[0].block; }
  const BlockGraph& bg() const { return b().retiled ? *b().retiled : *g.ops[0].block; }
};

// A product whose every 4-warp partition needs more than 64 fragment floats per thread still
// runs on tensor cores (up to 128): the FMA fallback ran such attention steps 5-15x slower.
TEST(Schedule, LargeProductsStayOnTensorCores) {
  PlannedDataGraph pg("gqa_bs16_keys128.mugraph.json");
  const BlockSchedule& b = pg.b();
  const BlockGraph& bg = pg.bg();
  int matmuls = 0;
  for (size_t i = 0; i < bg.ops.size(); ++i)
    if (bg.ops[i].kind == OpKind::MatMul) {
      ++matmuls;
      EXPECT_TRUE(b.tiles[i].mma.use) << bg.ops[i].name;
      const Distribution* d = mma_distribution(b, static_cast<int>(i));
      ASSERT_NE(d, nullptr) << bg.ops[i].name;
      EXPECT_LE(d->bw * d->mtw * d->ntw * 4, 128) << bg.ops[i].name;
    }
  EXPECT_EQ(matmuls, 2);
}

// Tiles read by ldmatrix keep their padded row pitch (no 8-way bank conflicts) even where that
// costs a ring stage: four blocks per SM fit three unpadded stages but only two padded ones.
TEST(Schedule, LdmatrixTilesKeepPaddingOverRingDepth) {
  PlannedDataGraph pg("gqa_bs16_split4.mugraph.json");
  const BlockSchedule& b = pg.b();
  const BlockGraph& bg = pg.bg();
  EXPECT_GE(b.pipeline_stages, 2);
  int checked = 0;
  for (size_t i = 0; i < bg.ops.size(); ++i) {
    if (bg.ops[i].kind != OpKind::MatMul || !b.tiles[i].mma.use) continue;
    for (int side = 0; side < 2; ++side) {
      bool ldm = side == 0 ? b.tiles[i].mma.a_ldmatrix : b.tiles[i].mma.b_ldmatrix;
      int leaf = bg.ops[i].inputs[side];
      if (!ldm || bg.ops[leaf].kind != OpKind::Input) continue;
      const TilePlan& t = b.tiles[leaf];
      int64_t pitch_bytes = t.strides[t.strides.size() - 2] * 2;
      EXPECT_NE(pitch_bytes % 128, 0) << bg.ops[leaf].name << " pitch " << pitch_bytes;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3);  // Q, K and V
}

// A block-wide sum of one long row uses every warp of the block.
TEST(Schedule, LongRowReductionUsesSeveralWarps) {
  KernelGraph g =
      load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/add_rmsnorm.mugraph.json");
  Schedule s = plan_schedule(g, default_target());
  const BlockGraph& bg = *g.ops[0].block;
  const TilePlan& ss = s.kernels[0].block->tiles[op_index(bg, "ss")];
  EXPECT_GT(ss.dist.group, 32);
  EXPECT_LE(ss.dist.group, bg.block_threads);
  // h = x + r has three readers: recomputed in each, never a float32 tile.
  EXPECT_EQ(s.kernels[0].block->tiles[op_index(bg, "h")].home, TileHome::Inline);
}

// A decode matmul X[M, K] W[K, N] (f16), optionally of a weightless rms_norm of X.
KernelGraph decode_matmul(int64_t M, int64_t K, int64_t N, bool rms = false) {
  KernelGraphBuilder b("dm");
  int x = b.input("X", {M, K}, DType::F16);
  int w = b.input("W", {K, N}, DType::F16);
  if (rms) {
    Attrs e;
    e.eps = 1e-6;
    x = b.op(OpKind::RmsNorm, {x}, e, "n");
  }
  b.output(b.op(OpKind::MatMul, {x, w}, {}, "o"));
  return std::move(b).finish();
}

// On sm_90a the decode GEMV streams W through TMA: one block per SM with a 128 KB ring of weight
// (4 stages of BK = 16384 / BN rows), the narrowest column blocks that fit on the SMs, and
// k-splits only until 8 MB are in flight; weights under 8 MB, N past 256 columns per SM and
// sm_80 keep the register GEMV.
TEST(Schedule, DecodeGemvStreamsThroughTmaOnSm90a) {
  struct Case {
    int64_t M, K, N;
    bool rms;
    bool tma;
    int bn, bk, splits;
    const char* strategy;
  };
  const Case cases[] = {
      {32, 4096, 6144, true, true, 64, 256, 1, "gemv tma 64x256 s4 rms_norm"},
      {1, 6656, 16384, false, true, 128, 128, 1, "gemv tma 128x128 s4"},
      {32, 16384, 2304, false, true, 64, 256, 2, "gemv tma 64x256 s4"},
      {20, 4096, 32000, false, true, 256, 64, 1, "gemv tma 256x64 s4"},
      {16, 2048, 2048, false, true, 64, 256, 1, "gemv tma 64x256 s4"},
      {8, 4096, 40000, false, false, 0, 0, 0, "gemv"},       // 157 blocks of 256 columns
      {5, 256, 136, true, false, 0, 0, 0, "gemv rms_norm"},  // 68 KB of weight
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("M {} K {} N {}", c.M, c.K, c.N));
    KernelGraph g = decode_matmul(c.M, c.K, c.N, c.rms);
    const Schedule s90 = plan_schedule(g, target_for(Arch::Sm90a));
    const KernelPlan& kp = s90.kernels.back();
    ASSERT_TRUE(kp.as<GemvKernel>());
    const std::optional<GemvTmaShape>& tma = kp.as<GemvKernel>()->tma;
    EXPECT_EQ(tma.has_value(), c.tma);
    EXPECT_EQ(kp.strategy(), c.strategy);
    if (c.tma) {
      EXPECT_EQ(tma->bn, c.bn);
      EXPECT_EQ(tma->bk, c.bk);
      EXPECT_EQ(tma->stages, 4);
      EXPECT_EQ(kp.splits, c.splits);
      EXPECT_EQ(kp.threads, c.rms ? 192 : 160);
      EXPECT_EQ(kp.grid, (c.N + c.bn - 1) / c.bn * c.splits);
    }
    const Schedule s80 = plan_schedule(g, target_for(Arch::Sm80));
    const KernelPlan& k80 = s80.kernels.back();
    ASSERT_TRUE(k80.as<GemvKernel>());
    EXPECT_FALSE(k80.as<GemvKernel>()->tma.has_value());
    EXPECT_EQ(k80.strategy(), c.rms ? "gemv rms_norm" : "gemv");
  }
}

// Whatever the shape, a TMA plan launches one wave of one block per SM within the shared memory
// of a block, has a valid box (BK a multiple of 64, at most 256 rows), at most 8 splits, and
// splits only where each streams at least two full rings.
TEST(Schedule, TmaGemvPlansFitTheMachine) {
  const Target& t = target_for(Arch::Sm90a);
  int planned = 0;
  for (int64_t M : {1, 7, 8, 9, 16, 17, 24, 25, 32})
    for (int64_t K : {512, 2048, 4096, 6656, 11008, 16384, 28672})
      for (int64_t N : {1024, 2304, 4096, 8448, 16896, 17024, 33792, 33800}) {
        SCOPED_TRACE(fmt::format("M {} K {} N {}", M, K, N));
        KernelGraph g = decode_matmul(M, K, N);
        const Schedule sched = plan_schedule(g, t);
        const KernelPlan& kp = sched.kernels.back();
        ASSERT_TRUE(kp.as<GemvKernel>());
        const std::optional<GemvTmaShape>& tma = kp.as<GemvKernel>()->tma;
        EXPECT_EQ(tma.has_value(),
                  K * N * 2 >= (int64_t(8) << 20) && (N + 255) / 256 <= t.sm_count);
        if (!tma) continue;
        ++planned;
        const GemvTmaShape& v = *tma;
        EXPECT_TRUE(v.bn == 64 || v.bn == 128 || v.bn == 256);
        EXPECT_TRUE(v.bk % 64 == 0 && v.bk >= 64 && v.bk <= 256);
        EXPECT_GE(v.stages, 2);
        EXPECT_GE(kp.splits, 1);
        EXPECT_LE(kp.splits, 8);
        EXPECT_LE(kp.grid, t.sm_count);
        EXPECT_EQ(kp.grid, (N + v.bn - 1) / v.bn * kp.splits);
        EXPECT_LE(kp.smem + 2048, t.smem_per_block);
        if (kp.splits > 1) {
          EXPECT_GE(K, kp.splits * 2 * v.stages * v.bk);
        }
        // The narrowest column blocks that fit: half as wide would not.
        if (v.bn > 64) {
          EXPECT_GT((N + v.bn / 2 - 1) / (v.bn / 2), t.sm_count);
        }
        EXPECT_NE(schedule_to_text(g, sched).find("gemv tma"), std::string::npos);
      }
  EXPECT_GT(planned, 100);
}

// The sum (or mean) of a 2-D 16-bit tensor's rows runs as the TMA GEMV with a ones row on sm_90a
// (linear_mean's W-row sum; H100: 32 MB in 14.0 us, the block graph it replaces ~2x slower);
// elsewhere the column kernel stays.
TEST(Schedule, RowSumsOfAWeightRunTheOnesRowGemv) {
  auto graph = [](OpKind kind, Shape shape, int dim, DType dt, Arch arch) {
    KernelGraphBuilder kb("col", "", arch);
    int x = kb.input("X", shape, dt);
    Attrs a;
    a.dim = dim;
    a.keepdim = true;
    kb.output(kb.op(kind, {x}, a, "Y"));
    return std::move(kb).finish();
  };
  auto plan = [](const KernelGraph& g, bool lowerings = true) {
    return plan_schedule(g, target_for(g.arch), PlanOptions{lowerings}).kernels.at(0);
  };
  KernelGraph w = graph(OpKind::Sum, {4096, 4096}, 0, DType::BF16, Arch::Sm90a);
  ASSERT_TRUE(plan(w).as<ColumnSumGemvKernel>());
  EXPECT_NE(emit_cuda(w).find("kiln::rt::GemvOnesX>(nullptr, 4096, t0, t0, 4096, t1, 4096, 1, "
                              "4096, 4096, 1, stream, kiln::rt::GemvOnesX{1.0f})"),
            std::string::npos);
  KernelGraph m = graph(OpKind::Mean, {4096, 2048}, 0, DType::F16, Arch::Sm90a);
  ASSERT_TRUE(plan(m).as<ColumnSumGemvKernel>());
  EXPECT_NE(emit_cuda(m).find("GemvOnesX{0.000244140625f}"), std::string::npos);
  // Under 8 MB of weight the TMA GEMV's rule does not apply (gemv_tma_shape).
  EXPECT_FALSE(
      plan(graph(OpKind::Sum, {1024, 256}, 0, DType::F16, Arch::Sm90a)).as<ColumnSumGemvKernel>());
  // Not: sm_80, no lowerings (the simulator), f32, a max, 3-D, N not a multiple of 8, dim 1.
  EXPECT_TRUE(
      plan(graph(OpKind::Sum, {4096, 4096}, 0, DType::BF16, Arch::Sm80)).as<ColumnKernel>());
  EXPECT_TRUE(plan(w, false).as<ColumnKernel>());
  EXPECT_FALSE(
      plan(graph(OpKind::Sum, {512, 512}, 0, DType::F32, Arch::Sm90a)).as<ColumnSumGemvKernel>());
  EXPECT_FALSE(
      plan(graph(OpKind::Max, {512, 512}, 0, DType::F16, Arch::Sm90a)).as<ColumnSumGemvKernel>());
  EXPECT_FALSE(plan(graph(OpKind::Sum, {4, 512, 512}, 1, DType::F16, Arch::Sm90a))
                   .as<ColumnSumGemvKernel>());
  EXPECT_FALSE(
      plan(graph(OpKind::Sum, {512, 100}, 0, DType::F16, Arch::Sm90a)).as<ColumnSumGemvKernel>());
  EXPECT_FALSE(
      plan(graph(OpKind::Sum, {512, 512}, 1, DType::F16, Arch::Sm90a)).as<ColumnSumGemvKernel>());
}

// A transpose that feeds a matmul is an access pattern: on sm_90a the wgmma GEMM and the TMA GEMV
// read its [N, K] input K-major in place and the transpose runs no kernel (nn.Linear's X W^T);
// it stays a kernel where its output is also a graph output, is read twice, or the matmul has
// no K-major path (sm_80, the register GEMV).
TEST(Schedule, TransposedWeightsAreReadInPlace) {
  auto graph = [](int64_t m, int64_t n, int64_t k, Arch arch, bool wt_out, bool twice) {
    KernelGraphBuilder kb("lin", "", arch);
    int x = kb.input("X", {m, k}, DType::BF16);
    int w = kb.input("W", {n, k}, DType::BF16);
    int wt = kb.op(OpKind::Transpose, {w}, {}, "Wt");
    int y = kb.op(OpKind::MatMul, {x, wt}, {}, "Y");
    kb.output(y);
    if (wt_out) kb.output(wt);
    if (twice) kb.output(kb.op(OpKind::MatMul, {x, wt}, {}, "Y2"));
    return std::move(kb).finish();
  };
  struct Case {
    int64_t m, n, k;
    const char* launch;
  };
  const Case cases[] = {
      {512, 14336, 4096,
       "WgmmaGemmWS<__nv_bfloat16, 1, 6, 1, true, true>, __nv_bfloat16, "
       "kiln::rt::WgmmaEpiIdentity>(t0, 4096, t1, t1, 4096, "},
      {16, 14336, 4096, "kiln::rt::GemvIdentity, true>(t0, 4096, t1, t1, 4096, "},
      {1, 4096, 14336, "kiln::rt::GemvIdentity, true>(t0, 14336, t1, t1, 14336, "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("M {} N {} K {}", c.m, c.n, c.k));
    KernelGraph g = graph(c.m, c.n, c.k, Arch::Sm90a, false, false);
    const Schedule s = plan_schedule(g, target_for(Arch::Sm90a));
    EXPECT_TRUE(s.kernels[0].as<FusedIntoKernel>());
    EXPECT_EQ(s.kernels[1].view_op, 0);
    EXPECT_EQ(s.tensor_offset[g.ops[0].outputs[0]], -1);  // W^T is never written ...
    EXPECT_LT(s.workspace_bytes, c.n * c.k * 2);          // ... and takes no workspace
    const std::string cu = emit_cuda(g);
    EXPECT_NE(cu.find(c.launch), std::string::npos);
    EXPECT_NE(cu.find("k0_Wt: transpose -> read in place by k1_Y (no kernel)"), std::string::npos);
    // Kept as a kernel: W^T also an output, read by two matmuls, or sm_80 past 32 rows (at
    // decode rows the K-major register GEMV reads it in place there too).
    for (const KernelGraph& other : {graph(c.m, c.n, c.k, Arch::Sm90a, true, false),
                                     graph(c.m, c.n, c.k, Arch::Sm90a, false, true),
                                     graph(c.m, c.n, c.k, Arch::Sm80, false, false)}) {
      const Schedule so = plan_schedule(other, target_for(other.arch));
      const bool in_place = other.arch == Arch::Sm80 && c.m <= 32;
      EXPECT_EQ(so.kernels[0].as<FusedIntoKernel>() != nullptr, in_place);
      EXPECT_EQ(so.kernels[1].view_op, in_place ? 0 : -1);
      if (in_place) {
        ASSERT_TRUE(so.kernels[1].as<GemvKernel>());
        ASSERT_TRUE(so.kernels[1].as<GemvKernel>()->kmajor.has_value());
        EXPECT_EQ(so.kernels[1].as<GemvKernel>()->kmajor->splits, 1);  // no clusters on sm_80
      }
    }
  }
  // 33 to 64 rows: the wgmma GEMM reads W K-major (the mma.sync GEMM would need W^T written out);
  // with W stored (K, N) those rows stay on mma.sync.
  {
    KernelGraph g = graph(48, 14336, 4096, Arch::Sm90a, false, false);
    const Schedule s = plan_schedule(g, target_for(Arch::Sm90a));
    EXPECT_TRUE(s.kernels[0].as<FusedIntoKernel>());
    ASSERT_TRUE(s.kernels[1].as<WgmmaGemmKernel>());
    EXPECT_EQ(s.kernels[1].as<WgmmaGemmKernel>()->rows, 48);
    KernelGraphBuilder kb("kn", "", Arch::Sm90a);
    int x = kb.input("X", {48, 4096}, DType::BF16);
    int w = kb.input("W", {4096, 14336}, DType::BF16);
    kb.output(kb.op(OpKind::MatMul, {x, w}, {}, "Y"));
    EXPECT_TRUE(plan_schedule(std::move(kb).finish(), target_for(Arch::Sm90a))
                    .kernels[0]
                    .as<GemmTcKernel>());
  }
  // Weights under 8 MB at decode rows are read in place as well: by the TMA GEMV where each block
  // streams at most 192 KB (2 MB in 16 blocks), else by the K-major register GEMV (4 MB in 16).
  const Schedule small =
      plan_schedule(graph(8, 1024, 1024, Arch::Sm90a, false, false), target_for(Arch::Sm90a));
  EXPECT_TRUE(small.kernels[0].as<FusedIntoKernel>());
  ASSERT_TRUE(small.kernels[1].as<GemvKernel>());
  EXPECT_TRUE(small.kernels[1].as<GemvKernel>()->tma.has_value());
  KernelGraph g4 = graph(8, 512, 4096, Arch::Sm90a, false, false);
  const Schedule few = plan_schedule(g4, target_for(Arch::Sm90a));
  EXPECT_TRUE(few.kernels[0].as<FusedIntoKernel>());
  ASSERT_TRUE(few.kernels[1].as<GemvKernel>());
  ASSERT_TRUE(few.kernels[1].as<GemvKernel>()->kmajor.has_value());
  // Off sm_90a (no clusters) a weight of few 16-column blocks keeps its transpose kernel and the
  // split-K [K, N] GEMV: one block would stream N16 x K16384 alone.
  const Schedule thin =
      plan_schedule(graph(8, 16, 16384, Arch::Sm80, false, false), target_for(Arch::Sm80));
  EXPECT_FALSE(thin.kernels[0].as<FusedIntoKernel>());
  const std::string cu4 = emit_cuda(g4);  // W [512, 4096] as W^T, row stride K; 8 splits
  EXPECT_NE(cu4.find("kiln::rt::gemv_kmajor_launch<__nv_bfloat16, __nv_bfloat16, 1, 1, 8, 4, 8, "
                     "kiln::rt::GemvIdentity>(t0, 4096, t1, nullptr, 4096, "),
            std::string::npos);
  EXPECT_NE(cu4.find(", 512, 8, 512, 4096, 8, stream, kiln::rt::GemvIdentity());"),
            std::string::npos);
}

// f32 matmuls past 32 rows run the three-pass tf32 GEMM on sm_90a, reading 2-D transposes of
// either operand in place (batched transposes too), a batched B in the same launches
// (F32x3Batch); split-K only
// where the tiles do not fill the SMs, with the partials in the kernel's workspace. Decode rows,
// sm_80 and 16-bit operands keep their kernels.
// 16-bit products whose operands TMA cannot address as stored stay on the tensor cores: a
// weight K x N of prime N or any odd K is copied K-major first (StagedGemmKernel: the wgmma GEMM,
// or up to 64 rows the K-major GEMV); an nn.Linear weight with aligned rows needs no copy at any
// N; only small products keep the FMA kernel, which is costed at the CUDA cores' rate.
TEST(Schedule, OddSixteenBitMatmulsStayOnTheTensorCores) {
  auto graph = [](int64_t m, int64_t k, int64_t n, bool b_t, DType dt) {
    KernelGraphBuilder kb("odd", "", Arch::Sm90a);
    int a = kb.input("A", {m, k}, dt);
    int b = kb.input("B", b_t ? Shape{n, k} : Shape{k, n}, dt);
    if (b_t) b = kb.op(OpKind::Transpose, {b}, {}, "Bt");
    kb.output(kb.op(OpKind::MatMul, {a, b}, {}, "C"));
    return std::move(kb).finish();
  };
  const Target t = target_for(Arch::Sm90a);
  {  // 61 rows by a [3072, 1531] weight: B copied, then two GEMVs of 32 and 29 rows.
    KernelGraph g = graph(61, 3072, 1531, false, DType::F16);
    const Schedule sc = plan_schedule(g, t);
    const StagedGemmKernel* st = sc.kernels.back().as<StagedGemmKernel>();
    ASSERT_TRUE(st);
    EXPECT_TRUE(st->stage_b);
    EXPECT_FALSE(st->stage_a);
    ASSERT_TRUE(st->gemv.has_value());
    EXPECT_EQ(st->gemv->mt, 4);
    EXPECT_EQ(sc.kernels.back().scratch_bytes, (61 + 1531) * 3072 * 2);
    const std::string cu = emit_cuda(g);
    EXPECT_NE(cu.find("kiln::rt::stage16_launch<__half>("), std::string::npos);
    EXPECT_NE(cu.find("for (int r0 = 0; r0 < 61; r0 += 32) {"), std::string::npos);
  }
  {  // 300 x 1001 by 1001 x 515: both copied (K odd), the wgmma GEMM.
    KernelGraph g = graph(300, 1001, 515, false, DType::F16);
    const StagedGemmKernel* st = plan_schedule(g, t).kernels.back().as<StagedGemmKernel>();
    ASSERT_TRUE(st);
    EXPECT_TRUE(st->stage_a && st->stage_b);
    EXPECT_FALSE(st->gemv.has_value());
    EXPECT_NE(emit_cuda(g).find("kiln::rt::gemm16_staged_launch<__half, __half"),
              std::string::npos);
  }
  {  // Past 2048 rows only B may be copied (a copied A hung the GEMM at 20000 rows): K 33 declines,
     // K 200 copies B alone.
    EXPECT_FALSE(plan_schedule(graph(20000, 33, 513, false, DType::BF16), t)
                     .kernels.back()
                     .as<StagedGemmKernel>());
    const StagedGemmKernel* st = plan_schedule(graph(20000, 200, 513, false, DType::BF16), t)
                                     .kernels.back()
                                     .as<StagedGemmKernel>();
    ASSERT_TRUE(st);
    EXPECT_FALSE(st->stage_a);
  }
  {  // An unaligned N with a single k-tile stays off the GEMM, copied or not (where the hang was).
    const Schedule sc = plan_schedule(graph(20000, 64, 513, true, DType::F16), t);
    EXPECT_FALSE(sc.kernels.back().as<WgmmaGemmKernel>());
    EXPECT_FALSE(sc.kernels.back().as<StagedGemmKernel>());
  }
  {  // bf16 nn.Linear, N 1021 and K 1024: B^T read in place by the wgmma GEMM, no copy.
    KernelGraph g = graph(508, 1024, 1021, true, DType::BF16);
    const WgmmaGemmKernel* w = plan_schedule(g, t).kernels.back().as<WgmmaGemmKernel>();
    ASSERT_TRUE(w);
    EXPECT_TRUE(w->b_kmajor);
  }
  {  // A small product keeps the FMA kernel's one launch, modeled at the FMA fraction of the
     // CUDA-core rate: no faster than its flops at that rate.
    KernelGraph g = graph(40, 72, 33, false, DType::F16);
    const Schedule sc = plan_schedule(g, t);
    ASSERT_TRUE(sc.kernels.back().as<FmaKernel>());
    const KernelCost c = plan_cost(g, g.ops.back(), t, sc.kernels.back());
    const double flops = 2.0 * 40 * 72 * 33;
    EXPECT_EQ(c.tc_flops, 0.0);
    EXPECT_GE(c.time, flops / (t.fp32_flops_per_s * cost_constants(t.arch).fma_matmul_efficiency));
  }
}

// matmul(T, T) with T = transpose(W): T has one consumer op but two reads, so no lowering may
// read W in place for B (A would name T, which then has no kernel and no buffer).
TEST(Schedule, ATransposeReadTwiceByOneMatmulKeepsItsKernel) {
  for (DType dt : {DType::F16, DType::F32}) {
    KernelGraphBuilder kb("tt", "", Arch::Sm90a);
    const int w = kb.input("W", {256, 256}, dt);
    const int t = kb.op(OpKind::Transpose, {w}, {}, "T");
    kb.output(kb.op(OpKind::MatMul, {t, t}, {}, "C"));
    KernelGraph g = std::move(kb).finish();
    const Schedule sc = plan_schedule(g, target_for(Arch::Sm90a));
    EXPECT_LT(sc.kernels.back().view_op, 0) << dtype_name(dt);
    EXPECT_LT(sc.kernels.back().prologue_op, 0) << dtype_name(dt);
  }
}

TEST(Schedule, F32MatmulsRunTheTf32x3Gemm) {
  auto f32_graph = [](Arch arch, int64_t m, int64_t k, int64_t n, bool a_t, bool b_t,
                      int64_t batch) {
    KernelGraphBuilder kb("f32", "", arch);
    Shape as = a_t ? Shape{k, m} : Shape{m, k}, bs = b_t ? Shape{n, k} : Shape{k, n};
    if (batch > 1) as.insert(as.begin(), batch), bs.insert(bs.begin(), batch);
    int a = kb.input("A", as, DType::F32);
    int b = kb.input("B", bs, DType::F32);
    if (a_t) a = kb.op(OpKind::Transpose, {a}, {}, "At");
    if (b_t) b = kb.op(OpKind::Transpose, {b}, {}, "Bt");
    kb.output(kb.op(OpKind::MatMul, {a, b}, {}, "C"));
    return std::move(kb).finish();
  };
  struct Case {
    int64_t m, k, n;
    bool a_t, b_t;
    int64_t batch;
    int splits;
  };
  for (const Case& c :
       {Case{2048, 2048, 2048, false, false, 1, 1}, Case{128, 1024, 512, false, true, 1, 6},
        Case{768, 1024, 512, true, false, 1, 6}, Case{300, 1000, 520, true, true, 1, 6},
        Case{256, 512, 384, false, false, 8, 3}, Case{256, 512, 384, true, true, 4, 3}}) {
    const KernelGraph g = f32_graph(Arch::Sm90a, c.m, c.k, c.n, c.a_t, c.b_t, c.batch);
    const Schedule s = plan_schedule(g, target_for(Arch::Sm90a));
    const KernelPlan& mm = s.kernels.back();
    const Tf32x3GemmKernel* p = mm.as<Tf32x3GemmKernel>();
    ASSERT_TRUE(p) << mm.strategy();
    EXPECT_EQ(p->splits, c.splits) << c.m << " " << c.n;
    EXPECT_EQ(p->batch, c.batch);
    EXPECT_EQ(p->b_kmajor, c.b_t);
    EXPECT_EQ(p->a_view >= 0, c.a_t);
    // The transposes are read in place: no kernel of their own.
    for (size_t i = 0; i + 1 < s.kernels.size(); ++i)
      if (g.ops[i].kind == OpKind::Transpose) EXPECT_TRUE(s.kernels[i].as<FusedIntoKernel>());
    const int64_t kp = (c.k + 31) / 32 * 32;
    EXPECT_EQ(mm.scratch_bytes, c.batch * (c.m + c.n) * 2 * kp * 4 +
                                    (c.splits > 1 ? c.splits * c.batch * c.m * c.n * 4 : 0));
    const std::string cu = emit_cuda(g);
    EXPECT_NE(cu.find("kiln::rt::gemm_f32x3_launch("), std::string::npos);
    EXPECT_NE(
        cu.find(fmt::format("{}, {}, {}, {}, ws + {}", c.m, c.n, c.k, c.splits, mm.scratch_offset)),
        std::string::npos);
    if (c.batch == 8)
      EXPECT_NE(cu.find("kiln::rt::F32x3Batch{8, 8, 0, 131072, 0, 196608}"), std::string::npos);
  }
  // Matrix-vector shapes read the large operand once on the CUDA cores (f32_rowdot): N <= 8 with A
  // row-major (W = A), M <= 8 with B read K-major through its transpose (W = B^T); k-splits where
  // the rows are few.
  {
    const KernelGraph mv = f32_graph(Arch::Sm90a, 2048, 8192, 1, false, false, 1);
    const Schedule s = plan_schedule(mv, target_for(Arch::Sm90a));
    const F32RowdotKernel* p = s.kernels.back().as<F32RowdotKernel>();
    ASSERT_TRUE(p);
    EXPECT_TRUE(p->n_small);
    EXPECT_EQ(p->s, 1);
    EXPECT_EQ(p->l, 2048);
    EXPECT_EQ(p->splits, 3);  // 32 warps per SM want 3 splits of 2048 rows; K allows 4
    EXPECT_NE(
        emit_cuda(mv).find("f32_rowdot_launch(1, t0, 8192, t1, 1, 1, t2, 1, 1, 2048, 8192, 3, "),
        std::string::npos);
    const KernelGraph lin = f32_graph(Arch::Sm80, 4, 4096, 4096, false, true, 1);
    const Schedule sl = plan_schedule(lin, target_for(Arch::Sm80));
    const F32RowdotKernel* q = sl.kernels.back().as<F32RowdotKernel>();
    ASSERT_TRUE(q);
    EXPECT_FALSE(q->n_small);
    EXPECT_TRUE(sl.kernels[0].as<FusedIntoKernel>());  // B's transpose is read in place
    EXPECT_NE(
        emit_cuda(lin).find("f32_rowdot_launch(4, t1, 4096, t0, 4096, 1, t3, 4096, 1, 4096, "),
        std::string::npos);
    // M <= 8 with B stored [K, N]: W's K is not contiguous, so not f32_rowdot but the column
    // stream (up to 16 rows, A row-major or read transposed); A transposed with N <= 8 neither.
    const KernelGraph kn = f32_graph(Arch::Sm90a, 4, 4096, 4096, false, false, 1);
    const Schedule skn = plan_schedule(kn, target_for(Arch::Sm90a));
    EXPECT_FALSE(skn.kernels.back().as<F32RowdotKernel>());
    const F32ColstreamKernel* cs = skn.kernels.back().as<F32ColstreamKernel>();
    ASSERT_TRUE(cs);
    EXPECT_EQ(cs->rows, 4);
    EXPECT_EQ(cs->splits, 66);  // 32 warps a split, 16 per SM wanted; K / (8 * 4) allows 128
    EXPECT_EQ(skn.kernels.back().scratch_bytes, 66 * 4 * 4096 * 4);
    EXPECT_NE(emit_cuda(kn).find("f32_colstream_launch(4, t1, 4096, t0, 4096, 1, t2, 4096, 4096, "
                                 "4096, 66, "),
              std::string::npos);
    const Schedule st =
        plan_schedule(f32_graph(Arch::Sm80, 12, 512, 1000, true, false, 1), target_for(Arch::Sm80));
    ASSERT_TRUE(st.kernels.back().as<F32ColstreamKernel>());
    EXPECT_GE(st.kernels.back().as<F32ColstreamKernel>()->a_view, 0);
    EXPECT_FALSE(plan_schedule(f32_graph(Arch::Sm90a, 17, 4096, 4096, false, false, 1),
                               target_for(Arch::Sm90a))
                     .kernels.back()
                     .as<F32ColstreamKernel>());
    EXPECT_FALSE(plan_schedule(f32_graph(Arch::Sm90a, 4096, 4096, 4, true, false, 1),
                               target_for(Arch::Sm90a))
                     .kernels.back()
                     .as<F32RowdotKernel>());
  }
  // What the streaming f32 kernels decline at 17-32 rows runs the tf32 GEMM past 2M
  // multiply-adds, with up to 64 k-splits where the partials are small (32 x 64 by K 16384: 64).
  {
    const Schedule sl = plan_schedule(f32_graph(Arch::Sm90a, 32, 16384, 64, false, false, 1),
                                      target_for(Arch::Sm90a));
    const Tf32x3GemmKernel* t = sl.kernels.back().as<Tf32x3GemmKernel>();
    ASSERT_TRUE(t);
    EXPECT_EQ(t->splits, 64);
  }
  // Not the tf32 GEMM: under 2M multiply-adds, sm_80, f16 operands.
  EXPECT_FALSE(
      plan_schedule(f32_graph(Arch::Sm90a, 20, 100, 500, false, true, 1), target_for(Arch::Sm90a))
          .kernels.back()
          .as<Tf32x3GemmKernel>());
  EXPECT_FALSE(plan_schedule(f32_graph(Arch::Sm80, 2048, 2048, 2048, false, false, 1),
                             target_for(Arch::Sm80))
                   .kernels.back()
                   .as<Tf32x3GemmKernel>());
  KernelGraphBuilder kb("f16", "", Arch::Sm90a);
  const int x = kb.input("X", {512, 1024}, DType::F16);
  const int w = kb.input("W", {1024, 512}, DType::F16);
  kb.output(kb.op(OpKind::MatMul, {x, w}, {}, "Y"));
  EXPECT_FALSE(plan_schedule(std::move(kb).finish(), target_for(Arch::Sm90a))
                   .kernels[0]
                   .as<Tf32x3GemmKernel>());
}

}  // namespace
}  // namespace kiln
