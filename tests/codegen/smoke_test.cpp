#include <gtest/gtest.h>
#include <fstream>
#include "kiln/codegen/emit.h"
#include "kiln/ir/json_io.h"
namespace kiln {
TEST(Smoke, EmitExamples) {
  for (const char* n :
       {"rmsnorm_linear", "gated_mlp", "gqa", "lora", "add_rmsnorm", "skinny_gemm"}) {
    KernelGraph g =
        load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/" + n + ".mugraph.json");
    KernelGraph s = load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/" + n + ".json");
    std::ofstream(std::string("/tmp/cg/") + n + ".cu") << emit_harness(g, s);
    std::ofstream(std::string("/tmp/cg/") + n + "_spec.cu") << emit_harness(s, s);
  }
}
}  // namespace kiln
