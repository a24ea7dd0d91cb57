// Invariants the block-graph builder enforces: derived tiles and stages, map checks, savers,
// and the exact resource rule per target.
#include <gtest/gtest.h>

#include "kiln/ir/block_graph.h"
#include "kiln/ir/diag.h"

namespace kiln {
namespace {

std::vector<TensorDesc> xw(int64_t m, int64_t k, int64_t n) {
  return {{"X", {m, k}, DType::F16}, {"W", {k, n}, DType::F16}};
}

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.code();
  }
  ADD_FAILURE() << "no UserError thrown";
  return ErrorCode::Unsupported;
}

TEST(BlockGraph, TiledMatmulDerivesTilesAndStages) {
  BlockGraphBuilder b({48}, 128, {64}, xw(2, 4096, 6144));
  int x = b.input(0, {-1}, {1}, "x");
  int w = b.input(1, {1}, {0}, "w");
  int m = b.op(OpKind::MatMul, {x, w}, {}, "m");
  int acc = b.op(OpKind::AccumSum, {m}, {}, "acc");
  b.output(acc, {1}, {-1}, DType::F16, "O");
  BlockGraph g = std::move(b).finish();
  EXPECT_EQ(g.ops[x].shape, (Shape{2, 64}));
  EXPECT_EQ(g.ops[w].shape, (Shape{64, 128}));
  EXPECT_EQ(g.ops[m].shape, (Shape{2, 128}));
  EXPECT_EQ(g.ops[m].stage, Stage::Loop);
  EXPECT_EQ(g.ops[acc].stage, Stage::Post);
  EXPECT_EQ(g.outputs[0].shape, (Shape{2, 6144}));
  EXPECT_EQ(g.num_blocks(), 48);
  EXPECT_EQ(g.num_iterations(), 64);
}

TEST(BlockGraph, InvariantInputHasInvariantStage) {
  BlockGraphBuilder b({4}, 128, {8}, xw(8, 64, 32));
  int x = b.input(0, {0}, {-1}, "x");
  EXPECT_EQ(b.peek().ops[x].stage, Stage::Invariant);
}

TEST(BlockGraph, RejectsTilesThatDoNotDivide) {
  BlockGraphBuilder b({5}, 128, {}, xw(2, 64, 32));
  EXPECT_EQ(code_of([&] { b.input(1, {1}, {}, "w"); }), ErrorCode::Map);
}

TEST(BlockGraph, RejectsMapsOfWrongLengthOrDuplicateDims) {
  BlockGraphBuilder b({4, 2}, 128, {2}, xw(8, 64, 32));
  EXPECT_EQ(code_of([&] { b.input(0, {0}, {1}); }), ErrorCode::Map);
  EXPECT_EQ(code_of([&] { b.input(0, {0, 0}, {1}); }), ErrorCode::Map);
  EXPECT_EQ(code_of([&] { b.input(0, {0, 2}, {1}); }), ErrorCode::Map);
  EXPECT_EQ(code_of([&] { b.input(0, {0, -1}, {-2}); }), ErrorCode::Map);
}

TEST(BlockGraph, RejectsMixingLoopAndPostTiles) {
  BlockGraphBuilder b({1}, 128, {4}, xw(8, 64, 32));
  int x = b.input(0, {-1}, {1});
  int s = b.op(OpKind::AccumSum, {x});
  EXPECT_EQ(code_of([&] { b.op(OpKind::Add, {x, s}); }), ErrorCode::Structure);
  EXPECT_EQ(code_of([&] { b.op(OpKind::AccumSum, {s}); }), ErrorCode::Structure);
}

TEST(BlockGraph, SaverRules) {
  BlockGraphBuilder b({4}, 128, {4}, xw(8, 64, 32));
  int x = b.input(0, {0}, {1}, "x");  // tile [2, 16], loop stage
  // Grid dim of extent 4 must be mapped.
  EXPECT_EQ(code_of([&] { b.output(x, {-1}, {1}, DType::F16, "A"); }), ErrorCode::Map);
  // A loop tile saved without mapping the loop dim would overwrite itself.
  EXPECT_EQ(code_of([&] { b.output(x, {0}, {-1}, DType::F16, "B"); }), ErrorCode::Map);
  // In-loop saver with an extra leading dim: rank 3 output.
  b.output(x, {1}, {0}, DType::F32, "C", 3);
  EXPECT_EQ(b.peek().outputs.back().shape, (Shape{4, 8, 16}));
  int s = b.op(OpKind::AccumSum, {x});
  EXPECT_EQ(code_of([&] { b.output(s, {0}, {1}, DType::F16, "D"); }), ErrorCode::Map);
}

TEST(BlockGraph, AccumRescaleNeedsBroadcastableMax) {
  BlockGraphBuilder b({1}, 128, {4}, {{"S", {16, 64}, DType::F32}});
  int s = b.input(0, {-1}, {1});  // [16, 16]
  Attrs a;
  a.dim = 1;
  int m = b.op(OpKind::Max, {s}, a);  // [16, 1]
  int r = b.op(OpKind::AccumRescale, {s, m});
  EXPECT_EQ(b.peek().ops[r].shape, (Shape{16, 16}));
  EXPECT_EQ(code_of([&] { b.op(OpKind::AccumRescale, {m, s}); }), ErrorCode::Shape);
}

