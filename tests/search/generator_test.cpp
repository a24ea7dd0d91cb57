// The generator: expansion, variants, canonical partitions, schedules, lowering and its
// feasibility checks, assembly.
#include "kiln/search/generator.h"

#include <set>

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "search_test_util.h"

namespace kiln::search {
namespace {

TEST(Generator, ExpandsRmsNormIntoPrimitivesWithSharedLabels) {
  PGraph g = expand_spec(testing::small_rmsnorm_linear());
  std::set<OpKind> kinds;
  for (const PNode& n : g.nodes) kinds.insert(n.kind);
  EXPECT_TRUE(kinds.count(OpKind::Square) && kinds.count(OpKind::Sum) && kinds.count(OpKind::Sqrt));
  EXPECT_FALSE(kinds.count(OpKind::RmsNorm));
  // X's hidden dim and W's rows are the same label: the matmul contracts what the norm reduces.
  int x = g.inputs[0], w = g.inputs[1];
  EXPECT_EQ(g.labels[x][1], g.labels[w][0]);
  EXPECT_NE(g.labels[x][1], g.labels[w][1]);
}

TEST(Generator, VariantsIncludeTheHoistAndSplits) {
  std::vector<PGraph> vs = enumerate_variants(expand_spec(testing::small_rmsnorm_linear()), {});
  bool hoist = false, split = false;
  for (const PGraph& v : vs)
    for (const std::string& r : v.rewrites) {
      hoist |= r.rfind("hoist", 0) == 0;
      split |= r.rfind("split", 0) == 0;
    }
  EXPECT_TRUE(hoist);
  EXPECT_TRUE(split);
  EXPECT_TRUE(vs.front().rewrites.empty());  // the plain expansion first
}

TEST(Generator, PartitionsAreCanonicalAndDistinct) {
  for (const PGraph& v : enumerate_variants(expand_spec(testing::small_gated_mlp()), {})) {
    std::set<std::vector<std::vector<int>>> seen;
    std::vector<int> order = canonical_order(v);
    for (const Partition& p : enumerate_partitions(v, 8)) {
      EXPECT_TRUE(seen.insert(p.groups).second) << "a partition was generated twice";
      std::vector<int> flat;
      for (const auto& grp : p.groups) flat.insert(flat.end(), grp.begin(), grp.end());
      EXPECT_EQ(flat, order);  // contiguous segments of the one canonical order
    }
  }
}

TEST(Generator, NoDuplicateCandidatesOnASmallSpec) {
  // Every lowered kernel of every group of every partition of the plain variant, assembled with
  // the first feasible kernel of the other groups: fingerprints never repeat.
  PGraph v = expand_spec(testing::small_gated_mlp());
  std::set<std::string> fps;
  int n = 0;
  for (const Partition& p : enumerate_partitions(v, 4)) {
    std::vector<std::vector<KernelChoice>> per;
    for (const auto& grp : p.groups) {
      std::vector<KernelChoice> ks;
      if (grp.size() == 1 && predefined_ok(v, grp[0])) ks.push_back({grp, nullptr});
      for (const Schedule& s : enumerate_schedules(v, grp, {})) {
        Lowered l = lower_group(v, grp, s, default_target());
        if (l.block) ks.push_back({grp, l.block});
      }
      per.push_back(ks);
    }
    bool ok = true;
    for (const auto& ks : per) ok &= !ks.empty();
    if (!ok) continue;
    for (size_t i = 0; i < per.size(); ++i)
      for (size_t j = 0; j < per[i].size(); ++j) {
        if (j == 0 && i > 0) continue;  // the all-first combination is counted once
        std::vector<KernelChoice> pick;
        for (size_t k = 0; k < per.size(); ++k) pick.push_back(per[k][k == i ? j : 0]);
        KernelGraph g = assemble(v, pick, Arch::Sm90a);
        EXPECT_TRUE(fps.insert(fingerprint(g)).second) << "duplicate candidate";
        ++n;
      }
  }
  EXPECT_GT(n, 50);
}

TEST(Generator, ScheduleFeasibilityIsExactPerTarget) {
  // One block holds X [64, 1024] and W [1024, 32] (f16: 192 KiB) plus an 8 KiB f32 tile:
  // fits sm_90a's 227 KiB, not sm_80's 163 KiB. Two loop steps fit both.
  KernelGraph spec = parse_spec(R"({"name": "big", "inputs": [
      {"name": "X", "shape": [64, 1024], "dtype": "f16"},
      {"name": "W", "shape": [1024, 32], "dtype": "f16"}],
    "nodes": [{"name": "O", "op": "matmul", "inputs": ["X", "W"]}], "outputs": ["O"]})");
  PGraph g = expand_spec(spec);
  std::vector<int> grp = canonical_order(g);
  Schedule one;  // one block, no loop
  Lowered h = lower_group(g, grp, one, target_for(Arch::Sm90a));
  Lowered a = lower_group(g, grp, one, target_for(Arch::Sm80));
  EXPECT_TRUE(h.block != nullptr) << h.message;
  EXPECT_EQ(a.failure, LowerFailure::Resource);
  Schedule looped = one;
  looped.loop_label = g.labels[g.inputs[0]][1];
  looped.loop_range = 2;
  EXPECT_TRUE(lower_group(g, grp, looped, target_for(Arch::Sm80)).block != nullptr);
}

