// The profiling pass (search/profile.h) on a fake toolchain: candidates are re-ranked by measured
// time, every kind of failure is reported and never wins, the spec is always measured, and the
// toolchain lookups behave as documented. No GPU or real nvcc is needed.
#include "kiln/search/profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "../support/fake_cuda.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/search/generator.h"

namespace kiln::search {
namespace {

namespace fs = std::filesystem;

std::string example(const std::string& name) {
  return std::string(KILN_SOURCE_DIR) + "/examples/" + name;
}

struct Fixture {
  fs::path dir;
  KernelGraph spec;
  std::vector<Candidate> cands;
  ProfileOptions opt;

  // n candidates (the lora μGraph under distinct fingerprints), a fake toolchain with `plan`.
  Fixture(const std::string& test, int n, const std::map<std::string, std::string>& plan) {
    dir = fs::path(KILN_BINARY_DIR) / "profile_test" / test;
    fs::remove_all(dir);
    kiln_test::write_fake_cuda(dir / "bin", plan);
    spec = parse_spec_file(example("lora.json"));
    KernelGraph g = load_graph_file(example("lora.mugraph.json"));
    for (int i = 0; i < n; ++i) {
      Candidate c;
      c.graph = g;
      c.fingerprint = "cand" + std::to_string(i + 1);
      c.verified = true;
      cands.push_back(c);
    }
    opt.run.nvcc = (dir / "bin" / "nvcc").string();
    opt.work_dir = (dir / "work").string();
    opt.threads = 2;
    opt.thread_variants = {};  // tests of the variants ask for them
  }
};

int threads_of(const Candidate& c) {
  for (const KernelOp& op : c.graph.ops)
    if (op.block) return op.block->block_threads;
  return 0;
}

std::vector<int> model_ranks(const ProfileResult& r) {
  std::vector<int> v;
  for (const ProfiledCandidate& p : r.ranked) v.push_back(p.model_rank);
  return v;
}

TEST(Profile, RanksByMeasuredTimeAndAlwaysIncludesTheSpec) {
  // Candidate 4 is the spec, appended because no candidate has its fingerprint.
  Fixture f("rank", 3, {{"1", "us=9.5"}, {"2", "us=3.25"}, {"3", "us=7"}, {"4", "us=5"}});
  ProfileResult r = profile_candidates(f.spec, f.cands, f.opt);
  ASSERT_EQ(r.ranked.size(), 4u);
  EXPECT_EQ(model_ranks(r), (std::vector<int>{2, 4, 3, 1}));
  ASSERT_NE(r.winner(), nullptr);
  EXPECT_EQ(r.winner()->candidate.fingerprint, "cand2");
  EXPECT_DOUBLE_EQ(r.winner()->m.us, 3.25);
  EXPECT_TRUE(r.ranked[1].candidate.is_spec);
  EXPECT_EQ(r.ranked[1].candidate.fingerprint, fingerprint(r.ranked[1].candidate.graph));
  EXPECT_EQ(r.device, "Fake GPU");
  EXPECT_TRUE(r.mismatches().empty());
  nlohmann::json j = profile_to_json(r);
  EXPECT_EQ(j[0]["measured_us"], 3.25);
  EXPECT_EQ(j[0]["gpu_ok"], true);
  EXPECT_TRUE(j[0]["profile_error"].is_null());
}

// The model's best is also measured with its generic block kernels at other thread counts: the
// same block ops, a new fingerprint, the verdict saying so; a faster variant wins.
TEST(Profile, MeasuresTheBestAtOtherThreadCounts) {
  Fixture f("threads", 2,
            {{"1", "us=6.7"}, {"2", "us=7"}, {"3", "us=4.8"}, {"4", "us=7.2"}, {"5", "us=9"}});
  f.opt.thread_variants = {64, 256, 128};  // 128 is the candidate's own: no variant
  ProfileResult r = profile_candidates(f.spec, f.cands, f.opt);
  ASSERT_EQ(r.ranked.size(), 5u);  // 2 candidates, 2 variants of the first, the spec
  ASSERT_NE(r.winner(), nullptr);
  EXPECT_EQ(r.winner()->model_rank, 3);
  EXPECT_EQ(threads_of(r.winner()->candidate), 64);
  EXPECT_NE(r.winner()->candidate.verdict.find("(64 threads per block)"), std::string::npos);
  EXPECT_EQ(r.winner()->candidate.fingerprint, fingerprint(r.winner()->candidate.graph));
  const KernelGraph& base = f.cands[0].graph;
  const KernelGraph& v = r.winner()->candidate.graph;
  ASSERT_EQ(v.ops.size(), base.ops.size());
  for (size_t i = 0; i < v.ops.size(); ++i)
    if (v.ops[i].block) {
      EXPECT_EQ(v.ops[i].block->ops.size(), base.ops[i].block->ops.size());
      EXPECT_EQ(v.ops[i].block->grid, base.ops[i].block->grid);
    }
  bool has256 = false;
  for (const ProfiledCandidate& p : r.ranked) has256 |= threads_of(p.candidate) == 256;
  EXPECT_TRUE(has256);
}

TEST(Profile, ThreadVariantsOnlyWhereAGenericBlockKernelChanges) {
  KernelGraph lora = load_graph_file(example("lora.mugraph.json"));
  Candidate c;
  c.graph = lora;
  c.verdict = "equivalent";
  EXPECT_TRUE(thread_variant(c, 64, Arch::Sm90a).has_value());
  EXPECT_FALSE(thread_variant(c, 128, Arch::Sm90a).has_value());   // its own count
  EXPECT_FALSE(thread_variant(c, 2048, Arch::Sm90a).has_value());  // over the block limit
  // Graphs whose kernels all run as runtime kernels (the TMA GEMV, a row chain): nothing to vary.
  for (const char* name : {"gated_mlp.mugraph.json", "double_norm.mugraph.json"}) {
    Candidate g;
    g.graph = load_graph_file(example(name));
    EXPECT_FALSE(thread_variant(g, 64, Arch::Sm90a).has_value()) << name;
  }
}

TEST(Profile, TheSpecIsNotProfiledTwice) {
  Fixture f("dedup", 2, {{"1", "us=4"}, {"2", "us=2"}, {"3", "us=1"}});
  Candidate s;
  s.graph = f.spec;
  s.graph.arch = f.opt.run.arch;
  s.fingerprint = fingerprint(s.graph);
  s.is_spec = true;
  f.cands.push_back(s);
  f.cands.push_back(f.cands[0]);  // a duplicate fingerprint
  ProfileResult r = profile_candidates(f.spec, f.cands, f.opt);
  EXPECT_EQ(r.ranked.size(), 3u);
  EXPECT_TRUE(r.winner()->candidate.is_spec);
}

TEST(Profile, FailuresAreReportedAndNeverWin) {
  Fixture f("failures", 5,
            {{"1", "compile_fail"},
             {"2", "mismatch"},
             {"3", "no_result"},
             {"4", "cuda_error"},
             {"5", "us=50"},
             {"6", "us=60"}});
  ProfileResult r = profile_candidates(f.spec, f.cands, f.opt);
  ASSERT_EQ(r.ranked.size(), 6u);
  // The slow correct ones first, then the failures in model order.
  EXPECT_EQ(model_ranks(r), (std::vector<int>{5, 6, 1, 2, 3, 4}));
  EXPECT_EQ(r.winner()->model_rank, 5);
  const Measurement& ce = r.ranked[2].m;
  EXPECT_EQ(ce.status, ProfileStatus::CompileError);
  EXPECT_NE(ce.error.find("fake compile failure"), std::string::npos) << ce.error;
  EXPECT_TRUE(fs::exists(ce.log));
  EXPECT_NE(ce.error.find(ce.log), std::string::npos);
  EXPECT_EQ(r.ranked[3].m.status, ProfileStatus::Mismatch);
  EXPECT_EQ(r.ranked[4].m.status, ProfileStatus::NoResult);
  EXPECT_EQ(r.ranked[5].m.status, ProfileStatus::CudaError);
  EXPECT_NE(r.ranked[5].m.error.find("no CUDA-capable device"), std::string::npos);
  ASSERT_EQ(r.mismatches().size(), 1u);
  EXPECT_EQ(r.mismatches()[0]->model_rank, 2);
}

TEST(Profile, NothingMeasuredMeansNoWinner) {
  Fixture f("none", 1, {{"*", "cuda_error"}});
  ProfileResult r = profile_candidates(f.spec, f.cands, f.opt);
  EXPECT_EQ(r.winner(), nullptr);
  EXPECT_EQ(model_ranks(r), (std::vector<int>{1, 2}));  // model order kept
}

TEST(Profile, AHangingHarnessTimesOut) {
  Fixture f("timeout", 1, {{"1", "hang"}, {"2", "us=1"}});
  f.opt.run.run_timeout_s = 0.5;
  auto t0 = std::chrono::steady_clock::now();
  ProfileResult r = profile_candidates(f.spec, f.cands, f.opt);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20);
  EXPECT_TRUE(r.winner()->candidate.is_spec);
  EXPECT_EQ(r.ranked[1].m.status, ProfileStatus::Timeout);
  EXPECT_NE(r.ranked[1].m.error.find("timed out"), std::string::npos);
}

TEST(Profile, ProgressCountsUp) {
  Fixture f("progress", 2, {{"*", "us=2"}});
  std::vector<std::string> seen;
  f.opt.progress = [&](const char* phase, int done, int total) {
    seen.push_back(std::string(phase) + std::to_string(done) + "/" + std::to_string(total));
  };
  profile_candidates(f.spec, f.cands, f.opt);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), "profiling3/3");
  EXPECT_NE(std::find(seen.begin(), seen.end(), "compiling3/3"), seen.end());
}

