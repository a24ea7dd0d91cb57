// Block graphs walked by the interpreter equal the predefined ops they implement: tiled and
// split-K matmuls, accumulators (sum, max, online-softmax rescale), in-loop savers, several loop
// dims, invariant inputs and fused thread graphs.
#include <cmath>

#include "block_graphs.h"
#include "helpers.h"

namespace kiln {
namespace {

using testing::GraphPair;

// Both graphs of the pair on the same random inputs, in F64 (tight) and F32 (spec tolerance of
// f32 outputs, or of the output dtype if lower).
void expect_equivalent(const GraphPair& p, uint64_t seed = 1, double f64_tol = 1e-12) {
  auto in = random_inputs(p.spec, seed);
  for (Precision prec : {Precision::F64, Precision::F32}) {
    auto got = evaluate(p.mugraph, in, {prec, 0});
    auto want = evaluate(p.spec, in, {Precision::F64, 0});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      double tol = prec == Precision::F64 ? f64_tol : spec_tolerance(want[i].dtype) / 4;
      EXPECT_LE(relative_l2_error(got[i], want[i]), tol)
          << "output " << i << (prec == Precision::F64 ? " f64" : " f32");
    }
  }
}

TEST(BlockWalk, TiledMatmulEqualsMatmul) {
  expect_equivalent(testing::tiled_matmul(64, 128, 96, 2, 3, 4));
  expect_equivalent(testing::tiled_matmul(8, 64, 32, 1, 4, 1));  // no real loop
  expect_equivalent(testing::tiled_matmul(16, 256, 64, 2, 2, 8, DType::F16));
}

TEST(BlockWalk, SplitKWithLeadingOutputDimAndKernelSum) {
  GraphPair p = testing::split_k_matmul(64, 128, 96, 3, 4, 2);
  // The partial sums land in an extra leading dim [splits, m, n].
  const KernelGraph& g = p.mugraph;
  EXPECT_EQ(g.tensor(g.ops[0].outputs[0]).shape, (Shape{4, 64, 96}));
  expect_equivalent(p);
}

TEST(BlockWalk, AccumMaxEqualsMaxReduction) {
  std::vector<TensorDesc> ins = {{"X", {8, 64}, DType::BF16}};
  KernelGraphBuilder kb("amax");
  auto ids = testing::add_inputs(kb, ins);
  BlockGraphBuilder b({2}, 128, {4}, ins);
  Attrs last;
  last.dim = 1;
  int x = b.input(0, {0}, {1}, "x");
  int am = b.op(OpKind::AccumMax, {b.op(OpKind::Max, {x}, last, "m")}, {}, "am");
  b.output(am, {0}, {-1}, DType::BF16, "M");
  kb.output(kb.graph_defined(testing::share(std::move(b)), ids, "k")[0]);
  KernelGraphBuilder sb("max");
  auto s = testing::add_inputs(sb, ins);
  sb.output(sb.op(OpKind::Max, s, last, "M"));
  // A max selects an input value: exact in both precisions.
  GraphPair p{std::move(kb).finish(), std::move(sb).finish()};
  auto in = random_inputs(p.spec, 3);
  for (Precision prec : {Precision::F64, Precision::F32})
    testing::expect_same(evaluate(p.mugraph, in, {prec, 0})[0], evaluate(p.spec, in)[0]);
}

TEST(BlockWalk, OnlineSoftmaxWithRescaleEqualsSoftmax) {
  expect_equivalent(testing::online_softmax(8, 64, 2, 4));
  expect_equivalent(testing::online_softmax(4, 96, 1, 6, DType::F16));
  // Inputs with a large spread, so that the running max really changes between iterations.
  GraphPair p = testing::online_softmax(4, 64, 2, 8);
  auto in = random_inputs(p.spec, 9);
  for (size_t i = 0; i < in[0].data.size(); ++i) in[0].data[i] *= 40.0 * (i % 64) / 64;
  auto got = evaluate(p.mugraph, in), want = evaluate(p.spec, in);
  EXPECT_LE(relative_l2_error(got[0], want[0]), 1e-12);
}

// A matmul operand rounded to f16 (what a 16-bit tensor-core mma does to a float32 tile): plain,
// values beyond f16's range overflow; row_scaled (the attention lowering's online P, held relative
// to its row max) loses only relative precision.
TEST(BlockWalk, RowScaledOperandRoundingKeepsRangeAndRelativePrecision) {
  std::vector<TensorDesc> ins = {{"X", {4, 64}, DType::F32}, {"W", {64, 16}, DType::F16}};
  KernelGraphBuilder kb("mm");
  auto ids = testing::add_inputs(kb, ins);
  BlockGraphBuilder b({1}, 128, {}, ins);
  int x = b.input(0, {-1}, {}, "x");
  int w = b.input(1, {-1}, {}, "w");
  int mm = b.op(OpKind::MatMul, {x, w}, {}, "y");
  b.output(mm, {-1}, {}, DType::F32, "Y");
  KernelGraph g = [&] {
    kb.output(kb.graph_defined(testing::share(std::move(b)), ids, "k")[0]);
    return std::move(kb).finish();
  }();
  auto in = random_inputs(g, 5);
  for (size_t i = 0; i < in[0].data.size(); ++i) in[0].data[i] *= 1e6 * (1 + double(i / 64));
  const std::vector<HostTensor> want = evaluate(g, in);
  for (bool scaled : {false, true}) {
    EvalOptions o{Precision::F32, 0};
    o.operand_rounding = {{0, mm, 0, DType::F16, scaled}};
    const HostTensor got = evaluate(g, in, o)[0];
    bool finite = true;
    for (double v : got.data) finite = finite && std::isfinite(v);
    EXPECT_EQ(finite, scaled);
    if (scaled) EXPECT_LE(relative_l2_error(got, want[0]), 2e-3);
  }
}

TEST(BlockWalk, FlashAttentionWithRescaledAccumulators) {
  expect_equivalent(testing::flash_attention(2, 16, 8, 64, 4));
  expect_equivalent(testing::flash_attention(1, 8, 16, 96, 6, DType::BF16));
}

TEST(BlockWalk, AccumulatingAnInvariantTileMultipliesByTheIterationCount) {
  std::vector<TensorDesc> ins = {{"X", {4, 8}, DType::F32}};
  KernelGraphBuilder kb("inv_acc");
  auto ids = testing::add_inputs(kb, ins);
  BlockGraphBuilder b({2}, 128, {3, 2}, ins);
  int x = b.input(0, {0}, {-1, -1}, "x");  // invariant [2, 8]
  b.output(b.op(OpKind::AccumSum, {x}, {}, "acc"), {0}, {-1, -1}, DType::F32, "Y");
  kb.output(kb.graph_defined(testing::share(std::move(b)), ids, "k")[0]);
  KernelGraph g = std::move(kb).finish();
  auto in = random_inputs(g, 6);
  auto out = evaluate(g, in)[0];
  for (size_t i = 0; i < in[0].data.size(); ++i) ASSERT_EQ(out.data[i], 6 * in[0].data[i]);
}

TEST(BlockWalk, InLoopSaverWithFmap) {
  std::vector<TensorDesc> ins = {{"X", {8, 64}, DType::F32}};
  KernelGraphBuilder kb("inloop");
  auto ids = testing::add_inputs(kb, ins);
  BlockGraphBuilder b({2}, 128, {4}, ins);
  int x = b.input(0, {0}, {1}, "x");  // tile [4, 16] at rows 4g, cols 16l
  int e = b.op(OpKind::Exp, {x}, {}, "e");
  b.output(e, {0}, {1}, DType::F32, "Y");     // back in place: [8, 64]
  b.output(e, {1}, {0}, DType::F32, "Z", 3);  // loop index as a leading dim: [4, 8, 16]
  auto outs = kb.graph_defined(testing::share(std::move(b)), ids, "k");
  kb.output(outs[0]);
  kb.output(outs[1]);
  KernelGraph g = std::move(kb).finish();
  auto in = random_inputs(g, 2);
  auto out = evaluate(g, in);
  ASSERT_EQ(out[1].shape, (Shape{4, 8, 16}));
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 64; ++c) {
      double want = std::exp(in[0].data[r * 64 + c]);
      ASSERT_EQ(out[0].data[r * 64 + c], want);
      ASSERT_EQ(out[1].data[(c / 16) * 128 + r * 16 + c % 16], want);
    }
}