TEST(Generator, ReductionOverAGriddedLabelIsRejected) {
  PGraph g = expand_spec(testing::small_matmul());
  std::vector<int> grp = canonical_order(g);
  Schedule s;
  s.grid = {{g.labels[g.inputs[0]][1], 4}};  // partitions K without a split: wrong
  EXPECT_EQ(lower_group(g, grp, s, default_target()).failure, LowerFailure::Map);
}

TEST(Generator, SplitKLowersToPartialAndCombine) {
  PGraph base = expand_spec(testing::small_matmul());
  for (const PGraph& v : enumerate_variants(base, {})) {
    if (v.split_label < 0 || v.split_parts != 4) continue;
    std::vector<int> order = canonical_order(v);
    ASSERT_EQ(order.size(), 2u);  // the partial matmul, the combine
    std::vector<KernelChoice> ks;
    for (int x : order) {
      std::vector<Schedule> ss = enumerate_schedules(v, {x}, {});
      ASSERT_FALSE(ss.empty());
      Lowered l = lower_group(v, {x}, ss.front(), default_target());
      ASSERT_TRUE(l.block != nullptr) << l.message;
      ks.push_back({{x}, l.block});
    }
    KernelGraph g = assemble(v, ks, Arch::Sm90a);
    EXPECT_EQ(g.num_kernels(), 2);
    EXPECT_EQ(g.tensor(g.ops[0].outputs[0]).shape, (Shape{4, 1, 32}));  // leading split dim
    return;
  }
  FAIL() << "no 4-way split variant";
}

// A kernel whose saved tensor does not have its node's shape (here: X X^T lowered with the
// ambiguous label gridded, which enumerate_schedules never offers) is a generator bug; assembly
// refuses it, so it costs that candidate only, never a graph with the wrong outputs.
TEST(Generator, AssemblyRefusesAKernelOutputOfTheWrongShape) {
  KernelGraph spec = testing::gram();
  PGraph g = expand_spec(spec);
  std::vector<int> grp = canonical_order(g);
  Schedule s;
  s.grid = {{g.labels[g.inputs[0]][0], 2}};
  Lowered l = lower_group(g, grp, s, default_target());
  ASSERT_TRUE(l.block != nullptr) << l.message;
  ASSERT_NE(l.block->outputs[0].shape, (Shape{64, 64}));
  EXPECT_THROW(assemble(g, {{grp, l.block}}, Arch::Sm90a), UserError);
}

