// `kiln trace FILE summary|top [K]|why ID|path ID|tree [ID]|graph ID|rewritten ID|html -o DIR`:
// explores a search trace written by `kiln optimize --trace FILE` (docs/trace-format.md). Every
// verb reads the database through its indexes, so each answers at once whatever the trace's size;
// `--json` prints the same answer as JSON.
#include <cstdio>

#include "commands.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/ir/print.h"
#include "kiln/search/trace_db.h"
#include "kiln/search/trace_html.h"
#include "log.h"

namespace kiln::cli {

namespace {

int64_t number_arg(const std::string& s, const char* what) {
  try {
    size_t used = 0;
    long long v = std::stoll(s, &used);
    if (used == s.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw UserError(ErrorCode::Schema,
                  fmt::format("expected {} (a whole number >= 0), got \"{}\"", what, s));
}

void print(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
}

}  // namespace

void add_trace(CLI::App& app) {
  auto* cmd = app.add_subcommand("trace", "Explore a search trace (kiln optimize --trace)");
  static std::string file, what = "summary", kind, status, reason, out;
  static std::vector<std::string> args;
  static int depth = 2;
  static int64_t limit = 20;
  static int kernels = -1;
  static double min_cost = -1, max_cost = -1;
  static bool json = false;
  cmd->add_option("FILE", file, "trace database (kiln optimize --trace FILE)")->required();
  cmd->add_option("VERB", what,
                  "summary | top [K] | why ID | path ID | tree [ID] | graph ID | rewritten ID | "
                  "html -o DIR")
      ->check(
          CLI::IsMember({"summary", "top", "why", "path", "tree", "graph", "rewritten", "html"}))
      ->capture_default_str();
  cmd->add_option("ARG", args,
                  "K for top; the state ID for why, path, tree, graph and rewritten (the kernel "
                  "graph the state's variant was built from: the spec, or a graph of the algebra "
                  "pass, with its rewrites)");
  cmd->add_flag("--json", json, "print JSON instead of text");
  cmd->add_option("--kind", kind, "top: states of this kind (default: candidate)")
      ->check(CLI::IsMember(
          {"root", "variant", "partition", "group", "schedule", "block_op", "candidate"}));
  cmd->add_option("--status", status, "top: states that ended so")
      ->check(CLI::IsMember({"expanded", "pruned", "costed", "verified", "rejected"}));
  cmd->add_option("--reason", reason, "top: states pruned or rejected for this reason");
  cmd->add_option("--kernels", kernels, "top: candidates with this many kernels")
      ->check(whole_number(1, 1000, "kernels"));
  cmd->add_option("--min-cost", min_cost, "top: modeled cost at least this (us)")
      ->check(real_number(0, 1e12, "us"));
  cmd->add_option("--max-cost", max_cost, "top: modeled cost at most this (us)")
      ->check(real_number(0, 1e12, "us"));
  cmd->add_option("--depth", depth, "tree: levels shown")
      ->check(whole_number(0, 10000, "levels"))
      ->capture_default_str();
  cmd->add_option("--limit", limit, "tree: children shown per state")
      ->check(whole_number(1, 1000000, "children"))
      ->capture_default_str();
  cmd->add_option("-o,--out", out,
                  "graph: write the μGraph here (default stdout); html: the page's directory");
  cmd->callback([] {
    search::TraceDb db = search::TraceDb::open(file);
    auto id_arg = [&](const char* verb) {
      if (args.empty())
        throw UserError(ErrorCode::Schema, fmt::format("trace {} needs a state ID", verb),
                        fmt::format("kiln trace FILE {} ID (ids: kiln trace FILE top)", verb));
      return number_arg(args[0], "a state ID");
    };
    if (what == "summary") {
      search::TraceSummary s = db.summary();
      print(json ? s.to_json().dump(2) + "\n" : s.str());
    } else if (what == "top") {
      search::TraceFilter f;
      if (!kind.empty()) f.kind = search::trace_kind_from(kind);
      if (!status.empty()) f.status = search::trace_status_from(status);
      f.reason = reason;
      if (!f.kind && reason.empty() && !f.status) f.kind = search::TraceKind::Candidate;
      if (kernels > 0) f.kernels = kernels;
      f.min_cost_us = min_cost;
      f.max_cost_us = max_cost;
      int64_t k = args.empty() ? 10 : number_arg(args[0], "a count K");
      std::vector<search::TraceRow> rows = db.select(f, k);
      if (json) {
        nlohmann::json j = nlohmann::json::array();
        for (const auto& r : rows) j.push_back(r.to_json());
        print(j.dump(2) + "\n");
      } else {
        std::string s;
        for (size_t i = 0; i < rows.size(); ++i)
          s += fmt::format("{:>3}. {}\n", i + 1, rows[i].str());
        print(s);
      }
    } else if (what == "why" || what == "path") {
      std::vector<search::TraceRow> p = db.path(id_arg(what.c_str()));
      if (json) {
        nlohmann::json j = nlohmann::json::array();
        for (const auto& r : p) {
          nlohmann::json x = r.to_json();
          // path: the decisions alone, one per level.
          if (what == "path")
            x = {{"id", r.id},
                 {"kind", search::trace_kind_name(r.kind)},
                 {"detail", x["detail"]},
                 {"decision", x["decision"]}};
          j.push_back(std::move(x));
        }
        print(j.dump(2) + "\n");
      } else {
        std::string s;
        for (size_t i = 0; i < p.size(); ++i) {
          std::string ind(i * 2, ' ');
          if (what == "why")
            s += ind + p[i].str() + "\n";
          else
            s += fmt::format("{}#{} {}: {}{}\n", ind, p[i].id, search::trace_kind_name(p[i].kind),
                             p[i].detail, p[i].decision.empty() ? "" : "  [" + p[i].decision + "]");
        }
        print(s);
      }
    } else if (what == "tree") {
      int64_t root = args.empty() ? 0 : number_arg(args[0], "a state ID");
      print(json ? search::trace_tree_json(db, root, depth, limit).dump(2) + "\n"
                 : search::trace_tree(db, root, depth, limit));
    } else if (what == "rewritten") {
      int64_t id = id_arg("rewritten");
      search::TraceGraphs graphs(db);
      search::TraceGraphs::Rewritten w = graphs.rewritten(id);
      if (json) {
        print(nlohmann::json({{"state", id},
                              {"base", w.base},
                              {"rewrites", w.rewrites},
                              {"graph", nlohmann::json::parse(write_mugraph(w.graph))}})
                  .dump(2) +
              "\n");
      } else {
        std::string s = w.base == 0 ? fmt::format("state #{}: the spec as written\n", id)
                                    : fmt::format("state #{}: algebra graph {} ({})\n", id, w.base,
                                                  fmt::join(w.rewrites, "; "));
        print(s + to_text(w.graph));
      }
    } else if (what == "graph") {
      int64_t id = id_arg("graph");
      search::TraceGraphs graphs(db);
      std::string text = write_mugraph(graphs.graph(id));
      if (out.empty()) {
        print(text);
      } else {
        make_parent_dirs(out);
        write_file_text(out, text);
        note("wrote the μGraph of state #{} to {}", id, out);
      }
    } else {
      if (out.empty())
        throw UserError(ErrorCode::Schema, "trace html needs an output directory",
                        "kiln trace FILE html -o DIR");
      make_dirs(out);
      search::HtmlStats hs = search::write_trace_html(db, out + "/index.html");
      if (json)
        print(nlohmann::json({{"page", out + "/index.html"},
                              {"candidates", hs.candidates},
                              {"graphs", hs.graphs},
                              {"tree_states", hs.tree_states},
                              {"bytes", hs.bytes}})
                  .dump(2) +
              "\n");
      else
        note("wrote {}/index.html ({} candidates, {} graphs, {} tree states, {} KB)", out,
             hs.candidates, hs.graphs, hs.tree_states, hs.bytes >> 10);
    }
  });
}

}  // namespace kiln::cli
