// Search traces: the read side (queries on the database, graph rebuilding). docs/trace-format.md.
#include "kiln/search/trace_db.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <functional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/ir/target.h"
#include "kiln/search/enumerate.h"
#include "trace_schema.h"

namespace kiln::search {

namespace {

// A prepared statement that finalizes itself.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr) != SQLITE_OK)
      user_error(ErrorCode::Syntax, "the trace database cannot answer a query ({}): {}", sql,
                 sqlite3_errmsg(db));
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  sqlite3_stmt* operator*() const { return s_; }
  bool step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    user_error(ErrorCode::Io, "reading the trace database failed: {}",
               sqlite3_errmsg(sqlite3_db_handle(s_)));
  }
  std::string text(int col) const {
    const unsigned char* t = sqlite3_column_text(s_, col);
    return t ? std::string(reinterpret_cast<const char*>(t)) : std::string();
  }

 private:
  sqlite3_stmt* s_ = nullptr;
};

// Every column of a row, text resolved through the strings table.
constexpr const char* kRowSelect =
    "SELECT s.id, s.parent, s.kind, s.status, r.s, d.s, n.s, c.s, s.cost_us, s.kernels, s.t_ms, "
    "m.rank, m.measured_us, m.measured_status FROM states s "
    "LEFT JOIN strings r ON r.id = s.reason LEFT JOIN strings d ON d.id = s.detail "
    "LEFT JOIN strings n ON n.id = s.note LEFT JOIN strings c ON c.id = s.decision "
    "LEFT JOIN ranked m ON m.id = s.id ";

TraceRow read_row(const Stmt& st) {
  sqlite3_stmt* s = *st;
  TraceRow r;
  r.id = sqlite3_column_int64(s, 0);
  r.parent = sqlite3_column_type(s, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 1);
  int k = sqlite3_column_int(s, 2), u = sqlite3_column_int(s, 3);
  r.kind = static_cast<TraceKind>(k >= 0 && k < kTraceKinds ? k : 0);
  r.status = static_cast<TraceStatus>(u >= 0 && u < kTraceStatuses ? u : 0);
  r.reason = st.text(4);
  r.detail = st.text(5);
  r.note = st.text(6);
  r.decision = st.text(7);
  r.cost_us = sqlite3_column_type(s, 8) == SQLITE_NULL ? -1 : sqlite3_column_double(s, 8);
  r.kernels = sqlite3_column_int(s, 9);
  r.t = sqlite3_column_int64(s, 10) / 1000.0;
  r.rank = sqlite3_column_int(s, 11);
  r.measured_us = sqlite3_column_type(s, 12) == SQLITE_NULL ? -1 : sqlite3_column_double(s, 12);
  r.measured_status = st.text(13);
  return r;
}

}  // namespace

nlohmann::json TraceRow::to_json() const {
  nlohmann::json j = {{"id", id},
                      {"parent", parent < 0 ? nlohmann::json(nullptr) : nlohmann::json(parent)},
                      {"kind", trace_kind_name(kind)},
                      {"status", trace_status_name(status)},
                      {"t", t}};
  auto opt = [&](const char* k, const std::string& v) {
    j[k] = v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v);
  };
  opt("reason", reason);
  opt("detail", detail);
  opt("note", note);
  opt("decision", decision);
  j["cost_us"] = cost_us < 0 ? nlohmann::json(nullptr) : nlohmann::json(cost_us);
  if (kind == TraceKind::Candidate) {
    j["kernels"] = kernels;
    j["rank"] = rank > 0 ? nlohmann::json(rank) : nlohmann::json(nullptr);
    j["measured_us"] = measured_us < 0 ? nlohmann::json(nullptr) : nlohmann::json(measured_us);
    opt("measured_status", measured_status);
  }
  return j;
}

std::string TraceRow::str() const {
  std::string s = fmt::format("#{} {} {}", id, trace_kind_name(kind), trace_status_name(status));
  if (!reason.empty()) s += fmt::format(" [{}]", reason);
  if (cost_us >= 0) s += fmt::format(" {:.2f} us", cost_us);
  if (measured_us >= 0) s += fmt::format(" (measured {:.2f} us)", measured_us);
  if (rank > 0) s += fmt::format(" rank {}", rank);
  if (!detail.empty()) s += ": " + detail;
  if (!note.empty()) s += " -- " + note;
  return s;
}

// ---------------------------------------------------------------------------------------------
// Enumeration runs: the blob trace.cpp writes (TraceWriter::Impl::apply(TraceEnumRun)).

