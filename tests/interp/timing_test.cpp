// Timing sanity for suite-sized specs: prints how long evaluation takes, asserts nothing about
// time (only that F32 agrees with F64 within the spec tolerance). The full table in
// docs/interpreter.md comes from DISABLED_SuiteTimings (run it with
// --gtest_also_run_disabled_tests --gtest_filter='*SuiteTimings*').
#include <chrono>
#include <cstdio>
#include <ctime>

#include "helpers.h"
#include "suite.h"

namespace kiln {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of the whole process (all threads): on a shared machine wall time says little.
double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

void time_spec(const KernelGraph& g, const char* label) {
  auto t0 = std::chrono::steady_clock::now();
  double c0 = cpu_seconds();
  auto in = random_inputs(g, 1);
  double gen = seconds_since(t0), cgen = cpu_seconds() - c0;
  t0 = std::chrono::steady_clock::now();
  c0 = cpu_seconds();
  auto f32 = evaluate(g, in, {Precision::F32, 0});
  double t32 = seconds_since(t0), c32 = cpu_seconds() - c0;
  t0 = std::chrono::steady_clock::now();
  c0 = cpu_seconds();
  auto ref = evaluate(g, in, {Precision::F64, 0});
  double t64 = seconds_since(t0), c64 = cpu_seconds() - c0;
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_LE(relative_l2_error(f32[i], ref[i]), spec_tolerance(ref[i].dtype)) << label;
  std::printf(
      "[ timing   ] %-26s wall/cpu s: inputs %5.2f/%5.2f  f32 %5.2f/%5.2f  f64 %5.2f/%5.2f\n",
      label, gen, cgen, t32, c32, t64, c64);
}

void time_rows(const KernelGraph& g, const char* label, int64_t count) {
  auto in = random_inputs(g, 1);
  std::vector<std::vector<int64_t>> rows;
  for (int t : g.outputs) rows.push_back(sample_rows(g.tensor(t).shape, count, 1));
  auto t0 = std::chrono::steady_clock::now();
  double c0 = cpu_seconds();
  auto part = evaluate_rows(g, in, rows, {Precision::F64, 0});
  std::printf("[ timing   ] %-26s wall/cpu s: %lld rows f64 %5.2f/%5.2f\n", label,
              static_cast<long long>(count), seconds_since(t0), cpu_seconds() - c0);
  EXPECT_EQ(part[0].shape[0], count);
}

TEST(Timing, SuiteSizedSpecs) {
  time_spec(testing::rmsnorm_linear(16), "rmsnorm_linear bs16");
  time_spec(testing::gated_mlp_spec(16), "gated_mlp m16");
  time_rows(testing::gated_mlp_spec(4096), "gated_mlp m4096 partial", 8);
}

TEST(Timing, DISABLED_SuiteTimings) {
  for (int64_t bs : {1, 8, 16})
    time_spec(testing::rmsnorm_linear(bs), ("rmsnorm_linear bs" + std::to_string(bs)).c_str());
  for (int64_t m : {1, 8, 16})
    time_spec(testing::gated_mlp_spec(m), ("gated_mlp m" + std::to_string(m)).c_str());
  time_rows(testing::gated_mlp_spec(4096), "gated_mlp m4096 partial", 16);
  for (int64_t bs : {1, 8, 16})
    time_spec(testing::gqa(bs), ("gqa bs" + std::to_string(bs)).c_str());
  time_spec(testing::lora(), "lora");
  for (int64_t n : {1, 16, 256, 2048})
    time_spec(testing::add_rmsnorm(n), ("add_rmsnorm n" + std::to_string(n)).c_str());
  for (auto [n, k] : {std::pair<int64_t, int64_t>{2304, 16384}, {13312, 16384}, {16384, 6656}})
    for (int64_t m : {1, 32})
      time_spec(testing::skinny_gemm(m, n, k),
                ("skinny_gemm N" + std::to_string(n) + " m" + std::to_string(m)).c_str());
}

}  // namespace
}  // namespace kiln
