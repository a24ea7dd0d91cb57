// match_contraction recognizes exactly the block graphs that compute epilogue(A·B_0, A·B_1,
// E...) per output element, and nothing that computes anything else.
#include <gtest/gtest.h>

#include <filesystem>

#include <fmt/format.h>

#include "kiln/codegen/emit.h"
#include "kiln/codegen/lowerings/contraction.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/json_io.h"
#include "sim_runner.h"

namespace kiln {
namespace {

const int64_t M = 256, N = 256, K = 128;

// grid [M/128, N/64] (rows, cols), loop [K/32]; out = silu(A·B0) * (A·B1) + E when two weights
// (A·B0 when one); the last two variants break one condition each (a reduction in the epilogue,
// B's columns tiled by the rows' grid dim).
enum class Variant { Plain, Dual, WithE, ReduceEpilogue, SwappedGrid };

BlockGraph build(Variant v, DType dt = DType::F16) {
  std::vector<TensorDesc> ins = {
      {"A", {M, K}, dt}, {"B0", {K, N}, dt}, {"B1", {K, N}, dt}, {"E", {M, N}, DType::F32}};
  BlockGraphBuilder b({M / 128, N / 64}, 256, {K / 32}, ins);
  int a = b.input(0, {0, -1}, {1});
  int b0 = v == Variant::SwappedGrid ? b.input(1, {1, -1}, {0}) : b.input(1, {-1, 1}, {0});
  int mm0 = b.op(OpKind::MatMul, {a, b0});
  int acc0 = b.op(OpKind::AccumSum, {mm0});
  int value = acc0;
  if (v == Variant::Dual || v == Variant::WithE || v == Variant::ReduceEpilogue) {
    int b1 = b.input(2, {-1, 1}, {0});
    int mm1 = b.op(OpKind::MatMul, {a, b1});
    int acc1 = b.op(OpKind::AccumSum, {mm1});
    int s = b.op(OpKind::Silu, {acc0});
    value = b.op(OpKind::Mul, {s, acc1});
    if (v == Variant::WithE) {
      int e = b.input(3, {0, 1}, {-1});
      value = b.op(OpKind::Add, {value, e});
    }
    if (v == Variant::ReduceEpilogue) {
      Attrs at;
      at.dim = 1;
      value = b.op(OpKind::Sum, {value}, at);
    }
  }
  b.output(value, {0, 1}, {-1}, DType::F16, "O");
  return std::move(b).finish(target_for(Arch::Sm90a));
}

TEST(Contraction, RecognizesOneAndTwoWeightsAndEpilogueOperands) {
  const Target& t = target_for(Arch::Sm90a);
  auto p1 = match_contraction(build(Variant::Plain), t);
  ASSERT_TRUE(p1);
  EXPECT_EQ(p1->b.size(), 1u);
  EXPECT_EQ(p1->result, "v0");
  EXPECT_EQ(p1->m, M);
  EXPECT_EQ(p1->n, N);
  EXPECT_EQ(p1->k, K);

  auto p2 = match_contraction(build(Variant::Dual), t);
  ASSERT_TRUE(p2);
  EXPECT_EQ(p2->b, (std::vector<int>{1, 2}));
  EXPECT_EQ(p2->epi_statements.size(), 2u);  // silu, mul

  auto p3 = match_contraction(build(Variant::WithE), t);
  ASSERT_TRUE(p3);
  EXPECT_EQ(p3->epi_inputs, std::vector<int>{3});
  EXPECT_NE(p3->epi_statements.back().find("e0"), std::string::npos);
}

TEST(Contraction, RejectsEverythingElse) {
  EXPECT_FALSE(match_contraction(build(Variant::Plain), target_for(Arch::Sm80)));
  const Target& t = target_for(Arch::Sm90a);
  EXPECT_FALSE(match_contraction(build(Variant::ReduceEpilogue), t));
  EXPECT_FALSE(match_contraction(build(Variant::SwappedGrid), t));
  EXPECT_FALSE(match_contraction(build(Variant::Dual, DType::F32), t));  // f32: one weight only
}

// f32 operands past GEMV rows run the three-pass tf32 GEMM with the epilogue functor (split-K
// where the tiles do not fill the SMs, the pairs and partials in the kernel's workspace).
TEST(Contraction, F32OperandsRunTheTf32x3Gemm) {
  const Target& t = target_for(Arch::Sm90a);
  auto p = match_contraction(build(Variant::Plain, DType::F32), t);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->ab, DType::F32);
  // 2 x 2 tiles of 128 on 132 SMs: splits for 33 units, capped by 3 * 128 / 32 / 4 = 3 (fewer
  // than 32 k-tiles: splits of at least 4).
  EXPECT_EQ(p->f32x3_splits, 3);
  KernelGraphBuilder kb("contract32", "", Arch::Sm90a);
  int a = kb.input("A", {M, K}, DType::F32);
  int b0 = kb.input("B0", {K, N}, DType::F32);
  int b1 = kb.input("B1", {K, N}, DType::F32);
  int e = kb.input("E", {M, N}, DType::F32);
  auto bg = std::make_shared<const BlockGraph>(build(Variant::Plain, DType::F32));
  auto outs = kb.graph_defined(bg, {a, b0, b1, e}, "k");
  kb.output(outs[0]);
  KernelGraph g = std::move(kb).finish();
  Schedule s = plan_schedule(g, t);
  ASSERT_TRUE(s.kernels[0].as<ContractionKernel>());
  const int64_t kpad = 128;
  EXPECT_EQ(s.kernels[0].scratch_bytes, (M + N) * 2 * kpad * 4 + 3 * M * N * 4);  // + partials
  EXPECT_NE(emit_cuda(g).find(
                fmt::format("kiln::rt::gemm_f32x3_launch(t0, {}, false, t1, {}, false, ", K, N)),
            std::string::npos);
}

TEST(Contraction, PlannerAndEmitterUseIt) {
  KernelGraphBuilder kb("contract", "", Arch::Sm90a);
  int a = kb.input("A", {M, K}, DType::F16);
  int b0 = kb.input("B0", {K, N}, DType::F16);
  int b1 = kb.input("B1", {K, N}, DType::F16);
  int e = kb.input("E", {M, N}, DType::F32);
  auto bg = std::make_shared<const BlockGraph>(build(Variant::WithE));
  auto outs = kb.graph_defined(bg, {a, b0, b1, e}, "k");
  kb.output(outs[0]);
  KernelGraph g = std::move(kb).finish();
  Schedule s = plan_schedule(g, target_for(Arch::Sm90a));
  ASSERT_TRUE(s.kernels[0].as<ContractionKernel>());
  std::string cu = emit_cuda(g);
  EXPECT_NE(cu.find("WgmmaGemmWS<__half, 2, 4>"), std::string::npos);
  EXPECT_NE(cu.find("kiln::rt::Silu"), std::string::npos);
  // On sm_80 the same graph takes the generic block-graph path.
  Schedule s80 = plan_schedule(g, target_for(Arch::Sm80));
  EXPECT_FALSE(s80.kernels[0].as<ContractionKernel>());
}

// Decode rows (M <= 32) with weights the TMA GEMV streams (>= 8 MB): the plan says so and its
// configuration is the planner's GEMV rule for that many weights; M between 33 and 127, small
// weights, or sm_80 are not lowered.
BlockGraph gated(int64_t m, int64_t n, int64_t k, int64_t grid_n) {
  std::vector<TensorDesc> ins = {
      {"X", {m, k}, DType::F16}, {"W0", {k, n}, DType::F16}, {"W1", {k, n}, DType::F16}};
  BlockGraphBuilder b({grid_n}, 128, {k / 256}, ins);
  int x = b.input(0, {-1}, {1});
  int a0 = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, b.input(1, {1}, {0})})});
  int a1 = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, b.input(2, {1}, {0})})});
  int o = b.op(OpKind::Mul, {b.op(OpKind::Silu, {a0}), a1});
  b.output(o, {1}, {-1}, DType::F16, "O");
  return std::move(b).finish(target_for(Arch::Sm90a));
}

