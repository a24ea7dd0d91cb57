// kiln_codegen_tool: the emitter's command line until `kiln emit` exists (scripts/emit_all.sh).
//   kiln_codegen_tool GRAPH.json [-o OUT.cu] [--target sm_90a|sm_80] [--schedule]
//                     [--harness HARNESS.cu --spec SPEC.json] [--verdict TEXT]
// GRAPH is a spec or a μGraph; --harness writes the GPU harness that checks GRAPH against SPEC
// (default: GRAPH itself when it is a spec). Exit status: 0 ok, 2 invalid input, 1 other failure.
#include <cstdio>
#include <fstream>
#include <string>

#include "kiln/codegen/emit.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"

int main(int argc, char** argv) {
  using namespace kiln;
  std::string graph, out, harness, spec, verdict;
  Arch arch = Arch::Sm90a;
  bool schedule = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-o")
      out = val();
    else if (a == "--target") {
      auto t = arch_from_name(val());
      if (!t) return std::fprintf(stderr, "unknown target\n"), 2;
      arch = *t;
    } else if (a == "--schedule")
      schedule = true;
    else if (a == "--harness")
      harness = val();
    else if (a == "--spec")
      spec = val();
    else if (a == "--verdict")
      verdict = val();
    else if (graph.empty() && a[0] != '-')
      graph = a;
    else
      return std::fprintf(stderr,
                          "usage: %s GRAPH.json [-o OUT.cu] [--target T] [--schedule] [--harness "
                          "H.cu --spec SPEC.json]\n",
                          argv[0]),
             2;
  }
  if (graph.empty()) return std::fprintf(stderr, "no graph given\n"), 2;
  try {
    KernelGraph g = load_graph_file(graph);
    EmitOptions eo;
    eo.arch = arch;
    eo.source = graph;
    eo.verdict = verdict;
    if (schedule)
      std::fputs(schedule_to_text(g, plan_schedule(g, target_for(arch))).c_str(), stdout);
    if (!out.empty()) std::ofstream(out) << emit_cuda(g, eo);
    if (!harness.empty()) {
      KernelGraph s = spec.empty() ? g : load_graph_file(spec);
      HarnessOptions ho;
      ho.emit = eo;
      std::ofstream(harness) << emit_harness(g, s, ho);
    }
  } catch (const UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.render().c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_codegen_tool: %s\n", e.what());
    return 1;
  }
  return 0;
}