TEST(Profile, ParsesHarnessOutput) {
  Measurement ok = parse_harness_output(
      {0, false,
       "device: NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, L2 50 MB)\ncheck ...\n"
       "KILN_RESULT name=lora ok=1 err=2.500e-04 us=12.75 calls=20 copies=8\n"});
  EXPECT_TRUE(ok.ok());
  EXPECT_DOUBLE_EQ(ok.us, 12.75);
  EXPECT_DOUBLE_EQ(ok.err, 2.5e-4);
  EXPECT_EQ(ok.device, "NVIDIA H100 80GB HBM3");
  // A clean exit with ok=0 is still a mismatch; a timing of nan is no result.
  EXPECT_EQ(parse_harness_output({0, false, "KILN_RESULT name=a ok=0 err=1 us=3 calls=1 copies=1"})
                .status,
            ProfileStatus::Mismatch);
  EXPECT_EQ(
      parse_harness_output({0, false, "KILN_RESULT name=a ok=1 err=0 us=nan calls=0 copies=0"})
          .status,
      ProfileStatus::NoResult);
  EXPECT_EQ(parse_harness_output({139, false, "Segmentation fault"}).status,
            ProfileStatus::NoResult);
  EXPECT_EQ(parse_harness_output({-1, true, ""}).status, ProfileStatus::Timeout);
}

