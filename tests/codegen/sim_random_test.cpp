// Random μGraphs (random_graphs.h), emitted and run on the CPU simulator, agree with the
// interpreter's float64 evaluation of the same μGraph within the spec tolerance. The count is
// KILN_SIM_GRAPHS (default 12); each graph costs one host-compiler run.
#include <gtest/gtest.h>

#include <cstdlib>

#include "kiln/codegen/schedule.h"
#include "kiln/ir/print.h"
#include "random_graphs.h"
#include "sim_runner.h"

namespace kiln {
namespace {

TEST(SimRandom, EmittedKernelsMatchInterpreter) {
  int n = 12;
  if (const char* e = std::getenv("KILN_SIM_GRAPHS")) n = std::atoi(e);
  int first = 0;
  if (const char* e = std::getenv("KILN_SIM_FIRST")) first = std::atoi(e);
  Arch arch = Arch::Sm90a;
  if (const char* e = std::getenv("KILN_SIM_ARCH"); e && arch_from_name(e))
    arch = *arch_from_name(e);
  for (int i = first; i < first + n; ++i) {
    testing::RandomGraphs gen(1000 + i);
    KernelGraph g = gen.next(fmt::format("rnd{}", i));
    std::string msg =
        testing::check_in_simulator(g, g, 11 + i, fmt::format("rnd{}", i), arch, Precision::F32);
    EXPECT_EQ(msg, "") << "graph " << i << ":\n"
                       << to_text(g) << schedule_to_text(g, plan_schedule(g, default_target()));
  }
}

}  // namespace
}  // namespace kiln
