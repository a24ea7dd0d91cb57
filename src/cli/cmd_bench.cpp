// `kiln bench GRAPH [--spec SPEC] [--nvcc P] [--repeats R] [--seed S] [--keep DIR]`: measures one
// μGraph (or a spec's own emission) on this machine's GPU. Emits the GPU harness (codegen/emit.h),
// builds it with nvcc, runs it (check against the float64 reference of the spec, then CUDA-graph
// timing) and prints the median time and the check's error. Without nvcc or without a GPU it
// says which, leaves the harness where it can be carried to a GPU machine, and exits with a
// distinct status (kBenchNoNvcc, kBenchNoGpu) rather than failing.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "commands.h"
#include "kiln/codegen/emit.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/search/profile.h"
#include "log.h"

namespace kiln::cli {

namespace {

namespace fs = std::filesystem;

constexpr int kBenchNoNvcc = 3;  // no nvcc found: the harness is written, not built
constexpr int kBenchNoGpu = 4;   // built, but no CUDA GPU is visible to run it

}  // namespace

void add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench", "Build and run a μGraph's (or a spec's) GPU harness here: check and time it");
  static std::string graph_file, spec_file, nvcc, keep, target = "sm_90a";
  static int repeats = 30, checks = 2, copies = 0;
  static uint64_t seed = 1;
  cmd->add_option("GRAPH", graph_file, "μGraph JSON (with --spec) or a spec JSON alone")
      ->required();
  cmd->add_option("--spec", spec_file, "the spec whose float64 reference checks GRAPH");
  cmd->add_option("--nvcc", nvcc,
                  "nvcc to use (default: $CUDACXX, else nvcc on PATH, else "
                  "/usr/local/cuda/bin/nvcc)");
  cmd->add_option("--target", target, "GPU the harness is built for")
      ->check(CLI::IsMember({"sm_90a", "sm_80"}))
      ->capture_default_str();
  cmd->add_option("--repeats", repeats, "timed CUDA-graph replays (median reported)")
      ->check(whole_number(1, 100000, "replays"))
      ->capture_default_str();
  // Two at least: check c draws uniform inputs when c is even, normal std 1 when odd (the spec's
  // range rule), and run_harness never asks for fewer.
  cmd->add_option("--checks", checks,
                  "correctness checks (seeds S, S+1, ...; uniform and normal std-1 inputs "
                  "alternating; at least 2)")
      ->check(whole_number(2, 1000, "checks"))
      ->capture_default_str();
  cmd->add_option("--seed", seed, "first check's input seed")->capture_default_str();
  cmd->add_option("--copies", copies,
                  "input sets the timing rotates over (default: enough to stream more than twice "
                  "the L2, so every call reads DRAM; 4 is what shared/bench/torch_baselines.py "
                  "rotates over, so small inputs stay in L2)")
      ->check(whole_number(1, 1024, "input sets"));
  cmd->add_option("--keep", keep,
                  "build in this directory and keep it (default: a temporary directory, removed "
                  "after a successful run)");
  cmd->footer(fmt::format(
      "Exit status: 0 checked and timed; 1 build failure, mismatch or CUDA error; 2 invalid "
      "input;\n{} no nvcc found (the harness is written, not built); {} no CUDA GPU visible "
      "(the harness is built, not run).",
      kBenchNoNvcc, kBenchNoGpu));
  cmd->callback([] {
    KernelGraph g = load_graph_file(graph_file);
    KernelGraph spec = spec_file.empty() ? g : parse_spec_file(spec_file);
    if (spec_file.empty() && !g.is_spec())
      throw UserError(ErrorCode::Schema, graph_file + " is a μGraph: bench needs its spec",
                      "give --spec SPEC.json");
    search::HarnessRun hr;
    hr.arch = *arch_from_name(target);
    hr.seed = seed;
    hr.repeats = repeats;
    hr.checks = checks;
    hr.copies = copies;
    std::string dir = keep;
    if (dir.empty()) {
      std::string tmpl = (fs::temp_directory_path() / "kiln-bench-XXXXXX").string();
      if (!mkdtemp(tmpl.data())) user_error(ErrorCode::Io, "cannot create {}", tmpl);
      dir = tmpl;
    }
    make_dirs(dir);
    HarnessOptions ho;
    ho.emit.arch = hr.arch;
    ho.emit.source = graph_file;
    ho.emit.verdict =
        spec_file.empty() ? "the spec itself" : "checked on the GPU against " + spec_file;
    ho.seed = seed;
    ho.checks = checks;
    ho.repeats = repeats;
    ho.file = "harness.cu";
    std::string cu = (fs::path(dir) / "harness.cu").string();
    write_file_text(cu, emit_harness(g, spec, ho));
    std::string run_args = fmt::format("--seed {} --checks {} --repeats {}", seed, checks, repeats);
    if (copies > 0) run_args += fmt::format(" --copies {}", copies);
    std::optional<std::string> found = search::find_nvcc(nvcc);
    if (!found) {
      std::fprintf(stderr,
                   "kiln bench: no nvcc found (--nvcc, $CUDACXX, PATH, /usr/local/cuda/bin/nvcc); "
                   "the harness was written to %s and can be built and run on a GPU machine "
                   "with:\n  cd %s && %s && ./harness %s\n",
                   cu.c_str(), search::shell_quote(dir).c_str(),
                   nvcc_command("harness.cu", "harness", hr.arch, false).c_str(), run_args.c_str());
      exit_status() = kBenchNoNvcc;
      return;
    }
    hr.nvcc = *found;
    bool tty = isatty(fileno(stderr));
    if (tty && notes_shown()) std::fprintf(stderr, "kiln bench: building %s ...", cu.c_str());
    search::Measurement m = search::compile_harness(dir, hr);
    if (tty && notes_shown()) std::fprintf(stderr, "\r\033[K");
    if (m.status != search::ProfileStatus::NotRun) {
      std::fprintf(stderr, "kiln bench: %s\n", m.error.c_str());
      exit_status() = 1;
      return;
    }
    search::GpuProbe gpu = search::detect_gpu();
    if (!gpu.found) {
      std::fprintf(stderr,
                   "kiln bench: no CUDA GPU visible (%s); the harness was written to %s and built "
                   "as %s/harness; run it on a GPU machine with:\n  %s %s\n",
                   gpu.detail.c_str(), cu.c_str(), dir.c_str(),
                   search::shell_quote(dir + "/harness").c_str(), run_args.c_str());
      exit_status() = kBenchNoGpu;
      return;
    }
    m = search::run_harness(dir, hr);
    if (!m.ok()) {
      std::fprintf(stderr, "kiln bench: %s: %s: %s\n", g.name.c_str(),
                   search::profile_status_name(m.status), m.error.c_str());
      exit_status() = 1;
      return;
    }
    std::printf("%s: %.2f us (median of %d), max rel err %.2e, %s\n", g.name.c_str(), m.us, repeats,
                m.err, m.device.c_str());
    if (keep.empty()) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    } else {
      if (notes_shown())
        std::fprintf(stderr, "kiln bench: harness, binary and logs in %s\n", dir.c_str());
    }
  });
}

}  // namespace kiln::cli