TEST(Contraction, DecodeRowsRunAsTheTmaGemv) {
  const Target& t = target_for(Arch::Sm90a);
  for (int64_t m : {1, 8, 16, 32}) {
    auto p = match_contraction(gated(m, 4096, 4096, 128), t);
    ASSERT_TRUE(p) << m;
    ASSERT_TRUE(p->gemv) << m;
    EXPECT_EQ(p->b.size(), 2u);
    auto rule = gemv_tma_shape(m, 4096, 4096, 2, t);
    ASSERT_TRUE(rule);
    EXPECT_EQ(p->gemv->grid, rule->grid);
    EXPECT_EQ(p->gemv->bk * p->gemv->bn * 2, 16384);  // two weights share the 32 KB stage
  }
  EXPECT_FALSE(match_contraction(gated(64, 4096, 4096, 128), t));  // neither GEMV nor tiles
  EXPECT_FALSE(match_contraction(gated(1, 1024, 1024, 32), t));    // 4 MB of weights
  EXPECT_FALSE(match_contraction(gated(1, 4096, 4096, 128), target_for(Arch::Sm80)));

  KernelGraphBuilder kb("gm", "", Arch::Sm90a);
  int x = kb.input("X", {8, 4096}, DType::F16);
  int w0 = kb.input("W0", {4096, 4096}, DType::F16);
  int w1 = kb.input("W1", {4096, 4096}, DType::F16);
  auto bg = std::make_shared<const BlockGraph>(gated(8, 4096, 4096, 128));
  kb.output(kb.graph_defined(bg, {x, w0, w1}, "k")[0]);
  KernelGraph g = std::move(kb).finish();
  Schedule s = plan_schedule(g, t);
  ASSERT_TRUE(s.kernels[0].as<ContractionKernel>());
  EXPECT_EQ(s.kernels[0].grid, s.kernels[0].as<ContractionKernel>()->c.gemv->grid);
  std::string cu = emit_cuda(g);
  EXPECT_NE(cu.find("gemv_tma_launch<__half, __half, 1, 2, "), std::string::npos);
  EXPECT_NE(cu.find("static constexpr bool kRowSumSq = false;"), std::string::npos);
}

