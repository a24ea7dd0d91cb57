// The cost model: properties, not golden numbers.
#include "kiln/search/cost_model.h"

#include <gtest/gtest.h>

#include "kiln/ir/json_io.h"
#include "kiln/search/generator.h"
#include "search_test_util.h"

namespace kiln::search {
namespace {

KernelGraph example(const std::string& name) {
  return load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/" + name);
}

TEST(CostModel, FusedReferencesBeatTheirSpecs) {
  for (const char* c : {"rmsnorm_linear", "gated_mlp", "lora", "gqa", "skinny_gemm"}) {
    GraphCost spec = estimate_cost(example(std::string(c) + ".json"), default_target());
    GraphCost ref = estimate_cost(example(std::string(c) + ".mugraph.json"), default_target());
    EXPECT_LT(ref.time, spec.time) << c;
    EXPECT_EQ(ref.launches, static_cast<int>(ref.kernels.size()));
  }
}

TEST(CostModel, WeightStreamingIsDramBoundNearTheFloor) {
  GraphCost c = estimate_cost(example("rmsnorm_linear.mugraph.json"), default_target());
  ASSERT_EQ(c.kernels.size(), 1u);
  EXPECT_EQ(c.kernels[0].bound, "dram");
  // 50.3 MB of W at 3 TB/s is 16.8 us; launch and latency add a few.
  EXPECT_GT(c.time, 16.8e-6);
  EXPECT_LT(c.time, 22e-6);
}

TEST(CostModel, EveryLaunchCosts) {
  GraphCost one = estimate_cost(testing::small_matmul(), default_target());
  EXPECT_GE(one.time, default_target().launch_s);
  EXPECT_EQ(one.launches, 1);
}

TEST(CostModel, MoreBlocksHelpUntilTheSmsAreBusy) {
  // The same matmul lowered with a grid of 2 and of 32 blocks over N.
  KernelGraph spec = parse_spec(R"({"name": "w", "inputs": [
      {"name": "X", "shape": [1, 4096], "dtype": "f16"},
      {"name": "W", "shape": [4096, 4096], "dtype": "f16"}],
    "nodes": [{"name": "O", "op": "matmul", "inputs": ["X", "W"]}], "outputs": ["O"]})");
  PGraph g = expand_spec(spec);
  std::vector<int> grp = canonical_order(g);
  auto time_with = [&](int64_t parts) {
    Schedule s;
    s.grid = {{g.labels[g.inputs[1]][1], parts}};
    s.loop_label = g.labels[g.inputs[0]][1];
    s.loop_range = 256;
    Lowered l = lower_group(g, grp, s, default_target());
    EXPECT_TRUE(l.block != nullptr) << l.message;
    return estimate_cost(assemble(g, {{grp, l.block}}, Arch::Sm90a), default_target()).time;
  };
  EXPECT_GT(time_with(2), 2 * time_with(32));
}

TEST(CostModel, SlowerTargetIsSlower) {
  KernelGraph g = example("gated_mlp.mugraph.json");
  EXPECT_GT(estimate_cost(g, target_for(Arch::Sm80)).time,
            estimate_cost(g, target_for(Arch::Sm90a)).time);
}

}  // namespace
}  // namespace kiln::search
