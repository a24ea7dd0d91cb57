// match_attention recognizes exactly the block graphs that compute attention's two-contraction
// chain (S = Q K, P = f(S), row sums of g(S), accum_sum(P V), an elementwise epilogue), places
// every tile where block_graph.h's offset rule puts it, and refuses everything else.
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/codegen/emit.h"
#include "kiln/codegen/lowerings/attention.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/json_io.h"

namespace kiln {
namespace {

const int64_t H = 4, M = 256, D = 64, N = 1024, DV = 64;

enum class Variant {
  Normalized,  // O = acc(P V) / acc(sum P), grid [H, M / mt, 1]
  Partials,    // the un-normalized partials of a 4-way key split (f32), as flash decoding
  KMajor,      // K stored [H, N, D], read through a transpose
  Mean,        // a mean instead of a sum (the feed is scaled by 1 / keys per iteration)
  NoLoop,      // the block's whole key range (an eighth of the keys) in one tile
  SavesP,      // P is saved every iteration
  MaxRows,     // a row max into accum_max
  Mask,        // P = exp(S) * mask, a second input in the elementwise map
  F32Out,      // the epilogue saves f32: rounding P to f16 is not allowed
  Scaled,      // P = exp(S * 0.125) and the row sum of exp(S / 8): online, a = 0.125
  NegScaled,   // P = exp(S * -0.5): the max would be a min; not online
  MixedScale,  // P = exp(S * 0.125), the row sum of exp(S * 0.25): no common factor; not online
  PlusOne,     // O / L + 1: degree 0, online
  PlusL,       // O / L + L: not homogeneous; not online
};

BlockGraph build(Variant v, int64_t mt = 128, int64_t d = D, int64_t nt = 64, int64_t n = N) {
  const bool km = v == Variant::KMajor;
  const int64_t split = v == Variant::Partials ? 4 : v == Variant::NoLoop ? 8 : 1;
  std::vector<TensorDesc> ins = {
      {"Q", {H, M, d}, DType::F16},
      km ? TensorDesc{"K", {H, n, d}, DType::F16} : TensorDesc{"K", {H, d, n}, DType::F16},
      {"V", {H, n, DV}, DType::F16},
      {"Mask", {H, M, n}, DType::F16}};
  const bool loop = v != Variant::NoLoop;
  std::vector<int64_t> lp;
  if (loop) lp = {n / split / nt};
  BlockGraphBuilder b({H, M / mt, split}, 128, lp, ins);
  std::vector<int> none = loop ? std::vector<int>{-1} : std::vector<int>{};
  int q = b.input(0, {0, 1, -1}, none);
  int k = km ? b.input(1, {0, -1, 1}, loop ? std::vector<int>{1} : none)
             : b.input(1, {0, -1, 2}, loop ? std::vector<int>{2} : none);
  if (km) k = b.op(OpKind::Transpose, {k});
  int vv = b.input(2, {0, -1, 1}, loop ? std::vector<int>{1} : none);
  int s = b.op(OpKind::MatMul, {q, k});
  auto constant = [&](double c) {
    Attrs a;
    a.value = c;
    return b.op(OpKind::Constant, {}, a);
  };
  const double scale = v == Variant::Scaled || v == Variant::MixedScale ? 0.125
                       : v == Variant::NegScaled                        ? -0.5
                                                                        : 1.0;
  int p = scale == 1.0 ? b.op(OpKind::Exp, {s})
                       : b.op(OpKind::Exp, {b.op(OpKind::Mul, {s, constant(scale)})});
  // The row feed's own exponential, where it differs from P's.
  int feed = v == Variant::Scaled ? b.op(OpKind::Exp, {b.op(OpKind::Div, {s, constant(8)})})
             : v == Variant::MixedScale
                 ? b.op(OpKind::Exp, {b.op(OpKind::Mul, {s, constant(0.25)})})
                 : -1;
  if (v == Variant::Mask) {
    int mask = b.input(3, {0, 1, 2}, loop ? std::vector<int>{2} : none);
    p = b.op(OpKind::Mul, {p, mask});
  }
  Attrs rows;
  rows.dim = 2;
  int l = b.op(v == Variant::Mean      ? OpKind::Mean
               : v == Variant::MaxRows ? OpKind::Max
                                       : OpKind::Sum,
               {feed >= 0 ? feed : p}, rows);
  int pv = b.op(OpKind::MatMul, {p, vv});
  if (v == Variant::SavesP) b.output(p, {0, 1, 2}, {2}, DType::F16, "P");
  int acc_l = loop ? b.op(v == Variant::MaxRows ? OpKind::AccumMax : OpKind::AccumSum, {l}) : l;
  int acc_o = loop ? b.op(OpKind::AccumSum, {pv}) : pv;
  if (split > 1) {
    b.output(acc_o, {1, 2, 0}, none, DType::F32, "OP", 4);
    b.output(acc_l, {1, 2, 0}, none, DType::F32, "LP", 4);
  } else {
    int o = b.op(OpKind::Div, {acc_o, acc_l});
    if (v == Variant::PlusOne) o = b.op(OpKind::Add, {o, constant(1)});
    if (v == Variant::PlusL) o = b.op(OpKind::Add, {o, acc_l});
    b.output(o, {0, 1, -1}, none, v == Variant::F32Out ? DType::F32 : DType::F16, "O");
  }
  return std::move(b).finish(target_for(Arch::Sm90a));
}

// Where block_graph.h puts an input op's tile for grid index g (the loop at 0), as a box
// origin of the input's 2-D view.
std::pair<int64_t, int64_t> tile_origin(const BlockGraph& bg, const BlockOp& op,
                                        const std::vector<int64_t>& g) {
  const Shape& dims = bg.inputs[op.io].shape;
  const int r = static_cast<int>(dims.size());
  std::vector<int64_t> start(r, 0);
  for (size_t gd = 0; gd < bg.grid.size(); ++gd) {
    const int d = op.imap[gd];
    if (d < 0) continue;
    const int64_t L = !bg.loop.empty() && !op.fmap.empty() && op.fmap[0] == d ? bg.loop[0] : 1;
    start[d] = g[gd] * L * op.shape[d];
  }
  int64_t row = 0;
  for (int d = 0; d < r - 1; ++d) row = row * dims[d] + start[d];
  return {row, start[r - 1]};
}

void expect_views_follow_offset_rule(const BlockGraph& bg, const AttentionPlan& p) {
  for (const AttentionView* v : {&p.q, &p.k, &p.v}) {
    const BlockOp* op = nullptr;
    for (const BlockOp& o : bg.ops)
      if (o.kind == OpKind::Input && o.io == v->io) op = &o;
    ASSERT_TRUE(op);
    std::vector<int64_t> g(3, 0);
    for (g[0] = 0; g[0] < bg.grid[0]; ++g[0])
      for (g[1] = 0; g[1] < (bg.grid.size() > 1 ? bg.grid[1] : 1); ++g[1])
        for (g[2] = 0; g[2] < (bg.grid.size() > 2 ? bg.grid[2] : 1); ++g[2]) {
          auto [row, col] = tile_origin(bg, *op, g);
          int64_t r = 0, c = 0;
          for (int i = 0; i < 3; ++i) r += v->row_coef[i] * g[i], c += v->col_coef[i] * g[i];
          EXPECT_EQ(r, row) << bg.inputs[v->io].name;
          EXPECT_EQ(c, col) << bg.inputs[v->io].name;
        }
  }
}

TEST(Attention, RecognizesTheChainAndPlacesEveryTile) {
  const Target& t = target_for(Arch::Sm90a);
  for (Variant v : {Variant::Normalized, Variant::Partials, Variant::KMajor, Variant::NoLoop}) {
    const int64_t mt = v == Variant::NoLoop ? 64 : 128;  // fits the resource rule unlowered
    BlockGraph bg = build(v, mt);
    auto p = match_attention(bg, t, true, true);
    ASSERT_TRUE(p) << static_cast<int>(v);
    EXPECT_EQ(p->mt, mt);
    EXPECT_EQ(p->d, D);
    EXPECT_EQ(p->dv, DV);
    EXPECT_EQ(p->keys, v == Variant::Partials ? N / 4 : v == Variant::NoLoop ? N / 8 : N);
    EXPECT_EQ(p->rows, 1);
    EXPECT_EQ(p->k_nmajor, v != Variant::KMajor);
    EXPECT_TRUE(p->v_nmajor);
    EXPECT_NE(p->p.find("e"), std::string::npos);  // exp(s), bound to a local
    expect_views_follow_offset_rule(bg, *p);
  }
}

TEST(Attention, EpilogueAndStores) {
  const Target& t = target_for(Arch::Sm90a);
  auto n = match_attention(build(Variant::Normalized), t, true, true);
  ASSERT_TRUE(n);
  ASSERT_EQ(n->stores.size(), 1u);
  EXPECT_FALSE(n->stores[0].row);
  EXPECT_EQ(n->stores[0].ld, DV);
  // O [H, M, DV] tile [1, 128, 64]: grid dim 0 moves M * DV elements, dim 1 128 rows.
  EXPECT_EQ(n->stores[0].base_coef, (std::array<int64_t, 3>{M * DV, 128 * DV, 0}));
  EXPECT_NE(n->stores[0].statements.back().find("r[0]"), std::string::npos);

  auto s = match_attention(build(Variant::Partials), t, true, true);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->stores.size(), 2u);
  EXPECT_FALSE(s->stores[0].row);
  EXPECT_EQ(s->stores[0].result, "o");
  EXPECT_EQ(s->stores[0].dtype, DType::F32);
  EXPECT_TRUE(s->stores[1].row);
  EXPECT_EQ(s->stores[1].result, "r[0]");
  // OP [4, H, M, DV]: the split (grid dim 2) is the leading dim.
  EXPECT_EQ(s->stores[0].base_coef, (std::array<int64_t, 3>{M * DV, 128 * DV, H * M * DV}));
  EXPECT_EQ(s->stores[1].base_coef, (std::array<int64_t, 3>{M, 128, H * M}));