// The hand-written large-M example is lowered (it is what the nvcc test compiles).
TEST(Contraction, GatedMlpM4096ExampleIsLowered) {
  KernelGraph g =
      load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/gated_mlp_m4096.mugraph.json");
  auto p = match_contraction(*g.ops[0].block, target_for(Arch::Sm90a));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->b.size(), 2u);
}

// nn.Linear's layout and epilogue operands of any broadcast: B_j as the transpose of an [N, K]
// tile (read K-major in place), a bias [N] and a per-row scale [M, 1]; the emitted functor reads
// each at its own strides. One K-major and one N-major weight together are not a contraction (the
// runtime kernels take one layout).
BlockGraph linear(bool dual_mixed) {
  std::vector<TensorDesc> ins = {{"X", {M, K}, DType::BF16},
                                 {"W", {N, K}, DType::BF16},
                                 {"b", {N}, DType::BF16},
                                 {"r", {M, 1}, DType::F32},
                                 {"W1", {K, N}, DType::BF16}};
  BlockGraphBuilder b({M / 128, N / 64}, 256, {K / 32}, ins);
  int x = b.input(0, {0, -1}, {1});
  int w = b.input(1, {-1, 0}, {1});
  int acc = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, b.op(OpKind::Transpose, {w})})});
  int bias = b.input(2, {-1, 0}, {-1});
  int rs = b.input(3, {0, -1}, {-1});
  int v = b.op(OpKind::Mul, {b.op(OpKind::Silu, {b.op(OpKind::Add, {acc, bias})}), rs});
  if (dual_mixed) {
    int w1 = b.input(4, {-1, 1}, {0});
    v = b.op(OpKind::Mul, {v, b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, w1})})});
  }
  b.output(v, {0, 1}, {-1}, DType::BF16, "Y");
  return std::move(b).finish(target_for(Arch::Sm90a));
}

TEST(Contraction, TransposedWeightsAndBroadcastEpilogueOperands) {
  const Target& t = target_for(Arch::Sm90a);
  auto p = match_contraction(linear(false), t);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->b_kmajor);
  EXPECT_EQ(p->b, std::vector<int>{1});
  EXPECT_EQ(p->k, K);
  EXPECT_EQ(p->epi_inputs, (std::vector<int>{2, 3}));
  ASSERT_EQ(p->epi_strides.size(), 2u);
  EXPECT_EQ(p->epi_strides[0], (std::array<int64_t, 2>{0, 1}));  // bias [N]
  EXPECT_EQ(p->epi_strides[1], (std::array<int64_t, 2>{1, 0}));  // per-row [M, 1]
  EXPECT_FALSE(match_contraction(linear(true), t));

  KernelGraphBuilder kb("lin", "", Arch::Sm90a);
  int x = kb.input("X", {M, K}, DType::BF16);
  int w = kb.input("W", {N, K}, DType::BF16);
  int bias = kb.input("b", {N}, DType::BF16);
  int r = kb.input("r", {M, 1}, DType::F32);
  int w1 = kb.input("W1", {K, N}, DType::BF16);
  auto bg = std::make_shared<const BlockGraph>(linear(false));
  kb.output(kb.graph_defined(bg, {x, w, bias, r, w1}, "k")[0]);
  KernelGraph g = std::move(kb).finish();
  ASSERT_TRUE(plan_schedule(g, t).kernels[0].as<ContractionKernel>());
  const std::string cu = emit_cuda(g);
  EXPECT_NE(cu.find("WgmmaGemmWS<__nv_bfloat16, 1, 6, 1, true, true>"), std::string::npos);
  EXPECT_NE(cu.find("(t0, 128, t1, t1, 128, "), std::string::npos);  // ldb = K
  EXPECT_NE(cu.find("e0_ptr[n]"), std::string::npos);
  EXPECT_NE(cu.find("e1_ptr[int64_t(m) * 1]"), std::string::npos);
}

