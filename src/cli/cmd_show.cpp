// `kiln show FILE [--dot|--svg]`: prints a spec or a μGraph as text, as Graphviz DOT, or as an
// SVG drawing (laid out by Kiln: no Graphviz needed).
#include <cstdio>

#include "commands.h"
#include "kiln/ir/json_io.h"
#include "kiln/ir/print.h"

namespace kiln::cli {

void add_show(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "show", "Print a spec or μGraph as text (or DOT with --dot, SVG with --svg)");
  static std::string file;
  static bool dot = false, svg = false;
  cmd->add_option("FILE", file, "spec (spec/1) or μGraph (mugraph/1) JSON file")->required();
  auto* d =
      cmd->add_flag("--dot", dot, "print Graphviz DOT instead of text (pipe into `dot -Tsvg`)");
  cmd->add_flag("--svg", svg, "print an SVG drawing instead of text (no Graphviz needed)")
      ->excludes(d);
  cmd->callback([] {
    KernelGraph g = load_graph_file(file);
    std::string out = dot ? to_dot(g) : svg ? to_svg(g) : to_text(g);
    std::fwrite(out.data(), 1, out.size(), stdout);
  });
}

}  // namespace kiln::cli
