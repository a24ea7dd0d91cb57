// Invariants of kernel graphs: shape and dtype inference for every predefined op class, names,
// and graph-defined ops agreeing with their block graphs.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
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

namespace kiln {
namespace {

DType dtype_of(const KernelGraph& g, const std::string& name) {
  const int t = g.find_tensor(name);
  EXPECT_GE(t, 0) << name;
  return t < 0 ? DType::F32 : g.tensor(t).dtype;
}

// Output names, shapes and dtypes, in order: store_exact_intermediates never changes them.
std::vector<TensorDesc> output_descs(const KernelGraph& g) {
  std::vector<TensorDesc> d;
  for (int o : g.outputs) d.push_back(g.tensor(o));
  return d;
}

TEST(StoreExactIntermediates, WithoutF32OutputsTheGraphIsUnchanged) {
  KernelGraphBuilder b("g");
  int x = b.input("X", {4, 8}, DType::F16), w = b.input("W", {8, 2}, DType::F16);
  int f = b.input("F", {2}, DType::F32);
  int y = b.op(OpKind::MatMul, {x, w}, {}, "Y");
  b.output(b.op(OpKind::Add, {y, f}, {}, "O"));  // f16: the first input's dtype
  KernelGraph g = std::move(b).finish();
  KernelGraph h = store_exact_intermediates(g);
  EXPECT_EQ(h.tensors, g.tensors);
  EXPECT_EQ(h.ops.size(), g.ops.size());
}

TEST(StoreExactIntermediates, WidensWhatAnF32OutputReads) {
  // O = b + relu(X W1) W2 with f16 X, W: O is f32 (its first input), H, R, Y are stored in f32.
  KernelGraphBuilder b("mlp");
  int bias = b.input("b", {4}, DType::F32), x = b.input("X", {2, 8}, DType::F16);
  int w1 = b.input("W1", {8, 16}, DType::F16), w2 = b.input("W2", {16, 4}, DType::F16);
  int h = b.op(OpKind::MatMul, {x, w1}, {}, "H");
  int r = b.op(OpKind::Relu, {h}, {}, "R");
  int y = b.op(OpKind::MatMul, {r, w2}, {}, "Y");
  b.output(b.op(OpKind::Add, {bias, y}, {}, "O"));
  KernelGraph g = std::move(b).finish();
  EXPECT_EQ(dtype_of(g, "H"), DType::F16);
  KernelGraph e = store_exact_intermediates(g);
  EXPECT_EQ(output_descs(e), output_descs(g));
  EXPECT_EQ(e.ops.size(), g.ops.size());
  for (const char* n : {"H", "R", "Y", "O"}) EXPECT_EQ(dtype_of(e, n), DType::F32) << n;
  for (const char* n : {"X", "W1", "W2"}) EXPECT_EQ(dtype_of(e, n), DType::F16) << n;
  // Idempotent, and the widened graph still reads as a spec.
  EXPECT_EQ(store_exact_intermediates(e).tensors, e.tensors);
  EXPECT_TRUE(e.is_spec());
}

TEST(StoreExactIntermediates, A16BitOutputThatAnF32OutputReadsGetsAnF32Twin) {
  // Y (bf16) is an output and Z = b + Y (f32) reads it: Y keeps its dtype for its own output, and
  // Z reads Y_f32, the same matmul stored in f32. A name taken already is not reused.
  KernelGraphBuilder b("twin");
  int x = b.input("X", {2, 8}, DType::BF16), w = b.input("W", {8, 4}, DType::BF16);
  int bias = b.input("Y_f32", {4}, DType::F32);
  int y = b.op(OpKind::MatMul, {x, w}, {}, "Y");
  int z = b.op(OpKind::Add, {bias, y}, {}, "Z");
  int o = b.op(OpKind::Gelu, {z}, {}, "O");
  b.output(y);
  b.output(z);
  b.output(o);
  KernelGraph g = std::move(b).finish();
  KernelGraph e = store_exact_intermediates(g);
  EXPECT_EQ(output_descs(e), output_descs(g));
  ASSERT_EQ(e.ops.size(), g.ops.size() + 1);
  const int twin = e.find_tensor("Y_f32_");
  ASSERT_GE(twin, 0);
  EXPECT_EQ(e.tensor(twin).dtype, DType::F32);
  const KernelOp& zop = e.ops[e.producer(e.find_tensor("Z"))];
  EXPECT_EQ(zop.inputs[1], twin);
  EXPECT_EQ(e.ops[e.producer(twin)].kind, OpKind::MatMul);
  EXPECT_EQ(dtype_of(e, "Y"), DType::BF16);
}

TEST(StoreExactIntermediates, ConstantChainsAndPartsNoF32OutputReads) {
  // s = sqrt(exp(0.5)) is f32 already; O = X * s (bf16) feeds the f32 output P = s - O, while
  // Q = relu(X) only feeds a bf16 output and stays bf16.
  KernelGraphBuilder b("consts");
  int x = b.input("X", {4, 40}, DType::BF16);
  Attrs half;
  half.value = 0.5;
  int a = b.op(OpKind::Constant, {}, half, "a");
  int s = b.op(OpKind::Sqrt, {b.op(OpKind::Exp, {a}, {}, "e")}, {}, "s");
  int o = b.op(OpKind::Mul, {x, s}, {}, "O");
  int p = b.op(OpKind::Sub, {s, o}, {}, "P");
  int q = b.op(OpKind::Relu, {x}, {}, "Q");
  b.output(p);
  b.output(b.op(OpKind::Neg, {q}, {}, "R"));
  KernelGraph g = std::move(b).finish();
  ASSERT_EQ(dtype_of(g, "P"), DType::F32);
  KernelGraph e = store_exact_intermediates(g);
  EXPECT_EQ(output_descs(e), output_descs(g));
  EXPECT_EQ(dtype_of(e, "O"), DType::F32);
  EXPECT_EQ(dtype_of(e, "Q"), DType::BF16);
  EXPECT_EQ(dtype_of(e, "R"), DType::BF16);
}

TEST(StoreExactIntermediates, IsLinearOnLongChains) {
  KernelGraphBuilder b("chain");
  int t = b.input("X", {4}, DType::F16);
  for (int i = 0; i < 100000; ++i) t = b.op(OpKind::Neg, {t}, {}, "n" + std::to_string(i));
  int f = b.input("F", {4}, DType::F32);
  b.output(b.op(OpKind::Add, {f, t}, {}, "O"));
  KernelGraph e = store_exact_intermediates(std::move(b).finish());
  EXPECT_EQ(dtype_of(e, "n99999"), DType::F32);
  EXPECT_EQ(dtype_of(e, "X"), DType::F16);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// The range rule: exp of an unbounded exponent and what is computed from it are stored in f32 up
// to the normalization; a max-subtracted exponent, the normalized probabilities and the outputs
// keep their 16-bit dtypes; an unbounded 16-bit output that others read gets an f32 twin.
TEST(KernelGraph, UnboundedIntermediatesAreStoredInF32) {
  const KernelGraph g = parse_spec(R"({"name": "att", "inputs": [
      {"name": "Q", "shape": [2, 8, 16], "dtype": "f16"}, {"name": "K", "shape": [2, 16, 32], "dtype": "f16"},
      {"name": "V", "shape": [2, 32, 16], "dtype": "f16"}],
    "nodes": [{"name": "S", "op": "matmul", "inputs": ["Q", "K"]},
              {"name": "P", "op": "exp", "inputs": ["S"]},
              {"name": "L", "op": "sum", "inputs": ["P"], "attrs": {"dim": -1}},
              {"name": "A", "op": "div", "inputs": ["P", "L"]},
              {"name": "O", "op": "matmul", "inputs": ["A", "V"]},
              {"name": "M", "op": "max", "inputs": ["S"], "attrs": {"dim": -1}},
              {"name": "D", "op": "sub", "inputs": ["S", "M"]},
              {"name": "E", "op": "exp", "inputs": ["D"]},
              {"name": "Z", "op": "sum", "inputs": ["E"], "attrs": {"dim": -1}},
              {"name": "X", "op": "exp", "inputs": ["Q"]},
              {"name": "X2", "op": "mul", "inputs": ["X", "X"]}],
    "outputs": ["O", "Z", "X", "X2"]})");
  EXPECT_EQ(dtype_of(g, "S"), DType::F16);  // a matmul of std-1 data is bounded
  EXPECT_EQ(dtype_of(g, "P"), DType::F32);
  EXPECT_EQ(dtype_of(g, "L"), DType::F32);
  EXPECT_EQ(dtype_of(g, "A"), DType::F16);  // P / sum(P): in [0, 1]
  EXPECT_EQ(dtype_of(g, "E"), DType::F16);  // exp(S - max(S)) <= 1
  EXPECT_EQ(dtype_of(g, "Z"), DType::F16);  // an output keeps its dtype
  EXPECT_EQ(dtype_of(g, "X"), DType::F16);
  EXPECT_EQ(dtype_of(g, "X_f32"), DType::F32);  // what X2 reads
  const int x2 = g.find_tensor("X2");
  ASSERT_GE(g.producer(x2), 0);
  EXPECT_EQ(g.ops[g.producer(x2)].inputs[0], g.find_tensor("X_f32"));
  for (size_t i = 0; i < g.outputs.size(); ++i) EXPECT_EQ(g.tensor(g.outputs[i]).dtype, DType::F16);
}

// The magnitude rule (magnitude.h): square(X W) at k 3072 reaches ~1.1e5 at std 1, past f16, so
// the intermediate is stored in f32; at k 256 (~9.2e3) it stays f16; bf16 holds either.
TEST(KernelGraph, IntermediatesPastF16AtStd1AreStoredInF32) {
  auto spec = [](int k, const char* dt) {
    return parse_spec(fmt::format(R"({{"name": "sq", "inputs": [
        {{"name": "X", "shape": [4, {0}], "dtype": "{1}"}}, {{"name": "W", "shape": [{0}, 32], "dtype": "{1}"}}],
      "nodes": [{{"name": "H", "op": "matmul", "inputs": ["X", "W"]}},
                {{"name": "S", "op": "square", "inputs": ["H"]}},
                {{"name": "M", "op": "mean", "inputs": ["S"], "attrs": {{"dim": -1}}}},
                {{"name": "P", "op": "mul", "inputs": ["H", "H"]}},
                {{"name": "O", "op": "add", "inputs": ["M", "P"]}}],
      "outputs": ["O", "S"]}})",
                                  k, dt));
  };
  const KernelGraph big = spec(3072, "f16");
  EXPECT_EQ(dtype_of(big, "H"), DType::F16);      // X W itself: ~330 at std 1
  EXPECT_EQ(dtype_of(big, "S"), DType::F16);      // an output keeps its dtype ...
  EXPECT_EQ(dtype_of(big, "S_f32"), DType::F32);  // ... and its readers read a twin
  EXPECT_EQ(dtype_of(big, "M"), DType::F16);      // a mean of 32 squares: ~1.1e4
  EXPECT_EQ(dtype_of(big, "P"), DType::F32);
  const KernelGraph small = spec(256, "f16");
  for (const TensorDesc& t : small.tensors) EXPECT_EQ(t.dtype, DType::F16) << t.name;
  const KernelGraph wide = spec(3072, "bf16");
  for (const TensorDesc& t : wide.tensors) EXPECT_EQ(t.dtype, DType::BF16) << t.name;
}