// Decode rows with one K-major weight that the TMA GEMV does not take (N not a multiple of 8, or
// few blocks of a small weight) run as the K-major register GEMV with the same epilogue functor
// (bias, activation, per-row scale); its result on the CPU simulator matches the spec's.
BlockGraph small_linear(int64_t m, int64_t n, int64_t k, int64_t tn) {
  std::vector<TensorDesc> ins = {{"X", {m, k}, DType::BF16},
                                 {"W", {n, k}, DType::BF16},
                                 {"b", {n}, DType::BF16},
                                 {"r", {m, 1}, DType::F32}};
  BlockGraphBuilder b({n / tn}, 128, {k / 64}, ins);
  int x = b.input(0, {-1}, {1});
  int w = b.input(1, {0}, {1});
  int acc = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, b.op(OpKind::Transpose, {w})})});
  int bias = b.input(2, {0}, {-1});
  int rs = b.input(3, {-1}, {-1});
  int v = b.op(OpKind::Mul, {b.op(OpKind::Tanh, {b.op(OpKind::Add, {acc, bias})}), rs});
  b.output(v, {1}, {-1}, DType::BF16, "Y");
  return std::move(b).finish(target_for(Arch::Sm90a));
}

TEST(Contraction, SmallKmajorWeightsRunAsTheRegisterGemv) {
  const Target& t = target_for(Arch::Sm90a);
  struct Case {
    int64_t m, n, k, tn, splits;
  };
  // N 1020: 64 blocks of 16 columns, 2 splits (K 640: at least 256 rows each); N 512 K 4096 (4 MB
  // in 16 TMA blocks of 256 KB): 32 blocks, 8 splits.
  for (const Case& c : {Case{5, 1020, 640, 60, 2}, Case{3, 512, 4096, 64, 8}}) {
    SCOPED_TRACE(fmt::format("M {} N {} K {}", c.m, c.n, c.k));
    auto bg = std::make_shared<const BlockGraph>(small_linear(c.m, c.n, c.k, c.tn));
    auto p = match_contraction(*bg, t);
    ASSERT_TRUE(p);
    EXPECT_TRUE(p->b_kmajor);
    EXPECT_FALSE(p->gemv);
    ASSERT_TRUE(p->gemv_kmajor);
    EXPECT_EQ(p->gemv_kmajor->splits, c.splits);

    KernelGraphBuilder kb("lin", "", Arch::Sm90a);
    int x = kb.input("X", {c.m, c.k}, DType::BF16);
    int w = kb.input("W", {c.n, c.k}, DType::BF16);
    int bias = kb.input("b", {c.n}, DType::BF16);
    int r = kb.input("r", {c.m, 1}, DType::F32);
    kb.output(kb.graph_defined(bg, {x, w, bias, r}, "k")[0]);
    KernelGraph g = std::move(kb).finish();
    const Schedule s = plan_schedule(g, t);
    ASSERT_TRUE(s.kernels[0].as<ContractionKernel>());
    EXPECT_EQ(s.kernels[0].grid, (c.n + 15) / 16 * c.splits);
    const std::string cu = emit_cuda(g);
    EXPECT_NE(cu.find(fmt::format("kiln::rt::gemv_kmajor_launch<__nv_bfloat16, __nv_bfloat16, 1, "
                                  "1, 8, 4, 8, Epi_k0_k>(t0, {0}, t1, nullptr, {0}, ",
                                  c.k)),
              std::string::npos);

    KernelGraphBuilder sb("lin", "", Arch::Sm90a);
    int sx = sb.input("X", {c.m, c.k}, DType::BF16);
    int sw = sb.input("W", {c.n, c.k}, DType::BF16);
    int sbias = sb.input("b", {c.n}, DType::BF16);
    int sr = sb.input("r", {c.m, 1}, DType::F32);
    int h = sb.op(OpKind::MatMul, {sx, sb.op(OpKind::Transpose, {sw}, {}, "Wt")}, {}, "H");
    int y = sb.op(OpKind::Mul,
                  {sb.op(OpKind::Tanh, {sb.op(OpKind::Add, {h, sbias}, {}, "Hb")}, {}, "T"), sr},
                  {}, "Y");
    sb.output(y);
    EXPECT_EQ(testing::check_in_simulator(g, std::move(sb).finish(), 5, "kmajor_contraction",
                                          Arch::Sm90a, Precision::F32, /*lowerings=*/true),
              "");
  }
}

