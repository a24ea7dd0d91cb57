// `kiln emit GRAPH -o FILE.cu [--header FILE.h] [--name NAME] [--target sm_90a|sm_80]
//  [--spec SPEC] [--harness FILE.cu] [--schedule]`: writes the standalone CUDA file of a spec or
// μGraph. With --spec, the graph is first verified against the spec (finite-field verifier) and
// its verdict goes into the file's header comment; a graph that is not equivalent is refused
// (exit 1) and nothing is written. --header writes the C header of the .cu (prototypes with
// named parameters, shapes and dtypes); --name exports the symbols as kiln_NAME (default the
// graph's name), so one graph emitted under two names links twice into one program. --harness
// also writes the GPU harness (main(): seeded inputs, float64 reference from the spec, check,
// CUDA-graph timing) that scripts/gpu_check.sh compiles and runs. Missing directories of the
// output paths are created.
#include <cstdio>

#include "commands.h"
#include "kiln/codegen/emit.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/verifier/verify.h"
#include "log.h"

namespace kiln::cli {

namespace {}  // namespace

void add_emit(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "emit",
      "Write the standalone CUDA .cu of a spec or μGraph (and optionally its C header and GPU "
      "harness)");
  static std::string graph_file, out, header, name, spec_file, harness, target = "sm_90a";
  static bool schedule = false;
  cmd->add_option("GRAPH", graph_file, "spec or μGraph JSON file")->required();
  cmd->add_option("-o,--output", out,
                  "the .cu to write (extern \"C\" kiln_<name> launch function)");
  cmd->add_option("--header", header,
                  "also write the .cu's C header (prototypes, shapes, dtypes; C or C++)");
  cmd->add_option("--name", name,
                  "the <name> of the exported symbols (default: the graph's name); files of "
                  "distinct names link into one program")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return is_valid_name(v) ? "" : "must match [A-Za-z_][A-Za-z0-9_]*, got " + v;
          },
          "NAME"));
  cmd->add_option("--target", target, "GPU the schedule is planned for")
      ->check(CLI::IsMember({"sm_90a", "sm_80"}))
      ->capture_default_str();
  cmd->add_option("--spec", spec_file,
                  "spec to verify GRAPH against before emitting; the harness's reference");
  cmd->add_option("--harness", harness,
                  "also write a GPU harness .cu (check against the spec's float64 reference, "
                  "then timing); build it with the nvcc line in its header");
  cmd->add_flag("--schedule", schedule, "print the layout/schedule plan");
  cmd->callback([] {
    if (out.empty() && header.empty() && harness.empty() && !schedule)
      throw UserError(ErrorCode::Schema, "nothing to do",
                      "give -o FILE.cu, --header FILE.h, --harness or --schedule");
    KernelGraph g = load_graph_file(graph_file);
    KernelGraph spec = spec_file.empty() ? g : load_graph_file(spec_file);
    EmitOptions eo;
    eo.arch = *arch_from_name(target);
    eo.source = graph_file;
    eo.name = name;
    if (!out.empty()) eo.cu_file = file_name(out);
    if (!header.empty()) eo.header_file = file_name(header);
    if (!spec_file.empty()) {
      verifier::Verdict v = verifier::verify(spec, g);
      if (!v.equivalent()) {
        std::fprintf(stderr, "kiln emit: %s is not equivalent to %s:\n%s", graph_file.c_str(),
                     spec_file.c_str(), v.summary().c_str());
        exit_status() = 1;
        return;
      }
      // One line: the header comment prefixes each line with "//".
      std::string summary = v.summary();
      for (char& c : summary)
        if (c == '\n') c = ';';
      while (!summary.empty() && (summary.back() == ';' || summary.back() == ' '))
        summary.pop_back();
      eo.verdict = "equivalent to " + spec_file + " (" + summary + ")";
    } else {
      eo.verdict = g.is_spec() ? "the spec itself" : "not verified (no --spec given)";
    }
    if (schedule)
      std::fputs(schedule_to_text(g, plan_schedule(g, target_for(eo.arch))).c_str(), stdout);
    if (!out.empty()) {
      make_parent_dirs(out);
      write_file_text(out, emit_cuda(g, eo));
      if (notes_shown())
        std::fprintf(stderr, "wrote %s\n  build: %s\n", out.c_str(),
                     nvcc_command(out, out.substr(0, out.rfind('.')) + ".o", eo.arch).c_str());
    }
    if (!header.empty()) {
      make_parent_dirs(header);
      write_file_text(header, emit_header(g, eo));
      if (notes_shown()) std::fprintf(stderr, "wrote %s\n", header.c_str());
    }
    if (!harness.empty()) {
      make_parent_dirs(harness);
      HarnessOptions ho;
      ho.emit = eo;
      ho.file = file_name(harness);
      write_file_text(harness, emit_harness(g, spec, ho));
      if (notes_shown())
        std::fprintf(
            stderr, "wrote %s\n  build: %s\n", harness.c_str(),
            nvcc_command(harness, harness.substr(0, harness.rfind('.')), eo.arch, false).c_str());
    }
  });
}

}  // namespace kiln::cli
