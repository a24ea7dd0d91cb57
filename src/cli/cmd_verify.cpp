// `kiln verify A B [--trials N] [--seed S] [--float] [--no-scale]`: are two graphs (specs or
// μGraphs, any mix) equivalent? Finite-field trials (docs/verifier.md); exit 0 when equivalent,
// 1 when not (printing the output, element and seed that differ), 2 on invalid input.
#include <cstdio>

#include "commands.h"
#include "kiln/ir/json_io.h"
#include "kiln/verifier/verify.h"

namespace kiln::cli {

void add_verify(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "verify", "Check that two graphs (specs or μGraphs) compute the same function");
  static std::string file_a, file_b;
  static int trials = 0;
  static uint64_t seed = 1;
  static bool float_too = false, no_scale = false;
  static int threads = 0;
  cmd->add_option("A", file_a, "spec or μGraph JSON file")->required();
  cmd->add_option("B", file_b, "spec or μGraph JSON file")->required();
  cmd->add_option("--trials", trials,
                  "finite-field trials (0: enough for a false-positive bound below 2^-60)")
      ->capture_default_str();
  cmd->add_option("--seed", seed, "base seed of the trials")->capture_default_str();
  cmd->add_flag("--float", float_too,
                "also run the float64 check (A as the reference, B as the candidate)");
  cmd->add_flag("--no-scale", no_scale,
                "no scaled instance (output rows are still sampled when the graphs are too big)");
  cmd->add_option("--threads", threads, "worker threads (0: all cores)")->capture_default_str();
  cmd->callback([] {
    KernelGraph a = load_graph_file(file_a), b = load_graph_file(file_b);
    verifier::VerifyOptions opt;
    opt.trials = trials;
    opt.seed = seed;
    opt.scale = !no_scale;
    opt.threads = threads;
    verifier::Verdict v = verifier::verify(a, b, opt);
    std::printf("%s vs %s\n%s\n", file_a.c_str(), file_b.c_str(), v.summary().c_str());
    bool ok = v.equivalent();
    if (float_too) {
      verifier::FloatCheckOptions fo;
      fo.max_sampled_work = 1e300;  // asked for explicitly: run it however long it takes
      fo.threads = threads;
      verifier::FloatCheck fc = verifier::float_check(a, b, seed, fo);
      std::printf("%s\n", fc.summary().c_str());
      ok &= fc.ok;
    }
    if (!ok) exit_status() = 1;
  });
}

}  // namespace kiln::cli
