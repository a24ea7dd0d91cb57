// Every example μGraph, emitted and run on the CPU simulator, matches its spec in float64.
#include <gtest/gtest.h>

#include <cstdlib>

#include "kiln/ir/json_io.h"
#include "sim_runner.h"

namespace kiln {
namespace {

class SimExample : public ::testing::TestWithParam<std::string> {};

TEST_P(SimExample, MatchesSpec) {
  // The large-weight examples take a minute or more each on the simulator.
  bool heavy =
      GetParam() == "rmsnorm_linear" || GetParam() == "gated_mlp" || GetParam() == "skinny_gemm";
  const char* full = std::getenv("KILN_SIM_FULL");
  if (heavy && !(full && *full == '1')) GTEST_SKIP() << "set KILN_SIM_FULL=1";
  std::string base = std::string(KILN_SOURCE_DIR) + "/examples/" + GetParam();
  KernelGraph g = load_graph_file(base + ".mugraph.json");
  KernelGraph spec = load_graph_file(base + ".json");
  EXPECT_EQ(testing::check_in_simulator(g, spec, 7, "ex_" + GetParam()), "");
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
