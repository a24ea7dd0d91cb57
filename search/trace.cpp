// Search traces: the background SQLite writer and the decision codes (docs/trace-format.md).
#include "kiln/search/trace.h"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/search/enumerate.h"
#include "kiln/search/search.h"
#include "kiln/version.h"
#include "trace_schema.h"

namespace kiln::search {

namespace {

constexpr const char* kKindNames[kTraceKinds] = {"root",     "variant",  "partition", "group",
                                                 "schedule", "block_op", "candidate"};
constexpr const char* kStatusNames[kTraceStatuses] = {"expanded", "pruned", "costed", "verified",
                                                      "rejected"};

}  // namespace

const char* trace_kind_name(TraceKind k) {
  return kKindNames[static_cast<int>(k)];
}
const char* trace_status_name(TraceStatus s) {
  return kStatusNames[static_cast<int>(s)];
}
std::optional<TraceKind> trace_kind_from(std::string_view name) {
  for (int i = 0; i < kTraceKinds; ++i)
    if (name == kKindNames[i]) return static_cast<TraceKind>(i);
  return std::nullopt;
}
std::optional<TraceStatus> trace_status_from(std::string_view name) {
  for (int i = 0; i < kTraceStatuses; ++i)
    if (name == kStatusNames[i]) return static_cast<TraceStatus>(i);
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// The writer.

struct TraceWriter::Impl {
  struct Measure {
    int64_t id;
    int rank;  // > 0: a rank; else a measurement
    double us;
    std::string status;
  };
  struct Meta {
    std::vector<std::pair<std::string, std::string>> rows;
  };
  using Item = std::variant<std::vector<TraceState>, TraceEnumRun, TraceUpdate, Measure, Meta>;

  std::string path;
  sqlite3* db = nullptr;
  sqlite3_stmt *insert = nullptr, *intern_stmt = nullptr, *update = nullptr, *update_cost = nullptr,
               *measure = nullptr, *rank_stmt = nullptr;
  sqlite3_stmt* run_stmt = nullptr;
  std::unordered_map<std::string, int64_t> strings;
  // Counts of the enumeration states (they are not rows): (status, reason string id) -> n.
  std::map<std::pair<int, int64_t>, int64_t> run_counts;
  std::unordered_map<std::string_view, int64_t> enum_reasons;  // EnumState::pruned -> string id
  std::set<int64_t> reason_ids;  // strings used as reasons (the reasons table)

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> queue;
  bool closing = false, closed = false;
  std::string error;  // the first failure; the writer stops writing after it
  std::thread thread;
  // A commit is what a run killed mid-way leaves readable (the rollback journal restores the last
  // one), and what `kiln trace` sees of a run still going. The writer commits after 50,000 rows or
  // half a second, whichever comes first (a commit of a small batch costs a few milliseconds): a
  // machine that generates rows slowly must not keep the root row uncommitted for a minute.
  static constexpr int64_t kCommitRows = 50000;
  static constexpr std::chrono::milliseconds kCommitEvery{500};
  int64_t since_commit = 0;
  std::chrono::steady_clock::time_point last_commit = std::chrono::steady_clock::now();
  void commit_if_due(bool force) {
    const auto now = std::chrono::steady_clock::now();
    if (since_commit == 0 ||
        (!force && since_commit < kCommitRows && now - last_commit < kCommitEvery))
      return;
    exec("COMMIT; BEGIN");
    since_commit = 0;
    last_commit = now;
  }

  void check(int rc, const char* what) {
    if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return;
    throw std::runtime_error(fmt::format("{}: {}", what, sqlite3_errmsg(db)));
  }
  void exec(const char* sql) {
    char* msg = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
      std::string m = msg ? msg : "?";
      sqlite3_free(msg);
      throw std::runtime_error(fmt::format("{}: {}", sql, m));
    }
  }
  sqlite3_stmt* prepare(const char* sql) {
    sqlite3_stmt* s = nullptr;
    check(sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr), sql);
    return s;
  }

