// kiln_algebra_tool: the algebra pass on specs, as the search runs it (the spec's primitive
// graph, the search's default limits, each extracted graph verified against the spec), for
// docs/algebra.md's table of times and node counts.
//   kiln_algebra_tool SPEC.json...
// Prints per spec: the pass's summary line, then one line per extracted base. Exit status: 0,
// 2 for bad usage; a spec that does not parse is reported in its line.
#include <cstdio>
#include <string>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/search/search.h"

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc < 2) return std::fprintf(stderr, "usage: %s SPEC.json...\n", argv[0]), 2;
  for (int i = 1; i < argc; ++i) {
    try {
      const KernelGraph spec = parse_spec_file(argv[i]);
      search::SearchConfig cfg;
      cfg.threads = 2;
      const search::PGraph base = search::expand_spec(spec);
      search::AlgebraBases ab = search::algebra_bases(
          spec, base, cfg, Deadline::in(cfg.variants.algebra_seconds), Deadline{});
      std::printf("%s: %s\n", spec.name.c_str(), ab.summary.c_str());
      for (const std::string& l : ab.lines) std::printf("  %s\n", l.c_str());
    } catch (const std::exception& e) {
      std::printf("%s: error: %s\n", argv[i], e.what());
    }
  }
  return 0;
}
