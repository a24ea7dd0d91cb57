// Traces: the database holds every state of the search once, with a parent that exists; tracing
// changes nothing the search finds; the same search writes the same trace; queries agree with a
// full scan; and the μGraph of every costed state is rebuilt from the trace's decisions exactly.
#include "kiln/search/trace.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/search/cost_model.h"
#include "kiln/search/search.h"
#include "kiln/search/trace_db.h"
#include "kiln/verifier/verify.h"
#include "search_test_util.h"

namespace kiln::search {
namespace {

std::string temp(const std::string& name) {
  return std::string(KILN_BINARY_DIR) + "/test_search_" + name;
}

SearchConfig small_config(int threads = 2) {
  SearchConfig c;
  c.threads = threads;
  c.top_k = 3;
  c.use_z3 = false;
  c.variants.max_split = 4;
  return c;
}

SearchResult traced(const KernelGraph& spec, const SearchConfig& c, const std::string& path,
                    int64_t batch_rows = 8192) {
  TraceWriter w(path, batch_rows);
  SearchResult r = run_search(spec, c, &w);
  w.close();
  return r;
}

// Every state of a trace, by id.
std::vector<TraceRow> all_states(const TraceDb& db) {
  std::vector<TraceRow> out;
  db.for_each([&](const TraceRow& r) { out.push_back(r); });
  return out;
}

TEST(Trace, HoldsEveryStateOnceUnderAParentThatExists) {
  std::string path = temp("every_state.trace");
  SearchResult r = traced(testing::small_gated_mlp(), small_config(), path);
  TraceDb db = TraceDb::open(path);
  std::vector<TraceRow> rows = all_states(db);
  // Ids are dense: exactly the states the search counted, nothing after them.
  ASSERT_EQ(static_cast<int64_t>(rows.size()), r.stats.states);
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(rows[i].id, static_cast<int64_t>(i));
  EXPECT_FALSE(db.find(r.stats.states).has_value());
  // find() agrees with the scan (every 97th state: block ops are decoded per lookup).
  for (size_t i = 0; i < rows.size(); i += 97) {
    std::optional<TraceRow> f = db.find(rows[i].id);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(
        std::tie(f->parent, f->kind, f->status, f->reason, f->detail),
        std::tie(rows[i].parent, rows[i].kind, rows[i].status, rows[i].reason, rows[i].detail));
  }
  EXPECT_EQ(rows[0].kind, TraceKind::Root);
  std::map<std::string, int64_t> pruned;
  int64_t verified = 0, block_ops = 0;
  for (const TraceRow& s : rows) {
    if (s.id > 0) {
      ASSERT_GE(s.parent, 0) << s.id;
      EXPECT_LT(s.parent, s.id) << "a parent is created before its children";
    }
    if (s.status == TraceStatus::Pruned) pruned[s.reason]++;
    verified += s.status == TraceStatus::Verified;
    block_ops += s.kind == TraceKind::BlockOp;
  }
  EXPECT_GT(block_ops, 0);
  EXPECT_EQ(verified, r.stats.verified);
  // Pruning in the trace is the search's own count, reason by reason ("duplicate" and budget
  // notes are counted after generation and are not states).
  for (const auto& [why, n] : pruned) EXPECT_EQ(n, r.stats.pruned.at(why)) << why;
  // The summary (precomputed counts) agrees with the rows.
  TraceSummary sm = db.summary();
  EXPECT_EQ(sm.states, r.stats.states);
  EXPECT_EQ(sm.verified, r.stats.verified);
  EXPECT_EQ(sm.pruned, pruned);
  // children(x) is exactly the states whose parent is x (every state but block ops, whose
  // lookups decode their enumeration, and every 31st block op).
  std::map<int64_t, std::vector<int64_t>> kids_of;
  for (const TraceRow& s : rows)
    if (s.id > 0) kids_of[s.parent].push_back(s.id);
  for (size_t i = 0; i < rows.size(); ++i) {
    const TraceRow& s = rows[i];
    if (s.kind == TraceKind::BlockOp && i % 31) continue;
    int64_t total = 0;
    std::vector<TraceRow> kids = db.children(s.id, 1 << 20, &total);
    std::vector<int64_t> ids;
    for (const TraceRow& k : kids) ids.push_back(k.id);
    EXPECT_EQ(ids, kids_of[s.id]) << s.id;
    EXPECT_EQ(total, static_cast<int64_t>(kids.size()));
    if (!kids.empty()) {  // a limit keeps the first ones and still counts them all
      EXPECT_EQ(db.children(s.id, 1, &total).front().id, ids.front());
      EXPECT_EQ(total, static_cast<int64_t>(ids.size()));
    }
  }
  // The winner's path runs from the root through its variant and partition.
  std::vector<TraceRow> p = db.path(r.best().state);
  ASSERT_GE(p.size(), 3u);
  EXPECT_EQ(p.front().id, 0);
  EXPECT_EQ(p.back().id, r.best().state);
  EXPECT_EQ(p.back().rank, 1);
  for (size_t i = 1; i < p.size(); ++i) EXPECT_EQ(p[i].parent, p[i - 1].id);
}

TEST(Trace, TracingChangesNothingTheSearchFinds) {
  SearchConfig c = small_config();
  SearchResult plain = run_search(testing::small_rmsnorm_linear(), c);
  SearchResult t = traced(testing::small_rmsnorm_linear(), c, temp("no_change.trace"));
  ASSERT_EQ(plain.stop, StopReason::Exhausted);
  EXPECT_EQ(plain.stats.states, t.stats.states);
  EXPECT_EQ(plain.stats.pruned, t.stats.pruned);
  EXPECT_EQ(plain.stats.complete, t.stats.complete);
  ASSERT_EQ(plain.ranked.size(), t.ranked.size());
  for (size_t i = 0; i < plain.ranked.size(); ++i)
    EXPECT_EQ(plain.ranked[i].fingerprint, t.ranked[i].fingerprint) << i;
}

TEST(Trace, TheSameSearchWritesTheSameTrace) {
  // Two threads twice and one thread: ids, parents, outcomes and decisions agree (times differ).
  // The last run hands rows over 7 at a time, so that branches hand over mid-way, rows of a
  // later variant wait for earlier ones, and outcomes arrive as updates of rows handed over.
  std::vector<std::vector<TraceRow>> runs;
  for (auto [threads, batch] : {std::pair{2, 8192}, {2, 8192}, {1, 8192}, {2, 7}}) {
    std::string path = temp("same_" + std::to_string(runs.size()) + ".trace");
    traced(testing::small_gated_mlp(), small_config(threads), path, batch);
    runs.push_back(all_states(TraceDb::open(path)));
  }
  for (size_t k = 1; k < runs.size(); ++k) {
    ASSERT_EQ(runs[k].size(), runs[0].size());
    for (size_t i = 0; i < runs[0].size(); ++i) {
      const TraceRow &a = runs[0][i], &b = runs[k][i];
      ASSERT_EQ(std::tie(a.id, a.parent, a.kind, a.status, a.reason, a.detail, a.decision),
                std::tie(b.id, b.parent, b.kind, b.status, b.reason, b.detail, b.decision))
          << "run " << k << ", state " << i;
      EXPECT_EQ(a.cost_us, b.cost_us);
    }
  }
}

TEST(Trace, SelectAgreesWithAFullScan) {
  std::string path = temp("select.trace");
  traced(testing::small_rmsnorm_linear(), small_config(), path);
  TraceDb db = TraceDb::open(path);
  std::vector<TraceRow> rows = all_states(db);
  auto matches = [](const TraceFilter& f, const TraceRow& r) {
    return (!f.kind || r.kind == *f.kind) && (!f.status || r.status == *f.status) &&
           (f.reason.empty() || r.reason == f.reason) &&
           (!f.kernels || (r.kind == TraceKind::Candidate && r.kernels == *f.kernels)) &&
           (f.min_cost_us < 0 || (r.cost_us >= 0 && r.cost_us >= f.min_cost_us)) &&
           (f.max_cost_us < 0 || (r.cost_us >= 0 && r.cost_us <= f.max_cost_us));
  };
  std::vector<TraceFilter> filters(8);
  filters[0].kind = TraceKind::Candidate;
  filters[1].kind = TraceKind::Schedule;
  filters[1].status = TraceStatus::Pruned;
  filters[2].reason = "map";
  filters[3].kind = TraceKind::BlockOp;
  filters[4].reason = "enum_shape";
  filters[5].kind = TraceKind::Candidate;
  filters[5].kernels = 2;
  filters[6].kind = TraceKind::Schedule;
  filters[6].max_cost_us = 3;
  filters[7].status = TraceStatus::Costed;
  filters[7].min_cost_us = 2;
  for (size_t fi = 0; fi < filters.size(); ++fi) {
    const TraceFilter& f = filters[fi];
    // The expected order: costed states cheapest first (ties by id), then the rest by id.
    std::vector<const TraceRow*> want;
    for (const TraceRow& r : rows)
      if (matches(f, r)) want.push_back(&r);
    std::stable_sort(want.begin(), want.end(), [](const TraceRow* a, const TraceRow* b) {
      if ((a->cost_us >= 0) != (b->cost_us >= 0)) return a->cost_us >= 0;
      return a->cost_us >= 0 && a->cost_us < b->cost_us;
    });
    for (int64_t limit : {int64_t(1), int64_t(7), int64_t(1) << 30}) {
      std::vector<TraceRow> got = db.select(f, limit);
      ASSERT_EQ(got.size(), std::min<size_t>(want.size(), static_cast<size_t>(limit)))
          << "filter " << fi;
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].id, want[i]->id) << "filter " << fi;
    }
  }
}

