// `kiln show FILE [--dot|--svg]`: prints a spec or a μGraph as text, as Graphviz DOT, or as an
// SVG drawing (laid out by Kiln: no Graphviz needed). The text of a μGraph ends with how each
// kernel is lowered on its target (the schedule's strategy: e.g. the attention lowering's online
// softmax, which the block graph itself does not show).
#include <cstdio>

#include <fmt/format.h>

#include "commands.h"
#include "kiln/codegen/schedule.h"
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
    if (!dot && !svg && !g.is_spec()) {
      const Schedule s = plan_schedule(g, target_for(g.arch));
      out += fmt::format("lowering ({}):\n", target_for(g.arch).name);
      for (const KernelPlan& kp : s.kernels)
        if (kp.op >= 0) out += fmt::format("  {}: {}\n", g.ops[kp.op].name, kp.strategy());
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
  });
}

}  // namespace kiln::cli