  // The id of a string in the strings table (NULL for the empty string).
  void bind_string(sqlite3_stmt* st, int col, const std::string& s) {
    if (s.empty())
      sqlite3_bind_null(st, col);
    else
      sqlite3_bind_int64(st, col, intern(s));
  }
  int64_t intern(std::string_view sv) {
    std::string s(sv);
    auto it = strings.find(s);
    if (it == strings.end()) {
      int64_t id = static_cast<int64_t>(strings.size()) + 1;
      sqlite3_bind_int64(intern_stmt, 1, id);
      sqlite3_bind_text(intern_stmt, 2, s.data(), static_cast<int>(s.size()), SQLITE_STATIC);
      check(sqlite3_step(intern_stmt), "intern");
      sqlite3_reset(intern_stmt);
      it = strings.emplace(s, id).first;
    }
    return it->second;
  }
  static void bind_cost(sqlite3_stmt* st, int col, double us) {
    if (us >= 0)
      sqlite3_bind_double(st, col, us);
    else
      sqlite3_bind_null(st, col);
  }

  void open() {
    // A file left at the path (an older trace, a JSON Lines one) is replaced, not appended to.
    ::unlink(path.c_str());
    ::unlink((path + "-journal").c_str());
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
        SQLITE_OK) {
      std::string why = db ? sqlite3_errmsg(db) : "out of memory";
      sqlite3_close_v2(db);
      db = nullptr;
      throw UserError(ErrorCode::Io, fmt::format("cannot write the trace file {}: {}", path, why),
                      "give --trace a path whose directory exists and is writable");
    }
    // `kiln trace` may read the file while the run writes it (its SHARED lock is held for a
    // query's length): the writer waits for such a reader rather than fail its write. Without the
    // wait, a reader polling at the run's start failed the schema's write ("database is locked"),
    // and the run ended with a trace file that names no format.
    sqlite3_busy_timeout(db, 10000);
    // Appends only, into a fresh file: no fsync; the rollback journal stays (it is cheap for
    // appends) so that a run killed mid-way leaves the last committed batches readable.
    exec("PRAGMA synchronous=OFF; PRAGMA temp_store=MEMORY; PRAGMA cache_size=-16384;");
    // The schema and the format row in one transaction: a reader sees an empty file or a trace.
    exec("BEGIN");
    exec(kTraceSchema);
    exec(fmt::format("INSERT INTO meta VALUES('format','{}'),('kiln_version','{}')", kTraceFormat,
                     KILN_VERSION)
             .c_str());
    exec("COMMIT; BEGIN");
    insert = prepare(
        "INSERT INTO states(id,parent,kind,status,reason,detail,note,decision,cost_us,kernels,t_ms)"
        " VALUES(?,?,?,?,?,?,?,?,?,?,?)");
    intern_stmt = prepare("INSERT INTO strings(id,s) VALUES(?,?)");
    update = prepare("UPDATE states SET status=?, reason=?, note=? WHERE id=?");
    update_cost = prepare("UPDATE states SET status=?, reason=?, note=?, cost_us=? WHERE id=?");
    rank_stmt = prepare(
        "INSERT INTO ranked(id,rank) VALUES(?,?) ON CONFLICT(id) DO UPDATE SET rank=excluded.rank");
    run_stmt =
        prepare("INSERT INTO enum_runs(first_id,n,grp,vocab,t_ms,states) VALUES(?,?,?,?,?,?)");
    measure = prepare(
        "INSERT INTO ranked(id,measured_us,measured_status) VALUES(?,?,?) ON CONFLICT(id) DO "
        "UPDATE SET measured_us=excluded.measured_us, measured_status=excluded.measured_status");
  }

  void apply(std::vector<TraceState>& batch) {
    for (const TraceState& s : batch) {
      sqlite3_bind_int64(insert, 1, s.id);
      if (s.parent >= 0)
        sqlite3_bind_int64(insert, 2, s.parent);
      else
        sqlite3_bind_null(insert, 2);
      sqlite3_bind_int(insert, 3, static_cast<int>(s.kind));
      sqlite3_bind_int(insert, 4, static_cast<int>(s.status));
      bind_string(insert, 5, s.reason);
      if (!s.reason.empty()) reason_ids.insert(strings.at(s.reason));
      bind_string(insert, 6, s.detail);
      bind_string(insert, 7, s.note);
      std::string decision = s.decision;
      if (!s.kernels.empty())
        decision = fmt::format("k{}{}{}", fmt::join(s.kernels, ","), decision.empty() ? "" : " ",
                               decision);
      bind_string(insert, 8, decision);
      bind_cost(insert, 9, s.cost_us);
      if (s.kind == TraceKind::Candidate)
        sqlite3_bind_int(insert, 10, static_cast<int>(s.kernels.size()));
      else
        sqlite3_bind_null(insert, 10);
      sqlite3_bind_int64(insert, 11, static_cast<int64_t>(s.t * 1000));
      check(sqlite3_step(insert), "insert a state");
      sqlite3_reset(insert);
    }
    since_commit += static_cast<int64_t>(batch.size());
  }
  // One enumeration as a blob of varints: per state its parent + 1 (0: the group), its
  // vocabulary index, its operand count and operands, then 2 * reason string id + complete.
  void apply(const TraceEnumRun& r) {
    std::string blob;
    auto put = [&](uint64_t v) {
      while (v >= 0x80) {
        blob.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
      }
      blob.push_back(static_cast<char>(v));
    };
    std::string vocab;
    for (const std::string& v : r.vocab) vocab += v + "\n";
    for (const EnumState& s : r.states) {
      put(static_cast<uint64_t>(s.parent + 1));
      put(static_cast<uint64_t>(s.vocab));
      put(s.inputs.size());
      for (int i : s.inputs) put(static_cast<uint64_t>(i));
      int64_t reason = 0;
      if (!s.pruned.empty()) {
        auto it = enum_reasons.find(s.pruned);
        if (it == enum_reasons.end())
          it = enum_reasons.emplace(s.pruned, intern("enum_" + std::string(s.pruned))).first;
        reason_ids.insert(it->second);
        reason = it->second;
      }
      put(static_cast<uint64_t>(reason * 2 + (s.complete ? 1 : 0)));
      run_counts[{static_cast<int>(s.pruned.empty() ? TraceStatus::Expanded : TraceStatus::Pruned),
                  reason}]++;
    }
    sqlite3_bind_int64(run_stmt, 1, r.first_id);
    sqlite3_bind_int64(run_stmt, 2, static_cast<int64_t>(r.states.size()));
    sqlite3_bind_int64(run_stmt, 3, r.group);
    sqlite3_bind_int64(run_stmt, 4, intern(vocab));
    sqlite3_bind_int64(run_stmt, 5, static_cast<int64_t>(r.t * 1000));
    sqlite3_bind_blob(run_stmt, 6, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
    check(sqlite3_step(run_stmt), "insert an enumeration");
    sqlite3_reset(run_stmt);
    since_commit += static_cast<int64_t>(r.states.size()) / 8;
  }
  void apply(const TraceUpdate& u) {
    sqlite3_stmt* st = u.cost_us >= 0 ? update_cost : update;
    sqlite3_bind_int(st, 1, static_cast<int>(u.status));
    bind_string(st, 2, u.reason);
    if (!u.reason.empty()) reason_ids.insert(strings.at(u.reason));
    bind_string(st, 3, u.note);
    int col = 4;
    if (u.cost_us >= 0) sqlite3_bind_double(st, col++, u.cost_us);
    sqlite3_bind_int64(st, col, u.id);
    check(sqlite3_step(st), "update a state");
    sqlite3_reset(st);
    ++since_commit;
  }
  void apply(const Measure& m) {
    if (m.rank > 0) {
      sqlite3_bind_int64(rank_stmt, 1, m.id);
      sqlite3_bind_int(rank_stmt, 2, m.rank);
      check(sqlite3_step(rank_stmt), "record a rank");
      sqlite3_reset(rank_stmt);
      return;
    }
    sqlite3_bind_int64(measure, 1, m.id);
    bind_cost(measure, 2, m.us);
    sqlite3_bind_text(measure, 3, m.status.data(), static_cast<int>(m.status.size()),
                      SQLITE_STATIC);
    check(sqlite3_step(measure), "record a measurement");
    sqlite3_reset(measure);
  }
  void apply(const Meta& m) {
    sqlite3_stmt* st = prepare("INSERT OR REPLACE INTO meta(key,value) VALUES(?,?)");
    auto put = [&](const char* k, const std::string& v) {
      sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
      sqlite3_bind_text(st, 2, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
      check(sqlite3_step(st), "write meta");
      sqlite3_reset(st);
    };
    for (const auto& [k, v] : m.rows) put(k.c_str(), v);
    sqlite3_finalize(st);
    since_commit = kCommitRows;  // committed at once: a killed run's file still has its spec
  }

  // What makes queries instant: the indexes (built once, sorted, at the end, which is both
  // faster and denser than growing them row by row) and the summary counts.
  void finish() {
    exec(kTraceIndexes);
    exec(
        "INSERT INTO counts(kind,status,reason,n) SELECT kind,status,reason,count(*) FROM states "
        "GROUP BY kind,status,reason;"
        "INSERT INTO meta SELECT 'last_t_ms', coalesce(max(t_ms), 0) FROM states;");
    sqlite3_stmt* c = prepare("INSERT INTO counts(kind,status,reason,n) VALUES(?,?,?,?)");
    for (const auto& [k, n] : run_counts) {
      sqlite3_bind_int(c, 1, static_cast<int>(TraceKind::BlockOp));
      sqlite3_bind_int(c, 2, k.first);
      if (k.second)
        sqlite3_bind_int64(c, 3, k.second);
      else
        sqlite3_bind_null(c, 3);
      sqlite3_bind_int64(c, 4, n);
      check(sqlite3_step(c), "write the counts");
      sqlite3_reset(c);
    }
    sqlite3_finalize(c);
    // The reasons, by their string ids: a filter by reason looks its id up here, not in strings.
    sqlite3_stmt* rs = prepare("INSERT INTO reasons(id,name) SELECT id, s FROM strings WHERE id=?");
    for (int64_t id : reason_ids) {
      sqlite3_bind_int64(rs, 1, id);
      check(sqlite3_step(rs), "write the reasons");
      sqlite3_reset(rs);
    }
    sqlite3_finalize(rs);
    exec("ANALYZE;");
    exec("COMMIT");
  }

  // The writer thread: applies queued work until close(), then builds the indexes.
  void loop() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> l(mu);
        // Idle, the rows applied so far are committed once their half second is up.
        while (queue.empty() && !closing) {
          if (cv.wait_for(l, kCommitEvery) == std::cv_status::timeout && error.empty() &&
              since_commit > 0) {
            l.unlock();
            try {
              commit_if_due(true);
            } catch (const std::exception& e) {
              l.lock();
              error = e.what();
              continue;
            }
            l.lock();
          }
        }
        if (queue.empty()) break;
        item = std::move(queue.front());
        queue.pop_front();
        if (!error.empty()) continue;  // drain without writing
      }
      try {
        std::visit([&](auto& x) { apply(x); }, item);
        commit_if_due(false);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> l(mu);
        error = e.what();
      }
    }
    if (error.empty()) {
      try {
        finish();
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    for (sqlite3_stmt* s : {insert, intern_stmt, update, update_cost, measure, rank_stmt, run_stmt})
      sqlite3_finalize(s);
    sqlite3_close_v2(db);
    db = nullptr;
  }

  void push(Item item) {
    {
      std::lock_guard<std::mutex> l(mu);
      queue.push_back(std::move(item));
    }
    cv.notify_one();
  }
};