TEST(Trace, RebuildsTheGraphOfEveryCostedState) {
  std::string path = temp("graphs.trace");
  KernelGraph spec = testing::small_rmsnorm_linear();
  SearchConfig c = small_config();
  SearchResult r = traced(spec, c, path);
  TraceDb db = TraceDb::open(path);
  TraceGraphs graphs(db);
  TraceFilter cand;
  cand.kind = TraceKind::Candidate;
  std::vector<TraceRow> cs = db.select(cand, 1 << 20);
  ASSERT_GT(cs.size(), 10u);
  const Target& target = target_for(c.arch);
  for (const TraceRow& row : cs) {
    ASSERT_GE(row.cost_us, 0);
    KernelGraph g = graphs.graph(row.id);
    // The graph searched: its fingerprint, and the cost the search recorded.
    EXPECT_EQ("f" + fingerprint(g), row.decision.substr(row.decision.find(" f") + 1)) << row.id;
    EXPECT_NEAR(estimate_cost(g, target).time * 1e6, row.cost_us, 1e-9 * row.cost_us) << row.id;
  }
  // Ranked candidates are what the search ranked, and prove equivalent to the spec again.
  for (const Candidate& k : r.ranked) {
    KernelGraph g = graphs.graph(k.state);
    EXPECT_EQ(fingerprint(g), k.fingerprint);
    if (!k.is_spec) EXPECT_TRUE(verifier::verify(spec, g).equivalent());
  }
  // Costed schedules: one kernel alone, as costed.
  TraceFilter sch;
  sch.kind = TraceKind::Schedule;
  sch.status = TraceStatus::Costed;
  std::vector<TraceRow> ss = db.select(sch, 200);
  ASSERT_FALSE(ss.empty());
  for (const TraceRow& row : ss) {
    KernelGraph g = graphs.graph(row.id);
    EXPECT_EQ(g.num_kernels(), 1);
    EXPECT_NEAR(estimate_cost(g, target).time * 1e6, row.cost_us, 1e-9 * row.cost_us) << row.id;
  }
  // A state without a graph is a user error naming it.
  TraceFilter pr;
  pr.status = TraceStatus::Pruned;
  std::vector<TraceRow> pruned = db.select(pr, 1);
  ASSERT_EQ(pruned.size(), 1u);
  try {
    graphs.graph(pruned[0].id);
    ADD_FAILURE() << "a pruned state has no graph";
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), ErrorCode::Name);
  }
}