TEST(BlockWalk, MultipleLoopDims) {
  std::vector<TensorDesc> ins = {{"X", {4, 8, 16}, DType::F32}};
  KernelGraphBuilder kb("loops2");
  auto ids = testing::add_inputs(kb, ins);
  BlockGraphBuilder b({4}, 128, {2, 4}, ins);
  int x = b.input(0, {0}, {1, 2}, "x");  // tile [1, 4, 4]
  Attrs d1, d2;
  d1.dim = 1;
  d2.dim = 2;
  int s = b.op(OpKind::Sum, {b.op(OpKind::Sum, {x}, d2, "s2")}, d1, "s1");
  int acc = b.op(OpKind::AccumSum, {s}, {}, "acc");
  b.output(acc, {0}, {-1, -1}, DType::F32, "S");
  int sq = b.op(OpKind::Square, {x}, {}, "sq");
  b.output(sq, {0}, {1, 2}, DType::F32, "Q");
  auto outs = kb.graph_defined(testing::share(std::move(b)), ids, "k");
  kb.output(outs[0]);
  kb.output(outs[1]);
  KernelGraphBuilder sb("spec");
  auto sid = testing::add_inputs(sb, ins);
  sb.output(sb.op(OpKind::Sum, {sb.op(OpKind::Sum, sid, d2, "s2")}, d1, "S"));
  sb.output(sb.op(OpKind::Square, sid, {}, "Q"));
  expect_equivalent({std::move(kb).finish(), std::move(sb).finish()});
}