  auto m = match_attention(build(Variant::Mean), t, true, true);
  ASSERT_TRUE(m);
  EXPECT_NE(m->feeds[0].find("0.015625"), std::string::npos) << m->feeds[0];  // 1 / 64 keys
}

TEST(Attention, RejectsEverythingElse) {
  const Target& t = target_for(Arch::Sm90a);
  EXPECT_FALSE(match_attention(build(Variant::Normalized), target_for(Arch::Sm80), true, true));
  EXPECT_FALSE(match_attention(build(Variant::Normalized), t, false, false));  // P may not round
  EXPECT_FALSE(match_attention(build(Variant::SavesP), t, true, true));
  EXPECT_FALSE(match_attention(build(Variant::MaxRows), t, true, true));
  EXPECT_FALSE(match_attention(build(Variant::Mask), t, true, true));
  EXPECT_FALSE(match_attention(build(Variant::Normalized, 32), t, true, true));       // mt % 64
  EXPECT_FALSE(match_attention(build(Variant::Normalized, 128, 32), t, true, true));  // D % 64
  // 32-key iterations are fine: the block's 1024 keys are walked in 64-key chunks.
  EXPECT_TRUE(match_attention(build(Variant::Normalized, 128, 64, 32), t, true, true));
}

// The online (max-subtracted) form is chosen exactly where the matcher can prove it exact: P and
// every row feed k exp(a s) with one a > 0, every saved value of degree 0 in (O, L).
TEST(Attention, OnlineFormWhereItIsExact) {
  const Target& t = target_for(Arch::Sm90a);
  struct Case {
    Variant v;
    bool online;
    double a;
  };
  for (Case c :
       {Case{Variant::Normalized, true, 1.0}, Case{Variant::KMajor, true, 1.0},
        Case{Variant::Mean, true, 1.0}, Case{Variant::NoLoop, false, 0},
        Case{Variant::Scaled, true, 0.125}, Case{Variant::PlusOne, true, 1.0},  // NoLoop: partials
        Case{Variant::Partials, false, 0}, Case{Variant::NegScaled, false, 0},
        Case{Variant::MixedScale, false, 0}, Case{Variant::PlusL, false, 0}}) {
    const int64_t mt = c.v == Variant::NoLoop ? 64 : 128;
    auto p = match_attention(build(c.v, mt), t, true, true);
    ASSERT_TRUE(p) << static_cast<int>(c.v);
    EXPECT_EQ(p->online, c.online) << static_cast<int>(c.v);
    if (c.online) {
      EXPECT_EQ(p->exp_scale, c.a) << static_cast<int>(c.v);
      EXPECT_EQ(p->p_coef, 1.0);
      // A mean's feed is scaled by 1 / (keys per tile).
      EXPECT_EQ(p->feed_coef, std::vector<double>{c.v == Variant::Mean ? 1.0 / 64 : 1.0});
    }
    EXPECT_GE(p->pv_op, 0);
    EXPECT_EQ(build(c.v, mt).ops[p->pv_op].kind, OpKind::MatMul);
  }
}

KernelGraph graph_of(Variant v, int64_t n = N) {
  KernelGraphBuilder kb("attn", "", Arch::Sm90a);
  int q = kb.input("Q", {H, M, D}, DType::F16);
  int k = kb.input("K", v == Variant::KMajor ? Shape{H, n, D} : Shape{H, D, n}, DType::F16);
  int vv = kb.input("V", {H, n, DV}, DType::F16);
  int mask = kb.input("Mask", {H, M, n}, DType::F16);
  auto bg = std::make_shared<const BlockGraph>(build(v, 128, D, 64, n));
  auto outs = kb.graph_defined(bg, {q, k, vv, mask}, "k");
  for (int o : outs) kb.output(o);
  return std::move(kb).finish();
}

TEST(Attention, PlannerAndEmitterUseItWhereRoundingPIsAllowed) {
  KernelGraph g = graph_of(Variant::Normalized);
  Schedule s = plan_schedule(g, target_for(Arch::Sm90a));
  const AttentionKernel* ak = s.kernels[0].as<AttentionKernel>();
  ASSERT_TRUE(ak);
  // Two 64-row tiles per block, 16 tiles: each tile's 16 key chunks split over a cluster of 4
  // CTAs (8 would leave 2 chunks per CTA) -> 64 CTAs of one consumer (4 chunks each is too short
  // a chain to split again), two of them per SM where they fit.
  EXPECT_EQ(ak->cluster, 4);
  EXPECT_EQ(ak->key_split, 1);
  EXPECT_EQ(s.kernels[0].grid, H * (M / 128) * 2 * 4);
  std::string cu = emit_cuda(g);
  EXPECT_NE(cu.find("kiln::rt::attn_launch<Cfg>"), std::string::npos);
  EXPECT_NE(cu.find("static constexpr bool kOnline = true;"), std::string::npos);
  EXPECT_NE(cu.find("true, true, 2, 1, 4>"), std::string::npos);  // min blocks, splits, cluster
  // O / L + L is not scale-free: no online form, so no cluster split.
  const AttentionKernel* pk = plan_schedule(graph_of(Variant::PlusL), target_for(Arch::Sm90a))
                                  .kernels[0]
                                  .as<AttentionKernel>();
  ASSERT_TRUE(pk);
  EXPECT_EQ(pk->cluster, 1);
  // Nor an in-CTA key split (the runtime combines online partials only; H100: half the row sums).
  EXPECT_EQ(pk->key_split, 1);
  EXPECT_NE(cu.find("AttnCfg<__half, 1, 64, 64, 64,"), std::string::npos);
  // Without lowerings (the simulator), on sm_80, and with an f32 output: the generic kernel.
  EXPECT_FALSE(plan_schedule(g, target_for(Arch::Sm90a), PlanOptions{false})
                   .kernels[0]
                   .as<AttentionKernel>());
  EXPECT_FALSE(plan_schedule(g, target_for(Arch::Sm80)).kernels[0].as<AttentionKernel>());
  KernelGraph g32 = graph_of(Variant::F32Out);
  EXPECT_FALSE(plan_schedule(g32, target_for(Arch::Sm90a)).kernels[0].as<AttentionKernel>());
}

// Two consumers split a CTA's chunks only where the chain is long enough (5 chunks per CTA or
// more under a cluster, 16 without; the H100 measurements are in the planner): 16 chunks over
// clusters of 4 leave 4 per CTA, 256 leave 64.
TEST(Attention, TwoConsumersSplitOnlyLongChains) {
  for (int64_t n : {int64_t(1024), int64_t(16384)}) {
    const AttentionKernel* ak =
        plan_schedule(graph_of(Variant::Normalized, n), target_for(Arch::Sm90a))
            .kernels[0]
            .as<AttentionKernel>();
    ASSERT_TRUE(ak);
    EXPECT_EQ(ak->cluster, 4) << n;
    EXPECT_EQ(ak->key_split, n == 16384 ? 2 : 1) << n;
  }
}

// A key count the cluster does not divide (17 chunks of 64): the CTAs take shares of 4 and 5
// chunks, so the cluster still fills the SMs (it used to stay at 1: 16 CTAs walking 17 chunks).
TEST(Attention, ClusterSplitsAChunkCountItDoesNotDivide) {
  KernelGraph g = graph_of(Variant::Normalized, 17 * 64);
  const AttentionKernel* ak =
      plan_schedule(g, target_for(Arch::Sm90a)).kernels[0].as<AttentionKernel>();
  ASSERT_TRUE(ak);
  EXPECT_EQ(ak->cluster, 4);  // 17 / 4 >= 4 chunks each; 8 would leave 2
  std::string cu = emit_cuda(g);
  EXPECT_NE(cu.find("true, true, 2, 1, 4>"), std::string::npos);
  EXPECT_NE(cu.find(", 17, f, stream, 64);"), std::string::npos);  // the tile's chunks, not a share
  // Full chunks: the unmasked kernel (in the generated code; the runtime text above it has
  // other templates ending so).
  const size_t gen = cu.find("\nnamespace kiln_gen_");
  ASSERT_NE(gen, std::string::npos);
  EXPECT_EQ(cu.find(", true>;", gen), std::string::npos);
}

// Keys per block not a multiple of 64 (3000 = 25 tiles of 120): the online chain runs 47 chunks,
// the last with 56 keys (the rest masked); a non-online chain is not lowered (its f could not map a
// masked score to 0).
TEST(Attention, AKeyCountNotAMultipleOf64MasksTheLastChunk) {
  auto graph = [&](Variant v) {
    KernelGraphBuilder b("attn3000", "", Arch::Sm90a);
    int q = b.input("Q", {H, M, D}, DType::F16);
    int k = b.input("K", {H, D, 3000}, DType::F16);
    int vv = b.input("V", {H, 3000, DV}, DType::F16);
    int mask = b.input("Mask", {H, M, 3000}, DType::F16);
    auto bg = std::make_shared<const BlockGraph>(build(v, 128, D, 120, 3000));
    for (int o : b.graph_defined(bg, {q, k, vv, mask}, "k")) b.output(o);
    return std::move(b).finish();
  };
  KernelGraph g = graph(Variant::Normalized);
  const AttentionKernel* ak =
      plan_schedule(g, target_for(Arch::Sm90a)).kernels[0].as<AttentionKernel>();
  ASSERT_TRUE(ak);
  EXPECT_TRUE(ak->a.online);
  EXPECT_EQ(ak->a.keys, 3000);
  std::string cu = emit_cuda(g);
  EXPECT_NE(cu.find(", 47, f, stream, 56);"), std::string::npos);
  // The masked kernel, only here (in the generated code, after the runtime text).
  EXPECT_NE(cu.find(", true>;", cu.find("\nnamespace kiln_gen_")), std::string::npos);
  EXPECT_FALSE(plan_schedule(graph(Variant::PlusL), target_for(Arch::Sm90a))
                   .kernels[0]
                   .as<AttentionKernel>());
}

// Attention over row-normed operands: Q and/or K (K stored keys x D, read through a transpose)
// as x / sqrt(sum(x^2) / D + eps) [* c] of the input tile, in the loop for K.
enum class Norm {
  QK,         // both normed, K-major K
  KOnly,      // only the keys
  QScaled,    // Q's norm times 0.125 (a scale the algebra moves onto the smaller side)
  QWeighted,  // Q's norm times a weight per column (rms_norm's): Q's columns weighted first
  QTileMul,   // Q's norm times a [rows, D] tile of another input: not a norm, not lowered
  KNMajor,    // K stored D x keys, its tile normed over its last dim (the keys): not lowered
};

BlockGraph build_normed(Norm v) {
  const bool km = v != Norm::KNMajor;
  std::vector<TensorDesc> ins = {
      {"Q", {H, M, D}, DType::F16},
      km ? TensorDesc{"K", {H, N, D}, DType::F16} : TensorDesc{"K", {H, D, N}, DType::F16},
      {"V", {H, N, DV}, DType::F16},
      {"G", {D}, DType::F16},
      {"W", {H, M, D}, DType::F16}};
  BlockGraphBuilder b({H, M / 64, 1}, 128, {N / 64}, ins);
  auto constant = [&](double c) {
    Attrs a;
    a.value = c;
    return b.op(OpKind::Constant, {}, a);
  };
  auto norm = [&](int x, int n) {
    Attrs rows;
    rows.dim = 2;
    rows.keepdim = true;
    const int ss = b.op(OpKind::Sum, {b.op(OpKind::Square, {x})}, rows);
    const int ms = b.op(OpKind::Mul, {ss, constant(1.0 / double(n))});
    return b.op(OpKind::Div, {x, b.op(OpKind::Sqrt, {b.op(OpKind::Add, {ms, constant(1e-6)})})});
  };
  int q = b.input(0, {0, 1, -1}, {-1});
  if (v != Norm::KOnly) q = norm(q, D);
  if (v == Norm::QScaled) q = b.op(OpKind::Mul, {q, constant(0.125)});
  if (v == Norm::QWeighted) q = b.op(OpKind::Mul, {q, b.input(3, {-1, -1, -1}, {-1})});
  if (v == Norm::QTileMul) q = b.op(OpKind::Mul, {q, b.input(4, {0, 1, -1}, {-1})});
  int k = km ? b.input(1, {0, -1, 1}, {1}) : b.input(1, {0, -1, 2}, {2});
  k = norm(k, km ? D : 64);
  if (km) k = b.op(OpKind::Transpose, {k});
  int vv = b.input(2, {0, -1, 1}, {1});
  int p = b.op(OpKind::Exp, {b.op(OpKind::MatMul, {q, k})});
  Attrs rows;
  rows.dim = 2;
  int l = b.op(OpKind::Sum, {p}, rows);
  int acc_o = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {p, vv})});
  int acc_l = b.op(OpKind::AccumSum, {l});
  b.output(b.op(OpKind::Div, {acc_o, acc_l}), {0, 1, -1}, {-1}, DType::F16, "O");
  return std::move(b).finish(target_for(Arch::Sm90a));
}