// X X^T: X's rows are both the matmul's m (as A) and its n (through the transpose, as B), so
// union-find gives two dims of X and of O one label. One input iterator per tensor cannot slice
// such a label for both uses (the tile of B would be the rows of A's tile), so no schedule may
// grid or loop over it, and no variant may split it.
TEST(Generator, ALabelTwiceInOneTensorIsNeverGriddedLoopedOrSplit) {
  KernelGraph spec = testing::gram();
  PGraph g = expand_spec(spec);
  const int x = g.inputs[0], o = g.outputs[0];
  const int rows = g.labels[x][0];
  ASSERT_EQ(g.labels[o], (std::vector<int>{rows, rows}));
  EXPECT_TRUE(g.ambiguous(rows));
  EXPECT_FALSE(g.ambiguous(g.labels[x][1]));  // k: one dim of every tensor
  for (const PGraph& v : enumerate_variants(g, {})) {
    EXPECT_NE(v.split_label, rows);
    for (const Partition& p : enumerate_partitions(v, 4))
      for (const auto& grp : p.groups)
        for (const Schedule& s : enumerate_schedules(v, grp, {})) {
          EXPECT_NE(s.loop_label, rows) << s.str(v);
          for (const GridDim& d : s.grid) EXPECT_NE(d.label, rows) << s.str(v);
        }
  }
}

}  // namespace
}  // namespace kiln::search

namespace kiln::search {
namespace {

// Fingerprints count every attribute and the storage dtype of what each op writes: graphs that
// differ only there are different kernels and must never be deduplicated into one.
TEST(Generator, FingerprintsCountEveryAttributeAndStorageDtype) {
  auto make = [](const std::string& node) {
    return parse_spec(R"({"name": "f", "inputs": [{"name": "X", "shape": [4, 64], "dtype": "f16"}],
      "nodes": [)" + node +
                      R"(], "outputs": ["O"]})");
  };
  std::set<std::string> seen;
  for (const char* n :
       {R"({"name": "O", "op": "rms_norm", "inputs": ["X"], "attrs": {"eps": 1e-6}})",
        R"({"name": "O", "op": "rms_norm", "inputs": ["X"], "attrs": {"eps": 1e-5}})",
        R"({"name": "O", "op": "gelu", "inputs": ["X"]})",
        R"({"name": "O", "op": "gelu", "inputs": ["X"], "attrs": {"approximate": "tanh"}})",
        R"({"name": "O", "op": "clamp", "inputs": ["X"], "attrs": {"min": 0, "max": 6}})",
        R"({"name": "O", "op": "clamp", "inputs": ["X"], "attrs": {"min": 0, "max": 1}})",
        R"({"name": "O", "op": "leaky_relu", "inputs": ["X"], "attrs": {"negative_slope": 0.1}})",
        R"({"name": "O", "op": "leaky_relu", "inputs": ["X"], "attrs": {"negative_slope": 0.2}})"})
    EXPECT_TRUE(seen.insert(fingerprint(make(n))).second) << n;
  KernelGraph a = make(R"({"name": "E", "op": "exp", "inputs": ["X"]},
                          {"name": "O", "op": "neg", "inputs": ["E"]})");
  KernelGraph b = a;
  DType& dt = b.tensors[b.ops[0].outputs[0]].dtype;  // the intermediate in the other storage
  dt = dt == DType::F32 ? DType::F16 : DType::F32;
  EXPECT_NE(fingerprint(a), fingerprint(b));
}

}  // namespace
}  // namespace kiln::search

