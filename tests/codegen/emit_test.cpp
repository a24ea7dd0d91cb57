// The emitter writes a self-contained file for every example (spec and μGraph) and for many
// random μGraphs: the ABI functions, a header with the listing, schedule, verdict and nvcc
// command, the inlined device library, a shared-memory static_assert per block kernel, and no
// include of anything but the CUDA toolkit. The harness embeds the kernel and a reference.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "kiln/codegen/emit.h"
#include "kiln/codegen/lowerings/contraction.h"
#include "kiln/codegen/lowerings/row_chain.h"
#include "kiln/codegen/schedule.h"
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
  // Programmatic dependent launch (runtime/base.cuh): every kernel in the file, the runtime's
  // and the generated ones, waits for the previous kernel in the stream before anything else,
  // and the launch function launches through the runtime's launcher only.
  for (size_t at = cu.find("__global__"); at != std::string::npos;
       at = cu.find("__global__", at + 1)) {
    const size_t line = cu.rfind('\n', at) + 1;
    if (cu.find("//", line) < at) continue;  // a comment
    const size_t open = cu.find('{', at);
    ASSERT_NE(open, std::string::npos);
    if (cu.find(';', at) < open) continue;  // a declaration
    const size_t body = cu.find_first_not_of(" \n", open + 1);
    const std::string first = cu.substr(body, 40);
    EXPECT_TRUE(first.rfind("pdl_entry(", 0) == 0 || first.rfind("rt::pdl_entry(", 0) == 0 ||
                first.rfind("kiln::rt::pdl_entry(", 0) == 0)
        << cu.substr(at, open - at) << " begins with: " << first;
  }
  const size_t gen = cu.find("// ==== generated kernels");
  ASSERT_NE(gen, std::string::npos);
  EXPECT_EQ(cu.find("<<<", gen), std::string::npos);
  int blocks = 0;
  // One shared-memory assert per block-graph kernel (lowered contractions and attention chains
  // run the runtime's wgmma kernels).
  for (const KernelPlan& kp : plan_schedule(g, target_for(arch)).kernels)
    blocks += kp.block && kp.as<BlockGraphKernel>();
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

// A block kernel's shared memory is its dynamic kSmem plus static arrays (a reduction
// scratch): at exactly 48 KB of dynamic memory the launch already needs the raised limit (it
// failed with cudaErrorInvalidValue on an H100 in session 13), and the planner's budget leaves
// room for the static bytes under the per-block maximum.
TEST(Emit, RaisesTheSharedMemoryLimitCountingStaticArrays) {
  KernelGraph g =
      load_graph_file(std::string(KILN_SOURCE_DIR) + "/tests/data/smem_48k.mugraph.json");
  const Schedule s = plan_schedule(g, target_for(Arch::Sm90a));
  bool found = false;
  for (const KernelPlan& kp : s.kernels) {
    if (!kp.block || !kp.as<BlockGraphKernel>()) continue;
    EXPECT_LE(kp.block->smem_bytes + kStaticSmemBytes, target_for(Arch::Sm90a).smem_per_block);
    if (kp.block->smem_bytes != 48 * 1024) continue;
    found = true;
    const EmitOptions eo;
    const std::string cu = emit_cuda(g, s, eo);
    EXPECT_NE(cu.find(fmt::format("raise_smem_limit_once<{}>(kSmem_{})", kp.kernel, kp.kernel)),
              std::string::npos);
  }
  EXPECT_TRUE(found) << "no block kernel of exactly 48 KB: the fixture no longer tests the edge";
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

// A small row chain lets the next kernel launch at once only where every kernel of the function
// is one (the next call's first kernel would otherwise be launched early and hold SMs while it
// waits): the sandwich norm's one row chain triggers; linear_mean's row sum after its GEMV waits.
TEST(Emit, RowChainsTriggerTheNextLaunchOnlyAmongSmallRowChains) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/examples/";
  const auto triggers = [](const std::string& cu) {
    size_t n = 0, at = 0;
    while ((at = cu.find("pdl_entry(true)", at)) != std::string::npos) ++n, ++at;
    return n;
  };
  EXPECT_EQ(triggers(emit_cuda(load_graph_file(dir + "double_norm.mugraph.json"))), 1u);
  const KernelGraph lm = load_graph_file(dir + "linear_mean.mugraph.json");
  const kiln::Schedule s = plan_schedule(lm, target_for(Arch::Sm90a));
  int small_chains = 0, others = 0;
  for (const KernelPlan& kp : s.kernels) {
    if (const RowChainKernel* p = kp.as<RowChainKernel>())
      small_chains += p->cluster == 1 && p->blocks <= target_for(Arch::Sm90a).sm_count;
    else if (!kp.as<FusedIntoKernel>())
      ++others;
  }
  ASSERT_EQ(small_chains, 1) << "the example no longer ends in a small row chain; pick another";
  ASSERT_GE(others, 1);
  EXPECT_EQ(triggers(emit_cuda(lm)), 0u);
}

