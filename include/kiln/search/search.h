// The search: from a spec to ranked, verified μGraphs, under explicit limits.
//
// run_search() expands the spec (generator.h), enumerates variants in parallel (oneTBB, one
// task per variant, results merged in variant order so the outcome does not depend on
// scheduling), and within each variant its partitions into kernels and each group's schedules.
// Every lowered block graph is pruned by abstract expressions (prune.h: each tile's expression
// must be a subexpression of the spec's outputs), costed (cost_model.h) and only the `beam`
// cheapest schedules of distinct shapes of each group are kept. Complete candidates are ranked
// by modeled time, the cheapest of each shape (launch_shape) first, and verified
// (finite-field verifier) in rank order until top_k pass; a candidate is ranked only once
// verified, and the winner also passes the float check. The spec itself is always a
// candidate, so a search never ends with nothing. It ends with a typed stop reason.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/ir/deadline.h"
#include "kiln/ir/kernel_graph.h"
#include "kiln/search/cost_model.h"
#include "kiln/search/enumerate.h"
#include "kiln/search/generator.h"

namespace kiln::search {

class TraceWriter;

enum class StopReason : uint8_t {
  Exhausted,    // the whole space (under the structural limits) was explored
  TimeLimit,    // time_limit_s elapsed
  StateLimit,   // max_states states were generated
  MemoryLimit,  // the process grew past max_memory_mb
};
const char* stop_reason_name(StopReason r);

struct SearchConfig {
  Arch arch = Arch::Sm90a;
  // The whole search: generation stops at (1 - check_share) of it, and the checks that rank the
  // candidates (verifier, float check) stop at the limit itself, so that the limit holds on any
  // input (docs/reliability.md, "Time"). What the limit cut is listed in SearchResult::cut.
  double time_limit_s = 120;
  double check_share = 0.25;
  // Seconds of the limit spent or needed outside run_search (parsing before it; writing the
  // outputs after it): the search's deadlines come that much earlier. Not part of the result's
  // identity (to_json leaves it out).
  double reserve_s = 0;
  int threads = 0;  // 0: all cores
  int64_t max_states = 20'000'000;
  int64_t max_memory_mb = 8192;
  uint64_t seed = 1;       // verifier and float-check seed
  int top_k = 5;           // verified candidates to rank
  int max_kernels = 4;     // kernels per candidate (ops per kernel level)
  int max_block_ops = 64;  // block ops per block graph (ops per block level)
  int beam = 8;            // cheapest schedules kept per group
  VariantOptions variants;
  ScheduleOptions schedules;
  // Op-by-op block-graph enumeration (enumerate.h) next to the lowering: per group, on the
  // schedule classes (gridded labels, loop label) of its `beam` kept lowered schedules (the
  // first enum_classes classes when nothing lowered), for groups whose lowering needs at most
  // enumerate_opts.max_ops ops; each recipe is instantiated on every schedule of its class.
  bool enumerate = true;
  EnumOptions enumerate_opts;
  int enum_classes = 3;
  double enum_z3_budget_ms = 2000;  // Z3 time of the enumerator's pruner (its own instance)
  bool prune = true;                // abstract-expression pruning
  bool use_z3 = true;               // let the pruner call Z3 for what its fast path leaves open
  bool verify = true;               // verify candidates (off only in tests of the generator)
  bool float_check = true;
  // The fields that decide the result, as JSON (the cache key hashes it; threads excluded).
  nlohmann::json to_json() const;
};

struct SearchStats {
  int64_t states = 0;  // every node of the search tree
  int64_t variants = 0, partitions = 0, groups = 0, schedules = 0;
  int64_t lowered = 0;       // schedules that became feasible block graphs
  int64_t complete = 0;      // complete candidates assembled
  int64_t enum_states = 0;   // op-by-op enumeration states (in `states` too)
  int64_t enum_recipes = 0;  // complete enumerated block graphs (recipes)
  int64_t enum_kernels = 0;  // instantiated enumerated kernels the lowering did not produce
  int64_t enum_same = 0;     // instantiated enumerated kernels equal to the lowered one
  int64_t verified = 0;      // candidates the verifier accepted
  int64_t rejected = 0;      // candidates the verifier or the float check rejected
  std::map<std::string, int64_t> pruned;  // by reason
  double time_first_valid_s = -1;         // first verified candidate other than the spec
  double time_best_s = -1;                // the winner verified
  // The algebra pass: its time (part of the limit), its one-line summary, and a line per
  // extracted graph (its rewrites, modeled cost, the verifier's verdict).
  double algebra_s = 0;
  std::string algebra;
  std::vector<std::string> algebra_graphs;
  double generate_s = 0, verify_s = 0, elapsed_s = 0;
  std::string pruner;       // the pruner's statistics line
  std::string enum_pruner;  // the enumerator's pruner's
  nlohmann::json to_json() const;
};

struct Candidate {
  KernelGraph graph;
  GraphCost cost;
  std::string fingerprint;
  std::vector<std::string> rewrites;  // the variant's rewrites
  bool is_spec = false;
  bool verified = false;
  bool float_checked = false;  // passed the float check that predicts the GPU (float_model.h)
  std::string verdict;         // one line
  int64_t state = -1;          // trace id
};

// What the profiler tells apart and the model barely does: the grid, threads and iterations
// (after loop re-tiling) of the kernel the model finds slowest. Candidates that differ only in
// cheaper kernels (a follow-up reduction split differently) share a shape.
std::vector<int64_t> launch_shape(const Candidate& c);

struct SearchResult {
  StopReason stop = StopReason::Exhausted;
  SearchStats stats;
  // Verified and (the first, the spec and unbounded verdicts always) float-checked; empty when
  // every candidate failed a check. The cheapest of each launch shape in cost order, then the
  // others in cost order (best() is the model's cheapest).
  std::vector<Candidate> ranked;
  std::vector<Candidate> rejected;  // failed the verifier or the float check
  bool from_cache = false;
  // What the time limit cut, one line each ("generation: ...", "ranking: ..."); empty when
  // nothing was.
  std::vector<std::string> cut;
  // Nothing ranked because the time limit cut even the spec's check (not because checks failed).
  bool out_of_time = false;
  const Candidate& best() const { return ranked.front(); }
};

// A snapshot for progress displays, called at most ~10 times a second from any thread.
struct Progress {
  int64_t states = 0, lowered = 0, verified = 0;
  std::map<std::string, int64_t> pruned;
  double best_us = 0, elapsed_s = 0, limit_s = 0;
  const char* phase = "generate";
};
using ProgressFn = std::function<void(const Progress&)>;

// The algebra pass's bases for a spec whose primitive graph is `base` (algebra.h): the
// extracted graphs other than the one as written, each proven equal to the spec by the verifier
// (those it does not prove are dropped and listed). `own` bounds the saturation, `hard` the
// verification.
struct AlgebraBases {
  std::vector<PGraph> graphs;
  std::string summary;             // the pass's line, with how many the verifier rejected
  std::vector<std::string> lines;  // per extracted graph
  nlohmann::json trace;            // what a trace records to rebuild the bases (trace_db.h)
};
AlgebraBases algebra_bases(const KernelGraph& spec, const PGraph& base, const SearchConfig& config,
                           const Deadline& own, const Deadline& hard);

SearchResult run_search(const KernelGraph& spec, const SearchConfig& config,
                        TraceWriter* trace = nullptr, const ProgressFn& progress = {});

// JSON for report.json and the cache: the stop reason, statistics and every candidate's cost and
// verdict (graphs included when with_graphs).
// What ranking asks of one candidate: the verifier's verdict (the spec is its own proof) and,
// when `float_check`, the float check that predicts the GPU (float_model.h). An unbounded
// verdict (the outputs depend on a selection) passes only with that float check, on signed
// inputs too: without `float_check` such a candidate fails. Sets c.verdict, c.verified and
// c.float_checked. `failed_check` is "verifier" or "float_check" when !passed; `detail` says why.
struct CandidateCheck {
  bool passed = false;
  std::string failed_check, detail;
  double float_seconds = 0;
  bool needs_float_check = false;  // failed only because the verdict is unbounded and
                                   // `float_check` was false
  std::string cut;                 // "verifier" or "float_check": the deadline cut that check
};
// Past `deadline` the verifier and the float check stop: a verifier cut short fails the
// candidate ("verifier", the detail says the time limit), a float check cut short is skipped (the
// candidate passes as not float-checked, except an unbounded verdict, which needs the check).
CandidateCheck check_candidate(const KernelGraph& spec, Candidate& c, const SearchConfig& config,
                               bool float_check, const Deadline& deadline = {});

// A result read from the cache is checked again before use: the verifier for every ranked
// candidate (milliseconds), the float check for the first, the spec and unbounded verdicts, which
// need it (the rest are then marked not float-checked: the profiler's GPU check vouches for
// them). A cache file can be edited, damaged or copied under another key. Returns how many
// candidates failed; the caller then searches again instead of using the entry.
// The checks share config.time_limit_s: past it, what is left fails.
int recheck_cached(const KernelGraph& spec, SearchResult& r, const SearchConfig& config);

nlohmann::json result_to_json(const SearchResult& r, bool with_graphs);
SearchResult result_from_json(const nlohmann::json& j);

}  // namespace kiln::search