struct TraceDb::Run {
  int64_t first = 0, group = 0;
  double t = 0;
  std::vector<std::string> vocab;
  struct Entry {
    int parent = -1;  // local index; -1: the group
    int vocab = -1;
    std::vector<int> inputs;
    int64_t reason = 0;  // string id; 0: not pruned
    bool complete = false;
  };
  std::vector<Entry> states;
  int64_t id(size_t i) const { return first + static_cast<int64_t>(i); }
};

namespace {

constexpr const char* kRunSelect =
    "SELECT r.first_id, r.n, r.grp, v.s, r.t_ms, r.states FROM "
    "enum_runs r LEFT JOIN strings v ON v.id = r.vocab ";

// Decodes the current row of a kRunSelect statement. A damaged blob is a user error: the file is
// not what Kiln wrote.
template <class Run>
Run decode_run(const Stmt& st, const std::string& path) {
  Run r;
  r.first = sqlite3_column_int64(*st, 0);
  int64_t n = sqlite3_column_int64(*st, 1);
  r.group = sqlite3_column_int64(*st, 2);
  std::string vocab = st.text(3);
  for (size_t b = 0; b < vocab.size();) {
    size_t e = vocab.find('\n', b);
    if (e == std::string::npos) e = vocab.size();
    r.vocab.push_back(vocab.substr(b, e - b));
    b = e + 1;
  }
  r.t = sqlite3_column_int64(*st, 4) / 1000.0;
  const auto* p = static_cast<const unsigned char*>(sqlite3_column_blob(*st, 5));
  const unsigned char* end = p + sqlite3_column_bytes(*st, 5);
  auto get = [&]() -> uint64_t {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) user_error(ErrorCode::Syntax, "{}: a damaged enumeration record", path);
      uint8_t c = *p++;
      v |= static_cast<uint64_t>(c & 0x7f) << shift;
      if (!(c & 0x80)) return v;
    }
    user_error(ErrorCode::Syntax, "{}: a damaged enumeration record", path);
  };
  r.states.resize(static_cast<size_t>(n));
  for (auto& s : r.states) {
    s.parent = static_cast<int>(get()) - 1;
    s.vocab = static_cast<int>(get());
    uint64_t k = get();
    if (k > 16) user_error(ErrorCode::Syntax, "{}: a damaged enumeration record", path);
    for (uint64_t i = 0; i < k; ++i) s.inputs.push_back(static_cast<int>(get()));
    uint64_t f = get();
    s.reason = static_cast<int64_t>(f >> 1);
    s.complete = f & 1;
  }
  return r;
}

}  // namespace

std::optional<TraceDb::Run> TraceDb::run_containing(int64_t id) const {
  Stmt st(db_, std::string(kRunSelect) + "WHERE r.first_id <= ? ORDER BY r.first_id DESC LIMIT 1");
  sqlite3_bind_int64(*st, 1, id);
  if (!st.step()) return std::nullopt;
  if (id >= sqlite3_column_int64(*st, 0) + sqlite3_column_int64(*st, 1)) return std::nullopt;
  return decode_run<Run>(st, path_);
}

std::vector<TraceDb::Run> TraceDb::runs_of_group(int64_t group) const {
  Stmt st(db_, std::string(kRunSelect) + "WHERE r.grp = ? ORDER BY r.first_id");
  sqlite3_bind_int64(*st, 1, group);
  std::vector<Run> out;
  while (st.step()) out.push_back(decode_run<Run>(st, path_));
  return out;
}

std::string TraceDb::string_at(int64_t id) const {
  if (id <= 0) return {};
  Stmt st(db_, "SELECT s FROM strings WHERE id=?");
  sqlite3_bind_int64(*st, 1, id);
  return st.step() ? st.text(0) : std::string();
}

TraceRow TraceDb::run_row(const Run& r, size_t i) const {
  const Run::Entry& e = r.states[i];
  TraceRow row;
  row.id = r.id(i);
  row.parent = e.parent < 0 ? r.group : r.id(static_cast<size_t>(e.parent));
  row.kind = TraceKind::BlockOp;
  row.status = e.reason ? TraceStatus::Pruned : TraceStatus::Expanded;
  row.reason = string_at(e.reason);
  std::string op =
      e.vocab >= 0 && e.vocab < static_cast<int>(r.vocab.size()) ? r.vocab[e.vocab] : "?";
  row.detail =
      fmt::format("{}({}){}", op, fmt::join(e.inputs, ", "), e.complete ? " -> complete" : "");
  row.t = r.t;
  return row;
}

// ---------------------------------------------------------------------------------------------

