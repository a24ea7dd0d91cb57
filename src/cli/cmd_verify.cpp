// `kiln verify A B [--trials N] [--seed S] [--float [--input-std S]] [--no-scale]`: are two
// graphs (specs or μGraphs, any mix) equivalent? Finite-field trials (docs/verifier.md). Exit 0:
// equivalent with a false-positive bound (and the float check passed, if asked); 1: not
// equivalent (printing the output, element and seed that differ) or the float check failed;
// 2: invalid input; 3: equivalent on every trial but unbounded, because an output depends on
// what a selection (max, relu, clamp, ...) selects, which the field model cannot bound.
#include <cstdio>
#include <cstdlib>

#include "commands.h"
#include "kiln/ir/json_io.h"
#include "kiln/search/float_model.h"
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
  static double input_std = -1;
  cmd->add_option("A", file_a, "spec or μGraph JSON file")->required();
  cmd->add_option("B", file_b, "spec or μGraph JSON file")->required();
  cmd->add_option("--trials", trials,
                  "finite-field trials (0: enough for a false-positive bound below 2^-60)")
      ->check(whole_number(0, 10000, "trials"))
      ->capture_default_str();
  cmd->add_option("--seed", seed, "base seed of the trials")->capture_default_str();
  cmd->add_flag(
      "--float", float_too,
      "also run the float check: A's float64 reference against B as the GPU computes "
      "it (F32, 16-bit storage where B's schedule keeps it), on the uniform generator "
      "and on std-1 normal inputs (and inputs of one sign when the verdict is unbounded)");
  cmd->add_option("--input-std", input_std,
                  "with --float: check on normal inputs of this standard deviation only (0: the "
                  "uniform generator only)")
      ->check(input_std_range());
  cmd->add_flag("--no-scale", no_scale,
                "no scaled instance (output rows are still sampled when the graphs are too big)");
  cmd->add_option("--threads", threads, "worker threads (0: all cores)")
      ->check(thread_count())
      ->capture_default_str();
  static int64_t memory_limit_mb = 0;
  add_memory_limit(cmd, memory_limit_mb);
  cmd->callback([] {
    KernelGraph a = load_graph_file(file_a), b = load_graph_file(file_b);
    verifier::VerifyOptions opt;
    opt.max_bytes = memory_limit_mb << 20;
    opt.trials = trials;
    opt.seed = seed;
    opt.scale = !no_scale;
    opt.threads = threads;
    verifier::Verdict v = verifier::verify(a, b, opt);
    std::printf("%s vs %s\n%s\n", file_a.c_str(), file_b.c_str(), v.summary().c_str());
    bool ok = v.equivalent();
    if (float_too) {
      verifier::FloatCheckOptions fo =
          search::gpu_float_check_options(b, v.equivalent() && !v.bounded(), threads);
      fo.max_sampled_work = 1e300;  // asked for explicitly: run it however long it takes
      if (input_std >= 0) fo.input_stds = {input_std};
      fo.max_bytes = memory_limit_mb << 20;
      verifier::FloatCheck fc = verifier::float_check(a, b, seed, fo);
      std::printf("%s\n", fc.summary().c_str());
      ok &= fc.ok;
    }
    if (!ok)
      exit_status() = 1;
    else if (!v.bounded())
      exit_status() = 3;
  });
}

}  // namespace kiln::cli