namespace kiln::search {
namespace {

// A group with more schedules than max_schedules keeps the ones with nice tiles (1, multiples of
// 16, whole extents) first: a 16-group attention over 4032 keys (63 chunks of 64) kept its
// one-group-per-block grid with the 64-key loop; enumeration order had cut it.
TEST(Generator, ACappedScheduleListKeepsNiceTilesFirst) {
  KernelGraph spec = load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/gqa_keys4032.json");
  PGraph g = expand_spec(spec);
  std::vector<int> grp = canonical_order(g);
  ScheduleOptions all, capped;  // capped: the default 20000
  all.max_schedules = 1 << 20;
  const std::vector<Schedule> every = enumerate_schedules(g, grp, all);
  const std::vector<Schedule> kept = enumerate_schedules(g, grp, capped);
  ASSERT_GT(every.size(), kept.size());
  ASSERT_EQ(kept.size(), size_t(capped.max_schedules));
  // The batch label (16 groups) and the key label (4032).
  const int batch = g.labels[g.inputs[0]][0], keys = g.labels[g.inputs[1]][2];
  auto attention_like = [&](const Schedule& s) {
    return s.grid.size() == 1 && s.grid[0].label == batch && s.grid[0].parts == 16 &&
           s.loop_label == keys && s.loop_range == 63;
  };
  EXPECT_TRUE(std::any_of(kept.begin(), kept.end(), attention_like));
  // Among the first 20000 in enumeration order it is not (what the cap used to keep).
  EXPECT_FALSE(std::any_of(every.begin(), every.begin() + kept.size(), attention_like));
  // Every kept schedule is one of the full list.
  std::set<std::string> names;
  for (const Schedule& s : every) names.insert(s.str(g));
  for (const Schedule& s : kept) EXPECT_TRUE(names.count(s.str(g))) << s.str(g);
}

// softmax(X W) at k 4096 has logits up to ~384 at std 1, but its exp is of x - max(x) <= 0. A
// split variant computes the max as a combine of partial maxes; it is still shifted, so no
// variant of the spec as written overflows exp (only the algebra's cancelled shift does, and
// the search prunes those variants).
TEST(Generator, SplitSoftmaxVariantsKeepTheirShift) {
  KernelGraph spec = testing::logits_softmax();
  int splits = 0;
  for (const PGraph& v : enumerate_variants(expand_spec(spec), {})) {
    SCOPED_TRACE(fmt::format("{}", fmt::join(v.rewrites, "; ")));
    EXPECT_EQ(overflowing_exp(v, node_magnitudes(v)), -1);
    for (const PNode& n : v.nodes) splits += n.combine && n.kind == OpKind::Max;
  }
  EXPECT_GT(splits, 0);  // some variant splits the softmax's max
}

// range_hints names what the magnitudes see for a spec that cannot be right at std 1: an f16
// output past 65504 (a SwiGLU with std-1 weights at k 4096), an exp without a max of values past
// f32's exp range; a spec whose values fit gets none.
TEST(Generator, RangeHintsNameOutputsPastTheirDtype) {
  auto spec = [](const char* dt, const char* tail) {
    return parse_spec(fmt::format(R"({{"name": "h",
      "inputs": [{{"name": "X", "shape": [4, 4096], "dtype": "{0}"}},
                 {{"name": "W1", "shape": [4096, 64], "dtype": "{0}"}},
                 {{"name": "W3", "shape": [4096, 64], "dtype": "{0}"}}],
      "nodes": [{{"name": "G", "op": "matmul", "inputs": ["X", "W1"]}},
                {{"name": "U", "op": "matmul", "inputs": ["X", "W3"]}},
                {1}],
      "outputs": ["Y"]}})",
                                  dt, tail));
  };
  const std::string gate =
      R"({"name": "S", "op": "silu", "inputs": ["G"]}, {"name": "Y", "op": "mul", "inputs": ["S", "U"]})";
  std::vector<std::string> h = range_hints(spec("f16", gate.c_str()));
  ASSERT_EQ(h.size(), 1u) << fmt::format("{}", fmt::join(h, "\n"));
  EXPECT_NE(h[0].find("output Y is f16"), std::string::npos) << h[0];
  EXPECT_TRUE(range_hints(spec("bf16", gate.c_str())).empty());
  // The same product over k 64 stays far below 65504.
  KernelGraph k64 = parse_spec(R"({"name": "h",
      "inputs": [{"name": "X", "shape": [4, 64], "dtype": "f16"},
                 {"name": "W1", "shape": [64, 64], "dtype": "f16"},
                 {"name": "W3", "shape": [64, 64], "dtype": "f16"}],
      "nodes": [{"name": "G", "op": "matmul", "inputs": ["X", "W1"]},
                {"name": "U", "op": "matmul", "inputs": ["X", "W3"]},
                {"name": "S", "op": "silu", "inputs": ["G"]},
                {"name": "Y", "op": "mul", "inputs": ["S", "U"]}],
      "outputs": ["Y"]})");
  EXPECT_TRUE(range_hints(k64).empty());
  // exp of logits up to ~384 without a max overflows f32; with softmax's max it does not.
  std::vector<std::string> e =
      range_hints(spec("f32", R"({"name": "Y", "op": "exp", "inputs": ["G"]})"));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_NE(e[0].find("f32's exp range"), std::string::npos) << e[0];
  EXPECT_TRUE(range_hints(testing::logits_softmax()).empty());
}

}  // namespace
}  // namespace kiln::search