TraceDb TraceDb::open(const std::string& path) {
  struct stat sb;
  if (::stat(path.c_str(), &sb) != 0 || !S_ISREG(sb.st_mode))
    throw UserError(ErrorCode::Io, fmt::format("cannot read trace file {}", path),
                    "write one with kiln optimize SPEC -o DIR --trace FILE");
  TraceDb t;
  t.path_ = path;
  // A run killed mid-way leaves a hot rollback journal beside the file, which a read-only
  // connection cannot roll back (every read fails); opened read-write, SQLite rolls it back and
  // the file holds the batches the run committed. Where it cannot be written, read-only.
  struct stat jb;
  const bool hot = ::stat((path + "-journal").c_str(), &jb) == 0 && jb.st_size > 0;
  int rc = SQLITE_ERROR;
  if (hot) {
    rc = sqlite3_open_v2(path.c_str(), &t.db_, SQLITE_OPEN_READWRITE, nullptr);
    if (rc != SQLITE_OK) {
      sqlite3_close_v2(t.db_);
      t.db_ = nullptr;
    }
  }
  if (rc != SQLITE_OK) rc = sqlite3_open_v2(path.c_str(), &t.db_, SQLITE_OPEN_READONLY, nullptr);
  if (rc != SQLITE_OK)
    throw UserError(ErrorCode::Io, fmt::format("cannot read trace file {}: {}", path,
                                               t.db_ ? sqlite3_errmsg(t.db_) : "out of memory"));
  // A run still writing holds the file's lock while it commits (or spills a large batch): wait
  // for it, as long as a commit may take, rather than fail the read.
  sqlite3_busy_timeout(t.db_, 5000);
  // A JSON Lines trace (Kiln before kiln-trace/2) or any other file fails here.
  std::string format;
  int frc = SQLITE_OK;
  {
    sqlite3_stmt* s = nullptr;
    frc = sqlite3_prepare_v2(t.db_, "SELECT value FROM meta WHERE key='format'", -1, &s, nullptr);
    if (frc == SQLITE_OK) frc = sqlite3_step(s);
    if (frc == SQLITE_ROW) {
      const unsigned char* v = sqlite3_column_text(s, 0);
      if (v) format = reinterpret_cast<const char*>(v);
    }
    sqlite3_finalize(s);
  }
  // Locked past the wait: a trace being written, not a foreign file.
  if ((frc & 0xff) == SQLITE_BUSY || (frc & 0xff) == SQLITE_LOCKED)
    throw UserError(
        ErrorCode::Io,
        fmt::format("cannot read trace file {}: it is locked by the run writing it", path),
        "read it again in a moment, or once the run has finished");
  // SQLite creates the file before the run's first commit writes a page into it.
  if (format.empty() && ::stat(path.c_str(), &sb) == 0 && sb.st_size == 0)
    throw UserError(ErrorCode::Io, fmt::format("trace file {} is empty", path),
                    "a run that has just started writing it commits its first rows within a "
                    "second; a run that failed at its start leaves it empty");
  if (format != kTraceFormat)
    throw UserError(ErrorCode::Syntax,
                    format.empty() ? fmt::format("{} is not a Kiln trace database", path)
                                   : fmt::format("{} is a trace of format {}, not {}", path, format,
                                                 kTraceFormat),
                    "traces are SQLite databases written by kiln optimize --trace FILE; an older "
                    "JSON Lines trace must be written again");
  return t;
}

TraceDb::TraceDb(TraceDb&& o) noexcept : db_(o.db_), path_(std::move(o.path_)) {
  o.db_ = nullptr;
}
TraceDb& TraceDb::operator=(TraceDb&& o) noexcept {
  std::swap(db_, o.db_);
  std::swap(path_, o.path_);
  return *this;
}
TraceDb::~TraceDb() {
  if (db_) sqlite3_close(db_);
}