// A gated pair of K-major weights under 8 MB, silu(X W0^T) * (X W1^T) with N not a multiple of 8
// (the TMA GEMV declines): the K-major register GEMV streams both weights side by side, and its
// result on the CPU simulator matches the spec's.
TEST(Contraction, SmallKmajorGatedPairRunsAsTheRegisterGemv) {
  const Target& t = target_for(Arch::Sm90a);
  const int64_t m = 4, n = 1004, k = 512;
  std::vector<TensorDesc> ins = {
      {"X", {m, k}, DType::BF16}, {"W0", {n, k}, DType::BF16}, {"W1", {n, k}, DType::BF16}};
  BlockGraphBuilder b({n / 4}, 128, {k / 64}, ins);
  int x = b.input(0, {-1}, {1});
  auto product = [&](int io) {
    return b.op(OpKind::AccumSum,
                {b.op(OpKind::MatMul, {x, b.op(OpKind::Transpose, {b.input(io, {0}, {1})})})});
  };
  int a0 = product(1), a1 = product(2);
  b.output(b.op(OpKind::Mul, {b.op(OpKind::Silu, {a0}), a1}), {1}, {-1}, DType::BF16, "O");
  auto bg = std::make_shared<const BlockGraph>(std::move(b).finish(t));
  auto p = match_contraction(*bg, t);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->b.size(), 2u);
  EXPECT_FALSE(p->gemv);
  ASSERT_TRUE(p->gemv_kmajor);
  EXPECT_EQ(p->gemv_kmajor->nw, 2);

  KernelGraphBuilder kb("pair", "", Arch::Sm90a);
  int kx = kb.input("X", {m, k}, DType::BF16);
  int w0 = kb.input("W0", {n, k}, DType::BF16);
  int w1 = kb.input("W1", {n, k}, DType::BF16);
  kb.output(kb.graph_defined(bg, {kx, w0, w1}, "k")[0]);
  KernelGraph g = std::move(kb).finish();
  ASSERT_TRUE(plan_schedule(g, t).kernels[0].as<ContractionKernel>());
  const std::string cu = emit_cuda(g);
  EXPECT_NE(cu.find(fmt::format("kiln::rt::gemv_kmajor_launch<__nv_bfloat16, __nv_bfloat16, 1, 1, "
                                "8, 4, 8, Epi_k0_k, 2>(t0, {0}, t1, t2, {0}, ",
                                k)),
            std::string::npos);

  KernelGraphBuilder sb("pair", "", Arch::Sm90a);
  int sx = sb.input("X", {m, k}, DType::BF16);
  int s0 = sb.input("W0", {n, k}, DType::BF16);
  int s1 = sb.input("W1", {n, k}, DType::BF16);
  int g0 = sb.op(OpKind::MatMul, {sx, sb.op(OpKind::Transpose, {s0}, {}, "W0t")}, {}, "G");
  int u = sb.op(OpKind::MatMul, {sx, sb.op(OpKind::Transpose, {s1}, {}, "W1t")}, {}, "U");
  sb.output(sb.op(OpKind::Mul, {sb.op(OpKind::Silu, {g0}, {}, "S"), u}, {}, "O"));
  EXPECT_EQ(testing::check_in_simulator(g, std::move(sb).finish(), 5, "kmajor_pair", Arch::Sm90a,
                                        Precision::F32, /*lowerings=*/true),
            "");
}

// rms_norm(X) W with the scaling deferred: O = (X W) / sqrt(mean(X^2) + eps), the sum of squares
// accumulated beside the matmul in the block graph, runs as the TMA GEMV with its row-sum-of-
// squares warp (`rs` in the epilogue); the sum of squares of another input, or at GEMM sizes
// (no row sums there), does not match.
BlockGraph rms_gemv(int64_t m, bool other_input) {
  const int64_t k = 4096, n = 6144;
  std::vector<TensorDesc> ins = {
      {"X", {m, k}, DType::F16}, {"W", {k, n}, DType::F16}, {"Z", {m, k}, DType::F16}};
  BlockGraphBuilder b({n / 64}, 256, {k / 16}, ins);
  int x = b.input(0, {-1}, {1});
  int w = b.input(1, {1}, {0});
  int sq_src = other_input ? b.input(2, {-1}, {1}) : x;
  Attrs sd;
  sd.dim = 1;
  sd.keepdim = true;
  int ss = b.op(OpKind::AccumSum, {b.op(OpKind::Sum, {b.op(OpKind::Square, {sq_src})}, sd)});
  int acc = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, w})});
  Attrs c;
  c.value = 1.0 / double(k);
  int mean = b.op(OpKind::Mul, {ss, b.op(OpKind::Constant, {}, c)});
  int o = b.op(OpKind::Div, {acc, b.op(OpKind::Sqrt, {mean})});
  b.output(o, {1}, {-1}, DType::F16, "O");
  return std::move(b).finish(target_for(Arch::Sm90a));
}

