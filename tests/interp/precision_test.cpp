// F32 evaluation (float arithmetic, stores rounded to the dtypes) agrees with the F64 reference
// within the spec's tolerance on scaled-down versions of every suite computation, and F64 is
// deterministic whatever the thread count.
#include "helpers.h"
#include "suite.h"

namespace kiln {
namespace {

KernelGraph small_gqa() {
  KernelGraphBuilder b("gqa_small");
  int q = b.input("Q", {2, 32, 64}, DType::F16);
  int k = b.input("K", {2, 64, 512}, DType::F16);
  int v = b.input("V", {2, 512, 64}, DType::F16);
  int p = b.op(OpKind::Exp, {b.op(OpKind::MatMul, {q, k}, {}, "S")}, {}, "P");
  int s = b.op(OpKind::Sum, {p}, testing::last_dim(), "Z");
  b.output(b.op(OpKind::MatMul, {b.op(OpKind::Div, {p, s}, {}, "A"), v}, {}, "O"));
  return std::move(b).finish();
}

KernelGraph bf16_softmax_mlp() {
  KernelGraphBuilder b("bf16_mix");
  int x = b.input("X", {8, 256}, DType::BF16);
  int w = b.input("W", {256, 128}, DType::BF16);
  int h = b.op(OpKind::MatMul, {b.op(OpKind::RmsNorm, {x}, {}, "N"), w}, {}, "H");
  Attrs gt;
  gt.approximate = GeluApprox::Tanh;
  b.output(b.op(OpKind::Softmax, {b.op(OpKind::Gelu, {h}, gt, "G")}, {}, "Y"));
  return std::move(b).finish();
}

TEST(Precision, F32AgreesWithF64OnSuiteShapes) {
  std::vector<KernelGraph> graphs = {testing::lora(), testing::add_rmsnorm(4), small_gqa(),
                                     testing::skinny_gemm(8, 256, 2048), bf16_softmax_mlp()};
  for (const KernelGraph& g : graphs)
    for (uint64_t seed : {1, 2, 3}) {
      auto in = random_inputs(g, seed);
      auto ref = evaluate(g, in, {Precision::F64, 0});
      auto got = evaluate(g, in, {Precision::F32, 0});
      for (size_t i = 0; i < ref.size(); ++i) {
        double err = relative_l2_error(got[i], ref[i]);
        EXPECT_LE(err, spec_tolerance(ref[i].dtype)) << g.name << " output " << i;
        EXPECT_GT(err, 0.0) << g.name << ": F32 should round somewhere";
      }
    }
}

TEST(Precision, F64IsDeterministicAcrossThreadCounts) {
  KernelGraph g = small_gqa();
  auto in = random_inputs(g, 4);
  auto a = evaluate(g, in, {Precision::F64, 1});
  auto b = evaluate(g, in, {Precision::F64, 2});
  auto c = evaluate(g, in, {Precision::F64, 0});
  testing::expect_same(a[0], b[0]);
  testing::expect_same(a[0], c[0]);
}

}  // namespace
}  // namespace kiln
