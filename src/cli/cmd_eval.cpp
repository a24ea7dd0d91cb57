// `kiln eval FILE [--seed N] [--precision f32|f64] [--input-std S] [--rows N]`: runs the CPU
// reference interpreter on the documented seeded random inputs (uniform, or normal of std S > 0:
// the inputs of the GPU harness's checks) and prints, per output, its shape, mean, max |x| and a
// checksum (sum over i of (1 + i mod 7) * x_i, sensitive to order and to every element). With
// --rows N only N rows of each output are computed (seeded, first and last included), and only
// the input rows they read are generated: the way to evaluate a graph too big to hold.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "kiln/interp/domain.h"
#include "kiln/interp/interp.h"
#include "kiln/ir/json_io.h"

namespace kiln::cli {

void add_eval(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "eval", "Evaluate a spec or μGraph on seeded random inputs with the CPU interpreter");
  static std::string file;
  static uint64_t seed = 1;
  static std::string precision = "f64";
  static int threads = 0;
  static double input_std = 0;
  cmd->add_option("FILE", file, "spec or μGraph JSON file")->required();
  cmd->add_option("--seed", seed, "seed of the random inputs (docs/interpreter.md)")
      ->capture_default_str();
  cmd->add_option("--input-std", input_std,
                  "0: uniform inputs in [-0.5, 0.5); S > 0: normal inputs of standard deviation S "
                  "(the spec's range rule uses 1)")
      ->check(input_std_range())
      ->capture_default_str();
  cmd->add_option("--precision", precision,
                  "f64: exact reference semantics; f32: float arithmetic, stores rounded to dtype")
      ->check(CLI::IsMember({"f32", "f64"}))
      ->capture_default_str();
  cmd->add_option("--threads", threads, "worker threads (0: all cores)")
      ->check(thread_count())
      ->capture_default_str();
  static int64_t rows = 0;
  cmd->add_option("--rows", rows,
                  "0: every row; N > 0: only N rows of each output (seeded by --seed; the first "
                  "and the last among them), generating only the input rows they read")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  static int64_t memory_limit_mb = 0;
  add_memory_limit(cmd, memory_limit_mb);
  cmd->callback([] {
    KernelGraph g = load_graph_file(file);
    auto t0 = std::chrono::steady_clock::now();
    EvalOptions opt;
    opt.precision = precision == "f32" ? Precision::F32 : Precision::F64;
    opt.threads = threads;
    opt.max_bytes = memory_limit_mb << 20;
    // Which rows: every row, or N sampled rows of each output and the input rows they read.
    std::vector<std::vector<int64_t>> sel;
    std::vector<std::vector<uint8_t>> in_rows;
    if (rows > 0) {
      for (size_t i = 0; i < g.outputs.size(); ++i)
        sel.push_back(sample_rows(g.tensor(g.outputs[i]).shape, rows, seed + i));
      in_rows = input_rows(g, sel);
    }
    // The float64 inputs come first: check them with the evaluation before allocating them.
    double in_bytes = 0;
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const Shape& s = g.tensor(g.inputs[i]).shape;
      const bool all = rows == 0 || in_rows[i].empty();
      const double n = all ? double(numel(s))
                           : double(std::count(in_rows[i].begin(), in_rows[i].end(), 1)) *
                                 double(interp::num_cols(s));
      in_bytes += 8.0 * n;
    }
    const int vb = opt.precision == Precision::F32 ? 4 : 8;
    const double need = in_bytes + (rows > 0 ? estimate_bytes(g, vb, sel) : estimate_bytes(g, vb));
    if (std::string why = over_memory_limit(need, opt.max_bytes); !why.empty())
      throw MemoryLimitExceeded(fmt::format("evaluating {} with its inputs {}{}", g.name, why,
                                            rows > 0 ? "" : " (--rows N evaluates N rows only)"));
    std::vector<HostTensor> inputs =
        random_inputs(g, seed, input_std, rows > 0 ? &in_rows : nullptr);
    std::vector<HostTensor> outs =
        rows > 0 ? evaluate_rows(g, inputs, sel, opt) : evaluate(g, inputs, opt);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string dist =
        input_std > 0 ? fmt::format("normal inputs (std {:g})", input_std) : "uniform inputs";
    std::printf("%s: %s, seed %llu, %s, %s, %.3f s\n", g.name.c_str(),
                g.is_spec() ? "spec" : "μGraph", static_cast<unsigned long long>(seed),
                dist.c_str(), precision.c_str(), secs);
    for (size_t i = 0; i < outs.size(); ++i) {
      const HostTensor& t = outs[i];
      double sum = 0, maxabs = 0, check = 0;
      for (size_t e = 0; e < t.data.size(); ++e) {
        double v = t.data[e];
        sum += v;
        maxabs = std::max(maxabs, std::fabs(v));
        check += double(1 + e % 7) * v;
      }
      double mean = t.data.empty() ? 0 : sum / double(t.data.size());
      const Shape& full = g.tensor(g.outputs[i]).shape;
      std::printf("  %-12s %-20s %-5s mean % .6e  max|x| %.6e  checksum % .10e\n",
                  g.tensor(g.outputs[i]).name.c_str(), shape_str(full).c_str(), dtype_name(t.dtype),
                  mean, maxabs, check);
      if (rows > 0 && static_cast<int64_t>(sel[i].size()) < interp::num_rows(full)) {
        std::string list;
        for (size_t k = 0; k < sel[i].size() && k < 16; ++k)
          list += fmt::format("{}{}", k ? " " : "", sel[i][k]);
        if (sel[i].size() > 16) list += " ...";
        std::printf("  %-12s (statistics over %zu of %lld rows: %s)\n", "", sel[i].size(),
                    static_cast<long long>(interp::num_rows(full)), list.c_str());
      }
    }
  });
}

}  // namespace kiln::cli