// The harness's range-rule keys (checks=, exempt=) and per-check lines: a failure on either
// input distribution is a mismatch that names the distribution, the output and the seed; a run
// whose checks were all exempt is still ok and says so; older lines without the keys still parse.
TEST(Profile, ParsesChecksExemptAndNamesTheFailingDistribution) {
  Measurement both = parse_harness_output(
      {0, false,
       "device: Fake GPU (sm_90, 132 SMs, L2 50 MB)\n"
       "check seed=1 dist=uniform output=Y err=1.000e-05 tol=5.0e-03 nonfinite=0 ok\n"
       "check seed=2 dist=normal1 output=Y err=2.000e-05 tol=5.0e-03 nonfinite=0 ok\n"
       "KILN_RESULT name=a ok=1 err=2.000e-05 us=4.50 calls=20 copies=4 checks=2 exempt=0\n"});
  EXPECT_TRUE(both.ok());
  EXPECT_EQ(both.checks, 2);
  EXPECT_EQ(both.exempt, 0);
  EXPECT_DOUBLE_EQ(both.err, 2e-5);

  // Fails on normal inputs only (e.g. exp(QK^T) in f16): a mismatch naming dist and output.
  Measurement normal = parse_harness_output(
      {1, false,
       "check seed=1 dist=uniform output=Y err=1.000e-05 tol=5.0e-03 nonfinite=0 ok\n"
       "check seed=1 dist=uniform output=Z err=1.000e-05 tol=5.0e-03 nonfinite=0 ok\n"
       "check seed=2 dist=normal1 output=Y err=1.000e-05 tol=5.0e-03 nonfinite=0 ok\n"
       "check seed=2 dist=normal1 output=Z err=inf tol=5.0e-03 nonfinite=12 FAIL\n"
       "KILN_RESULT name=a ok=0 err=inf us=4.50 calls=20 copies=4 checks=2 exempt=0\n"});
  EXPECT_EQ(normal.status, ProfileStatus::Mismatch);
  EXPECT_NE(normal.error.find("output Z"), std::string::npos) << normal.error;
  EXPECT_NE(normal.error.find("normal1 inputs"), std::string::npos) << normal.error;
  EXPECT_NE(normal.error.find("seed 2"), std::string::npos) << normal.error;
  EXPECT_NE(normal.error.find("12 non-finite"), std::string::npos) << normal.error;
  EXPECT_EQ(normal.error.find("in all"), std::string::npos) << normal.error;

  // Fails on uniform inputs (and more): the first failure is named, the rest counted.
  Measurement uniform = parse_harness_output(
      {1, false,
       "check seed=1 dist=uniform output=Y err=3.000e-01 tol=5.0e-03 nonfinite=0 FAIL\n"
       "check seed=2 dist=normal1 output=Y err=4.000e-01 tol=5.0e-03 nonfinite=0 FAIL\n"
       "KILN_RESULT name=a ok=0 err=4.000e-01 us=4.50 calls=20 copies=4 checks=2 exempt=0\n"});
  EXPECT_EQ(uniform.status, ProfileStatus::Mismatch);
  EXPECT_NE(uniform.error.find("output Y"), std::string::npos) << uniform.error;
  EXPECT_NE(uniform.error.find("uniform inputs (seed 1: rel err 3.000e-01 > tol 5.0e-03)"),
            std::string::npos)
      << uniform.error;
  EXPECT_NE(uniform.error.find("2 failing"), std::string::npos) << uniform.error;

  // An exempt check neither passes nor fails; a run with only exempt checks is ok, unchecked.
  Measurement part = parse_harness_output(
      {0, false,
       "check seed=1 dist=uniform output=Y err=1.000e-05 tol=5.0e-03 nonfinite=0 ok\n"
       "check seed=2 dist=normal1 output=Y err=inf tol=5.0e-03 nonfinite=3 exempt\n"
       "exempt seed=2 dist=normal1: the float64 reference leaves the f32 range (5 values beyond "
       "FLT_MAX or not finite); this check neither passes nor fails\n"
       "KILN_RESULT name=a ok=1 err=1.000e-05 us=4.50 calls=20 copies=4 checks=2 exempt=1\n"});
  EXPECT_TRUE(part.ok()) << part.error;
  EXPECT_EQ(part.exempt, 1);
  Measurement all = parse_harness_output(
      {0, false,
       "check seed=1 dist=uniform output=Y err=inf tol=5.0e-03 nonfinite=3 exempt\n"
       "check seed=2 dist=normal1 output=Y err=inf tol=5.0e-03 nonfinite=3 exempt\n"
       "all 2 checks exempt: nothing was checked\n"
       "KILN_RESULT name=a ok=1 err=nan us=4.50 calls=20 copies=4 checks=2 exempt=2\n"});
  EXPECT_TRUE(all.ok()) << all.error;
  EXPECT_EQ(all.checks, 2);
  EXPECT_EQ(all.exempt, 2);
  EXPECT_EQ(all.err, -1);  // no check counted: no error to report
  // An older harness: no keys, no dist (its checks were uniform); unknown keys are ignored.
  Measurement old = parse_harness_output(
      {1, false,
       "check seed=1 output=Y err=3.000e-01 tol=5.0e-03 nonfinite=0 FAIL\n"
       "KILN_RESULT name=a ok=0 err=3.000e-01 us=4.50 calls=20 copies=4 future=7\n"});
  EXPECT_EQ(old.status, ProfileStatus::Mismatch);
  EXPECT_EQ(old.checks, -1);
  EXPECT_EQ(old.exempt, -1);
  EXPECT_NE(old.error.find("output Y differs from the float64 reference of the spec on uniform"),
            std::string::npos)
      << old.error;
}