// Issue 17: a candidate of an algebra graph names the kernel graph it was built from (the trace
// records the pass's graphs), and that graph is the spec's function.
TEST(Trace, NamesTheRewrittenKernelGraphOfACandidate) {
  std::string path = temp("rewritten.trace");
  const KernelGraph spec = parse_spec(R"({"name": "lowrank", "inputs": [
      {"name": "X", "shape": [16, 256], "dtype": "f16"}, {"name": "A", "shape": [256, 4], "dtype": "f16"},
      {"name": "B", "shape": [4, 256], "dtype": "f16"}],
    "nodes": [{"name": "AB", "op": "matmul", "inputs": ["A", "B"]},
              {"name": "Y", "op": "matmul", "inputs": ["X", "AB"]}], "outputs": ["Y"]})");
  SearchResult r = traced(spec, small_config(), path);
  TraceDb db = TraceDb::open(path);
  TraceGraphs graphs(db);
  TraceFilter cand;
  cand.kind = TraceKind::Candidate;
  int from_algebra = 0, from_spec = 0;
  for (const TraceRow& row : db.select(cand, 1 << 20)) {
    if (row.decision.rfind("spec", 0) == 0) {
      EXPECT_THROW(graphs.rewritten(row.id), UserError) << "the spec's candidate has no variant";
      continue;
    }
    TraceGraphs::Rewritten w = graphs.rewritten(row.id);
    if (w.base == 0) {
      ++from_spec;
      EXPECT_EQ(fingerprint(w.graph), fingerprint(spec));
      continue;
    }
    ++from_algebra;
    ASSERT_FALSE(w.rewrites.empty());
    EXPECT_NE(w.rewrites[0].find("matmul-assoc"), std::string::npos) << w.rewrites[0];
    EXPECT_TRUE(w.graph.is_spec());
    EXPECT_TRUE(verifier::verify(spec, w.graph).equivalent());
  }
  EXPECT_GT(from_algebra, 0);
  EXPECT_GT(from_spec, 0);
  EXPECT_NE(db.meta("algebra").find("matmul-assoc"), std::string::npos);
  // The summary names the pass and each base's rewrites.
  const TraceSummary sum = db.summary();
  EXPECT_NE(sum.algebra.find("verified"), std::string::npos) << sum.algebra;
  ASSERT_FALSE(sum.algebra_bases.empty());
  EXPECT_NE(sum.str().find("base 1: matmul-assoc"), std::string::npos) << sum.str();
  EXPECT_FALSE(r.stats.algebra.empty());
}