// A block kernel whose loop fits its cp.async ring issues every stage before the loop and only
// waits in it (one memory latency for a short loop, not one per S - 1 stages); a longer loop
// keeps the refilling ring. k-split warps add their partial products in rounds of plain stores,
// never shared-memory float atomics (compare-and-swap loops on sm_90).
TEST(Emit, ShortLoopsFillTheRingAtOnceAndKSplitsAddWithoutAtomics) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/examples/";
  const KernelGraph lora = load_graph_file(dir + "lora.mugraph.json");
  const kiln::Schedule s = plan_schedule(lora, target_for(Arch::Sm90a));
  ASSERT_EQ(s.kernels.size(), 1u);
  const BlockSchedule& b = *s.kernels[0].block;
  const BlockGraph& bg = b.retiled ? *b.retiled : *lora.ops[0].block;
  const int64_t stages = bg.num_iterations() / b.coarsen;
  const std::string cu = emit_cuda(lora);
  const size_t body = cu.find("// ==== generated kernels");
  ASSERT_NE(body, std::string::npos);
  const std::string gen = cu.substr(body);
  if (stages <= b.pipeline_stages && b.pipeline_stages >= 2) {
    EXPECT_NE(gen.find(fmt::format("kiln::rt::cp_async_wait_n({} - ic);", stages - 1)),
              std::string::npos);
    EXPECT_EQ(gen.find("const int nx = ic +"), std::string::npos);  // no refill
  }
  bool ksplit = false;
  for (const TilePlan& t : b.tiles)
    ksplit |= t.spill && t.dist.kind == DistKind::Mma && t.dist.ks > 1;
  EXPECT_TRUE(ksplit) << "the example no longer has a k-split spill; pick another";
  EXPECT_EQ(gen.find("atomicAdd("), std::string::npos);

  // skinny_gemm's split-K kernel (32 stages in a ring of 5) refills its ring, as the generic
  // block kernel (without the GEMV lowering that runs it otherwise).
  EmitOptions generic;
  generic.lowerings = false;
  const std::string big = emit_cuda(load_graph_file(dir + "skinny_gemm.mugraph.json"), generic);
  EXPECT_NE(big.find("const int nx = ic +"), std::string::npos);
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

// The range rule in every harness: checks alternate the uniform and the normal std-1 generator
// (at least two by default, also where a big reference cuts them), each check line names its
// distribution, and a check whose float64 reference leaves the f32 range is exempt. The device
// code itself runs in the simulator (sim_reference_test.cpp) and under nvcc (test_codegen_nvcc).
TEST(Emit, HarnessChecksBothDistributionsAndExemptsOutOfRange) {
  for (const char* name : {"gqa", "rmsnorm_linear", "gated_mlp_m4096"}) {
    SCOPED_TRACE(name);
    std::string base = std::string(KILN_SOURCE_DIR) + "/examples/" + name;
    KernelGraph spec = load_graph_file(base + ".json");
    KernelGraph g = std::filesystem::exists(base + ".mugraph.json")
                        ? load_graph_file(base + ".mugraph.json")
                        : spec;
    HarnessOptions ho;
    ho.checks = 1;
    const std::string h = emit_harness(g, spec, ho);
    auto at = [&](const std::string& text) {
      size_t p = h.find(text);
      EXPECT_NE(p, std::string::npos) << text;
      return p;
    };
    // The generator's normal variant, inlined, and the kernel that draws inputs from it.
    at("float kiln_rng_normal(uint64_t stream, uint64_t e, float sd)");
    at("kiln_rng_normal(stream, (uint64_t)e, sd)");
    at("gen_normal_kernel<__half>");
    // The option, and the alternation: even checks uniform, odd ones normal std 1.
    at("\"--input-std\"");
    at("input_std >= 0 ? input_std : (c % 2 ? 1.0 : 0.0)");
    // At least two checks by default, even for gated_mlp_m4096's big reference matmuls.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(h, m, std::regex(R"(kDefaultChecks = (\d+);)")));
    EXPECT_GE(std::stoi(m[1]), 2);
    if (std::string(name) == "gated_mlp_m4096") {
      EXPECT_EQ(std::stoi(m[1]), 2);
    }
    // Per check: reference on a zeroed workspace, range scan, then the kernel and the compare.
    const size_t zero = at("cudaMemsetAsync(rws, 0, rws_doubles * sizeof(double), s)");
    const size_t ref = at("KILN_CK(kiln_ref_run((const double* const*)rin, rout, rws, s));");
    const size_t scan = at("ref_out_of_range(rout, rws, rws_doubles, acc, s)");
    const size_t cmp = at("compare(o, out[o], rout[o], acc, s, &bad)");
    EXPECT_LT(zero, ref);
    EXPECT_LT(ref, scan);
    EXPECT_LT(scan, cmp);
    // The scan covers every output and the whole reference workspace.
    at("range_kernel<<<grid_for(kOutNumel[o]), 256, 0, s>>>(rout[o], kOutNumel[o], acc)");
    at("range_kernel<<<grid_for((int64_t)rws_doubles), 256, 0, s>>>(rws, (int64_t)rws_doubles, "
       "acc)");
    at("static const double kRefConstOutOfRange = 0;");
    // What is printed: the distribution per check line, exempt checks, the result's new keys.
    at("check seed=%llu dist=%s output=%s err=%.3e tol=%.1e nonfinite=%.0f %s\\n");
    at("is_exempt ? \"exempt\" : pass ? \"ok\" : \"FAIL\"");
    at("if (is_exempt) continue;");
    at("calls=%d copies=%d checks=%d exempt=%d\\n");
    // Timing inputs stay uniform.
    at("gen_input(i, cin[c * kNumIn + i], seed + 1000 + c, 0.0f, s);");
  }
  // The reference keeps the sums that rms_norm and mean accumulate in its workspace.
  KernelGraph rl = load_graph_file(std::string(KILN_SOURCE_DIR) + "/examples/rmsnorm_linear.json");
  EXPECT_NE(emit_harness(rl, rl).find("q[e] = ss;"), std::string::npos);
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
