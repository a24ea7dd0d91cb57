// The row-chain lowering takes exactly the block graphs whose values are whole rows (per row or
// shared weights), per-row scalars and constants, with reductions over the row only, and plans a
// launch that covers every chunk of a row; anything else stays with the generic block kernel.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <tuple>

#include "kiln/codegen/emit.h"
#include "kiln/codegen/lowerings/row_chain.h"
#include "kiln/codegen/schedule.h"

namespace kiln {
namespace {

// What to break in the sandwich norm O = rms_norm(X + rms_norm(Y) * w1) * w2, M rows of N, R rows
// per block: each variant violates one condition of the lowering.
enum class Variant {
  Plain,
  LoopOverRows,    // the rows walked by a loop dim, not the grid
  ColumnSum,       // a reduction over the rows, not along them
  WeightPerBlock,  // a [G, N] weight tiled by the grid: not one weight for every row
  MatMul,          // a product in the chain
};

struct Case {
  int64_t M, N, R;
  DType dt = DType::F16;
};

// rms_norm(x) * w over the last dim as the search writes it in a block graph: the sum of squares,
// then elementwise ops.
int rms(BlockGraphBuilder& b, int x, int w, int64_t N) {
  Attrs sum;
  sum.dim = 1;
  sum.keepdim = true;
  int ss = b.op(OpKind::Sum, {b.op(OpKind::Square, {x})}, sum);
  Attrs inv, eps;
  inv.value = 1.0 / double(N);
  eps.value = 1e-6;
  int ms = b.op(OpKind::Mul, {ss, b.op(OpKind::Constant, {}, inv)});
  int r = b.op(OpKind::Rsqrt, {b.op(OpKind::Add, {ms, b.op(OpKind::Constant, {}, eps)})});
  return b.op(OpKind::Mul, {b.op(OpKind::Mul, {x, r}), w});
}

BlockGraph build(const Case& c, Variant v) {
  const int64_t G = c.M / c.R;
  std::vector<TensorDesc> ins = {{"X", {c.M, c.N}, c.dt},
                                 {"Y", {c.M, c.N}, c.dt},
                                 {"w1", {c.N}, c.dt},
                                 {"w2", {v == Variant::WeightPerBlock ? G : 1, c.N}, c.dt},
                                 {"P", {c.N, c.N}, c.dt}};
  const bool loop = v == Variant::LoopOverRows;
  BlockGraphBuilder b(loop ? std::vector<int64_t>{1} : std::vector<int64_t>{G}, 128,
                      loop ? std::vector<int64_t>{G} : std::vector<int64_t>{}, ins);
  const std::vector<int> rows_imap = loop ? std::vector<int>{-1} : std::vector<int>{0};
  const std::vector<int> rows_fmap = loop ? std::vector<int>{0} : std::vector<int>{};
  const std::vector<int> none_fmap = loop ? std::vector<int>{-1} : std::vector<int>{};
  int x = b.input(0, rows_imap, rows_fmap);
  int y = b.input(1, rows_imap, rows_fmap);
  int w1 = b.input(2, {-1}, none_fmap);
  int w2 = b.input(3, v == Variant::WeightPerBlock ? std::vector<int>{0} : std::vector<int>{-1},
                   none_fmap);
  int n1 = rms(b, y, w1, c.N);
  if (v == Variant::MatMul) n1 = b.op(OpKind::MatMul, {n1, b.input(4, {-1}, none_fmap)});
  int s = b.op(OpKind::Add, {x, n1});
  if (v == Variant::ColumnSum) {
    Attrs sum;
    sum.dim = 0;
    sum.keepdim = true;
    s = b.op(OpKind::Add, {s, b.op(OpKind::Sum, {s}, sum)});
  }
  int o = rms(b, s, w2, c.N);
  b.output(o, rows_imap, rows_fmap, c.dt, "O");
  return std::move(b).finish(target_for(Arch::Sm90a));
}

KernelGraph wrap(const Case& c, Variant v) {
  KernelGraphBuilder kb("row_chain", "", Arch::Sm90a);
  const int64_t G = c.M / c.R;
  std::vector<int> ins = {kb.input("X", {c.M, c.N}, c.dt), kb.input("Y", {c.M, c.N}, c.dt),
                          kb.input("w1", {c.N}, c.dt),
                          kb.input("w2", {v == Variant::WeightPerBlock ? G : 1, c.N}, c.dt),
                          kb.input("P", {c.N, c.N}, c.dt)};
  auto bg = std::make_shared<const BlockGraph>(build(c, v));
  kb.output(kb.graph_defined(bg, ins, "k")[0]);
  return std::move(kb).finish();
}

TEST(RowChain, PlansEveryRowShape) {
  const Target& t = target_for(Arch::Sm90a);
  for (const Case& c :
       {Case{1, 8192, 1}, Case{16, 8192, 1}, Case{128, 4096, 2}, Case{64, 11008, 1},
        Case{8, 256, 8}, Case{4, 64, 1, DType::F32}, Case{32, 4096, 1, DType::BF16}}) {
    SCOPED_TRACE(fmt::format("M {} N {} R {} {}", c.M, c.N, c.R, dtype_name(c.dt)));
    KernelGraph g = wrap(c, Variant::Plain);
    const Schedule s = plan_schedule(g, t);
    const RowChainKernel* p = s.kernels[0].as<RowChainKernel>();
    ASSERT_TRUE(p) << s.kernels[0].strategy();
    EXPECT_EQ(p->rows, c.R);
    EXPECT_EQ(p->n, c.N);
    EXPECT_EQ(p->blocks, c.M / c.R);
    EXPECT_EQ(s.kernels[0].grid, c.M / c.R * p->cluster);
    // Every 8-element chunk of a row has a thread of its cluster, and no thread is idle across
    // all its chunks.
    EXPECT_EQ(p->threads % 32, 0);
    EXPECT_LE(p->threads, 1024);
    const int64_t span = int64_t(p->threads) * p->cluster;
    EXPECT_GE(span * p->chunks * 8, c.N);
    EXPECT_LT(span * (p->chunks - 1) * 8, c.N);
    EXPECT_EQ(p->reductions, 2);
    // The emitted kernel holds the rows in registers and reduces twice per row, each reduction
    // in a slot of its own.
    const std::string cu = emit_cuda(g);
    EXPECT_NE(cu.find("row chain in registers"), std::string::npos);
    for (int j = 0; j < 2; ++j)
      EXPECT_NE(cu.find(fmt::format("kiln::cg::row_reduce<{}, {}>(v", p->threads / 32, p->cluster)),
                std::string::npos);
    EXPECT_NE(cu.find("kiln_red[(r & 1) * 2 + 0]"), std::string::npos);
    EXPECT_NE(cu.find("kiln_red[(r & 1) * 2 + 1]"), std::string::npos);
  }
}

TEST(RowChain, LeavesEverythingElseToTheBlockKernel) {
  const Target& t = target_for(Arch::Sm90a);
  const Case c{16, 64, 2};
  for (Variant v :
       {Variant::LoopOverRows, Variant::ColumnSum, Variant::WeightPerBlock, Variant::MatMul}) {
    SCOPED_TRACE(static_cast<int>(v));
    const Schedule s = plan_schedule(wrap(c, v), t);
    EXPECT_FALSE(s.kernels[0].as<RowChainKernel>()) << s.kernels[0].strategy();
    EXPECT_TRUE(s.kernels[0].as<BlockGraphKernel>()) << s.kernels[0].strategy();
  }
  // Rows not a whole number of 8-element chunks.
  EXPECT_FALSE(
      plan_schedule(wrap({16, 1004, 1}, Variant::Plain), t).kernels[0].as<RowChainKernel>());
  // The CPU simulator's plans: generic kernels only.
  EXPECT_FALSE(plan_schedule(wrap(c, Variant::Plain), t, PlanOptions{false})
                   .kernels[0]
                   .as<RowChainKernel>());
}

TEST(RowChain, CostsItsRowsAndReductions) {
  // More rows per block cost more (they run one after another); the same rows over more blocks
  // cost no more.
  const Target& t = target_for(Arch::Sm90a);
  auto time = [&](const Case& c) {
    KernelGraph g = wrap(c, Variant::Plain);
    const Schedule s = plan_schedule(g, t);
    return plan_cost(g, g.ops.back(), t, s.kernels.back()).time;
  };
  EXPECT_LT(time({16, 1024, 1}), time({16, 1024, 4}));
  EXPECT_LE(time({16, 1024, 1}), time({16, 1024, 8}));
}

// add_rmsnorm's chain over M rows of N: H = X + R, Y = rms_norm(H) * w, both saved; one reduction.
KernelGraph add_norm(int64_t M, int64_t N, Arch arch) {
  const Target& t = target_for(arch);
  std::vector<TensorDesc> ins = {
      {"X", {M, N}, DType::F16}, {"R", {M, N}, DType::F16}, {"w", {N}, DType::F16}};
  BlockGraphBuilder b({M}, 128, {}, ins);
  int h = b.op(OpKind::Add, {b.input(0, {0}, {}), b.input(1, {0}, {})});
  int y = rms(b, h, b.input(2, {-1}, {}), N);
  b.output(h, {0}, {}, DType::F16, "H");
  b.output(y, {0}, {}, DType::F16, "Y");
  KernelGraphBuilder kb("add_norm", "", arch);
  std::vector<int> kin = {kb.input("X", {M, N}, DType::F16), kb.input("R", {M, N}, DType::F16),
                          kb.input("w", {N}, DType::F16)};
  auto bg = std::make_shared<const BlockGraph>(std::move(b).finish(t));
  for (int o : kb.graph_defined(bg, kin, "k")) kb.output(o);
  return std::move(kb).finish();
}

// Few long rows on sm_90a: the row is split over a cluster, every CTA taking its share of the row
// in, each reduction through distributed shared memory; the launch names the cluster. Many rows
// (the grid fills the SMs), sm_80 (no clusters) or short rows keep one CTA per row.
TEST(RowChain, SplitsFewLongRowsOverAClusterOnHopper) {
  const Target& h100 = target_for(Arch::Sm90a);
  {
    const KernelGraph g = add_norm(1, 16384, Arch::Sm90a);
    const Schedule s = plan_schedule(g, h100);
    const RowChainKernel* p = s.kernels[0].as<RowChainKernel>();
    ASSERT_TRUE(p) << s.kernels[0].strategy();
    EXPECT_GT(p->cluster, 1);
    EXPECT_EQ(s.kernels[0].grid, p->cluster);
    EXPECT_EQ(int64_t(p->threads) * p->cluster * p->chunks * 8, 16384);
    const std::string cu = emit_cuda(g);
    // The launch names the grid of G x C CTAs and the cluster.
    EXPECT_NE(cu.find(fmt::format("kiln::rt::launch(k0_k, dim3({}), dim3({}), 0, stream, {}, ",
                                  p->cluster, p->threads, p->cluster)),
              std::string::npos);
    EXPECT_NE(cu.find(fmt::format("const int g = (int)(blockIdx.x % {}) * {} + tid;", p->cluster,
                                  p->threads)),
              std::string::npos);
    EXPECT_NE(cu.find(fmt::format("row_reduce<{}, {}>", p->threads / 32, p->cluster)),
              std::string::npos);
    // The split pays: one CTA per row is modeled slower.
    RowChainKernel one = *p;
    one.cluster = 1;
    one.threads = 512;
    one.chunks = 4;
    KernelPlan kp = s.kernels[0];
    const CostContext cx{g, g.ops.back(), h100, kp};
    EXPECT_LT(p->cost(cx).time, one.cost(cx).time);
  }
  for (auto [M, N, arch] :
       {std::tuple{1, 16384, Arch::Sm80}, {512, 16384, Arch::Sm90a}, {1, 512, Arch::Sm90a}}) {
    SCOPED_TRACE(fmt::format("M {} N {} {}", M, N, target_for(arch).name));
    const KernelGraph g = add_norm(M, N, arch);
    const Schedule s = plan_schedule(g, target_for(arch));
    const RowChainKernel* p = s.kernels[0].as<RowChainKernel>();
    ASSERT_TRUE(p) << s.kernels[0].strategy();
    EXPECT_EQ(p->cluster, 1);
    EXPECT_EQ(s.kernels[0].grid, M);
    EmitOptions o;
    o.arch = arch;
    EXPECT_NE(emit_cuda(g, o).find(fmt::format("kiln::rt::launch(k0_k, dim3({}), dim3({}), 0, "
                                               "stream, 1, ",
                                               M, p->threads)),
              std::string::npos);
  }
}

// A row times a column (linear_mean's X·v after its rewrite): each row's dot product with a
// shared vector, one value per row, saved as an [M] output; the vector as a [N, 1] column or as
// the transpose of a [1, N] row. Two columns, or a column that differs per block, are not a row
// chain.
KernelGraph row_dot(int64_t M, int64_t N, int64_t R, bool transposed, int64_t cols = 1,
                    bool keep = false) {
  const int64_t G = M / R;
  const Shape vshape = transposed ? Shape{1, N} : Shape{N, cols};
  std::vector<TensorDesc> ins = {{"X", {M, N}, DType::BF16}, {"v", vshape, DType::F32}};
  BlockGraphBuilder b({G}, 128, {}, ins);
  int x = b.input(0, {0}, {});
  int v = b.input(1, {-1}, {});
  if (transposed) {
    Attrs p;
    p.perm = {1, 0};
    v = b.op(OpKind::Transpose, {v}, p);
  }
  int d = b.op(OpKind::MatMul, {x, v});
  if (!keep) {
    Attrs drop;
    drop.dim = 1;
    drop.keepdim = false;
    d = b.op(OpKind::Sum, {d}, drop);
  }
  Attrs inv;
  inv.value = 1.0 / double(N);
  int y = b.op(OpKind::Mul, {d, b.op(OpKind::Constant, {}, inv)});
  b.output(y, {0}, {}, DType::BF16, "Y");
  KernelGraphBuilder kb("row_dot", "", Arch::Sm90a);
  std::vector<int> kin = {kb.input("X", {M, N}, DType::BF16), kb.input("v", vshape, DType::F32)};
  auto bg = std::make_shared<const BlockGraph>(std::move(b).finish(target_for(Arch::Sm90a)));
  kb.output(kb.graph_defined(bg, kin, "k")[0]);
  return std::move(kb).finish();
}

TEST(RowChain, DotsRowsWithAColumnAndSavesOneValuePerRow) {
  const Target& t = target_for(Arch::Sm90a);
  for (bool transposed : {false, true})
    for (bool keep : {false, true})
      for (auto [M, N, R] : {std::tuple{1024, 4096, 1}, {64, 2048, 8}, {16, 512, 16}}) {
        SCOPED_TRACE(
            fmt::format("M {} N {} R {} transposed {} keep {}", M, N, R, transposed, keep));
        const KernelGraph g = row_dot(M, N, R, transposed, 1, keep);
        const Schedule s = plan_schedule(g, t);
        const RowChainKernel* p = s.kernels[0].as<RowChainKernel>();
        ASSERT_TRUE(p) << s.kernels[0].strategy();
        EXPECT_EQ(p->n, N);
        EXPECT_EQ(p->rows, R);
        EXPECT_EQ(p->blocks, M / R);
        EXPECT_EQ(p->reductions, 1);  // the dot; the sum that drops the kept dim is the value
        const std::string cu = emit_cuda(g);
        EXPECT_NE(cu.find("if (g == 0) out0[row] = kiln::rt::from_f32<__nv_bfloat16>("),
                  std::string::npos);
        EXPECT_NE(cu.find(" * v"), std::string::npos);  // the product inside the block sum
      }
  // Two columns: a matmul, not a dot.
  EXPECT_FALSE(plan_schedule(row_dot(64, 512, 8, false, 2), t).kernels[0].as<RowChainKernel>());
}
}  // namespace
}  // namespace kiln
