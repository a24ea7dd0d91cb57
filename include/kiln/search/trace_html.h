// The trace explorer: one self-contained HTML page (`kiln trace FILE html -o DIR`) to look at a
// search. No network: the styles, the script and the data are inline, and every μGraph is an
// inline SVG drawn by to_svg (kiln/ir/print.h).
//
// The page has the search tree (collapsible, each state with its outcome and pruning reason), a
// table of candidates (modeled and, where profiled, measured time, rank, verdict), and for the
// selected candidate its μGraph, its cost breakdown by kernel and the chain of decisions that
// made it; a search box filters the table and the tree. What it holds is bounded whatever the
// trace's size: the cheapest candidates (and every ranked, verified or rejected one) up to
// max_candidates, and the tree to tree_depth levels with at most tree_children children per state
// (the rest counted).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/search/trace_db.h"

namespace kiln::search {

struct HtmlOptions {
  int64_t max_candidates = 150;
  int tree_depth = 3;
  int64_t tree_children = 30;
};

struct HtmlStats {
  int64_t candidates = 0, graphs = 0, tree_states = 0, bytes = 0;
};

// Writes the page to `path` (throws UserError(Io) when it cannot).
HtmlStats write_trace_html(const TraceDb& db, const std::string& path, const HtmlOptions& opt = {});

}  // namespace kiln::search