std::string TraceDb::meta(const std::string& key) const {
  Stmt st(db_, "SELECT value FROM meta WHERE key=?");
  sqlite3_bind_text(*st, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  return st.step() ? st.text(0) : std::string();
}

std::optional<TraceRow> TraceDb::find(int64_t id) const {
  {
    Stmt st(db_, std::string(kRowSelect) + "WHERE s.id=?");
    sqlite3_bind_int64(*st, 1, id);
    if (st.step()) return read_row(st);
  }
  if (std::optional<Run> r = run_containing(id))
    return run_row(*r, static_cast<size_t>(id - r->first));
  return std::nullopt;
}

TraceRow TraceDb::get(int64_t id) const {
  std::optional<TraceRow> r = find(id);
  if (!r) user_error(ErrorCode::Name, "no state #{} in the trace {}", id, path_);
  return *r;
}

std::vector<TraceRow> TraceDb::path(int64_t id) const {
  std::vector<TraceRow> p{get(id)};
  // The tree is at most a few dozen levels deep (root, variant, group, schedule or block ops);
  // the bound only guards against a damaged file with a cycle.
  while (p.back().parent >= 0 && p.size() < 4096) p.push_back(get(p.back().parent));
  return {p.rbegin(), p.rend()};
}

std::vector<TraceRow> TraceDb::children(int64_t id, int64_t limit, int64_t* total) const {
  // The state's kind: a row of states, else a block op (or nothing).
  std::optional<TraceKind> kind;
  {
    Stmt k(db_, "SELECT kind FROM states WHERE id=?");
    sqlite3_bind_int64(*k, 1, id);
    if (k.step()) kind = static_cast<TraceKind>(sqlite3_column_int(*k, 0));
  }
  int64_t n = 0;
  std::vector<TraceRow> out;
  if (kind) {  // a block op's children are block ops
    Stmt c(db_, "SELECT count(*) FROM states WHERE parent=?");
    sqlite3_bind_int64(*c, 1, id);
    n = c.step() ? sqlite3_column_int64(*c, 0) : 0;
    if (n > 0 && limit > 0) {
      Stmt st(db_, std::string(kRowSelect) + "WHERE s.parent=? ORDER BY s.id LIMIT ?");
      sqlite3_bind_int64(*st, 1, id);
      sqlite3_bind_int64(*st, 2, limit);
      while (st.step()) out.push_back(read_row(st));
    }
  }
  // Block ops: under a group (the enumerations of that group) or under another block op (in
  // its own enumeration, after it).
  std::vector<Run> runs;
  int parent_local = -1;
  if (kind == TraceKind::Group) runs = runs_of_group(id);
  if (!kind)
    if (std::optional<Run> r = run_containing(id)) {
      parent_local = static_cast<int>(id - r->first);
      runs.push_back(std::move(*r));
    }
  std::vector<TraceRow> ops;
  for (const Run& r : runs)
    for (size_t i = 0; i < r.states.size(); ++i)
      if (r.states[i].parent == parent_local) {
        ++n;
        if (static_cast<int64_t>(ops.size()) < limit) ops.push_back(run_row(r, i));
      }
  if (!ops.empty()) {
    out.insert(out.end(), ops.begin(), ops.end());
    std::sort(out.begin(), out.end(),
              [](const TraceRow& a, const TraceRow& b) { return a.id < b.id; });
    if (static_cast<int64_t>(out.size()) > limit) out.resize(static_cast<size_t>(limit));
  }
  if (total) *total = n;
  return out;
}

std::vector<TraceRow> TraceDb::select(const TraceFilter& f, int64_t limit) const {
  std::string where = "WHERE 1";
  if (f.kind) where += " AND s.kind=:kind";
  if (f.status) where += " AND s.status=:status";
  if (!f.reason.empty()) where += " AND s.reason=(SELECT id FROM reasons WHERE name=:reason)";
  if (f.kernels) where += " AND s.kernels=:kernels";
  if (f.min_cost_us >= 0) where += " AND s.cost_us>=:min";
  if (f.max_cost_us >= 0) where += " AND s.cost_us<=:max";
  auto bind = [&](Stmt& st) {
    auto at = [&](const char* n) { return sqlite3_bind_parameter_index(*st, n); };
    if (f.kind) sqlite3_bind_int(*st, at(":kind"), static_cast<int>(*f.kind));
    if (f.status) sqlite3_bind_int(*st, at(":status"), static_cast<int>(*f.status));
    if (!f.reason.empty())
      sqlite3_bind_text(*st, at(":reason"), f.reason.c_str(), -1, SQLITE_TRANSIENT);
    if (f.kernels) sqlite3_bind_int(*st, at(":kernels"), *f.kernels);
    if (f.min_cost_us >= 0) sqlite3_bind_double(*st, at(":min"), f.min_cost_us);
    if (f.max_cost_us >= 0) sqlite3_bind_double(*st, at(":max"), f.max_cost_us);
    sqlite3_bind_int64(*st, at(":limit"), limit);
  };
  std::vector<TraceRow> out;
  // Costed states by cost (the cost index, in order, stops at the limit), then the rest by id.
  {
    Stmt st(db_, std::string(kRowSelect) + where +
                     " AND s.cost_us IS NOT NULL ORDER BY s.cost_us, s.id LIMIT :limit");
    bind(st);
    while (st.step()) out.push_back(read_row(st));
  }
  if (static_cast<int64_t>(out.size()) < limit && f.min_cost_us < 0 && f.max_cost_us < 0) {
    std::vector<TraceRow> rest;
    limit -= static_cast<int64_t>(out.size());
    {
      Stmt st(db_, std::string(kRowSelect) + where +
                       " AND s.cost_us IS NULL ORDER BY s.id LIMIT :limit");
      bind(st);
      while (st.step()) rest.push_back(read_row(st));
    }
    // Block ops, one enumeration at a time, until `limit` match.
    bool ops =
        (!f.kind || *f.kind == TraceKind::BlockOp) && !f.kernels &&
        (!f.status || *f.status == TraceStatus::Expanded || *f.status == TraceStatus::Pruned) &&
        (f.reason.empty() || f.reason.rfind("enum_", 0) == 0);
    int64_t reason = 0;
    if (ops && !f.reason.empty()) {
      Stmt r(db_, "SELECT id FROM reasons WHERE name=?");
      sqlite3_bind_text(*r, 1, f.reason.c_str(), -1, SQLITE_TRANSIENT);
      if (r.step())
        reason = sqlite3_column_int64(*r, 0);
      else
        ops = false;  // no state has that reason
    }
    if (ops) {
      Stmt st(db_, std::string(kRunSelect) + "ORDER BY r.first_id");
      int64_t found = 0;
      while (found < limit && st.step()) {
        Run r = decode_run<Run>(st, path_);
        for (size_t i = 0; i < r.states.size() && found < limit; ++i) {
          const Run::Entry& e = r.states[i];
          if (reason && e.reason != reason) continue;
          if (f.status && (*f.status == TraceStatus::Pruned) != (e.reason != 0)) continue;
          rest.push_back(run_row(r, i));
          ++found;
        }
      }
      std::sort(rest.begin(), rest.end(),
                [](const TraceRow& a, const TraceRow& b) { return a.id < b.id; });
      if (static_cast<int64_t>(rest.size()) > limit) rest.resize(static_cast<size_t>(limit));
    }
    out.insert(out.end(), rest.begin(), rest.end());
  }
  return out;
}

void TraceDb::for_each(const std::function<void(const TraceRow&)>& f) const {
  Stmt rows(db_, std::string(kRowSelect) + "ORDER BY s.id");
  Stmt runs(db_, std::string(kRunSelect) + "ORDER BY r.first_id");
  bool have_row = rows.step();
  std::optional<TraceRow> row;
  if (have_row) row = read_row(rows);
  while (runs.step()) {
    Run r = decode_run<Run>(runs, path_);
    while (row && row->id < r.first) {
      f(*row);
      row = rows.step() ? std::optional<TraceRow>(read_row(rows)) : std::nullopt;
    }
    for (size_t i = 0; i < r.states.size(); ++i) f(run_row(r, i));
  }
  while (row) {
    f(*row);
    row = rows.step() ? std::optional<TraceRow>(read_row(rows)) : std::nullopt;
  }
}

namespace {

// The algebra pass's record (meta "algebra", written by run_search): its line and, per base after
// the spec's, its rewrites and its kernel graph as mugraph/1 text. Empty without the pass.
struct AlgebraMeta {
  std::string summary;
  std::vector<std::vector<std::string>> rewrites;
  std::vector<std::string> graphs;
};
AlgebraMeta algebra_meta(const TraceDb& db) {
  AlgebraMeta m;
  const std::string text = db.meta("algebra");
  if (text.empty()) return m;
  const nlohmann::json j = parse_json_text(text, db.path() + ":algebra");
  m.summary = j.value("summary", std::string());
  for (const nlohmann::json& g : j.value("graphs", nlohmann::json::array())) {
    const std::string graph = g.value("graph", std::string());
    if (graph.empty())
      user_error(ErrorCode::Schema, "the trace {} records an algebra base without its graph",
                 db.path());
    m.rewrites.push_back(g.value("rewrites", std::vector<std::string>{}));
    m.graphs.push_back(graph);
  }
  return m;
}

}  // namespace

TraceSummary TraceDb::summary() const {
  TraceSummary s;
  // The writer stores the counts (and last_t_ms) when it closes the trace; a killed run's file
  // has neither, and its committed rows are counted here instead.
  s.complete = !meta("last_t_ms").empty();
  Stmt st(db_, s.complete ? "SELECT c.kind, c.status, r.s, c.n FROM counts c LEFT JOIN strings r "
                            "ON r.id = c.reason"
                          : "SELECT c.kind, c.status, r.s, count(*) FROM states c LEFT JOIN "
                            "strings r ON r.id = c.reason GROUP BY c.kind, c.status, c.reason");
  while (st.step()) {
    int k = sqlite3_column_int(*st, 0), u = sqlite3_column_int(*st, 1);
    if (k < 0 || k >= kTraceKinds || u < 0 || u >= kTraceStatuses) continue;
    TraceKind kind = static_cast<TraceKind>(k);
    TraceStatus status = static_cast<TraceStatus>(u);
    int64_t n = sqlite3_column_int64(*st, 3);
    std::string reason = st.text(2);
    s.states += n;
    s.states_by_kind[trace_kind_name(kind)][trace_status_name(status)] += n;
    if (status == TraceStatus::Pruned) s.pruned[reason] += n;
    if (status == TraceStatus::Rejected) s.rejected[reason] += n;
    if (kind == TraceKind::Candidate) {
      if (status == TraceStatus::Verified) s.verified += n;
      if (status != TraceStatus::Expanded && status != TraceStatus::Pruned)
        s.costed_candidates += n;
    }
  }
  {
    Stmt b(db_, "SELECT min(cost_us) FROM states WHERE kind=? AND status=?");
    sqlite3_bind_int(*b, 1, static_cast<int>(TraceKind::Candidate));
    sqlite3_bind_int(*b, 2, static_cast<int>(TraceStatus::Verified));
    if (b.step() && sqlite3_column_type(*b, 0) != SQLITE_NULL)
      s.best_verified_us = sqlite3_column_double(*b, 0);
  }
  std::string t = meta("last_t_ms");
  if (!t.empty()) s.elapsed_s = std::stod(t) / 1000.0;
  const AlgebraMeta am = algebra_meta(*this);
  s.algebra = am.summary;
  s.algebra_bases = am.rewrites;
  if (std::optional<TraceRow> root = find(0))
    s.spec = root->detail.substr(root->detail.find(' ') + 1);
  return s;
}

nlohmann::json TraceSummary::to_json() const {
  return {{"spec", spec},
          {"states", states},
          {"states_by_kind", states_by_kind},
          {"pruned", pruned},
          {"rejected", rejected},
          {"verified", verified},
          {"costed_candidates", costed_candidates},
          {"best_verified_us",
           best_verified_us < 0 ? nlohmann::json(nullptr) : nlohmann::json(best_verified_us)},
          {"elapsed_s", elapsed_s},
          {"algebra", algebra},
          {"algebra_bases", algebra_bases},
          {"complete", complete}};
}

std::string TraceSummary::str() const {
  std::string s =
      fmt::format("spec {}: {} states over {:.2f} s\n{}states by kind:\n", spec, states, elapsed_s,
                  complete ? ""
                           : "incomplete: the run stopped before it closed the trace; these are "
                             "the rows it committed\n");
  for (const auto& [kind, by] : states_by_kind) {
    int64_t n = 0;
    std::string parts;
    for (const auto& [st, c] : by) {
      n += c;
      parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", st, c);
    }
    s += fmt::format("  {:<10} {:>9}  ({})\n", kind, n, parts);
  }
  s += "pruned:\n";
  for (const auto& [k, v] : pruned) s += fmt::format("  {:<20} {}\n", k, v);
  if (!rejected.empty()) {
    s += "rejected:\n";
    for (const auto& [k, v] : rejected) s += fmt::format("  {:<20} {}\n", k, v);
  }
  s += fmt::format("candidates costed {}, verified {}\n", costed_candidates, verified);
  if (best_verified_us >= 0) s += fmt::format("best verified: {:.2f} us\n", best_verified_us);
  if (!algebra.empty()) {
    s += fmt::format("algebra: {}\n", algebra);
    for (size_t i = 0; i < algebra_bases.size(); ++i)
      s += fmt::format("  base {}: {}\n", i + 1, fmt::join(algebra_bases[i], "; "));
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// The tree.

namespace {

void tree_rec(const TraceDb& db, const TraceRow& r, int d, int depth, int64_t limit,
              std::string& s) {
  s += std::string(d * 2, ' ') + r.str();
  int64_t total = 0;
  std::vector<TraceRow> kids =
      d >= depth ? std::vector<TraceRow>{} : db.children(r.id, limit, &total);
  if (d >= depth) {
    db.children(r.id, 0, &total);
    s += total ? fmt::format("  (+{} children)\n", total) : "\n";
    return;
  }
  s += "\n";
  for (const TraceRow& k : kids) tree_rec(db, k, d + 1, depth, limit, s);
  if (total > static_cast<int64_t>(kids.size()))
    s += std::string((d + 1) * 2, ' ') +
         fmt::format("... {} more (kiln trace FILE tree {})\n", total - kids.size(), r.id);
}

nlohmann::json tree_json_rec(const TraceDb& db, const TraceRow& r, int d, int depth,
                             int64_t limit) {
  nlohmann::json j = r.to_json();
  int64_t total = 0;
  std::vector<TraceRow> kids = db.children(r.id, d >= depth ? 0 : limit, &total);
  j["children_total"] = total;
  nlohmann::json ks = nlohmann::json::array();
  for (const TraceRow& k : kids) ks.push_back(tree_json_rec(db, k, d + 1, depth, limit));
  j["children"] = std::move(ks);
  return j;
}

}  // namespace

std::string trace_tree(const TraceDb& db, int64_t root, int depth, int64_t limit) {
  std::string s;
  tree_rec(db, db.get(root), 0, depth, limit, s);
  return s;
}

nlohmann::json trace_tree_json(const TraceDb& db, int64_t root, int depth, int64_t limit) {
  return tree_json_rec(db, db.get(root), 0, depth, limit);
}

// ---------------------------------------------------------------------------------------------
// Rebuilding graphs.

struct TraceGraphs::Impl {
  const TraceDb& db;
  KernelGraph spec;
  Arch arch = Arch::Sm90a;
  VariantOptions vopt;
  int max_block_ops = 64;
  std::optional<std::vector<PGraph>> variants;

  explicit Impl(const TraceDb& d) : db(d) {
    std::string text = db.meta("spec"), config = db.meta("config");
    if (text.empty() || config.empty())
      user_error(ErrorCode::Schema, "the trace {} records no spec or config", db.path());
    spec = parse_mugraph(text, db.path() + ":spec");
    nlohmann::json c = parse_json_text(config, db.path() + ":config");
    if (auto a = arch_from_name(c.value("arch", std::string("sm_90a")))) arch = *a;
    vopt.algebra = c.value("algebra", vopt.algebra);
    vopt.hoist_scales = c.value("hoist_scales", vopt.hoist_scales);
    vopt.split = c.value("split", vopt.split);
    vopt.max_split = c.value("max_split", vopt.max_split);
    vopt.min_split_tile = c.value("min_split_tile", vopt.min_split_tile);
    max_block_ops = c.value("max_block_ops", max_block_ops);
    // The algebra pass's graphs (search.cpp, algebra_bases): the bases after the spec's own.
    const AlgebraMeta am = algebra_meta(db);
    for (const std::string& text : am.graphs)
      bases.push_back(parse_mugraph(text, db.path() + ":algebra"));
    base_rewrites = am.rewrites;
  }

  std::vector<KernelGraph> bases;
  std::vector<std::vector<std::string>> base_rewrites;

  const std::vector<PGraph>& all_variants() {
    if (!variants) {
      std::vector<PGraph> b{expand_spec(spec)};
      for (size_t i = 0; i < bases.size(); ++i) {
        b.push_back(primitive_graph(bases[i]));
        b.back().rewrites = base_rewrites[i];
      }
      variants = enumerate_variants(b, vopt);
    }
    return *variants;
  }

  TraceGraphs::Rewritten rewritten(int64_t id) {
    for (const TraceRow& r : db.path(id)) {
      if (r.kind != TraceKind::Variant) continue;
      int idx = -1;
      if (r.decision.size() > 1 && r.decision[0] == 'v')
        std::from_chars(r.decision.data() + 1, r.decision.data() + r.decision.size(), idx);
      const std::vector<PGraph>& vs = all_variants();
      if (idx < 0 || idx >= static_cast<int>(vs.size()))
        user_error(ErrorCode::Unsupported, "state #{}'s variant ({}) is not among the {} variants",
                   r.id, r.decision, vs.size());
      TraceGraphs::Rewritten w;
      w.base = vs[idx].base;
      if (w.base == 0) {
        w.graph = spec;
      } else {
        w.graph = bases.at(w.base - 1);
        w.rewrites = base_rewrites.at(w.base - 1);
      }
      return w;
    }
    user_error(ErrorCode::Name,
               "state #{} is above the variants: it has no kernel graph of its own", id);
  }

  [[noreturn]] void not_graph(const TraceRow& r) {
    throw UserError(ErrorCode::Name,
                    fmt::format("state #{} ({} {}) has no μGraph: only costed schedules and "
                                "candidates have one",
                                r.id, trace_kind_name(r.kind), trace_status_name(r.status)),
                    "list some with kiln trace FILE top");
  }

  const PGraph& variant_of(const TraceRow& group) {
    TraceRow v = db.get(group.parent);
    int idx = -1;
    if (v.kind == TraceKind::Variant && v.decision.size() > 1 && v.decision[0] == 'v')
      std::from_chars(v.decision.data() + 1, v.decision.data() + v.decision.size(), idx);
    all_variants();
    if (idx < 0 || idx >= static_cast<int>(variants->size()))
      user_error(ErrorCode::Unsupported,
                 "state #{}'s variant ({}) is not among the {} variants of the spec; was the "
                 "trace written by another Kiln version?",
                 v.id, v.decision, variants->size());
    return (*variants)[idx];
  }

  std::vector<int> group_nodes(const TraceRow& g, const PGraph& v) {
    std::vector<int> nodes;
    if (g.kind != TraceKind::Group || g.decision.empty() || g.decision[0] != 'n')
      user_error(ErrorCode::Syntax, "state #{} is not a group with a decision", g.id);
    size_t b = 1;
    while (b < g.decision.size()) {
      size_t e = g.decision.find(',', b);
      if (e == std::string::npos) e = g.decision.size();
      int x = -1;
      std::from_chars(g.decision.data() + b, g.decision.data() + e, x);
      if (x < 0 || x >= static_cast<int>(v.nodes.size()))
        user_error(ErrorCode::Syntax, "group #{} names node {} of a {}-node variant", g.id, x,
                   v.nodes.size());
      nodes.push_back(x);
      b = e + 1;
    }
    return nodes;
  }

  // The kernel choice of a costed schedule state, and its variant.
  std::pair<KernelChoice, const PGraph*> choice(int64_t id) {
    TraceRow s = db.get(id);
    if (s.kind != TraceKind::Schedule || s.cost_us < 0 || s.decision.empty()) not_graph(s);
    TraceRow g = db.get(s.parent);
    const PGraph& v = variant_of(g);
    KernelChoice kc{group_nodes(g, v), nullptr};
    ScheduleDecision d = parse_schedule_code(s.decision);
    if (d.predefined) return {kc, &v};
    const Target& target = target_for(arch);
    Lowered lw;
    if (d.enumerated) {
      std::vector<VocabOp> vocab = block_vocabulary(v, d.schedule.loop_label >= 0);
      BlockRecipe rc;
      for (const auto& [k, in] : d.ops) {
        if (k < 0 || k >= static_cast<int>(vocab.size()))
          user_error(ErrorCode::Syntax, "schedule #{} uses vocabulary entry {} of {}", id, k,
                     vocab.size());
        rc.ops.push_back({vocab[k], in});
      }
      rc.saves = d.saves;
      lw = instantiate(v, kc.group, d.schedule, rc, target, max_block_ops);
    } else {
      lw = lower_group(v, kc.group, d.schedule, target, max_block_ops);
    }
    if (!lw.block)
      user_error(ErrorCode::Unsupported,
                 "schedule #{} does not lower again ({}); was the trace written by another Kiln "
                 "version?",
                 id, lw.message);
    kc.block = lw.block;
    return {kc, &v};
  }

  KernelGraph graph(int64_t id) {
    TraceRow r = db.get(id);
    if (r.kind == TraceKind::Schedule) {
      auto [kc, v] = choice(id);
      return kernel_alone(*v, kc, arch);
    }
    if (r.kind != TraceKind::Candidate || r.cost_us < 0) not_graph(r);
    // "k<schedule ids> f<fingerprint>", or "spec f<fingerprint>".
    std::string fp;
    if (size_t f = r.decision.find(" f"); f != std::string::npos) fp = r.decision.substr(f + 2);
    if (r.decision.rfind("spec", 0) == 0) {
      KernelGraph g = spec;
      g.arch = arch;
      return g;
    }
    if (r.decision.empty() || r.decision[0] != 'k')
      user_error(ErrorCode::Syntax, "candidate #{} has no kernels recorded", id);
    std::vector<KernelChoice> ks;
    const PGraph* v = nullptr;
    std::string_view list(r.decision);
    list = list.substr(
        1, list.find(' ') == std::string_view::npos ? std::string_view::npos : list.find(' ') - 1);
    size_t b = 0;
    while (b < list.size()) {
      size_t e = list.find(',', b);
      if (e == std::string_view::npos) e = list.size();
      int64_t sid = -1;
      std::from_chars(list.data() + b, list.data() + e, sid);
      auto [kc, vv] = choice(sid);
      if (v && vv != v)
        user_error(ErrorCode::Syntax, "candidate #{} mixes kernels of two variants", id);
      v = vv;
      ks.push_back(std::move(kc));
      b = e + 1;
    }
    if (!v) user_error(ErrorCode::Syntax, "candidate #{} has no kernels recorded", id);
    KernelGraph g = assemble(*v, ks, arch);
    if (!fp.empty() && fingerprint(g) != fp)
      user_error(ErrorCode::Unsupported,
                 "the μGraph rebuilt for candidate #{} is not the one searched (fingerprint {}, "
                 "recorded {}); was the trace written by another Kiln version?",
                 id, fingerprint(g), fp);
    return g;
  }
};

TraceGraphs::TraceGraphs(const TraceDb& db) : impl_(std::make_unique<Impl>(db)) {}
TraceGraphs::~TraceGraphs() = default;
KernelGraph TraceGraphs::graph(int64_t id) {
  return impl_->graph(id);
}
TraceGraphs::Rewritten TraceGraphs::rewritten(int64_t id) {
  return impl_->rewritten(id);
}
const KernelGraph& TraceGraphs::spec() const {
  return impl_->spec;
}

}  // namespace kiln::search
