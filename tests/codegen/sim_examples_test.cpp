// Every example μGraph, emitted and run on the CPU simulator, matches its spec in float64.
#include <gtest/gtest.h>

#include <cstdlib>

#include <fmt/format.h>

#include "kiln/ir/json_io.h"
#include "sim_runner.h"

namespace kiln {
namespace {

class SimExample : public ::testing::TestWithParam<std::string> {};

TEST_P(SimExample, MatchesSpec) {
  // The large-weight examples take a minute or more each on the simulator; gqa (50 s) runs below
  // at 512 keys, its own reductions among others (SimFragmentRows).
  bool heavy = GetParam() == "rmsnorm_linear" || GetParam() == "gated_mlp" ||
               GetParam() == "skinny_gemm" || GetParam() == "gqa";
  const char* full = std::getenv("KILN_SIM_FULL");
  if (heavy && !(full && *full == '1')) GTEST_SKIP() << "set KILN_SIM_FULL=1";
  std::string base = std::string(KILN_SOURCE_DIR) + "/examples/" + GetParam();
  KernelGraph g = load_graph_file(base + ".mugraph.json");
  KernelGraph spec = load_graph_file(base + ".json");
  EXPECT_EQ(testing::check_in_simulator(g, spec, 7, "ex_" + GetParam()), "");
}

// The attention example with its row reduction and that reduction's accumulator changed in kind
// (sum/max into accum_sum/accum_max; sum into accum_sum is the example itself), at 512 keys: the
// emitter defers the fragment rows' quad shuffle to after the loop only where that regroups
// exactly; the emitted kernel must match the interpreter of the same μGraph either way.
TEST(SimFragmentRows, ReductionAndAccumulatorKindsMix) {
  std::string path = std::string(KILN_SOURCE_DIR) + "/examples/gqa.mugraph.json";
  nlohmann::json base = parse_json_text(read_file_text(path), path);
  // 512 keys instead of 4096 (4 key splits of 2 chunks, not 32), so the simulator runs in
  // seconds: the same tiles, loops and fragment-row code, an eighth of the blocks.
  base["inputs"][1]["shape"][2] = 512;
  base["inputs"][2]["shape"][1] = 512;
  ASSERT_EQ(base["kernels"][0]["grid"][2], 32);
  base["kernels"][0]["grid"][2] = 4;
  ASSERT_EQ(base["kernels"][1]["loop"][0], 32);
  base["kernels"][1]["loop"][0] = 4;
  for (const char* red : {"sum", "max"})
    for (const char* acc : {"accum_sum", "accum_max"}) {
      nlohmann::json j = base;
      for (auto& o : j["kernels"][0]["block_ops"]) {
        if (o["name"] == "l") o["op"] = red;
        if (o["name"] == "acc_l") o["op"] = acc;
      }
      KernelGraph g = mugraph_from_json(j, path);
      std::string tag = fmt::format("rows_{}_{}", red, acc);
      EXPECT_EQ(testing::check_in_simulator(g, g, 3, tag, Arch::Sm90a, Precision::F32), "") << tag;
    }
}

INSTANTIATE_TEST_SUITE_P(Examples, SimExample,
                         ::testing::Values("rmsnorm_linear", "gated_mlp", "gqa", "lora",
                                           "add_rmsnorm", "skinny_gemm"));

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Any μGraph file against its spec: KILN_SIM_GRAPH=g.mugraph.json KILN_SIM_SPEC=spec.json.
TEST(SimFile, MatchesSpec) {
  const char* g = std::getenv("KILN_SIM_GRAPH");
  const char* s = std::getenv("KILN_SIM_SPEC");
  if (!g || !s) GTEST_SKIP() << "set KILN_SIM_GRAPH and KILN_SIM_SPEC";
  EXPECT_EQ(testing::check_in_simulator(load_graph_file(g), load_graph_file(s), 5, "file"), "");
}

}  // namespace
}  // namespace kiln
