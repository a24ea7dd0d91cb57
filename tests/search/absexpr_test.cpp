// Abstract expressions: interning, and the translation of every op at kernel and block level.
#include "kiln/search/absexpr.h"

#include <gtest/gtest.h>

#include "kiln/search/prune.h"

namespace kiln::search {
namespace {

using E = AbsExpr;

const E X = E::input("X"), W = E::input("W"), Y = E::input("Y");
E c(double v) {
  return E::constant(v);
}

TEST(AbsExpr, InterningMakesEqualExpressionsOneNode) {
  E a = E::sum(64, X * W), b = E::sum(64, X * W);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.node(), b.node());
  EXPECT_EQ(a.id(), b.id());
  EXPECT_NE(a, E::sum(32, X * W));
  EXPECT_NE(X * W, W * X);  // built as written; canonical() identifies them
  EXPECT_EQ(E::constant(-0.0), E::constant(0.0));
}

TEST(AbsExpr, HashIsStructuralAndOrderIsIndependentOfCreation) {
  // Built in opposite orders, two expressions compare the same way.
  E p = E::exp(E::input("P_fresh")), q = E::opaque("tanh", {E::input("Q_fresh")});
  EXPECT_NE(structural_less(p, q), structural_less(q, p));
  EXPECT_FALSE(structural_less(p, p));
  EXPECT_EQ(std::hash<E>()(X * W), (X * W).hash());
}

TEST(AbsExpr, Prints) {
  EXPECT_EQ(E::sum(64, X * W).str(), "sum(64, mul(X, W))");
  EXPECT_EQ(E::max_reduce(8, X).str(), "max(8, X)");
  EXPECT_EQ((X - W).str(), "add(X, mul(-1, W))");
  EXPECT_EQ(E::any_constant().str(), "κ");
  EXPECT_EQ(E::sum(4, X * X).dag_size(), 3u);
}

// ---------------------------------------------------------------------------------------------
// Kernel level: one spec node, its expression.

struct OneOp {
  KernelGraph g;
  int out;
};

OneOp spec1(OpKind kind, Attrs attrs = {}, Shape xs = {2, 64}, std::vector<Shape> more = {}) {
  KernelGraphBuilder b("t");
  std::vector<int> in{b.input("X", xs, DType::F32)};
  const char* names[] = {"W", "Y"};
  for (size_t i = 0; i < more.size(); ++i) in.push_back(b.input(names[i], more[i], DType::F32));
  int o = b.op(kind, in, attrs, "O");
  b.output(o);
  KernelGraph g = std::move(b).finish();
  return {g, o};
}

E of(const OneOp& s) {
  return abstract_of(s.g, s.out);
}

TEST(Translate, MatmulIsASumOfProductsOverTheContraction) {
  EXPECT_EQ(of(spec1(OpKind::MatMul, {}, {2, 64}, {{64, 32}})), E::sum(64, X * W));
}

TEST(Translate, ElementwiseAndDerivedForms) {
  Shape s{2, 64};
  EXPECT_EQ(of(spec1(OpKind::Add, {}, s, {s})), X + W);
  EXPECT_EQ(of(spec1(OpKind::Sub, {}, s, {s})), X + c(-1) * W);
  EXPECT_EQ(of(spec1(OpKind::Div, {}, s, {s})), X / W);
  EXPECT_EQ(of(spec1(OpKind::Neg)), c(-1) * X);
  EXPECT_EQ(of(spec1(OpKind::Square)), X * X);
  EXPECT_EQ(of(spec1(OpKind::Reciprocal)), c(1) / X);
  EXPECT_EQ(of(spec1(OpKind::Rsqrt)), c(1) / E::opaque("sqrt", {X}));
  EXPECT_EQ(of(spec1(OpKind::Silu)), X * E::opaque("sigmoid", {X}));
  EXPECT_EQ(of(spec1(OpKind::Exp)), E::exp(X));
  EXPECT_EQ(of(spec1(OpKind::Transpose)), X);
  EXPECT_EQ(of(spec1(OpKind::Maximum, {}, s, {s})), E::opaque("maximum", {X, W}));
  Attrs gelu;
  gelu.approximate = GeluApprox::Tanh;
  EXPECT_EQ(of(spec1(OpKind::Gelu, gelu)), E::opaque("gelu_tanh", {X}));
  Attrs clamp;
  clamp.min = 0.0;
  clamp.max = 6.0;
  EXPECT_EQ(of(spec1(OpKind::Clamp, clamp)), E::opaque("clamp[0,6]", {X}));
}

TEST(Translate, Reductions) {
  Attrs d1;
  d1.dim = 1;
  EXPECT_EQ(of(spec1(OpKind::Sum, d1)), E::sum(64, X));
  EXPECT_EQ(of(spec1(OpKind::Mean, d1)), E::sum(64, X) / c(64));
  EXPECT_EQ(of(spec1(OpKind::Max, d1)), E::max_reduce(64, X));
  Attrs d0;
  d0.dim = 0;
  EXPECT_EQ(of(spec1(OpKind::Sum, d0)), E::sum(2, X));
}

TEST(Translate, SoftmaxSubtractsTheMaxAndNormalizes) {
  E e = E::exp(X - E::max_reduce(64, X));
  EXPECT_EQ(of(spec1(OpKind::Softmax)), e / E::sum(64, e));
}

TEST(Translate, RmsNormDividesByTheRootMeanSquare) {
  Attrs a;
  a.eps = 1e-6;
  E r = X / E::opaque("sqrt", {E::sum(64, X * X) / c(64) + c(1e-6)});
  EXPECT_EQ(of(spec1(OpKind::RmsNorm, a)), r);
  EXPECT_EQ(of(spec1(OpKind::RmsNorm, a, {2, 64}, {{64}})), r * W);
}

TEST(Translate, EveryKernelOpOfTheVocabularyHasAnExpression) {
  for (const OpInfo& info : all_ops()) {
    if (!(info.levels & kKernel) || info.cls == OpClass::GraphDefined) continue;
    std::vector<E> operands(info.min_inputs, X);
    std::vector<Shape> shapes(info.min_inputs, Shape{4, 4});
    Attrs a;
    a.dim = 1;
    E e = abstract_op(info.kind, a, operands, shapes);
    EXPECT_FALSE(e.null()) << info.name;
  }
}

// ---------------------------------------------------------------------------------------------
// Block level.

std::vector<TensorDesc> xw(int64_t m, int64_t k, int64_t n) {
  return {{"X", {m, k}, DType::F16}, {"W", {k, n}, DType::F16}};
}

TEST(TranslateBlock, TiledMatmulAccumulatesOverTheLoop) {
  BlockGraphBuilder b({48}, 128, {64}, xw(2, 4096, 6144));
  int x = b.input(0, {-1}, {1}, "x");
  int w = b.input(1, {1}, {0}, "w");
  int m = b.op(OpKind::MatMul, {x, w}, {}, "m");
  int acc = b.op(OpKind::AccumSum, {m}, {}, "acc");
  b.output(acc, {1}, {-1}, DType::F16, "O");
  BlockGraph g = std::move(b).finish();
  std::vector<E> e = abstract_block(g, {X, W});
  EXPECT_EQ(e[x], X);
  EXPECT_EQ(e[w], W);
  EXPECT_EQ(e[m], E::sum(64, X * W));  // tile contraction extent 4096 / 64
  EXPECT_EQ(e[acc], E::sum(64, E::sum(64, X * W)));
  EXPECT_EQ(abstract_block_outputs(g, {X, W}), std::vector<E>{e[acc]});
  EXPECT_EQ(canonical(e[acc]), canonical(E::sum(4096, X * W)));
}

TEST(TranslateBlock, IncrementalMatchesWholeGraph) {
  BlockGraphBuilder b({4}, 128, {8}, xw(8, 64, 32));
  int x = b.input(0, {0}, {1}, "x");
  std::vector<E> memo;
  EXPECT_EQ(abstract_of_block_op(b.peek(), x, {X, W}, &memo), X);
  EXPECT_EQ(memo.size(), 1u);
  int sq = b.op(OpKind::Square, {x}, {}, "sq");
  Attrs d1;
  d1.dim = 1;
  int s = b.op(OpKind::Sum, {sq}, d1, "s");
  int acc = b.op(OpKind::AccumSum, {s}, {}, "acc");
  E got = abstract_of_block_op(b.peek(), acc, {X, W}, &memo);
  EXPECT_EQ(memo.size(), 4u);
  EXPECT_EQ(got, E::sum(8, E::sum(8, X * X)));
  EXPECT_EQ(memo, abstract_block(b.peek(), {X, W}));
}

TEST(TranslateBlock, MaxAndRescaleAccumulators) {
  BlockGraphBuilder b({1}, 128, {4}, {{"X", {8, 64}, DType::F32}});
  int x = b.input(0, {-1}, {1}, "x");
  Attrs d1;
  d1.dim = 1;
  int m = b.op(OpKind::Max, {x}, d1, "m");  // [8, 1] per tile of 16
  int mx = b.op(OpKind::AccumMax, {m}, {}, "mx");
  int r = b.op(OpKind::AccumRescale, {x, m}, {}, "r");
  std::vector<E> e = abstract_block(b.peek(), {X});
  E tile_max = E::max_reduce(16, X);
  EXPECT_EQ(e[m], tile_max);
  EXPECT_EQ(e[mx], E::max_reduce(4, tile_max));
  EXPECT_EQ(e[r], E::sum(4, X * E::exp(tile_max - E::max_reduce(4, tile_max))));
  EXPECT_EQ(canonical(e[mx]), canonical(E::max_reduce(64, X)));
}

TEST(TranslateBlock, FusedThreadGraphAppliesItsOps) {
  BlockGraphBuilder b({1}, 128, {}, xw(8, 64, 32));
  int x = b.input(0, {-1}, {}, "x");
  ThreadGraph tg;
  tg.num_inputs = 1;
  tg.ops.push_back({OpKind::Sigmoid, {0}, {}});
  tg.ops.push_back({OpKind::Mul, {0, 1}, {}});
  int f = b.fused(tg, {x}, "f");
  EXPECT_EQ(abstract_of_block_op(b.peek(), f, {X, W}), X * E::opaque("sigmoid", {X}));
}

// Split-K: each block sums its share of K in a loop; a kernel-level sum adds the S partials.
KernelGraph split_k(int64_t m, int64_t k, int64_t n, int64_t split, int64_t loop) {
  KernelGraphBuilder kb("splitk");
  int xi = kb.input("X", {m, k}, DType::F16);
  int wi = kb.input("W", {k, n}, DType::F16);
  BlockGraphBuilder b({split, 2}, 128, {loop}, xw(m, k, n));
  int x = b.input(0, {1, -1}, {1}, "x");
  int w = b.input(1, {0, 1}, {0}, "w");
  int mm = b.op(OpKind::MatMul, {x, w}, {}, "mm");
  int acc = b.op(OpKind::AccumSum, {mm}, {}, "acc");
  b.output(acc, {0, 2}, {-1}, DType::F32, "P", 3);
  auto bg = std::make_shared<const BlockGraph>(std::move(b).finish());
  int p = kb.graph_defined(bg, {xi, wi}, "partial")[0];
  Attrs d0;
  d0.dim = 0;
  d0.keepdim = false;
  int o = kb.op(OpKind::Sum, {p}, d0, "O");
  kb.output(o);
  return std::move(kb).finish();
}

TEST(TranslateBlock, SplitKComposesToTheSpecMatmul) {
  KernelGraph g = split_k(16, 1024, 64, 4, 8);  // tiles of 1024 / (4 * 8) = 32 along K
  std::vector<E> t = abstract_tensors(g);
  E partial = t[g.find_tensor("P")];
  EXPECT_EQ(partial, E::sum(8, E::sum(32, X * W)));
  E out = t[g.outputs[0]];
  EXPECT_EQ(out, E::sum(4, partial));
  EXPECT_EQ(canonical(out), canonical(E::sum(1024, X * W)));
}

}  // namespace
}  // namespace kiln::search
