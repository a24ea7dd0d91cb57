// The kiln command line: a straight-line driver over the library layers. Exit status: 0 on
// success, 2 on invalid input (bad arguments, a malformed spec or μGraph), 1 on any other
// failure.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string_view>

#include <fmt/format.h>

#include "commands.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/memory.h"
#include "kiln/version.h"
#include "log.h"

namespace kiln::cli {
int& exit_status() {
  static int status = 0;
  return status;
}

CLI::Validator whole_number(long long lo, long long hi, const char* what) {
  return CLI::Validator(
      [lo, hi, what](std::string& v) -> std::string {
        errno = 0;
        char* end = nullptr;
        long long x = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || end == v.c_str() || *end != 0 || errno == ERANGE || x < lo || x > hi)
          return fmt::format("must be a whole number of {} in [{}, {}], got {}", what, lo, hi, v);
        return {};
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

CLI::Validator real_number(double lo, double hi, const char* what) {
  return CLI::Validator(
      [lo, hi, what](std::string& v) -> std::string {
        char* end = nullptr;
        double d = std::strtod(v.c_str(), &end);
        if (v.empty() || end == v.c_str() || *end != 0 || !(d >= lo && d <= hi))
          return fmt::format("must be a {} in [{:g}, {:g}], got {}", what, lo, hi, v);
        return {};
      },
      fmt::format("NUMBER in [{:g}, {:g}]", lo, hi));
}

CLI::Validator input_std_range() {
  return real_number(0, 1e4, "standard deviation (0: the uniform generator)");
}

CLI::Validator thread_count() {
  return whole_number(0, 1024, "threads (0: all cores)");
}
void add_memory_limit(CLI::App* cmd, int64_t& mb) {
  mb = kiln::default_memory_limit_mb();
  cmd->add_option("--memory-limit", mb,
                  "memory the run may use, in MB (default: half the machine's RAM); checked "
                  "before the interpreter, the verifier and the float check allocate their "
                  "tensors, and by the search")
      ->check(whole_number(64, int64_t(1) << 24, "MB"))
      ->capture_default_str();
}
}  // namespace kiln::cli

int main(int argc, char** argv) {
  CLI::App app{
      "kiln: a superoptimizer for GPU tensor programs.\n"
      "Reads a tensor program (a spec, spec/1) or a μGraph (mugraph/1) as JSON."};
  app.set_version_flag("--version", std::string("kiln ") + KILN_VERSION);
  app.require_subcommand(1);
  // -q / -v anywhere on the line (before or after the command): subcommands fall through to
  // these. They are read before parsing, so messages printed while parsing obey them too.
  app.fallthrough();
  static bool quiet = false, verbose = false;
  auto* q = app.add_flag("-q,--quiet", quiet, "print only warnings and errors on stderr");
  app.add_flag("-v,--verbose", verbose, "also print details on stderr")->excludes(q);
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "-q" || a == "--quiet") kiln::cli::set_verbosity(-1);
    if (a == "-v" || a == "--verbose") kiln::cli::set_verbosity(1);
  }
  app.footer(
      "Exit status: 0 success, 1 failure, 2 invalid input (bench: 3 no nvcc, 4 no GPU; verify: 3\n"
      "equivalent but unbounded, an output depends on what a selection selects).\n"
      "Run `kiln COMMAND --help` for a command's options.");
  kiln::cli::add_show(app);
  kiln::cli::add_eval(app);
  kiln::cli::add_verify(app);
  kiln::cli::add_optimize(app);
  kiln::cli::add_trace(app);
  kiln::cli::add_emit(app);
  kiln::cli::add_bench(app);
  kiln::cli::add_check(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  } catch (const kiln::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.render().c_str());
    return 2;
  } catch (const kiln::InternalError& e) {
    std::fprintf(stderr, "kiln: %s\nThis is a bug in Kiln; please report it.\n", e.what());
    return 1;
  } catch (const kiln::MemoryLimitExceeded& e) {
    std::fprintf(stderr,
                 "kiln: over the memory limit: %s; raise --memory-limit or use smaller shapes\n",
                 e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "kiln: out of memory (the graph's tensors, the search state or the interpreter's "
                 "values did not fit); try smaller shapes, fewer --threads or a shorter "
                 "--time-limit\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: %s\n", e.what());
    return 1;
  }
  return kiln::cli::exit_status();
}
