// Search traces, written side: the search tree as a SQLite database (docs/trace-format.md), one
// row per state, written by a background thread while the search runs.
//
// A state's row holds what the state is (its kind, the decision that made it, in words and in a
// machine form that trace_db.h rebuilds μGraphs from) and how it ended (expanded, pruned with a
// reason and the diagnostic, costed with its modeled time, verified or rejected). The search hands
// the writer batches of rows with their final ids and returns at once; rows are interned (every
// string is stored once), batched into transactions, and the indexes are built when the writer
// closes, so a trace costs the search a small, bounded share of its time (docs/trace-format.md has
// the measurements). Ids are assigned by the search in variant order, so the same spec and config
// give the same database row for row (only the times differ).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/search/enumerate.h"
#include "kiln/search/generator.h"

namespace kiln::search {

struct SearchConfig;

// What a state is: the level of the search tree it belongs to (docs/search.md).
enum class TraceKind : uint8_t { Root, Variant, Partition, Group, Schedule, BlockOp, Candidate };
// How a state ended. A state is Expanded until something else happened to it.
enum class TraceStatus : uint8_t { Expanded, Pruned, Costed, Verified, Rejected };

inline constexpr int kTraceKinds = 7;
inline constexpr int kTraceStatuses = 5;
const char* trace_kind_name(TraceKind k);      // "root", "variant", ..., "block_op", "candidate"
const char* trace_status_name(TraceStatus s);  // "expanded", "pruned", ...
std::optional<TraceKind> trace_kind_from(std::string_view name);
std::optional<TraceStatus> trace_status_from(std::string_view name);

// One state of the search tree, with its final id. Strings that are empty are stored as NULL.
struct TraceState {
  int64_t id = 0;
  int64_t parent = -1;  // -1: the root
  TraceKind kind = TraceKind::Root;
  TraceStatus status = TraceStatus::Expanded;
  std::string reason;  // Pruned, Rejected: why (docs/trace-format.md lists the reasons)
  std::string detail;  // what the state is, in words
  std::string note;    // the pruning diagnostic, the verifier's verdict, a candidate's fingerprint
  std::string decision;          // the decision in machine form (decision codes below)
  std::vector<int64_t> kernels;  // Candidate: the Schedule state of each of its kernels, in order
  double cost_us = -1;           // Costed, Verified, Rejected: modeled time (µs); < 0: none
  double t = 0;                  // seconds since the search started
};

// The states of one op-by-op enumeration (one group, one schedule class): ids first_id,
// first_id + 1, ... in log order, children of the group or of each other. They are most of a
// trace's states (hundreds of thousands), so they are stored as one row per enumeration, a packed
// blob of numbers, and kept as numbers until then (docs/trace-format.md, "enum_runs").
struct TraceEnumRun {
  int64_t first_id = 0;
  int64_t group = 0;               // the group state
  std::vector<std::string> vocab;  // the vocabulary, in words (EnumState::vocab indexes it)
  std::vector<EnumState> states;   // parents index this list (-1: the group)
  double t = 0;
};

// A later change to a state already handed to the writer (a verification verdict, a partition
// pruned after its groups were written): replaces its status, reason and note, and its cost when
// cost_us >= 0.
struct TraceUpdate {
  int64_t id = 0;
  TraceStatus status = TraceStatus::Expanded;
  std::string reason, note;
  double cost_us = -1;
};

// Writes a trace database. Every call but close() only queues work for the writer thread and
// returns at once; calls may come from any thread, and are applied in the order they were made.
class TraceWriter {
 public:
  // Creates the database at `path`, replacing a file that is there. Throws UserError(Io) when the
  // file cannot be created. `batch_rows`: how many rows a branch of the search gathers before it
  // hands them over (tests make it small, to hand over mid-way through everything).
  explicit TraceWriter(const std::string& path, int64_t batch_rows = 8192);
  ~TraceWriter();  // close(), errors swallowed
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // What the trace is of: the spec (its mugraph/1 text) and the search's config. Graphs are
  // rebuilt from these (trace_db.h), so run_search() records them before any state.
  void begin(const KernelGraph& spec, const SearchConfig& config);
  // One more meta row (the algebra pass's graphs, "algebra").
  void meta(const std::string& key, std::string value);
  void write(std::vector<TraceState> batch);
  void write_run(TraceEnumRun run);
  void update(TraceUpdate u);
  // A candidate's place in the ranking (1 = the winner by the model).
  void ranked(int64_t id, int rank);
  // A candidate measured on the GPU (kiln optimize --profile): median µs (< 0: none) and status.
  void measured(int64_t id, double us, std::string status);
  // Drains the queue, builds the indexes and the summary counts, and commits. Idempotent. Throws
  // UserError(Io) when anything failed to write (the disk filled up, say).
  void close();
  int64_t batch_rows() const { return batch_rows_; }

 private:
  int64_t batch_rows_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Decision codes: the machine form of a decision, short and exact (docs/trace-format.md).
//   variant    "v3"               its index in enumerate_variants()
//   group      "n4,5,6"           the variant's node ids
//   schedule   "p"                the group's single op as a predefined kernel
//              "g0/4,2/8 l1x16 t128"   grid (label/parts ...), loop (label x range, or "l-"),
//                                      block threads
//              ... " e" recipe    an enumerated block graph: ops "k.a.b" (vocabulary index,
//                                 operands) joined by ":", then "s" and the saved tiles
//   candidate  (the kernels column: the schedule state of each kernel)

std::string schedule_code(const Schedule& s);
// The recipe's ops as vocabulary indices of `vocab` (block_vocabulary of the variant); empty
// when an op is not in it (a test's extra vocabulary: such a kernel is not rebuildable).
std::string recipe_code(const BlockRecipe& r, const std::vector<VocabOp>& vocab);

struct ScheduleDecision {
  bool predefined = false;
  Schedule schedule;
  bool enumerated = false;
  std::vector<std::pair<int, std::vector<int>>> ops;  // vocabulary index, operands
  std::vector<int> saves;
};
// Parses a schedule state's code; throws UserError(Syntax) on a malformed one.
ScheduleDecision parse_schedule_code(std::string_view code);

}  // namespace kiln::search
