// kiln_cost_tool: the cost model's estimate of saved μGraphs, for refitting it against
// measurements (scripts/fit_cost_model.py, docs/cost-model.md "Calibration").
//   kiln_cost_tool [--target sm_90a|sm_80] GRAPH.json...
// Prints one JSON object per line: {"file": GRAPH, "cost": <cost_to_json>} (or "error").
// Exit status: 0 ok (per-file errors are reported in their line), 2 bad usage.
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/search/cost_model.h"

int main(int argc, char** argv) {
  using namespace kiln;
  Arch arch = Arch::Sm90a;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--target" && i + 1 < argc) {
      auto t = arch_from_name(argv[++i]);
      if (!t) return std::fprintf(stderr, "unknown target\n"), 2;
      arch = *t;
    } else if (!a.empty() && a[0] != '-') {
      files.push_back(a);
    } else {
      return std::fprintf(stderr, "usage: %s [--target T] GRAPH.json...\n", argv[0]), 2;
    }
  }
  for (const std::string& f : files) {
    nlohmann::json line = {{"file", f}};
    try {
      KernelGraph g = load_graph_file(f);
      line["cost"] = search::cost_to_json(search::estimate_cost(g, target_for(arch)));
    } catch (const UserError& e) {
      line["error"] = e.render();
    } catch (const std::exception& e) {
      line["error"] = e.what();
    }
    std::puts(line.dump().c_str());
  }
  return 0;
}