// The command run_harness runs for hr, with a runner that only records it (in dir `tag`).
std::string harness_command(HarnessRun hr, const std::string& tag) {
  fs::path dir = fs::path(KILN_BINARY_DIR) / "profile_test" / tag;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string seen;
  hr.runner = [&](const std::string& cmd, double) {
    seen = cmd;
    return ProcessResult{0, false, "KILN_RESULT name=a ok=1 err=0 us=1 calls=1 copies=1"};
  };
  EXPECT_TRUE(run_harness(dir.string(), hr).ok());
  return seen;
}

// profile_candidates and kiln bench ask every harness for at least two checks, so each candidate
// meets uniform and normal std-1 inputs.
TEST(Profile, RunHarnessAsksForBothDistributions) {
  for (int asked : {0, 1, 2, 5}) {
    HarnessRun hr;
    hr.checks = asked;
    const std::string seen = harness_command(hr, "two_checks");
    EXPECT_NE(seen.find(" --checks " + std::to_string(std::max(asked, 2)) + " "), std::string::npos)
        << seen;
  }
  EXPECT_GE(HarnessRun{}.checks, 2);
}

// --copies reaches the harness only when asked for (its default streams more than the L2).
TEST(Profile, RunHarnessPassesTheInputRotation) {
  for (int copies : {0, 4}) {
    HarnessRun hr;
    hr.copies = copies;
    const std::string seen = harness_command(hr, "copies");
    EXPECT_EQ(seen.find("--copies") != std::string::npos, copies > 0) << seen;
    if (copies) EXPECT_NE(seen.find(" --copies 4"), std::string::npos) << seen;
  }
}