TraceWriter::TraceWriter(const std::string& path, int64_t batch_rows)
    : batch_rows_(std::max<int64_t>(1, batch_rows)), impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  // Open here, on the caller's thread, so that a path that cannot be written is a user error at
  // once (before the search), not a failure at the end.
  try {
    impl_->open();
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    if (impl_->db) sqlite3_close_v2(impl_->db);
    throw UserError(ErrorCode::Io,
                    fmt::format("cannot write the trace file {}: {}", path, e.what()));
  }
  impl_->thread = std::thread([m = impl_.get()] { m->loop(); });
}

TraceWriter::~TraceWriter() {
  try {
    close();
  } catch (const std::exception&) {
  }
}

void TraceWriter::begin(const KernelGraph& spec, const SearchConfig& config) {
  impl_->push(Impl::Meta{{{"spec", write_mugraph(spec)}, {"config", config.to_json().dump()}}});
}
void TraceWriter::meta(const std::string& key, std::string value) {
  impl_->push(Impl::Meta{{{key, std::move(value)}}});
}
void TraceWriter::write(std::vector<TraceState> batch) {
  if (!batch.empty()) impl_->push(std::move(batch));
}
void TraceWriter::write_run(TraceEnumRun run) {
  if (!run.states.empty()) impl_->push(std::move(run));
}
void TraceWriter::update(TraceUpdate u) {
  impl_->push(std::move(u));
}
void TraceWriter::ranked(int64_t id, int rank) {
  impl_->push(Impl::Measure{id, rank, -1, {}});
}
void TraceWriter::measured(int64_t id, double us, std::string status) {
  impl_->push(Impl::Measure{id, 0, us, std::move(status)});
}

