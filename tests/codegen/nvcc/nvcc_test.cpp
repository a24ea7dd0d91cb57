// The emitted .cu of every example (spec and μGraph) and its GPU harness compile with nvcc for
// sm_90a and sm_80 without a warning (-Werror all-warnings): the object for both targets, the
// harness for sm_90a. Skipped when nvcc is absent. Compiles run two at a time.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include <fmt/format.h>

#include "find_nvcc.h"
#include "kiln/codegen/emit.h"
#include "kiln/ir/json_io.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using testing::find_nvcc;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Returns "" on success, else the compiler's output.
std::string compile(const std::string& nvcc, const fs::path& dir, const std::string& file,
                    const std::string& flags, const std::string& out) {
  std::string log = (dir / (out + ".log")).string();
  std::string cmd =
      fmt::format("cd '{}' && '{}' -O3 -std=c++17 -Werror all-warnings {} {} -o {} > '{}' 2>&1",
                  dir.string(), nvcc, flags, file, out, log);
  if (std::system(cmd.c_str()) == 0) return "";
  return slurp(log).substr(0, 4000);
}

class NvccExample : public ::testing::TestWithParam<std::string> {};

TEST_P(NvccExample, EmittedFileAndHarnessCompile) {
  std::string nvcc = find_nvcc();
  if (nvcc.empty()) GTEST_SKIP() << "nvcc not found";
  std::string base = std::string(KILN_SOURCE_DIR) + "/examples/" + GetParam();
  KernelGraph spec = load_graph_file(base + ".json");
  KernelGraph g =
      fs::exists(base + ".mugraph.json") ? load_graph_file(base + ".mugraph.json") : spec;
  fs::path dir = fs::temp_directory_path() / "kiln_codegen_nvcc" / GetParam();
  fs::create_directories(dir);
  std::ofstream(dir / "kernel.cu") << emit_cuda(g);
  std::ofstream(dir / "spec.cu") << emit_cuda(spec);
  std::ofstream(dir / "harness.cu") << emit_harness(g, spec);
  const std::string both =
      "-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80 -c";
  auto a = std::async(std::launch::async, compile, nvcc, dir, "kernel.cu", both, "kernel.o");
  auto b = std::async(std::launch::async, compile, nvcc, dir, "spec.cu", both, "spec.o");
  std::string ra = a.get(), rb = b.get();
  EXPECT_EQ(ra, "") << "μGraph kernel";
  EXPECT_EQ(rb, "") << "spec kernel";
  EXPECT_EQ(compile(nvcc, dir, "harness.cu", "-gencode=arch=compute_90a,code=sm_90a", "harness"),
            "")
      << "harness";
}

INSTANTIATE_TEST_SUITE_P(Examples, NvccExample,
                         ::testing::Values("rmsnorm_linear", "gated_mlp", "gqa", "lora",
                                           "add_rmsnorm", "skinny_gemm", "gated_mlp_m4096",
                                           "linear_act_m512", "swiglu", "qk_norm_attention"));

}  // namespace
}  // namespace kiln