TEST(Contraction, DeferredRmsNormRunsOnTheGemvRowSums) {
  const Target& t = target_for(Arch::Sm90a);
  auto p = match_contraction(rms_gemv(32, false), t);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->row_sumsq);
  ASSERT_TRUE(p->gemv);
  EXPECT_EQ(p->a, 0);
  EXPECT_EQ(p->b, std::vector<int>{1});
  EXPECT_FALSE(match_contraction(rms_gemv(32, true), t));
  EXPECT_FALSE(match_contraction(rms_gemv(128, false), t));

  KernelGraphBuilder kb("rms", "", Arch::Sm90a);
  int x = kb.input("X", {32, 4096}, DType::F16);
  int w = kb.input("W", {4096, 6144}, DType::F16);
  int z = kb.input("Z", {32, 4096}, DType::F16);
  auto bg = std::make_shared<const BlockGraph>(rms_gemv(32, false));
  kb.output(kb.graph_defined(bg, {x, w, z}, "k")[0]);
  KernelGraph g = std::move(kb).finish();
  const Schedule s = plan_schedule(g, t);
  ASSERT_TRUE(s.kernels[0].as<ContractionKernel>());
  EXPECT_EQ(s.kernels[0].threads, 192);
  const std::string cu = emit_cuda(g);
  EXPECT_NE(cu.find("static constexpr bool kRowSumSq = true;"), std::string::npos);
  EXPECT_NE(cu.find("rs"), std::string::npos);
}

// The same deferred rms_norm with a K-major weight the TMA GEMV does not take (N = 1020): the
// K-major register GEMV provides `rs` (its X loads), and the simulated result matches the spec's
// rms_norm(X) · W^T.
TEST(Contraction, DeferredRmsNormOnTheKmajorRegisterGemv) {
  const int64_t m = 7, k = 1024, n = 1020;
  std::vector<TensorDesc> ins = {{"X", {m, k}, DType::BF16}, {"W", {n, k}, DType::BF16}};
  BlockGraphBuilder b({n / 60}, 128, {k / 64}, ins);
  int x = b.input(0, {-1}, {1});
  int w = b.input(1, {0}, {1});
  Attrs sd;
  sd.dim = 1;
  sd.keepdim = true;
  int ss = b.op(OpKind::AccumSum, {b.op(OpKind::Sum, {b.op(OpKind::Square, {x})}, sd)});
  int acc = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, b.op(OpKind::Transpose, {w})})});
  Attrs c;
  c.value = 1.0 / double(k);
  Attrs ce;
  ce.value = 1e-5;
  int mean = b.op(OpKind::Add, {b.op(OpKind::Mul, {ss, b.op(OpKind::Constant, {}, c)}),
                                b.op(OpKind::Constant, {}, ce)});
  int o = b.op(OpKind::Div, {acc, b.op(OpKind::Sqrt, {mean})});
  b.output(o, {1}, {-1}, DType::BF16, "O");
  auto bg = std::make_shared<const BlockGraph>(std::move(b).finish(target_for(Arch::Sm90a)));
  auto p = match_contraction(*bg, target_for(Arch::Sm90a));
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->row_sumsq);
  EXPECT_TRUE(p->b_kmajor);
  ASSERT_TRUE(p->gemv_kmajor);

  KernelGraphBuilder kb("rmsk", "", Arch::Sm90a);
  int gx = kb.input("X", {m, k}, DType::BF16);
  int gw = kb.input("W", {n, k}, DType::BF16);
  kb.output(kb.graph_defined(bg, {gx, gw}, "k")[0]);
  KernelGraph g = std::move(kb).finish();
  EXPECT_NE(emit_cuda(g).find("static constexpr bool kRowSumSq = true;"), std::string::npos);

  KernelGraphBuilder sb("rmsk", "", Arch::Sm90a);
  int sx = sb.input("X", {m, k}, DType::BF16);
  int sw = sb.input("W", {n, k}, DType::BF16);
  Attrs e;
  e.eps = 1e-5;
  sb.output(sb.op(OpKind::MatMul,
                  {sb.op(OpKind::RmsNorm, {sx}, e, "N"), sb.op(OpKind::Transpose, {sw}, {}, "Wt")},
                  {}, "O"));
  EXPECT_EQ(testing::check_in_simulator(g, std::move(sb).finish(), 3, "kmajor_rms", Arch::Sm90a,
                                        Precision::F64, /*lowerings=*/true),
            "");
}

// A low-rank chain ((X L0) L1)[m, n] beside an optional full-rank weight W and a bias:
//   Y = X W + (X L0) L1 + bias   (has_w; else without X W)
// with L0 [K, R] or, ak, given as L0^T [R, K], L1 [R, N] or, bk, as L1^T [N, R], W [K, N] or, wk,
// as W^T [N, K]. Grid over N in tn-column blocks, loop over K in kt-row steps.
struct LowRankCase {
  int64_t m, n, k, r;
  bool has_w, ak, bk, wk;
  int64_t tn, kt;
  DType dt = DType::F16;
};

