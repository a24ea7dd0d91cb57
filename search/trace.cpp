// Search traces: the JSON Lines writer and the `kiln trace` reports (docs/trace-format.md).
#include "kiln/search/trace.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>

#include <fmt/format.h>

#include "kiln/ir/diag.h"

namespace kiln::search {

nlohmann::json TraceEvent::to_json() const {
  nlohmann::json j = {{"id", id}, {"parent", parent}, {"kind", kind}, {"event", event}};
  if (!reason.empty()) j["reason"] = reason;
  if (!detail.empty()) j["detail"] = detail;
  if (cost_us >= 0) j["cost_us"] = cost_us;
  j["t"] = t;
  return j;
}

TraceEvent TraceEvent::from_json(const nlohmann::json& j) {
  TraceEvent e;
  e.id = j.at("id").get<int64_t>();
  e.parent = j.at("parent").get<int64_t>();
  e.kind = j.at("kind").get<std::string>();
  e.event = j.at("event").get<std::string>();
  e.reason = j.value("reason", std::string());
  e.detail = j.value("detail", std::string());
  e.cost_us = j.value("cost_us", -1.0);
  e.t = j.value("t", 0.0);
  return e;
}

TraceWriter::TraceWriter(const std::string& path) {
  f_ = std::fopen(path.c_str(), "w");
  if (!f_)
    throw UserError(ErrorCode::Io,
                    fmt::format("cannot write the trace file {}: {}", path, std::strerror(errno)),
                    "give --trace a path whose directory exists and is writable");
}

TraceWriter::~TraceWriter() {
  if (f_) std::fclose(f_);
}

void TraceWriter::write(const TraceEvent& e) {
  std::lock_guard<std::mutex> l(mu_);
  std::string s = e.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fputs(s.c_str(), f_);
  std::fputc('\n', f_);
}

void TraceWriter::write_all(const std::vector<TraceEvent>& es) {
  for (const TraceEvent& e : es) write(e);
  flush();
}

void TraceWriter::flush() {
  std::lock_guard<std::mutex> l(mu_);
  std::fflush(f_);
}

std::vector<TraceEvent> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) user_error(ErrorCode::Io, "cannot read trace file {}", path);
  std::vector<TraceEvent> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    try {
      out.push_back(TraceEvent::from_json(nlohmann::json::parse(line)));
    } catch (const std::exception& e) {
      throw UserError(ErrorCode::Syntax,
                      fmt::format("{}:{}: not a trace event: {}", path, n, e.what()));
    }
  }
  return out;
}

namespace {

// The latest event of each state (a state can be expanded, then costed, then verified).
std::map<int64_t, std::vector<const TraceEvent*>> by_id(const std::vector<TraceEvent>& es) {
  std::map<int64_t, std::vector<const TraceEvent*>> m;
  for (const TraceEvent& e : es) m[e.id].push_back(&e);
  return m;
}

std::string line_of(const TraceEvent& e) {
  std::string s = fmt::format("#{} {} {}", e.id, e.kind, e.event);
  if (!e.reason.empty()) s += fmt::format(" [{}]", e.reason);
  if (e.cost_us >= 0) s += fmt::format(" {:.2f} us", e.cost_us);
  if (!e.detail.empty()) s += ": " + e.detail;
  return s;
}

}  // namespace

std::string trace_summary(const std::vector<TraceEvent>& es) {
  std::map<std::string, int64_t> expanded, pruned, events;
  int64_t verified = 0, rejected = 0, costed = 0;
  double best = -1, t_end = 0;
  for (const TraceEvent& e : es) {
    t_end = std::max(t_end, e.t);
    if (e.event == "expanded") expanded[e.kind]++;
    if (e.event == "pruned") pruned[e.reason]++;
    if (e.event == "costed") costed++;
    if (e.event == "rejected") rejected++;
    if (e.event == "verified") {
      verified++;
      if (best < 0 || e.cost_us < best) best = e.cost_us;
    }
  }
  std::string s = fmt::format("{} events over {:.2f} s\nstates expanded:\n", es.size(), t_end);
  for (const auto& [k, v] : expanded) s += fmt::format("  {:<10} {}\n", k, v);
  s += "pruned:\n";
  for (const auto& [k, v] : pruned) s += fmt::format("  {:<10} {}\n", k, v);
  s += fmt::format("costed {}, verified {}, rejected {}\n", costed, verified, rejected);
  if (best >= 0) s += fmt::format("best verified: {:.2f} us\n", best);
  return s;
}

std::string trace_top(const std::vector<TraceEvent>& es, int k) {
  // Complete candidates by cost; marked with their verification outcome.
  std::map<int64_t, std::string> outcome;
  for (const TraceEvent& e : es)
    if (e.kind == "candidate" && (e.event == "verified" || e.event == "rejected"))
      outcome[e.id] = e.event == "verified" ? "verified" : "rejected (" + e.reason + ")";
  std::vector<const TraceEvent*> c;
  for (const TraceEvent& e : es)
    if (e.kind == "candidate" && e.event == "costed") c.push_back(&e);
  std::stable_sort(c.begin(), c.end(), [](const TraceEvent* a, const TraceEvent* b) {
    return a->cost_us < b->cost_us;
  });
  std::string s;
  for (int i = 0; i < k && i < static_cast<int>(c.size()); ++i) {
    auto it = outcome.find(c[i]->id);
    s += fmt::format("{:>3}. #{:<8} {:>10.2f} us  {:<20} {}\n", i + 1, c[i]->id, c[i]->cost_us,
                     it == outcome.end() ? "not verified" : it->second, c[i]->detail);
  }
  return s;
}

std::string trace_why(const std::vector<TraceEvent>& es, int64_t id) {
  auto m = by_id(es);
  if (!m.count(id)) user_error(ErrorCode::Name, "no state #{} in the trace", id);
  std::vector<int64_t> path;
  for (int64_t x = id; x >= 0 && m.count(x); x = m[x].front()->parent) {
    path.push_back(x);
    if (path.size() > 64) break;
  }
  std::string s;
  int depth = 0;
  for (auto it = path.rbegin(); it != path.rend(); ++it, ++depth)
    for (const TraceEvent* e : m[*it]) s += std::string(depth * 2, ' ') + line_of(*e) + "\n";
  return s;
}

std::string trace_tree(const std::vector<TraceEvent>& es, int depth) {
  auto m = by_id(es);
  std::map<int64_t, std::vector<int64_t>> kids;
  std::vector<int64_t> roots;
  for (const auto& [id, evs] : m) {
    int64_t p = evs.front()->parent;
    if (p < 0 || !m.count(p))
      roots.push_back(id);
    else
      kids[p].push_back(id);
  }
  std::string s;
  std::function<void(int64_t, int)> rec = [&](int64_t id, int d) {
    const auto& evs = m[id];
    const TraceEvent* last = evs.back();
    s += std::string(d * 2, ' ') + line_of(*last);
    auto it = kids.find(id);
    size_t nk = it == kids.end() ? 0 : it->second.size();
    if (d >= depth && nk > 0) {
      s += fmt::format("  (+{} children)\n", nk);
      return;
    }
    s += "\n";
    if (nk)
      for (int64_t k : it->second) rec(k, d + 1);
  };
  for (int64_t r : roots) rec(r, 0);
  return s;
}

}  // namespace kiln::search