// A Llama MLP after its norm, in f16 at k 1024: silu(N W1) * (N W3) with N = rms_norm(X, g)
// reaches ~2e4 at std 1 and stays f16. The norm's bound is its input's bound over rms (6), not
// the worst case sqrt(n) (32 here), which made every product of such matmuls look past f16.
TEST(KernelGraph, NormedMlpIntermediatesStayF16) {
  const KernelGraph g = parse_spec(R"({"name": "mlp", "inputs": [
      {"name": "X", "shape": [4, 1024], "dtype": "f16"}, {"name": "g", "shape": [1024], "dtype": "f16"},
      {"name": "W1", "shape": [1024, 512], "dtype": "f16"}, {"name": "W3", "shape": [1024, 512], "dtype": "f16"},
      {"name": "W2", "shape": [512, 1024], "dtype": "f16"}],
    "nodes": [{"name": "N", "op": "rms_norm", "inputs": ["X", "g"]},
              {"name": "H1", "op": "matmul", "inputs": ["N", "W1"]},
              {"name": "H3", "op": "matmul", "inputs": ["N", "W3"]},
              {"name": "S", "op": "silu", "inputs": ["H1"]},
              {"name": "M", "op": "mul", "inputs": ["S", "H3"]},
              {"name": "O", "op": "matmul", "inputs": ["M", "W2"]}],
    "outputs": ["O"]})");
  for (const TensorDesc& t : g.tensors) EXPECT_EQ(t.dtype, DType::F16) << t.name;
}

}  // namespace
}  // namespace kiln
