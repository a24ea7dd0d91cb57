// The generic kernels of predefined ops, run on the CPU simulator, agree with the interpreter:
// elementwise (vector and broadcast paths, folded constants), transposes, reductions along inner
// and outer dims, softmax and rms_norm (warp-, block- and column-per-row paths), and matmul in
// every strategy (gemv, tensor-core GEMM with and without split-K, FMA with batch broadcast).
#include <map>
#include <random>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "kiln/codegen/lowerings.h"
#include "kiln/codegen/schedule.h"
#include "sim_runner.h"

namespace kiln {
namespace {

Attrs dim_attr(int d, bool keep = true) {
  Attrs a;
  a.dim = d;
  a.keepdim = keep;
  return a;
}

void expect_sim_ok(const KernelGraph& g, const std::string& tag) {
  EXPECT_EQ(testing::check_in_simulator(g, g, 3, tag, Arch::Sm90a, Precision::F32), "") << tag;
}

TEST(SimPredefined, ElementwiseTransposeReduce) {
  KernelGraphBuilder b("ew");
  int x = b.input("X", {4, 6, 16}, DType::F16);
  int y = b.input("Y", {6, 1}, DType::F32);
  Attrs cv;
  cv.value = 0.75;
  int c = b.op(OpKind::Constant, {}, cv, "c");
  int a = b.op(OpKind::Add, {x, x}, {}, "a");  // vector path
  int m = b.op(OpKind::Mul, {a, c}, {}, "m");  // constant folded
  int d = b.op(OpKind::Div, {m, y}, {}, "d");  // broadcast path
  Attrs g;
  g.approximate = GeluApprox::Tanh;
  int ge = b.op(OpKind::Gelu, {d}, g, "ge");
  Attrs cl;
  cl.min = -0.1;
  int cc = b.op(OpKind::Clamp, {ge}, cl, "cc");
  Attrs tp;
  tp.perm = {2, 0, 1};
  int t = b.op(OpKind::Transpose, {cc}, tp, "t");
  int s0 = b.op(OpKind::Sum, {t}, dim_attr(2, false), "s0");  // innermost: warp per row
  int s1 = b.op(OpKind::Max, {x}, dim_attr(1), "s1");         // middle: column per thread
  int s2 = b.op(OpKind::Mean, {x}, dim_attr(0, false), "s2");
  b.output(t);
  b.output(s0);
  b.output(s1);
  b.output(s2);
  b.output(x);   // an input as an output: copied
  b.output(s0);  // twice
  expect_sim_ok(std::move(b).finish(), "pre_ew");
}

// A constant that is an output is written by a one-thread kernel (<<<1, 1>>>), a block of one
// partial warp; the simulator runs it (it used to refuse any block that is not whole warps).
TEST(SimPredefined, ConstantOutput) {
  KernelGraphBuilder b("cout");
  int x = b.input("X", {40}, DType::F16);
  Attrs cv;
  cv.value = 2.5;
  int c = b.op(OpKind::Constant, {}, cv, "c");
  int s = b.op(OpKind::Sum, {x}, dim_attr(0, false), "s");
  b.output(s);
  b.output(c);
  expect_sim_ok(std::move(b).finish(), "pre_cout");
}

TEST(SimPredefined, SoftmaxAndRmsNorm) {
  KernelGraphBuilder b("rows");
  int x = b.input("X", {3, 2100}, DType::BF16);
  int z = b.input("Z", {4, 33, 5}, DType::F32);
  int w = b.input("w", {2100}, DType::BF16);
  int s = b.op(OpKind::Softmax, {x}, dim_attr(-1), "s");   // block per row
  int s2 = b.op(OpKind::Softmax, {z}, dim_attr(1), "s2");  // column per thread
  int s3 = b.op(OpKind::Softmax, {z}, dim_attr(2), "s3");  // warp per row
  Attrs e;
  e.eps = 1e-5;
  int r = b.op(OpKind::RmsNorm, {x, w}, e, "r");
  int r2 = b.op(OpKind::RmsNorm, {z}, {}, "r2");
  for (int o : {s, s2, s3, r, r2}) b.output(o);
  expect_sim_ok(std::move(b).finish(), "pre_rows");
}

TEST(SimPredefined, MatmulStrategies) {
  KernelGraphBuilder b("mm");
  int x = b.input("X", {3, 64}, DType::F16);
  int w = b.input("W", {64, 136}, DType::F16);
  int a = b.input("A", {2, 70, 1024}, DType::BF16);
  int bb = b.input("B", {1024, 24}, DType::BF16);
  int f = b.input("F", {2, 1, 5, 7}, DType::F32);
  int g = b.input("G", {3, 7, 6}, DType::F32);
  int p = b.input("P", {100, 64}, DType::F16);
  b.output(b.op(OpKind::MatMul, {x, w}, {}, "gemv"));
  b.output(b.op(OpKind::MatMul, {a, bb}, {}, "gemm_split"));
  b.output(b.op(OpKind::MatMul, {f, g}, {}, "fma"));
  b.output(b.op(OpKind::MatMul, {p, w}, {}, "gemm"));
  expect_sim_ok(std::move(b).finish(), "pre_mm");
}

// nn.Linear's X W^T with W stored [N, K]: the wgmma GEMM (M > 64) and the TMA GEMV (M <= 32,
// 8 MB of weight) read W in place, K-major, and the transposes run no kernel; the results match
// the interpreter. A ragged N and a transposed weight that is also an output (kept) too.
TEST(SimPredefined, TransposedWeightsReadInPlace) {
  KernelGraphBuilder b("lin");
  int p = b.input("P", {100, 64}, DType::F16);
  int w = b.input("W", {136, 64}, DType::F16);
  int x = b.input("X", {2, 1024}, DType::BF16);
  int v = b.input("V", {4096, 1024}, DType::BF16);  // 8 MB: the TMA GEMV
  int wt = b.op(OpKind::Transpose, {w}, {}, "Wt");
  int vt = b.op(OpKind::Transpose, {v}, {}, "Vt");
  int w2 = b.input("W2", {72, 64}, DType::F16);
  int w2t = b.op(OpKind::Transpose, {w2}, {}, "W2t");
  b.output(b.op(OpKind::MatMul, {p, wt}, {}, "gemm"));
  b.output(b.op(OpKind::MatMul, {x, vt}, {}, "gemv"));
  b.output(b.op(OpKind::MatMul, {p, w2t}, {}, "gemm_kept"));
  b.output(w2t);
  KernelGraph g = std::move(b).finish();
  const Schedule s = plan_schedule(g, target_for(Arch::Sm90a));
  EXPECT_EQ(s.kernels[0].strategy(), "read in place by k3_gemm (no kernel)");
  EXPECT_EQ(s.kernels[1].strategy(), "read in place by k4_gemv (no kernel)");
  EXPECT_NE(s.kernels[2].strategy().rfind("fused into", 0), 0u);  // W2t is an output
  EXPECT_EQ(s.kernels[3].strategy(), "wgmma_ws 128x128x64 s6, B read K-major in place");
  EXPECT_NE(s.kernels[4].strategy().find("W read K-major in place"), std::string::npos);
  expect_sim_ok(std::move(g), "pre_lin");
}

// nn.Linear weights under 8 MB are read in place too: by the TMA GEMV while each block streams at
// most 192 KB, else (or where N is not a multiple of 8) by the K-major register GEMV, split over
// a cluster where its 16-column blocks do not cover the SMs; a weightless rms_norm in front is
// its epilogue. No transpose runs a kernel, and every result matches the interpreter.
TEST(SimPredefined, SmallTransposedWeightsReadInPlace) {
  KernelGraphBuilder b("lin_small");
  Attrs e;
  e.eps = 1e-5;
  int x1 = b.input("X1", {3, 256}, DType::F16);
  int w1 = b.input("W1", {136, 256}, DType::F16);  // 68 KB over 3 TMA blocks
  int x2 = b.input("X2", {4, 4096}, DType::F16);
  int w2 = b.input("W2", {512, 4096}, DType::F16);  // 4 MB: 16 TMA blocks of 256 KB
  int x3 = b.input("X3", {5, 1000}, DType::BF16);
  int w3 = b.input("W3", {1001, 1000}, DType::BF16);  // N % 8 != 0
  int x4 = b.input("X4", {27, 264}, DType::BF16);
  int w4 = b.input("W4", {44, 264}, DType::BF16);  // N % 8 != 0
  b.output(b.op(OpKind::MatMul, {x1, b.op(OpKind::Transpose, {w1}, {}, "W1t")}, {}, "tma"));
  b.output(b.op(OpKind::MatMul, {x2, b.op(OpKind::Transpose, {w2}, {}, "W2t")}, {}, "reg8"));
  b.output(b.op(OpKind::MatMul, {x3, b.op(OpKind::Transpose, {w3}, {}, "W3t")}, {}, "ragged"));
  b.output(b.op(OpKind::MatMul,
                {b.op(OpKind::RmsNorm, {x4}, e, "n4"), b.op(OpKind::Transpose, {w4}, {}, "W4t")},
                {}, "rms"));
  KernelGraph g = std::move(b).finish();
  const Schedule s = plan_schedule(g, target_for(Arch::Sm90a));
  std::map<std::string, std::string> by;
  for (const KernelPlan& k : s.kernels) by[k.kernel] = k.strategy();
  for (const auto& [k, how] : by)
    if (k.find('W') != std::string::npos)
      EXPECT_NE(how.find("read in place"), std::string::npos) << k;
  auto gemv = [&](const char* name) {
    for (const KernelPlan& k : s.kernels)
      if (k.kernel.find(name) != std::string::npos) return k.as<GemvKernel>();
    return static_cast<const GemvKernel*>(nullptr);
  };
  ASSERT_TRUE(gemv("tma") && gemv("reg8") && gemv("ragged") && gemv("rms"));
  EXPECT_TRUE(gemv("tma")->tma.has_value());
  ASSERT_TRUE(gemv("reg8")->kmajor.has_value());
  EXPECT_EQ(gemv("reg8")->kmajor->splits, 8);  // 32 blocks of 16 columns
  ASSERT_TRUE(gemv("ragged")->kmajor.has_value());
  EXPECT_EQ(gemv("ragged")->kmajor->splits, 4);  // 63 blocks; 256 rows of K per split
  ASSERT_TRUE(gemv("rms")->kmajor.has_value());
  EXPECT_TRUE(gemv("rms")->rms);
  EXPECT_EQ(gemv("rms")->kmajor->mt, 4);
  for (const char* n : {"tma", "reg8", "ragged", "rms"}) EXPECT_TRUE(gemv(n)->b_kmajor) << n;
  // Off sm_90a: no clusters.
  const Schedule s80 = plan_schedule(g, target_for(Arch::Sm80));
  for (const KernelPlan& k : s80.kernels)
    if (const GemvKernel* p = k.as<GemvKernel>(); p && p->kmajor)
      EXPECT_EQ(p->kmajor->splits, 1) << k.kernel;
  expect_sim_ok(std::move(g), "pre_lin_small");
}

// Property: decode-row nn.Linear graphs of random shapes (M 1-32, any N, K a multiple of 8 up to
// 2048, f16 or bf16, with or without a weightless rms_norm in front, a bias and an activation
// after) plan their transpose as read in place on sm_90a, by whichever GEMV the rule picks, and
// the emitted code agrees with the interpreter on the CPU simulator, on sm_90a and sm_80.
TEST(SimPredefined, RandomSmallLinearsMatchTheInterpreter) {
  std::mt19937 rng(1411);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int tma = 0, reg = 0;
  for (int i = 0; i < 8; ++i) {
    const int64_t m = pick(1, 32), n = pick(1, 300), k = 8 * pick(1, 256);
    const DType dt = pick(0, 1) ? DType::BF16 : DType::F16;
    const bool rms = pick(0, 2) == 0, bias = pick(0, 1) == 1;
    SCOPED_TRACE(
        fmt::format("M {} N {} K {} {} rms {} bias {}", m, n, k, dtype_name(dt), rms, bias));
    KernelGraphBuilder b(fmt::format("rl{}", i));
    int x = b.input("X", {m, k}, dt);
    int w = b.input("W", {n, k}, dt);
    Attrs e;
    e.eps = 1e-5;
    int a = rms ? b.op(OpKind::RmsNorm, {x}, e, "n") : x;
    int y = b.op(OpKind::MatMul, {a, b.op(OpKind::Transpose, {w}, {}, "Wt")}, {}, "H");
    if (bias) y = b.op(OpKind::Add, {y, b.input("bias", {n}, dt)}, {}, "Hb");
    b.output(b.op(OpKind::Tanh, {y}, {}, "Y"));
    KernelGraph g = std::move(b).finish();
    const Schedule s = plan_schedule(g, target_for(Arch::Sm90a));
    const GemvKernel* gemv = nullptr;
    for (const KernelPlan& kp : s.kernels) {
      if (kp.op >= 0 && g.ops[kp.op].kind == OpKind::Transpose)
        EXPECT_TRUE(kp.as<FusedIntoKernel>()) << kp.strategy();
      if (kp.as<GemvKernel>()) gemv = kp.as<GemvKernel>();
    }
    ASSERT_TRUE(gemv);
    EXPECT_TRUE(gemv->b_kmajor);
    EXPECT_EQ(gemv->rms, rms);
    (gemv->tma ? tma : reg)++;
    for (Arch arch : {Arch::Sm90a, Arch::Sm80})
      EXPECT_EQ(testing::check_in_simulator(g, g, 7 + i, fmt::format("pre_rl{}_{}", i, int(arch)),
                                            arch, Precision::F32),
                "");
  }
  EXPECT_GT(reg, 0);  // the seed draws both GEMVs
  EXPECT_GT(tma, 0);
}

// Activations with batch dims over a 2-D weight ([B, S, K] x W^T, as nn.Linear is applied to a
// sequence) fold into the rows of one runtime GEMM / GEMV; a batched weight does not.
TEST(SimPredefined, BatchedActivationsFoldIntoOneGemm) {
  KernelGraphBuilder b("fold");
  int p = b.input("P", {2, 50, 64}, DType::F16);
  int w = b.input("W", {136, 64}, DType::F16);
  int x = b.input("X", {2, 1, 1024}, DType::BF16);
  int v = b.input("V", {4096, 1024}, DType::BF16);
  int q = b.input("Q", {2, 64, 72}, DType::F16);
  b.output(b.op(OpKind::MatMul, {p, b.op(OpKind::Transpose, {w}, {}, "Wt")}, {}, "gemm"));
  b.output(b.op(OpKind::MatMul, {x, b.op(OpKind::Transpose, {v}, {}, "Vt")}, {}, "gemv"));
  b.output(b.op(OpKind::MatMul, {p, q}, {}, "batched"));
  KernelGraph g = std::move(b).finish();
  const Schedule s = plan_schedule(g, target_for(Arch::Sm90a));
  ASSERT_TRUE(s.kernels[1].as<WgmmaGemmKernel>());
  EXPECT_EQ(s.kernels[1].as<WgmmaGemmKernel>()->rows, 100);
  ASSERT_TRUE(s.kernels[3].as<GemvKernel>());
  EXPECT_EQ(s.kernels[3].as<GemvKernel>()->rows, 2);
  EXPECT_TRUE(s.kernels[3].as<GemvKernel>()->b_kmajor);
  EXPECT_FALSE(s.kernels[4].as<WgmmaGemmKernel>());  // Q has a batch: one product per batch
  expect_sim_ok(std::move(g), "pre_fold");
}

// A weightless rms_norm read only by a decode-size matmul is fused into the GEMV (row-rms
// epilogue, no rms_norm kernel); one that is also an output, or has a weight, is not.
TEST(SimPredefined, RmsNormFusedIntoGemv) {
  for (int variant = 0; variant < 3; ++variant) {
    KernelGraphBuilder b("rmsmm");
    int x = b.input("X", {5, 256}, DType::F16);
    int w = b.input("W", {256, 136}, DType::F16);
    int g = b.input("G", {256}, DType::F16);
    Attrs e;
    e.eps = 1e-5;
    int r =
        variant == 2 ? b.op(OpKind::RmsNorm, {x, g}, e, "n") : b.op(OpKind::RmsNorm, {x}, e, "n");
    b.output(b.op(OpKind::MatMul, {r, w}, {}, "o"));
    if (variant == 1) b.output(r);
    KernelGraph kg = std::move(b).finish();
    Schedule s = plan_schedule(kg, target_for(Arch::Sm90a));
    const bool fused = variant == 0;
    EXPECT_EQ(s.kernels[0].strategy().rfind("fused into", 0) == 0, fused) << variant;
    EXPECT_EQ(s.kernels[1].strategy(), fused ? "gemv rms_norm" : "gemv") << variant;
    expect_sim_ok(std::move(kg), fmt::format("pre_rmsmm{}", variant));
  }
}

// x + r -> weightless rms_norm over long rows -> decode matmul: the rms_norm kernel takes the add
// as its prologue (not storing its output), so the GEMV must not take the rms_norm over as well
// (it would read the add's output, which then nothing writes: the emitted file did not compile).
TEST(SimPredefined, ResidualRmsNormBeforeGemv) {
  KernelGraphBuilder b("resrms");
  int x = b.input("X", {4, 2048}, DType::F16);
  int r = b.input("R", {4, 2048}, DType::F16);
  int w = b.input("W", {2048, 64}, DType::F16);
  int h = b.op(OpKind::Add, {x, r}, {}, "h");
  int n = b.op(OpKind::RmsNorm, {h}, {}, "n");
  b.output(b.op(OpKind::MatMul, {n, w}, {}, "y"));
  KernelGraph kg = std::move(b).finish();
  Schedule s = plan_schedule(kg, target_for(Arch::Sm90a));
  ASSERT_TRUE(s.kernels[1].as<RmsRowsKernel>()) << s.kernels[1].strategy();
  EXPECT_EQ(s.kernels[1].prologue_op, 0);
  EXPECT_EQ(s.kernels[2].strategy(), "gemv");
  // Every tensor a kernel reads is an input or written by a kernel that runs.
  for (const KernelPlan& kp : s.kernels) {
    if (kp.fused_into >= 0) continue;
    const KernelOp& op = kg.ops[kp.op];
    for (int t : op.inputs) {
      const int p = kg.producer(t);
      if (p < 0 || p == kp.prologue_op) continue;
      EXPECT_TRUE(s.kernels[p].fused_into < 0 || s.kernels[s.kernels[p].fused_into].prologue_stores)
          << kp.kernel << " reads " << kg.tensor(t).name;
    }
  }
  expect_sim_ok(std::move(kg), "pre_resrms");
}

// A long-row rms_norm runs in 16-byte vectors with the row in registers; an elementwise producer
// whose other readers run later becomes its prologue (stored when an output or read again), one
// read earlier keeps its own kernel.
TEST(SimPredefined, RmsNormRowsWithElementwisePrologue) {
  for (int variant = 0; variant < 4; ++variant) {
    KernelGraphBuilder b("addrms");
    int x = b.input("X", {3, 2048}, DType::F16);
    int r = b.input("R", {3, 2048}, DType::F16);
    int w = b.input("W", {2048}, DType::F16);
    int h = b.op(OpKind::Add, {x, r}, {}, "h");
    int early = variant == 3 ? b.op(OpKind::Mul, {h, x}, {}, "early") : -1;
    Attrs e;
    e.eps = 1e-5;
    int y =
        b.op(OpKind::RmsNorm, variant == 2 ? std::vector<int>{h} : std::vector<int>{h, w}, e, "y");
    b.output(y);
    if (variant == 0 || variant == 3) b.output(h);
    if (early >= 0) b.output(early);
    KernelGraph kg = std::move(b).finish();
    Schedule s = plan_schedule(kg, target_for(Arch::Sm90a));
    const KernelPlan& rp = s.kernels[variant == 3 ? 2 : 1];
    EXPECT_EQ(rp.strategy().rfind("row per block v8", 0), 0u) << rp.strategy();
    EXPECT_EQ(s.kernels[0].strategy().rfind("fused into", 0) == 0, variant != 3) << variant;
    EXPECT_EQ(rp.strategy().find("stores its output") != std::string::npos, variant == 0)
        << rp.strategy();
    expect_sim_ok(std::move(kg), fmt::format("pre_addrms{}", variant));
  }
}

}  // namespace
}  // namespace kiln
