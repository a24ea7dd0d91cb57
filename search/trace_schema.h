// The trace database's schema, shared by its writer (trace.cpp) and reader (trace_db.cpp).
// docs/trace-format.md describes every table and column; a change here is a new format version.
#pragma once

namespace kiln::search {

inline constexpr const char* kTraceFormat = "kiln-trace/2";

// States are one row each; kind and status are small integers (TraceKind, TraceStatus, also in
// the kinds and statuses tables) and every text column is an id into `strings`, so a row is a
// few bytes. The `state` view spells everything out for ad-hoc SQL.
inline constexpr const char* kTraceSchema = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE strings(id INTEGER PRIMARY KEY, s TEXT NOT NULL);
CREATE TABLE kinds(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO kinds VALUES(0,'root'),(1,'variant'),(2,'partition'),(3,'group'),(4,'schedule'),
  (5,'block_op'),(6,'candidate');
CREATE TABLE statuses(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO statuses VALUES(0,'expanded'),(1,'pruned'),(2,'costed'),(3,'verified'),(4,'rejected');
CREATE TABLE states(
  id INTEGER PRIMARY KEY,
  parent INTEGER,
  kind INTEGER NOT NULL,
  status INTEGER NOT NULL,
  reason INTEGER,
  detail INTEGER,
  note INTEGER,
  decision INTEGER,
  cost_us REAL,
  kernels INTEGER,
  t_ms INTEGER);
CREATE TABLE enum_runs(first_id INTEGER PRIMARY KEY, n INTEGER NOT NULL, grp INTEGER NOT NULL,
  vocab INTEGER NOT NULL, t_ms INTEGER, states BLOB NOT NULL);
CREATE TABLE ranked(id INTEGER PRIMARY KEY, rank INTEGER, measured_us REAL, measured_status TEXT);
CREATE TABLE counts(kind INTEGER, status INTEGER, reason INTEGER, n INTEGER);
CREATE TABLE reasons(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE VIEW state AS
  SELECT s.id, s.parent, k.name AS kind, st.name AS status, r.s AS reason, d.s AS detail,
         n.s AS note, c.s AS decision, s.cost_us, s.kernels, s.t_ms / 1000.0 AS t,
         m.rank, m.measured_us, m.measured_status
  FROM states s JOIN kinds k ON k.id = s.kind JOIN statuses st ON st.id = s.status
  LEFT JOIN strings r ON r.id = s.reason LEFT JOIN strings d ON d.id = s.detail
  LEFT JOIN strings n ON n.id = s.note LEFT JOIN strings c ON c.id = s.decision
  LEFT JOIN ranked m ON m.id = s.id;
)sql";

// Built when the writer closes. parent: the tree; (kind, status): filters and counts; reason:
// pruning filters (only pruned and rejected states have one); cost: the cheapest states of a
// kind, by index order with a LIMIT.
inline constexpr const char* kTraceIndexes = R"sql(
CREATE INDEX states_parent ON states(parent);
CREATE INDEX states_kind ON states(kind, status);
CREATE INDEX states_reason ON states(reason) WHERE reason IS NOT NULL;
CREATE INDEX states_cost ON states(kind, cost_us) WHERE cost_us IS NOT NULL;
CREATE INDEX enum_runs_grp ON enum_runs(grp);
)sql";

}  // namespace kiln::search