void TraceWriter::close() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> l(m.mu);
    if (m.closed) return;
    m.closing = true;
    m.closed = true;
  }
  m.cv.notify_one();
  if (m.thread.joinable()) m.thread.join();
  if (!m.error.empty())
    throw UserError(ErrorCode::Io,
                    fmt::format("the trace file {} is incomplete: {}", m.path, m.error),
                    "check the free space where --trace writes");
}

// ---------------------------------------------------------------------------------------------
// Decision codes.

std::string schedule_code(const Schedule& s) {
  std::string g;
  for (const GridDim& d : s.grid)
    g += fmt::format("{}{}/{}", g.empty() ? "" : ",", d.label, d.parts);
  std::string l = s.loop_label >= 0 ? fmt::format("{}x{}", s.loop_label, s.loop_range) : "-";
  return fmt::format("g{} l{} t{}", g, l, s.block_threads);
}

std::string recipe_code(const BlockRecipe& r, const std::vector<VocabOp>& vocab) {
  std::string s;
  for (const BlockRecipe::Op& o : r.ops) {
    auto it = std::find(vocab.begin(), vocab.end(), o.op);
    if (it == vocab.end()) return {};
    s += fmt::format("{}{}", s.empty() ? "" : ":", it - vocab.begin());
    for (int i : o.inputs) s += fmt::format(".{}", i);
  }
  return fmt::format("{} s{}", s, fmt::join(r.saves, ","));
}

