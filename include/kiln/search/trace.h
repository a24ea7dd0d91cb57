// Search traces: one JSON line per state of the search tree (docs/trace-format.md), written as
// the search runs, and the reader behind `kiln trace`.
//
// Each event has the state's id, its parent's id (so the tree can be rebuilt), its kind (root,
// variant, partition, group, schedule, candidate), what happened (expanded, pruned, costed,
// verified, rejected), and where it applies a reason, a cost and a detail string. Events of
// parallel branches are buffered per branch and written in branch order, so ids and order are
// the same run to run (only the timestamps differ).
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::search {

struct TraceEvent {
  int64_t id = 0;
  int64_t parent = -1;
  std::string kind;     // root, variant, partition, group, schedule, candidate
  std::string event;    // expanded, pruned, costed, verified, rejected
  std::string reason;   // pruned/rejected: why
  std::string detail;   // what the state is, in words
  double cost_us = -1;  // costed/verified: modeled time
  double t = 0;         // seconds since the search started
  nlohmann::json to_json() const;
  static TraceEvent from_json(const nlohmann::json& j);
};

// Writes events to a file, one JSON object per line. Thread-safe.
class TraceWriter {
 public:
  explicit TraceWriter(const std::string& path);  // throws UserError(Io)
  ~TraceWriter();
  void write(const TraceEvent& e);
  void write_all(const std::vector<TraceEvent>& es);
  void flush();

 private:
  std::FILE* f_ = nullptr;
  std::mutex mu_;
};

// Reads a trace file (throws UserError(Io/Syntax) naming the line).
std::vector<TraceEvent> read_trace(const std::string& path);

// The reports of `kiln trace`.
std::string trace_summary(const std::vector<TraceEvent>& es);
std::string trace_top(const std::vector<TraceEvent>& es, int k);
std::string trace_why(const std::vector<TraceEvent>& es, int64_t id);  // the path from the root
std::string trace_tree(const std::vector<TraceEvent>& es, int depth);

}  // namespace kiln::search
