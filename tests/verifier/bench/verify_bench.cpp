// Verifier throughput on one core: verifications per second of every example μGraph against its
// spec, of a KernelBench-sized 1024x8192x8192 matmul μGraph against its spec, and of a wrong
// candidate of that size (rejection), plus the float64 check of the big pair for comparison.
// Run: build/tests/verify_bench [--benchmark_filter=...]. Figures are in docs/verifier.md.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/verifier/verify.h"

namespace kiln::verifier {
namespace {

namespace fs = std::filesystem;

// O = X W with X [1024, 8192], W [8192, 8192]: a block per 128x128 output tile walks K in 128
// steps of 64. The wrong candidate combines the K steps with accum_max instead of accum_sum.
// With row_tile = 1, a block owns one row and 128 columns: the row dim cannot shrink (its unit
// is 1), so the verifier falls back to sampling output rows.
KernelGraph big_matmul_mugraph(bool wrong, int64_t row_tile = 128) {
  KernelGraphBuilder kb("big_matmul");
  int x = kb.input("X", {1024, 8192}, DType::F16);
  int w = kb.input("W", {8192, 8192}, DType::F16);
  const KernelGraph& g = kb.peek();
  BlockGraphBuilder bb({64, 1024 / row_tile}, 256, {128}, {g.tensor(x), g.tensor(w)});
  int tx = bb.input(0, {-1, 0}, {1}, "x");
  int tw = bb.input(1, {1, -1}, {0}, "w");
  int acc = bb.op(wrong ? OpKind::AccumMax : OpKind::AccumSum,
                  {bb.op(OpKind::MatMul, {tx, tw}, {}, "xw")}, {}, "acc");
  bb.output(acc, {1, 0}, {-1}, DType::F16, "O", -1, "save");
  auto out = kb.graph_defined(std::make_shared<const BlockGraph>(std::move(bb).finish()), {x, w},
                              "matmul");
  kb.output(out[0]);
  return std::move(kb).finish();
}

KernelGraph big_matmul_spec() {
  return parse_spec(R"({"name": "big_matmul",
    "inputs": [{"name": "X", "shape": [1024, 8192], "dtype": "f16"},
               {"name": "W", "shape": [8192, 8192], "dtype": "f16"}],
    "nodes": [{"name": "O", "op": "matmul", "inputs": ["X", "W"]}],
    "outputs": ["O"]})");
}

void run_verify(benchmark::State& state, const KernelGraph& a, const KernelGraph& b, bool expect) {
  VerifyOptions opt;
  opt.threads = 1;
  Verdict v;
  for (auto _ : state) {
    v = verify(a, b, opt);
    benchmark::DoNotOptimize(v);
  }
  if (v.equivalent() != expect) state.SkipWithError(("unexpected verdict: " + v.summary()).c_str());
  state.counters["verifications/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["trials"] = v.trials;
  state.counters["log2_bound"] = v.bound > 0 ? std::log2(v.bound) : -1e9;
  state.counters["rows_checked"] = static_cast<double>(v.rows_checked);
}

void register_all() {
  fs::path dir = fs::path(KILN_SOURCE_DIR) / "examples";
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    std::string f = p.filename().string();
    const std::string suffix = ".mugraph.json";
    if (f.size() <= suffix.size() || f.compare(f.size() - suffix.size(), suffix.size(), suffix))
      continue;
    std::string stem = f.substr(0, f.size() - suffix.size());
    fs::path spec = dir / (stem + ".json");
    if (!fs::exists(spec)) continue;
    auto a = std::make_shared<KernelGraph>(load_graph_file(spec.string()));
    auto b = std::make_shared<KernelGraph>(load_graph_file(p.string()));
    benchmark::RegisterBenchmark(("verify/" + stem).c_str(), [a, b](benchmark::State& s) {
      run_verify(s, *a, *b, true);
    })->Unit(benchmark::kMillisecond);
  }
  auto spec = std::make_shared<KernelGraph>(big_matmul_spec());
  auto good = std::make_shared<KernelGraph>(big_matmul_mugraph(false));
  auto bad = std::make_shared<KernelGraph>(big_matmul_mugraph(true));
  benchmark::RegisterBenchmark("verify/matmul_1024x8192x8192", [=](benchmark::State& s) {
    run_verify(s, *spec, *good, true);
  })->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("verify/matmul_1024x8192x8192_wrong", [=](benchmark::State& s) {
    run_verify(s, *spec, *bad, false);
  })->Unit(benchmark::kMillisecond);
  auto rows1 = std::make_shared<KernelGraph>(big_matmul_mugraph(false, 1));
  benchmark::RegisterBenchmark("verify/matmul_1024x8192x8192_row_tile_1", [=](benchmark::State& s) {
    run_verify(s, *spec, *rows1, true);
  })->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("float_check/matmul_1024x8192x8192", [=](benchmark::State& s) {
    FloatCheckOptions fo;
    fo.threads = 1;
    for (auto _ : s) benchmark::DoNotOptimize(float_check(*spec, *good, 1, fo));
  })->Unit(benchmark::kMillisecond);
}

}  // namespace
}  // namespace kiln::verifier

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  kiln::verifier::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