namespace {

[[noreturn]] void bad_code(std::string_view code) {
  user_error(ErrorCode::Syntax, "the trace holds a malformed schedule code \"{}\"", code);
}

// Splits on one character (no empty-string special case: "" gives {""}).
std::vector<std::string_view> split(std::string_view s, char c) {
  std::vector<std::string_view> out;
  size_t b = 0;
  for (;;) {
    size_t e = s.find(c, b);
    out.push_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) return out;
    b = e + 1;
  }
}

int64_t number(std::string_view s, std::string_view code) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) bad_code(code);
  return v;
}

}  // namespace

ScheduleDecision parse_schedule_code(std::string_view code) {
  ScheduleDecision d;
  if (code == "p") {
    d.predefined = true;
    return d;
  }
  std::vector<std::string_view> parts = split(code, ' ');
  if (parts.size() != 3 && parts.size() != 5) bad_code(code);
  if (parts[0].empty() || parts[0][0] != 'g' || parts[1].empty() || parts[1][0] != 'l' ||
      parts[2].empty() || parts[2][0] != 't')
    bad_code(code);
  if (parts[0].size() > 1)
    for (std::string_view gd : split(parts[0].substr(1), ',')) {
      std::vector<std::string_view> lp = split(gd, '/');
      if (lp.size() != 2) bad_code(code);
      d.schedule.grid.push_back({static_cast<int>(number(lp[0], code)), number(lp[1], code)});
    }
  if (parts[1] != "l-") {
    std::vector<std::string_view> lr = split(parts[1].substr(1), 'x');
    if (lr.size() != 2) bad_code(code);
    d.schedule.loop_label = static_cast<int>(number(lr[0], code));
    d.schedule.loop_range = number(lr[1], code);
  }
  d.schedule.block_threads = static_cast<int>(number(parts[2].substr(1), code));
  if (parts.size() == 5) {
    // An enumerated graph has ops and saves at least one tile.
    if (parts[3].size() < 2 || parts[3][0] != 'e' || parts[4].size() < 2 || parts[4][0] != 's')
      bad_code(code);
    d.enumerated = true;
    if (parts[3].size() > 1)
      for (std::string_view op : split(parts[3].substr(1), ':')) {
        std::vector<std::string_view> f = split(op, '.');
        std::vector<int> in;
        for (size_t i = 1; i < f.size(); ++i) in.push_back(static_cast<int>(number(f[i], code)));
        d.ops.push_back({static_cast<int>(number(f[0], code)), std::move(in)});
      }
    if (parts[4].size() > 1)
      for (std::string_view x : split(parts[4].substr(1), ','))
        d.saves.push_back(static_cast<int>(number(x, code)));
  }
  return d;
}

}  // namespace kiln::search