// Issue 15: a transpose that a matmul reads in place (W stored [N, K], nn.Linear's layout) runs
// no kernel, and the candidate's trace row says so (the spec's own candidate: its predefined
// GEMV reads Wᵀ K-major).
TEST(Trace, NamesTransposesReadInPlace) {
  std::string path = temp("inplace.trace");
  const KernelGraph spec = parse_spec(R"({"name": "lin", "inputs": [
      {"name": "X", "shape": [16, 4096], "dtype": "bf16"}, {"name": "W", "shape": [4096, 4096], "dtype": "bf16"}],
    "nodes": [{"name": "Wt", "op": "transpose", "inputs": ["W"]},
              {"name": "Y", "op": "matmul", "inputs": ["X", "Wt"]}], "outputs": ["Y"]})");
  SearchConfig c = small_config();
  c.time_limit_s = 20;
  traced(spec, c, path);
  TraceDb db = TraceDb::open(path);
  TraceFilter cand;
  cand.kind = TraceKind::Candidate;
  int in_place = 0;
  for (const TraceRow& row : db.select(cand, 1 << 20))
    in_place += row.detail.find("Wt read in place by k1_Y") != std::string::npos;
  EXPECT_GT(in_place, 0) << "no candidate row names the transpose read in place";
  const TraceRow spec_row = db.get(1);
  EXPECT_NE(spec_row.detail.find("the spec itself"), std::string::npos) << spec_row.detail;
  EXPECT_NE(spec_row.detail.find("Wt read in place by k1_Y"), std::string::npos) << spec_row.detail;
}