TEST(Profile, RunProcessCapturesOutputAndKillsOnTimeout) {
  ProcessResult r = run_process("echo out; echo err >&2; exit 3", 10);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.output.find("out"), std::string::npos);
  EXPECT_NE(r.output.find("err"), std::string::npos);
  auto t0 = std::chrono::steady_clock::now();
  ProcessResult t = run_process("sleep 30 & sleep 30", 0.3);
  EXPECT_TRUE(t.timed_out);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5);
  EXPECT_EQ(shell_quote("a/b-c.cu"), "a/b-c.cu");
  EXPECT_EQ(run_process("echo " + shell_quote("it's $HOME"), 5).output, "it's $HOME\n");
}

TEST(Profile, DetectsTheGpuThroughTheRunner) {
  auto fake = [](std::string out, int code) {
    return [=](const std::string& cmd, double) {
      EXPECT_EQ(cmd, "nvidia-smi -L");
      return ProcessResult{code, false, out};
    };
  };
  GpuProbe yes = detect_gpu(fake("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n", 0));
  EXPECT_TRUE(yes.found);
  EXPECT_EQ(yes.detail, "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)");
  GpuProbe none = detect_gpu(fake("No devices were found\n", 6));
  EXPECT_FALSE(none.found);
  EXPECT_EQ(none.detail, "nvidia-smi found none");
  EXPECT_FALSE(detect_gpu(fake("", 0)).found);
}

TEST(Profile, FindsNvccInTheDocumentedOrder) {
  fs::path dir = fs::path(KILN_BINARY_DIR) / "profile_test" / "find";
  kiln_test::write_fake_cuda(dir, {});
  std::string nvcc = (dir / "nvcc").string();
  const char* old_cx = std::getenv("CUDACXX");
  std::string saved_cx = old_cx ? old_cx : "";
  std::string saved_path = std::getenv("PATH") ? std::getenv("PATH") : "";
  EXPECT_EQ(find_nvcc(nvcc), nvcc);
  EXPECT_THROW(find_nvcc((dir / "missing").string()), UserError);
  setenv("CUDACXX", nvcc.c_str(), 1);
  EXPECT_EQ(find_nvcc(), nvcc);
  setenv("CUDACXX", (dir / "missing").c_str(), 1);
  EXPECT_EQ(find_nvcc(), std::nullopt);  // a wrong $CUDACXX is not silently replaced
  unsetenv("CUDACXX");
  setenv("PATH", (dir.string() + ":" + saved_path).c_str(), 1);
  EXPECT_EQ(find_nvcc(), nvcc);
  EXPECT_EQ(nvcc_version(nvcc), "Cuda compilation tools, release 99.9, V99.9.1");
  setenv("PATH", saved_path.c_str(), 1);
  if (old_cx) setenv("CUDACXX", saved_cx.c_str(), 1);
}

}  // namespace
}  // namespace kiln::search