TEST(BlockWalk, InvariantInputIsReusedEveryIteration) {
  std::vector<TensorDesc> ins = {{"X", {8, 64}, DType::F32}, {"v", {16}, DType::F32}};
  KernelGraphBuilder kb("inv");
  auto ids = testing::add_inputs(kb, ins);
  BlockGraphBuilder b({2}, 128, {4}, ins);
  int x = b.input(0, {0}, {1}, "x");
  int v = b.input(1, {-1}, {-1}, "v");
  b.output(b.op(OpKind::Mul, {x, v}, {}, "y"), {0}, {1}, DType::F32, "Y");
  kb.output(kb.graph_defined(testing::share(std::move(b)), ids, "k")[0]);
  KernelGraph g = std::move(kb).finish();
  auto in = random_inputs(g, 4);
  auto out = evaluate(g, in)[0];
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 64; ++c)
      ASSERT_EQ(out.data[r * 64 + c], in[0].data[r * 64 + c] * in[1].data[c % 16]);
}

TEST(BlockWalk, FusedThreadGraphGatedMlp) {
  expect_equivalent(testing::gated_mlp(16, 64, 32, 2, 2, 4));
  expect_equivalent(testing::gated_mlp(1, 128, 64, 1, 4, 8, DType::BF16));
}

TEST(BlockWalk, ThreadGraphWithConstantAndBroadcast) {
  std::vector<TensorDesc> ins = {{"X", {4, 32}, DType::F32}, {"R", {4, 1}, DType::F32}};
  KernelGraphBuilder kb("fusedc");
  auto ids = testing::add_inputs(kb, ins);
  BlockGraphBuilder b({4}, 128, {}, ins);
  int x = b.input(0, {0}, {}, "x");  // [1, 32]
  int r = b.input(1, {0}, {}, "r");  // [1, 1]
  ThreadGraph tg;
  tg.num_inputs = 2;
  Attrs half;
  half.value = 0.5;
  // 0.5 * x * r - x
  tg.ops = {{OpKind::Mul, {0, 1}, {}},
            {OpKind::Constant, {}, half},
            {OpKind::Mul, {2, 3}, {}},
            {OpKind::Sub, {4, 0}, {}}};
  b.output(b.fused(tg, {x, r}, "f"), {0}, {}, DType::F32, "Y");
  kb.output(kb.graph_defined(testing::share(std::move(b)), ids, "k")[0]);
  KernelGraph g = std::move(kb).finish();
  auto in = random_inputs(g, 5);
  auto out = evaluate(g, in)[0];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 32; ++j) {
      double xv = in[0].data[i * 32 + j], rv = in[1].data[i];
      ASSERT_EQ(out.data[i * 32 + j], 0.5 * (xv * rv) - xv);
    }
}

TEST(BlockWalk, ThreadCountOptionGivesSameResult) {
  GraphPair p = testing::gated_mlp(16, 64, 32, 4, 2, 4);
  auto in = random_inputs(p.spec, 8);
  auto one = evaluate(p.mugraph, in, {Precision::F32, 1});
  auto all = evaluate(p.mugraph, in, {Precision::F32, 0});
  testing::expect_same(one[0], all[0]);
}

}  // namespace
}  // namespace kiln
