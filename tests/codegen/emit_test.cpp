// The emitter writes a self-contained file for every example (spec and μGraph) and for many
// random μGraphs: the ABI functions, a header with the listing, schedule, verdict and nvcc
// command, the inlined device library, a shared-memory static_assert per block kernel, and no
// include of anything but the CUDA toolkit. The harness embeds the kernel and a reference.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "kiln/codegen/contraction.h"
#include "kiln/codegen/emit.h"
#include "kiln/ir/json_io.h"
#include "random_graphs.h"

namespace kiln {
namespace {

void check_file(const KernelGraph& g, const std::string& cu, Arch arch = Arch::Sm90a) {
  EXPECT_NE(cu.find("extern \"C\" size_t kiln_" + g.name + "_workspace_bytes(void)"),
            std::string::npos);
  EXPECT_NE(cu.find("extern \"C\" cudaError_t kiln_" + g.name + "("), std::string::npos);
  EXPECT_NE(cu.find("// Verdict: "), std::string::npos);
  EXPECT_NE(cu.find("nvcc -O3"), std::string::npos);
  EXPECT_NE(cu.find("// Schedule:"), std::string::npos);
  EXPECT_NE(cu.find("#ifndef KILN_RT_BASE_CUH"), std::string::npos);
  EXPECT_NE(cu.find("#ifndef KILN_CG_CUH"), std::string::npos);
  // Only toolkit headers are included (the runtime's own includes are guarded out).
  std::regex inc(R"re(#include\s+[<"]([^>"]+)[>"])re");
  for (auto it = std::sregex_iterator(cu.begin(), cu.end(), inc); it != std::sregex_iterator();
       ++it) {
    std::string h = (*it)[1];
    bool toolkit = h.rfind("cuda", 0) == 0 || h == "stdint.h" || h == "stddef.h" || h == "math.h" ||
                   h == "stdio.h" || h == "stdlib.h" || h == "string.h";
    bool runtime_sibling = h.size() > 4 && h.substr(h.size() - 4) == ".cuh";
    EXPECT_TRUE(toolkit || runtime_sibling) << h;
  }
  int blocks = 0;
  // One shared-memory assert per block-graph kernel (lowered contractions and attention chains
  // run the runtime's wgmma kernels).
  for (const KernelPlan& kp : plan_schedule(g, target_for(arch)).kernels)
    blocks += kp.block && !kp.contraction && !kp.attention;
  size_t asserts = 0, at = 0;
  while ((at = cu.find("static_assert(kSmem_", at)) != std::string::npos) ++asserts, ++at;
  EXPECT_EQ(asserts, static_cast<size_t>(blocks));
}

TEST(Emit, EveryExampleEmits) {
  int n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(KILN_SOURCE_DIR) + "/examples")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    KernelGraph g = load_graph_file(e.path().string());
    EmitOptions eo;
    eo.verdict = "equivalent (test)";
    std::string cu = emit_cuda(g, eo);
    check_file(g, cu);
    EXPECT_NE(cu.find("equivalent (test)"), std::string::npos);
    ++n;
  }
  EXPECT_GT(n, 0);
}

TEST(Emit, RandomGraphsEmit) {
  for (int i = 0; i < 150; ++i) {
    testing::RandomGraphs gen(9000 + i);
    KernelGraph g = gen.next(fmt::format("r{}", i));
    check_file(g, emit_cuda(g));
    check_file(g, emit_cuda(g, EmitOptions{Arch::Sm80, "", "", true}), Arch::Sm80);
  }
}

// The decode matmuls of the suite launch the TMA GEMV on sm_90a, with the planner's column
// blocks, stage shape and splits as template and launch arguments (MT rounded up to 4 for 17-24
// rows: wgmma n is 8, 16 or 32), and the register GEMV on sm_80.
TEST(Emit, DecodeGemvLaunchesTheTmaGemvOnSm90a) {
  KernelGraph rl =
      load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/rmsnorm_linear_bs16.json");
  const std::string cu = emit_cuda(rl);
  EXPECT_NE(cu.find("err = kiln::rt::gemv_tma_launch<__half, __half, 4, 1, 64, 256, 4, 1, "
                    "kiln::rt::GemvRmsNorm>("),
            std::string::npos);
  EXPECT_NE(cu.find("gemv tma 64x256 s4 rms_norm"), std::string::npos);  // the schedule header
  const std::string cu80 = emit_cuda(rl, EmitOptions{Arch::Sm80, "", "", true});
  EXPECT_EQ(cu80.find("err = kiln::rt::gemv_tma_launch<"), std::string::npos);
  EXPECT_NE(cu80.find("err = kiln::rt::gemv_launch<"), std::string::npos);

  KernelGraphBuilder b("m20");
  int x = b.input("X", {20, 4096}, DType::BF16);
  int w = b.input("W", {4096, 16384}, DType::BF16);
  b.output(b.op(OpKind::MatMul, {x, w}, {}, "o"));
  const std::string cu20 = emit_cuda(std::move(b).finish());
  EXPECT_NE(cu20.find("err = kiln::rt::gemv_tma_launch<__nv_bfloat16, __nv_bfloat16, 4, 1, 128, "
                      "128, 4, 1, kiln::rt::GemvIdentity>("),
            std::string::npos);
}

TEST(Emit, HarnessEmbedsKernelReferenceAndGenerator) {
  std::string base = std::string(KILN_SOURCE_DIR) + "/examples/gqa";
  KernelGraph g = load_graph_file(base + ".mugraph.json");
  KernelGraph spec = load_graph_file(base + ".json");
  std::string h = emit_harness(g, spec);
  EXPECT_NE(h.find("kiln_ref_run"), std::string::npos);
  EXPECT_NE(h.find("kiln_rng_value"), std::string::npos);
  EXPECT_NE(h.find("int main("), std::string::npos);
  EXPECT_NE(h.find("KILN_RESULT name=%s"), std::string::npos);
  EXPECT_NE(h.find("cudaStreamBeginCapture"), std::string::npos);
  // A μGraph with a different interface is a user error.
  KernelGraph other = load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/lora.json");
  EXPECT_THROW(emit_harness(g, other), UserError);
}

TEST(Emit, NvccCommandNamesBothTargetsForObjects) {
  std::string c = nvcc_command("k.cu", "k.o", Arch::Sm90a);
  EXPECT_NE(c.find("compute_90a,code=sm_90a"), std::string::npos);
  EXPECT_NE(c.find("compute_80,code=sm_80"), std::string::npos);
  EXPECT_NE(c.find(" -c "), std::string::npos);
  std::string h = nvcc_command("h.cu", "h", Arch::Sm80);
  EXPECT_NE(h.find("compute_80,code=sm_80"), std::string::npos);
  EXPECT_EQ(h.find("sm_90a"), std::string::npos);
}

}  // namespace
}  // namespace kiln
