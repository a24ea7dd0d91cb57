// Partial evaluation: evaluate_rows gives exactly the rows a full evaluation gives, for every op
// class and for graph-defined kernels, and the plan really narrows the work.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>

#include "block_graphs.h"
#include "helpers.h"
#include "kiln/interp/eval_core.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/memory.h"
#include "suite.h"

namespace kiln {
namespace {

// For each precision and a few row samples per output: evaluate_rows == select_rows(evaluate).
void expect_rows_match(const KernelGraph& g, uint64_t seed = 1) {
  auto in = random_inputs(g, seed);
  for (Precision prec : {Precision::F64, Precision::F32}) {
    auto full = evaluate(g, in, {prec, 0});
    for (int64_t count : {1, 2, 3, 7}) {
      std::vector<std::vector<int64_t>> rows;
      for (size_t i = 0; i < g.outputs.size(); ++i)
        rows.push_back(sample_rows(g.tensor(g.outputs[i]).shape, count, seed + count + i));
      auto part = evaluate_rows(g, in, rows, {prec, 0});
      // The input rows input_rows names are all the evaluation reads: inputs holding only those
      // (the rest zero) give the same rows.
      const auto in_rows = input_rows(g, rows);
      auto part_lazy = evaluate_rows(g, random_inputs(g, seed, 0, &in_rows), rows, {prec, 0});
      ASSERT_EQ(part.size(), full.size());
      for (size_t i = 0; i < part.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << g.name << " output " << i << " count " << count);
        testing::expect_same(part[i], select_rows(full[i], rows[i]));
        testing::expect_same(part_lazy[i], part[i]);
      }
    }
  }
}

TEST(Partial, SpecOpsOfEveryClass) {
  KernelGraphBuilder b("mix");
  int x = b.input("X", {4, 6, 8}, DType::F16);
  int w = b.input("W", {8, 5}, DType::F16);
  int v = b.input("v", {8}, DType::BF16);
  Attrs d0, d1, d2, p201;
  d0.dim = 0;
  d0.keepdim = false;
  d1.dim = 1;
  d2.dim = 2;
  d2.keepdim = false;
  p201.perm = {2, 0, 1};
  int t = b.op(OpKind::Transpose, {x}, {}, "T");      // [4, 8, 6]
  b.output(b.op(OpKind::Sum, {t}, d0, "S0"));         // [8, 6]
  b.output(b.op(OpKind::Max, {x}, d2, "M2"));         // [4, 6]
  b.output(b.op(OpKind::Mean, {x}, d1, "M1"));        // [4, 1, 8]
  b.output(b.op(OpKind::Softmax, {x}, d1, "Sm1"));    // along a middle dim
  b.output(b.op(OpKind::Softmax, {x}, {}, "Sm"));     // along the last dim
  b.output(b.op(OpKind::Transpose, {x}, p201, "P"));  // [8, 4, 6]
  int mm = b.op(OpKind::MatMul, {x, w}, {}, "XW");    // batch broadcast: [4, 6, 5]
  b.output(b.op(OpKind::Silu, {mm}, {}, "Y"));
  b.output(b.op(OpKind::RmsNorm, {x, v}, {}, "R"));
  b.output(b.op(OpKind::Mul, {x, v}, {}, "Xv"));
  Attrs c;
  c.value = 2;
  b.output(b.op(OpKind::Div, {b.op(OpKind::Constant, {}, c, "two"), x}, {}, "D"));
  b.output(x);
  expect_rows_match(std::move(b).finish());
}

TEST(Partial, SuiteShapedSpecs) {
  expect_rows_match(testing::lora());
  expect_rows_match(testing::add_rmsnorm(16));
}

TEST(Partial, GraphDefinedKernels) {
  expect_rows_match(testing::tiled_matmul(64, 128, 96, 4, 3, 4).mugraph);
  expect_rows_match(testing::split_k_matmul(64, 128, 96, 3, 4, 2).mugraph);
  expect_rows_match(testing::online_softmax(16, 64, 4, 4).mugraph);
  expect_rows_match(testing::gated_mlp(32, 64, 32, 4, 2, 4).mugraph);
  expect_rows_match(testing::flash_attention(4, 8, 8, 32, 2).mugraph);
  expect_rows_match(testing::flash_attention(4, 8, 8, 32, 2).spec);
}

TEST(Partial, PlanNarrowsRowsAndBlocks) {
  // Tiled matmul with 4 row blocks of 16 rows x 3 column blocks: row 5 needs the 3 blocks of
  // row block 0 and only rows 0..15 of A.
  KernelGraph g = testing::tiled_matmul(64, 128, 96, 4, 3, 4).mugraph;
  interp::EvalPlan plan = interp::plan_rows(g, {{5}});
  ASSERT_EQ(plan.blocks[0].size(), 12u);
  for (int b = 0; b < 12; ++b) EXPECT_EQ(plan.blocks[0][b], b < 3) << b;
  const interp::RowMask& a = plan.rows[g.inputs[0]];
  ASSERT_EQ(a.size(), 64u);
  for (int r = 0; r < 64; ++r) EXPECT_EQ(a[r], r < 16) << r;
  EXPECT_TRUE(plan.rows[g.inputs[1]].empty());  // all of B

  // The spec matmul needs exactly the one row of A.
  KernelGraph s = testing::tiled_matmul(64, 128, 96, 4, 3, 4).spec;
  plan = interp::plan_rows(s, {{5, 9}});
  const interp::RowMask& sa = plan.rows[s.inputs[0]];
  for (int r = 0; r < 64; ++r) EXPECT_EQ(sa[r], r == 5 || r == 9) << r;

  // An output with no rows requested is not computed at all.
  KernelGraph two = testing::add_rmsnorm(4);
  plan = interp::plan_rows(two, {{1}, {}});
  EXPECT_TRUE(plan.needed[two.outputs[0]]);
  EXPECT_FALSE(plan.rows[two.outputs[1]].empty());  // H: row 1 only, for the rms_norm
}

TEST(Partial, SampleRows) {
  auto r = sample_rows({1000, 8}, 10, 3);
  ASSERT_EQ(r.size(), 10u);
  EXPECT_EQ(r.front(), 0);
  EXPECT_EQ(r.back(), 999);
  for (size_t i = 1; i < r.size(); ++i) EXPECT_LT(r[i - 1], r[i]);
  EXPECT_EQ(sample_rows({1000, 8}, 10, 3), r);
  EXPECT_NE(sample_rows({1000, 8}, 10, 4), r);
  EXPECT_EQ(sample_rows({3, 8}, 10, 1), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(sample_rows({8}, 2, 1), (std::vector<int64_t>{0}));  // a vector is one row
  EXPECT_EQ(sample_rows({5, 2}, 1, 1), (std::vector<int64_t>{0}));
}

// A partial evaluation of a tensor far bigger than what it computes holds only what it computes:
// 2^31 elements (16 GB in float64 per tensor), three rows evaluated, inputs generated at those
// rows only.
TEST(Partial, SampledRowsOfAHugeTensorHoldOnlyThoseRows) {
  KernelGraphBuilder b("huge");
  int x = b.input("X", {32768, 65536}, DType::F16);
  int w = b.input("w", {65536}, DType::F16);
  Attrs norm;
  norm.eps = 1e-6;
  int e = b.op(OpKind::Exp, {x}, {}, "E");
  int n = b.op(OpKind::RmsNorm, {x, w}, norm, "N");
  b.output(b.op(OpKind::Mul, {e, n}, {}, "Y"));
  KernelGraph g = std::move(b).finish();
  const std::vector<std::vector<int64_t>> rows = {{0, 12345, 32767}};
  const auto in_rows = input_rows(g, rows);
  ASSERT_EQ(in_rows.size(), 2u);
  EXPECT_EQ(std::count(in_rows[0].begin(), in_rows[0].end(), 1), 3);
  EXPECT_TRUE(in_rows[1].empty());  // the weight: every row (it has one)
  const int64_t before = rss_bytes();
  for (Precision prec : {Precision::F64, Precision::F32}) {
    EvalOptions opt{prec, 0};
    opt.max_bytes = int64_t{1} << 30;  // the estimate must fit too
    auto in = random_inputs(g, 7, 1.0, &in_rows);
    auto out = evaluate_rows(g, in, rows, opt);
    ASSERT_EQ(out[0].shape, (Shape{3, 65536}));
    // Row 12345 against its own definition: exp(x) * x / rms(x) * w.
    const double* xr = in[0].data.data() + 12345 * int64_t{65536};
    double ss = 0;
    for (int64_t j = 0; j < 65536; ++j) ss += xr[j] * xr[j];
    const double inv = 1 / std::sqrt(ss / 65536 + 1e-6);
    for (int64_t j : {0, 777, 65535}) {
      const double want = std::exp(xr[j]) * xr[j] * inv * in[1].data[j];
      EXPECT_NEAR(out[0].data[65536 + j], want, 1e-3 * (1 + std::fabs(want))) << j;
    }
    EXPECT_LT(rss_bytes() - before, int64_t{64} << 20) << "bytes resident with the inputs";
  }
  // The peak, intermediates included (a whole tensor would be 4 GB in f16, 16 GB in f64).
  struct rusage ru {};
  ASSERT_EQ(getrusage(RUSAGE_SELF, &ru), 0);
  EXPECT_LT(ru.ru_maxrss, 1 << 20) << "peak resident set, KB";
}

TEST(Partial, RowOutOfRangeIsAShapeError) {
  KernelGraph g = testing::lora();
  auto in = random_inputs(g, 1);
  try {
    evaluate_rows(g, in, {{16}});
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), ErrorCode::Shape);
  }
}

}  // namespace
}  // namespace kiln