TEST(Trace, ScheduleCodesRoundTrip) {
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    Schedule s;
    int dims = static_cast<int>(rng() % 4);
    for (int d = 0; d < dims; ++d)
      s.grid.push_back({static_cast<int>(rng() % 12), static_cast<int64_t>(1 + rng() % 5000)});
    if (rng() % 2) {
      s.loop_label = static_cast<int>(rng() % 12);
      s.loop_range = static_cast<int64_t>(1 + rng() % 512);
    }
    s.block_threads = rng() % 2 ? 128 : 256;
    ScheduleDecision d = parse_schedule_code(schedule_code(s));
    EXPECT_FALSE(d.predefined);
    EXPECT_FALSE(d.enumerated);
    EXPECT_EQ(d.schedule.grid, s.grid);
    EXPECT_EQ(d.schedule.loop_label, s.loop_label);
    EXPECT_EQ(d.schedule.loop_range, s.loop_range);
    EXPECT_EQ(d.schedule.block_threads, s.block_threads);
  }
  EXPECT_TRUE(parse_schedule_code("p").predefined);
  ScheduleDecision e = parse_schedule_code("g0/4 l1x16 t128 e3.0.1:5.2 s2");
  EXPECT_TRUE(e.enumerated);
  ASSERT_EQ(e.ops.size(), 2u);
  EXPECT_EQ(e.ops[0].first, 3);
  EXPECT_EQ(e.ops[0].second, (std::vector<int>{0, 1}));
  EXPECT_EQ(e.saves, std::vector<int>{2});
  for (const char* bad : {"", "g", "g0 l- t", "gx/4 l- t128", "g0/4 l1 t128", "g l- t128 e s",
                          "g l- t128 ex s", "q l- t128"})
    EXPECT_THROW(parse_schedule_code(bad), UserError) << bad;
}

TEST(Trace, OpenRefusesWhatIsNotATrace) {
  try {
    TraceDb::open(temp("missing.trace"));
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
  }
  // A JSON Lines trace of an older Kiln.
  std::string jsonl = temp("old.jsonl");
  std::ofstream(jsonl) << R"({"id":0,"parent":-1,"kind":"root","event":"expanded","t":0})"
                       << "\n";
  try {
    TraceDb::open(jsonl);
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), ErrorCode::Syntax);
  }
  // A writer into a directory that does not exist fails at once, before any search.
  EXPECT_THROW(TraceWriter(temp("no_such_dir/x.trace")), UserError);
  // An empty file (a run that has just created it) is named as such.
  std::string empty = temp("empty.trace");
  std::ofstream(empty).close();
  try {
    TraceDb::open(empty);
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_EQ(e.code(), ErrorCode::Io);
    EXPECT_NE(std::string(e.what()).find("is empty"), std::string::npos) << e.what();
  }
}

// `kiln trace` may read a trace while the run writes it. A reader holding the file's SHARED lock
// (an open read transaction) makes the writer's commits wait, not fail: here the reader holds it
// across the writer's commits for longer than a commit's interval, then lets go, and every row
// is there. (Without the writer's busy wait, a `kiln trace summary` polling at a run's start
// failed the run: "database is locked".)
TEST(Trace, AReaderHoldingTheFileDelaysTheWriterWithoutFailingIt) {
  const std::string path = temp("held.trace");
  TraceWriter w(path);
  w.begin(testing::small_gated_mlp(), small_config());
  sqlite3* r = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &r, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_busy_timeout(r, 5000);
  ASSERT_EQ(sqlite3_exec(r, "BEGIN; SELECT count(*) FROM meta;", nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(r);
  constexpr int kRows = 3000;
  for (int b = 0; b < 3; ++b) {
    std::vector<TraceState> batch;
    for (int i = b * kRows / 3; i < (b + 1) * kRows / 3; ++i) {
      TraceState s;
      s.id = i;
      s.parent = i - 1;
      s.kind = i == 0 ? TraceKind::Root : TraceKind::Variant;
      s.detail = i == 0 ? "spec held" : "row";
      batch.push_back(std::move(s));
    }
    w.write(std::move(batch));
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
  }
  ASSERT_EQ(sqlite3_exec(r, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(r);
  sqlite3_close_v2(r);
  EXPECT_NO_THROW(w.close());
  TraceDb db = TraceDb::open(path);
  EXPECT_EQ(db.summary().states, kRows);
  EXPECT_EQ(db.summary().spec, "held");
}

}  // namespace
}  // namespace kiln::search