TEST(BlockGraph, FusedThreadGraphBroadcastsInputs) {
  BlockGraphBuilder b({1}, 128, {}, {{"A", {16, 64}, DType::F32}, {"B", {16, 1}, DType::F32}});
  int a = b.input(0, {-1}, {});
  int c = b.input(1, {-1}, {});
  ThreadGraph tg{2, {{OpKind::Silu, {0}, {}}, {OpKind::Mul, {2, 1}, {}}}};
  int f = b.fused(tg, {a, c});
  EXPECT_EQ(b.peek().ops[f].shape, (Shape{16, 64}));
  ThreadGraph bad{1, {{OpKind::MatMul, {0, 0}, {}}}};
  EXPECT_EQ(code_of([&] { b.fused(bad, {a}); }), ErrorCode::Op);
  ThreadGraph forward{1, {{OpKind::Exp, {1}, {}}}};
  EXPECT_EQ(code_of([&] { b.fused(forward, {a}); }), ErrorCode::Structure);
}

TEST(BlockGraph, ResourceRuleIsExactAndPerTarget) {
  // 1 x 160 KB f16 input tile: fits sm_90a (227 KB) but not sm_80 (163 KB)... 170000 B.
  auto make = [] {
    BlockGraphBuilder b({1}, 256, {}, {{"X", {85000}, DType::F16}});
    int x = b.input(0, {-1}, {});
    b.output(x, {-1}, {}, DType::F16, "Y");
    return b;
  };
  BlockGraph g = make().finish(target_for(Arch::Sm90a));
  EXPECT_EQ(block_resources(g).smem_bytes, 170000);
  EXPECT_EQ(block_resources(g).regs_per_thread, 32);
  EXPECT_EQ(code_of([&] { make().finish(target_for(Arch::Sm80)); }), ErrorCode::Resource);
}

TEST(BlockGraph, TilesFeedingOnlyAccumulatorsCountAsRegisters) {
  BlockGraphBuilder b({1}, 128, {4}, xw(16, 256, 64));
  int x = b.input(0, {-1}, {1});          // [16, 64] f16 = 2048 B
  int w = b.input(1, {-1}, {0});          // [64, 64] f16 = 8192 B
  int m = b.op(OpKind::MatMul, {x, w});   // [16, 64] -> 8 regs (only feeds the accumulator)
  int acc = b.op(OpKind::AccumSum, {m});  // 8 regs
  int e = b.op(OpKind::Exp, {acc});       // [16, 64], two readers, not of inputs: 4096 B
  b.output(e, {-1}, {-1}, DType::F16, "O");
  Attrs rows;
  rows.dim = 1;
  int s = b.op(OpKind::Sum, {e}, rows);  // [16, 1] reduction: 64 B
  b.output(s, {-1}, {-1}, DType::F32, "S");
  BlockResources r = block_resources(std::move(b).finish());
  EXPECT_EQ(r.smem_bytes, 2048 + 8192 + 4096 + 64);
  EXPECT_EQ(r.regs_per_thread, 32 + 8 + 8);
}

// Elementwise tiles that the emitter recomputes inside their readers take no shared memory: one
// reader that reads each element once in the same stage, or up to four readers of an op of
// input tiles (h = x + r read by a saver, a square and a product).
TEST(BlockGraph, RecomputedElementwiseTilesTakeNoStorage) {
  std::vector<TensorDesc> in = {{"X", {1, 1024}, DType::F16}, {"R", {1, 1024}, DType::F16}};
  BlockGraphBuilder b({1}, 128, {}, in);
  int x = b.input(0, {-1}, {});       // 2048 B
  int r = b.input(1, {-1}, {});       // 2048 B
  int h = b.op(OpKind::Add, {x, r});  // 3 readers, operands are inputs: 0 B
  b.output(h, {-1}, {}, DType::F16, "H");
  int sq = b.op(OpKind::Square, {h});  // one reader (the sum): 0 B
  Attrs rows;
  rows.dim = 1;
  int ss = b.op(OpKind::Sum, {sq}, rows);  // [1, 1]: 4 B
  int o = b.op(OpKind::Mul, {h, ss});      // one reader (the saver): 0 B
  b.output(o, {-1}, {}, DType::F16, "O");
  EXPECT_EQ(block_resources(std::move(b).finish()).smem_bytes, 2048 + 2048 + 4);
}

TEST(BlockGraph, RejectsBadLaunchShapes) {
  EXPECT_EQ(code_of([] { BlockGraphBuilder({}, 128, {}, {}); }), ErrorCode::Structure);
  EXPECT_EQ(code_of([] { BlockGraphBuilder({1, 1, 1, 1}, 128, {}, {}); }), ErrorCode::Structure);
  EXPECT_EQ(code_of([] { BlockGraphBuilder({1}, 100, {}, {}); }), ErrorCode::Structure);
  EXPECT_EQ(code_of([] { BlockGraphBuilder({1}, 2048, {}, {}); }), ErrorCode::Structure);
  EXPECT_EQ(code_of([] { BlockGraphBuilder({1, 70000}, 128, {}, {}); }), ErrorCode::Structure);
  EXPECT_EQ(code_of([] { BlockGraphBuilder({1}, 128, {0}, {}); }), ErrorCode::Structure);
}

}  // namespace
}  // namespace kiln
