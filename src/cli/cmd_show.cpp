// `kiln show FILE [--dot]`: prints a spec or a μGraph as text, or as Graphviz DOT.
#include <cstdio>

#include "commands.h"
#include "kiln/ir/json_io.h"
#include "kiln/ir/print.h"

namespace kiln::cli {

void add_show(CLI::App& app) {
  auto* cmd = app.add_subcommand("show", "Print a spec or μGraph as text (or DOT with --dot)");
  static std::string file;
  static bool dot = false;
  cmd->add_option("FILE", file, "spec (spec/1) or μGraph (mugraph/1) JSON file")->required();
  cmd->add_flag("--dot", dot, "print Graphviz DOT instead of text (pipe into `dot -Tsvg`)");
  cmd->callback([] {
    KernelGraph g = load_graph_file(file);
    std::string out = dot ? to_dot(g) : to_text(g);
    std::fwrite(out.data(), 1, out.size(), stdout);
  });
}

}  // namespace kiln::cli
