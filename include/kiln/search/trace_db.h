// Search traces, read side: the queries behind `kiln trace` (docs/trace-format.md), and the μGraph
// of any costed state, rebuilt from the decisions on its path.
//
// Every query is answered from the database's indexes (by id, by parent, by kind and status, by
// reason, by cost) or its precomputed counts, with a limit on what it returns, so it takes
// milliseconds and memory proportional to its answer, not to the trace.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/ir/kernel_graph.h"
#include "kiln/search/trace.h"

struct sqlite3;

namespace kiln::search {

// One state as read back.
struct TraceRow {
  int64_t id = 0;
  int64_t parent = -1;  // -1: the root
  TraceKind kind = TraceKind::Root;
  TraceStatus status = TraceStatus::Expanded;
  std::string reason, detail, note, decision;
  double cost_us = -1;  // < 0: not costed
  int kernels = 0;      // candidates: kernels of the μGraph
  double t = 0;         // seconds since the search started
  int rank = 0;         // ranked candidates: 1 = the model's winner
  double measured_us = -1;
  std::string measured_status;  // profiled candidates: ok, compile_error, mismatch, ...

  nlohmann::json to_json() const;
  std::string str() const;  // one line: "#id kind status [reason] cost: detail (note)"
};

// A conjunction; an unset field matches everything.
struct TraceFilter {
  std::optional<TraceKind> kind;
  std::optional<TraceStatus> status;
  std::string reason;
  std::optional<int> kernels;
  double min_cost_us = -1, max_cost_us = -1;  // < 0: no bound; a bound keeps costed states only
};

struct TraceSummary {
  std::string spec;  // the spec's name
  int64_t states = 0;
  std::map<std::string, std::map<std::string, int64_t>> states_by_kind;  // kind -> status -> n
  std::map<std::string, int64_t> pruned, rejected;                       // by reason
  int64_t verified = 0, costed_candidates = 0;
  double best_verified_us = -1;
  double elapsed_s = 0;  // time of the last state written
  // The algebra pass (meta "algebra"): its line, and the rewrites of each base it handed on.
  std::string algebra;
  std::vector<std::vector<std::string>> algebra_bases;
  // False for a trace whose run stopped before closing it (killed): the counts are then those of
  // the rows it committed, counted now, and the enumerator's packed runs are not in them.
  bool complete = true;
  nlohmann::json to_json() const;
  std::string str() const;
};

class TraceDb {
 public:
  // Opens read-only. Throws UserError(Io) when the file is missing or unreadable and
  // UserError(Syntax) when it is not a Kiln trace database of this format (a JSON Lines trace
  // of an older Kiln, say).
  static TraceDb open(const std::string& path);
  TraceDb(TraceDb&&) noexcept;
  TraceDb& operator=(TraceDb&&) noexcept;
  ~TraceDb();

  const std::string& path() const { return path_; }
  std::string meta(const std::string& key) const;  // "" when absent
  std::optional<TraceRow> find(int64_t id) const;
  TraceRow get(int64_t id) const;  // throws UserError(Name) when there is no such state
  // The states from the root down to `id` (root first).
  std::vector<TraceRow> path(int64_t id) const;
  // Children in id order, at most `limit`; *total gets how many there are.
  std::vector<TraceRow> children(int64_t id, int64_t limit, int64_t* total = nullptr) const;
  // States matching the filter: the costed ones cheapest first, then the others in id order; at
  // most `limit`.
  std::vector<TraceRow> select(const TraceFilter& f, int64_t limit) const;
  TraceSummary summary() const;
  // Every state in id order, streamed (memory independent of the trace's size).
  void for_each(const std::function<void(const TraceRow&)>& f) const;

 private:
  struct Run;  // one enumeration's states, decoded
  TraceDb() = default;
  std::optional<Run> run_containing(int64_t id) const;
  std::vector<Run> runs_of_group(int64_t group) const;
  TraceRow run_row(const Run& r, size_t i) const;
  std::string string_at(int64_t id) const;
  sqlite3* db_ = nullptr;
  std::string path_;
};

// The tree below `root` as text: `depth` levels, at most `limit` children per state (the rest
// counted), each state on one line with its outcome.
std::string trace_tree(const TraceDb& db, int64_t root, int depth, int64_t limit);
nlohmann::json trace_tree_json(const TraceDb& db, int64_t root, int depth, int64_t limit);

// Rebuilds μGraphs from the trace's decisions: the variant is recomputed from the spec, config
// and algebra graphs the trace records (enumerate_variants is deterministic), each kernel is
// lowered (or its enumerated recipe replayed) under its schedule, and a candidate is assembled from
// its kernels and checked against the fingerprint the search recorded.
class TraceGraphs {
 public:
  explicit TraceGraphs(const TraceDb& db);  // throws UserError(Schema) on a trace without a spec
  ~TraceGraphs();
  // The μGraph of a costed candidate (the spec's candidate is the spec) or of a costed schedule
  // (its kernel alone, as the search costed it). Throws UserError(Name) for any other state, and
  // UserError(Unsupported) when the rebuilt graph is not the one searched (another Kiln wrote it).
  KernelGraph graph(int64_t id);
  // The kernel graph a state's variant was built from: the spec as written (base 0) or a graph
  // the algebra pass extracted, with the rewrites that made it. Throws UserError(Name) for the
  // root and the spec's candidate, which have no variant.
  struct Rewritten {
    int base = 0;
    std::vector<std::string> rewrites;
    KernelGraph graph;
  };
  Rewritten rewritten(int64_t id);
  const KernelGraph& spec() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::search
