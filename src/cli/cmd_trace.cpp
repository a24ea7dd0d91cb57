// `kiln trace FILE summary|top [K]|why ID|tree [--depth D]`: explores a search trace written by
// `kiln optimize --trace FILE` (docs/trace-format.md).
#include <cstdio>

#include "commands.h"
#include "kiln/ir/diag.h"
#include "kiln/search/trace.h"

namespace kiln::cli {

void add_trace(CLI::App& app) {
  auto* cmd = app.add_subcommand("trace", "Explore a search trace (kiln optimize --trace)");
  static std::string file, what = "summary";
  static std::vector<std::string> args;
  static int depth = 2;
  cmd->add_option("FILE", file, "trace file (JSON Lines)")->required();
  cmd->add_option("REPORT", what, "summary | top [K] | why ID | tree")
      ->check(CLI::IsMember({"summary", "top", "why", "tree"}))
      ->capture_default_str();
  cmd->add_option("ARG", args, "K for top, ID for why");
  cmd->add_option("--depth", depth, "tree depth")
      ->check(whole_number(0, 10000, "levels"))
      ->capture_default_str();
  cmd->callback([] {
    std::vector<search::TraceEvent> es = search::read_trace(file);
    std::string out;
    auto num = [](const std::string& s) {
      try {
        return std::stoll(s);
      } catch (const std::exception&) {
        user_error(ErrorCode::Schema, "expected a number, got \"{}\"", s);
      }
    };
    if (what == "summary") {
      out = search::trace_summary(es);
    } else if (what == "top") {
      out = search::trace_top(es, args.empty() ? 10 : static_cast<int>(num(args[0])));
    } else if (what == "why") {
      if (args.empty()) user_error(ErrorCode::Schema, "trace why needs a state ID");
      out = search::trace_why(es, num(args[0]));
    } else {
      out = search::trace_tree(es, depth);
    }
    std::fputs(out.c_str(), stdout);
  });
}

}  // namespace kiln::cli