BlockGraph lowrank_block(const LowRankCase& c) {
  std::vector<TensorDesc> ins = {{"X", {c.m, c.k}, c.dt},
                                 {"L0", c.ak ? Shape{c.r, c.k} : Shape{c.k, c.r}, c.dt},
                                 {"L1", c.bk ? Shape{c.n, c.r} : Shape{c.r, c.n}, c.dt},
                                 {"W", c.wk ? Shape{c.n, c.k} : Shape{c.k, c.n}, c.dt},
                                 {"bias", {c.n}, c.dt}};
  BlockGraphBuilder b({c.n / c.tn}, 128, {c.k / c.kt}, ins);
  int x = b.input(0, {-1}, {1});
  int l0 = c.ak ? b.op(OpKind::Transpose, {b.input(1, {-1}, {1})}) : b.input(1, {-1}, {0});
  int l1 = c.bk ? b.op(OpKind::Transpose, {b.input(2, {0}, {-1})}) : b.input(2, {1}, {-1});
  int t = b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, l0})});
  int v = b.op(OpKind::MatMul, {t, l1});
  if (c.has_w) {
    int w = c.wk ? b.op(OpKind::Transpose, {b.input(3, {0}, {1})}) : b.input(3, {1}, {0});
    v = b.op(OpKind::Add, {b.op(OpKind::AccumSum, {b.op(OpKind::MatMul, {x, w})}), v});
  }
  v = b.op(OpKind::Add, {v, b.input(4, {0}, {-1})});
  b.output(v, {1}, {-1}, c.dt, "Y");
  return std::move(b).finish(target_for(Arch::Sm90a));
}

// The same computation as a spec, written with the low-rank product first where there is no W
// (X (L0 L1), the benchmark suite's lowrank): the verifier's view of the kernel's meaning.
KernelGraph lowrank_spec(const LowRankCase& c) {
  KernelGraphBuilder sb("lr", "", Arch::Sm90a);
  int x = sb.input("X", {c.m, c.k}, c.dt);
  int l0 = sb.input("L0", c.ak ? Shape{c.r, c.k} : Shape{c.k, c.r}, c.dt);
  int l1 = sb.input("L1", c.bk ? Shape{c.n, c.r} : Shape{c.r, c.n}, c.dt);
  int w = sb.input("W", c.wk ? Shape{c.n, c.k} : Shape{c.k, c.n}, c.dt);
  int bias = sb.input("bias", {c.n}, c.dt);
  if (c.ak) l0 = sb.op(OpKind::Transpose, {l0}, {}, "L0t");
  if (c.bk) l1 = sb.op(OpKind::Transpose, {l1}, {}, "L1t");
  int v = c.has_w ? sb.op(OpKind::MatMul, {sb.op(OpKind::MatMul, {x, l0}, {}, "T"), l1}, {}, "Z")
                  : sb.op(OpKind::MatMul, {x, sb.op(OpKind::MatMul, {l0, l1}, {}, "AB")}, {}, "Z");
  if (c.has_w) {
    if (c.wk) w = sb.op(OpKind::Transpose, {w}, {}, "Wt");
    v = sb.op(OpKind::Add, {sb.op(OpKind::MatMul, {x, w}, {}, "XW"), v}, {}, "S");
  }
  sb.output(sb.op(OpKind::Add, {v, bias}, {}, "Y"));
  return std::move(sb).finish();
}

