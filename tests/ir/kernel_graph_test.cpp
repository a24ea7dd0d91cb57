// Invariants of kernel graphs: shape and dtype inference for every predefined op class, names,
// and graph-defined ops agreeing with their block graphs.
#include <gtest/gtest.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/kernel_graph.h"

namespace kiln {
namespace {

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.code();
  }
  ADD_FAILURE() << "no UserError thrown";
  return ErrorCode::Unsupported;
}

TEST(KernelGraph, InfersShapesForEveryClass) {
  Attrs a;
  EXPECT_EQ(infer_op_shape(OpKind::MatMul, {{3, 1, 2, 4}, {5, 4, 6}}, a), (Shape{3, 5, 2, 6}));
  EXPECT_EQ(infer_op_shape(OpKind::Add, {{2, 1}, {3}}, a), (Shape{2, 3}));
  EXPECT_EQ(infer_op_shape(OpKind::Constant, {}, a), Shape{});
  EXPECT_EQ(infer_op_shape(OpKind::Exp, {{7}}, a), Shape{7});
  Attrs t;
  EXPECT_EQ(infer_op_shape(OpKind::Transpose, {{2, 3, 4}}, t), (Shape{2, 4, 3}));
  EXPECT_EQ(t.perm, (std::vector<int>{0, 2, 1}));
  Attrs p;
  p.perm = {-1, 0, 1};
  EXPECT_EQ(infer_op_shape(OpKind::Transpose, {{2, 3, 4}}, p), (Shape{4, 2, 3}));
  Attrs r;
  r.dim = -1;
  EXPECT_EQ(infer_op_shape(OpKind::Sum, {{2, 3}}, r), (Shape{2, 1}));
  EXPECT_EQ(r.dim, 1);
  Attrs r2;
  r2.dim = 0;
  r2.keepdim = false;
  EXPECT_EQ(infer_op_shape(OpKind::Mean, {{2, 3}}, r2), (Shape{3}));
  Attrs s;
  EXPECT_EQ(infer_op_shape(OpKind::Softmax, {{2, 3}}, s), (Shape{2, 3}));
  EXPECT_EQ(s.dim, 1);
  Attrs n;
  EXPECT_EQ(infer_op_shape(OpKind::RmsNorm, {{2, 8}, {8}}, n), (Shape{2, 8}));
}

TEST(KernelGraph, ShapeErrorsNameTheOperands) {
  Attrs a;
  std::vector<std::string> names{"N", "W"};
  try {
    infer_op_shape(OpKind::MatMul, {{2, 4096}, {4095, 6144}}, a, &names);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), ErrorCode::Shape);
    EXPECT_EQ(e.message(), "matmul: inner dims differ: N is [2, 4096], W is [4095, 6144]");
  }
  EXPECT_EQ(code_of([&] { infer_op_shape(OpKind::Add, {{2, 3}, {4}}, a); }), ErrorCode::Shape);
  EXPECT_EQ(code_of([&] { infer_op_shape(OpKind::Exp, {{2}, {2}}, a); }), ErrorCode::Op);
  Attrs d;
  d.dim = 2;
  EXPECT_EQ(code_of([&] { infer_op_shape(OpKind::Sum, {{2, 3}}, d); }), ErrorCode::Shape);
  Attrs bad;
  bad.perm = {0, 0};
  EXPECT_EQ(code_of([&] { infer_op_shape(OpKind::Transpose, {{2, 3}}, bad); }), ErrorCode::Op);
  EXPECT_EQ(code_of([&] { infer_op_shape(OpKind::RmsNorm, {{2, 8}, {4}}, a); }), ErrorCode::Shape);
  Attrs c;
  c.min = 2;
  c.max = 1;
  EXPECT_EQ(code_of([&] { infer_op_shape(OpKind::Clamp, {{2}}, c); }), ErrorCode::Op);
}

TEST(KernelGraph, DtypeIsFirstNonConstantInput) {
  KernelGraphBuilder b("g");
  int x = b.input("X", {4}, DType::BF16);
  Attrs cv;
  cv.value = 2.0;
  int c = b.op(OpKind::Constant, {}, cv, "two");
  int y = b.op(OpKind::Mul, {c, x}, {}, "Y");
  b.output(y);
  KernelGraph g = std::move(b).finish();
  EXPECT_EQ(g.tensor(c).dtype, DType::F32);
  EXPECT_EQ(g.tensor(y).dtype, DType::BF16);
  EXPECT_EQ(g.num_kernels(), 1);
  EXPECT_TRUE(g.is_spec());
}

TEST(KernelGraph, NamesAreCheckedAndUnique) {
  KernelGraphBuilder b("g");
  b.input("X", {4}, DType::F16);
  EXPECT_EQ(code_of([&] { b.input("X", {4}, DType::F16); }), ErrorCode::Name);
  EXPECT_EQ(code_of([&] { b.input("1x", {4}, DType::F16); }), ErrorCode::Name);
  EXPECT_EQ(code_of([] { KernelGraphBuilder("bad-name"); }), ErrorCode::Name);
  EXPECT_EQ(code_of([&] { b.input("Z", {0}, DType::F16); }), ErrorCode::Shape);
  EXPECT_EQ(code_of([&] { b.input("Z", {1, 2, 3, 4, 5}, DType::F16); }), ErrorCode::Shape);
  EXPECT_EQ(code_of([&] { b.input("Z", {1 << 30, 1 << 30}, DType::F16); }), ErrorCode::Shape);
}

TEST(KernelGraph, GraphDefinedInputsMustMatchBlockGraph) {
  BlockGraphBuilder bb({2}, 128, {}, {{"X", {4, 8}, DType::F16}});
  int x = bb.input(0, {0}, {});
  bb.output(x, {0}, {}, DType::F16, "Y");
  auto block = std::make_shared<const BlockGraph>(std::move(bb).finish());
  KernelGraphBuilder b("g");
  int good = b.input("A", {4, 8}, DType::F16);
  int bad = b.input("B", {4, 8}, DType::F32);
  EXPECT_EQ(code_of([&] { b.graph_defined(block, {bad}, "k0"); }), ErrorCode::Shape);
  auto outs = b.graph_defined(block, {good}, "k0");
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(b.peek().tensor(outs[0]).shape, (Shape{4, 8}));
  EXPECT_EQ(code_of([&] { b.graph_defined(block, {good}, "k0"); }), ErrorCode::Name);
}

TEST(Ops, TableIsConsistentAndNamesRoundTrip) {
  for (const OpInfo& i : all_ops()) {
    EXPECT_EQ(op_from_name(i.name), i.kind);
    EXPECT_EQ(&op_info(i.kind), &i);
    EXPECT_LE(i.min_inputs, i.max_inputs);
  }
  EXPECT_EQ(closest_op_name("matmull", kKernel), "matmul");
  EXPECT_EQ(closest_op_name("zzzzzzzz", kKernel), "");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Building is linear in the number of ops: a 100k-op chain would take hours if name lookups or
// producer queries scanned the graph (a spec file may hold that many nodes).
TEST(KernelGraph, BuildingALongChainIsLinear) {
  KernelGraphBuilder b("chain");
  int t = b.input("X", {4}, DType::F16);
  for (int i = 0; i < 100000; ++i) t = b.op(OpKind::Neg, {t}, {}, "n" + std::to_string(i));
  b.output(t);
  KernelGraph g = std::move(b).finish();
  EXPECT_EQ(g.ops.size(), 100000u);
}

}  // namespace
}  // namespace kiln