// A row norm of Q or of K-major keys is a prologue of the chain: the plan keeps the factor as a
// function of the row's sum of squares (any scale multiplied on after the norm included) and
// the runtime applies it to S's rows and columns; a weight per column (rms_norm's) is kept apart
// (the runtime weights Q's columns); a product with another tile, or a norm over the keys (an
// N-major K tile), is refused, so the generic kernels keep those graphs.
TEST(Attention, RowNormsOfQAndKeysArePrologues) {
  const Target t = target_for(Arch::Sm90a);
  std::optional<AttentionPlan> qk = match_attention(build_normed(Norm::QK), t, true, true);
  ASSERT_TRUE(qk);
  EXPECT_TRUE(qk->q_norm.on);
  EXPECT_TRUE(qk->k_norm.on);
  EXPECT_FALSE(qk->k_nmajor);
  EXPECT_TRUE(qk->online);
  // X / sqrt(..) is X times the factor 1 / sqrt(..): the division is applied to the factor.
  bool reciprocal = false;
  for (const std::string& st : qk->q_norm.statements)
    reciprocal = reciprocal || st.find("(1.0f / ") != std::string::npos;
  EXPECT_TRUE(reciprocal);
  std::optional<AttentionPlan> ko = match_attention(build_normed(Norm::KOnly), t, true, true);
  ASSERT_TRUE(ko);
  EXPECT_FALSE(ko->q_norm.on);
  EXPECT_TRUE(ko->k_norm.on);
  std::optional<AttentionPlan> qs = match_attention(build_normed(Norm::QScaled), t, true, true);
  ASSERT_TRUE(qs);
  EXPECT_TRUE(qs->q_norm.on);
  bool scaled = false;
  for (const std::string& st : qs->q_norm.statements)
    scaled = scaled || st.find("0.125f") != std::string::npos;
  EXPECT_TRUE(scaled);
  EXPECT_EQ(qk->q_norm.weight_io, -1);
  std::optional<AttentionPlan> qw = match_attention(build_normed(Norm::QWeighted), t, true, true);
  ASSERT_TRUE(qw);
  EXPECT_TRUE(qw->q_norm.on);
  EXPECT_EQ(qw->q_norm.weight_io, 3);  // G
  EXPECT_FALSE(match_attention(build_normed(Norm::QTileMul), t, true, true));
  EXPECT_FALSE(match_attention(build_normed(Norm::KNMajor), t, true, true));

  // Planned and emitted: a normalizer warpgroup (one more than the consumers), the factors'
  // shared memory and the functor's members.
  KernelGraphBuilder kb("attn_norm", "", Arch::Sm90a);
  int q = kb.input("Q", {H, M, D}, DType::F16);
  int k = kb.input("K", {H, N, D}, DType::F16);
  int vv = kb.input("V", {H, N, DV}, DType::F16);
  int g = kb.input("G", {D}, DType::F16);
  int wt = kb.input("W", {H, M, D}, DType::F16);
  auto bg = std::make_shared<const BlockGraph>(build_normed(Norm::QK));
  for (int o : kb.graph_defined(bg, {q, k, vv, g, wt}, "k")) kb.output(o);
  KernelGraph kg = std::move(kb).finish();
  Schedule s = plan_schedule(kg, t);
  const AttentionKernel* ak = s.kernels[0].as<AttentionKernel>();
  ASSERT_TRUE(ak);
  EXPECT_EQ(s.kernels[0].threads, 128 * (2 + ak->key_split));
  EXPECT_EQ(ak->min_blocks, 1);
  const int64_t stage = (D + DV) * 64 * 2;
  int64_t smem = 64 * D * 2 + ak->key_split * ak->stages * stage +
                 (64 + ak->key_split * ak->stages * 64 + D) * 4 + 1024;
  if (ak->cluster > 1 &&
      smem + ak->cluster * ((DV / 8 + ak->cluster - 1) / ak->cluster + 1) * 2048 <=
          t.smem_per_block)
    smem += ak->cluster * ((DV / 8 + ak->cluster - 1) / ak->cluster + 1) * 2048;
  EXPECT_EQ(s.kernels[0].smem, smem);
  std::string cu = emit_cuda(kg);
  EXPECT_NE(cu.find("static constexpr bool kNormA = true;"), std::string::npos);
  EXPECT_NE(cu.find("static constexpr bool kNormK = true;"), std::string::npos);
  EXPECT_NE(cu.find("float norm_k(float ss) const"), std::string::npos);
  EXPECT_NE(cu.find(", false, true>;"), std::string::npos);  // unmasked, NORM
  EXPECT_NE(cu.find("static constexpr bool kColWeights = false;"), std::string::npos);
}

// The hand-written attention example is lowered (it is what the nvcc test compiles).
TEST(Attention, GqaExampleIsLowered) {
  KernelGraph g = load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/gqa.mugraph.json");
  Schedule s = plan_schedule(g, target_for(Arch::Sm90a));
  ASSERT_TRUE(s.kernels[0].as<AttentionKernel>());
  EXPECT_FALSE(s.kernels[1].as<AttentionKernel>());  // the combine kernel is not a chain
}

}  // namespace
}  // namespace kiln