// Few rows times a low-rank chain (every operand layout, f16 and bf16, K not a multiple of 16)
// run as the low-rank chain kernel with its
// configuration: the cluster split from K (48 KB of X and L0 per CTA), the column block from N,
// and the emitted launch's operands and layouts; the simulated result matches the spec's.
TEST(Contraction, LowRankChainsRunAsOneClusteredLaunch) {
  const Target& t = target_for(Arch::Sm90a);
  struct Expect {
    LowRankCase c;
    int mt, rt, nc, splits;
  };
  const Expect cases[] = {
      // The suite's lowrank at a quarter of N and half of K: K 2048 in 4 CTAs of 512.
      {{16, 1024, 2048, 16, false, false, false, false, 64, 64}, 1, 1, 32, 4},
      // nn.Linear-layout factors, bf16, 5 rows, rank 24, N 8 past a multiple of 256.
      {{5, 520, 256, 24, false, true, true, false, 8, 64, DType::BF16}, 1, 2, 32, 1},
      // 32 rows, rank 64, K 1000 (not a multiple of 16), B^T only: 4 CTAs of 256 x 96 halves.
      {{32, 264, 1000, 64, false, false, true, false, 8, 200}, 2, 4, 32, 4},
      // The suite's lowrank: 8 CTAs of 512 k, 64-column blocks (64 CTAs).
      {{16, 4096, 4096, 16, false, false, false, false, 64, 256}, 1, 1, 64, 8},
      // 17 rows, L0^T, rank 8, 4352 columns: 64-column blocks fill the SMs.
      {{17, 4352, 128, 8, false, true, false, false, 64, 32}, 2, 1, 64, 1},
  };
  for (const Expect& e : cases) {
    const LowRankCase& c = e.c;
    SCOPED_TRACE(fmt::format("M {} N {} K {} R {} w {} ak {} bk {} wk {}", c.m, c.n, c.k, c.r,
                             c.has_w, c.ak, c.bk, c.wk));
    auto bg = std::make_shared<const BlockGraph>(lowrank_block(c));
    auto p = match_contraction(*bg, t);
    ASSERT_TRUE(p);
    ASSERT_TRUE(p->lowrank);
    ASSERT_TRUE(p->lowrank_shape);
    EXPECT_EQ(p->lowrank->r, c.r);
    EXPECT_EQ(p->lowrank->a_kmajor, c.ak);
    EXPECT_EQ(p->lowrank->b_kmajor, c.bk);
    EXPECT_EQ(p->b.size(), c.has_w ? 1u : 0u);
    const LowRankShape& v = *p->lowrank_shape;
    EXPECT_EQ(v.mt, e.mt);
    EXPECT_EQ(v.rt, e.rt);
    EXPECT_EQ(v.nc, e.nc);
    EXPECT_EQ(v.splits, e.splits);
    const int64_t blocks = (c.n + v.nc - 1) / v.nc;
    EXPECT_EQ(v.grid, (blocks + v.splits - 1) / v.splits * v.splits);

    KernelGraphBuilder kb("lr", "", Arch::Sm90a);
    std::vector<int> ins;
    for (const TensorDesc& d : bg->inputs) ins.push_back(kb.input(d.name, d.shape, d.dtype));
    kb.output(kb.graph_defined(bg, ins, "k")[0]);
    KernelGraph g = std::move(kb).finish();
    const Schedule s = plan_schedule(g, t);
    ASSERT_TRUE(s.kernels[0].as<ContractionKernel>());
    EXPECT_EQ(s.kernels[0].grid, v.grid);
    EXPECT_EQ(s.kernels[0].splits, v.splits);
    const std::string cu = emit_cuda(g);
    const char* ty = c.dt == DType::BF16 ? "__nv_bfloat16" : "__half";
    EXPECT_NE(cu.find(fmt::format(
                  "kiln::rt::lowrank_launch<{0}, {0}, {1}, {2}, {3}, {4}, {5}, {6}, "
                  "{7}, Epi_k0_k>(t0, {8}, t1, {9}, t2, {10}, {11}, ",
                  ty, v.mt, v.rt, v.nc, c.ak, c.bk, c.has_w, c.has_w && c.wk, c.k, c.ak ? c.k : c.r,
                  c.bk ? c.r : c.n,
                  c.has_w ? fmt::format("t3, {}", c.wk ? c.k : c.n) : fmt::format("t0, {}", c.k))),
              std::string::npos);
    EXPECT_EQ(testing::check_in_simulator(g, lowrank_spec(c), 11, "lowrank_contraction",
                                          Arch::Sm90a, Precision::F32, /*lowerings=*/true),
              "");
  }
}

// What the low-rank chain kernel does not take falls back to the other paths or the block
// kernel: more than 32 rows, a rank over 64 or not a multiple of 8, f32 operands, a full-rank
// weight beside the chain, sm_80.
TEST(Contraction, LowRankChainsOutsideTheKernelAreDeclined) {
  const Target& t = target_for(Arch::Sm90a);
  const LowRankCase ok{16, 1024, 512, 16, false, false, false, false, 64, 64};
  ASSERT_TRUE(match_contraction(lowrank_block(ok), t));
  EXPECT_FALSE(match_contraction(lowrank_block(ok), target_for(Arch::Sm80)));
  LowRankCase rows = ok;
  rows.m = 48;
  EXPECT_FALSE(match_contraction(lowrank_block(rows), t));
  LowRankCase rank = ok;
  rank.r = 80;
  EXPECT_FALSE(match_contraction(lowrank_block(rank), t));
  rank.r = 12;
  EXPECT_FALSE(match_contraction(lowrank_block(rank), t));
  LowRankCase f32 = ok;
  f32.dt = DType::F32;
  EXPECT_FALSE(match_contraction(lowrank_block(f32), t));
  // Beside a full-rank weight, in either layout (LoRA), the block kernel was measured as fast.
  for (bool wk : {false, true}) {
    LowRankCase with_w = ok;
    with_w.has_w = true;
    with_w.wk = wk;
    EXPECT_FALSE(match_contraction(lowrank_block(with_w), t));
  }
  // The host mirror of the runtime's shared-memory layout, at the suite's lowrank (K 4096 in 8
  // CTAs of 512): X 16 x 520, L0 512 x 24, L1 16 x 40 halves, then 14 areas of 16 x 20 f32
  // (4 warps' partials, their sum, 8 ranks', the cluster's sum) and the exchange's mbarrier.
  EXPECT_EQ(lowrank_smem_bytes(1, 1, 32, false, false, 4096, 8),
            (16 * 520 + 512 * 24 + 16 * 40) * 2 + 14 * 16 * 20 * 4 + 16);
}

}  // namespace
}  // namespace kiln
