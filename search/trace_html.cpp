// The trace explorer page (trace_html.h): data gathered from the trace database with bounded
// queries, μGraphs rebuilt (TraceGraphs) and drawn (to_svg), written into one HTML file with its
// style and script inline.
#include "kiln/search/trace_html.h"

#include <functional>
#include <set>

#include <fmt/format.h>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/ir/print.h"
#include "kiln/ir/target.h"
#include "kiln/search/cost_model.h"

namespace kiln::search {

namespace {

// The page. KILN_DATA is replaced by the data (JSON with "</" escaped).
constexpr const char* kPage = R"html(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>Kiln search trace</title>
<style>
body{font:13px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fff}
header{padding:8px 14px;background:#2b3a4a;color:#fff;display:flex;gap:18px;align-items:center;flex-wrap:wrap}
header h1{font-size:16px;margin:0}
header input{font-size:13px;padding:3px 6px;width:260px}
main{display:grid;grid-template-columns:minmax(320px,38%) 1fr;gap:10px;padding:10px;height:calc(100vh - 60px);box-sizing:border-box}
section{overflow:auto;border:1px solid #ccd;border-radius:4px;padding:6px}
h2{font-size:14px;margin:4px 0 6px}
table{border-collapse:collapse;width:100%}
th,td{padding:2px 6px;border-bottom:1px solid #eee;text-align:left;white-space:nowrap}
td.d{white-space:normal;font-family:monospace;font-size:11px}
tr.cand{cursor:pointer}tr.cand:hover{background:#eef4ff}tr.sel{background:#dbe8ff}
.pruned{color:#a33}.verified{color:#171}.rejected{color:#a50}.costed{color:#236}
ul.tree{list-style:none;padding-left:14px;margin:0}ul.tree li{margin:1px 0}
.tog{cursor:pointer;display:inline-block;width:12px;color:#555}
.node{font-family:monospace;font-size:11px}.hit{background:#ffef9e}
.kind{font-weight:bold}.more{color:#777;font-style:italic}
#graph svg{max-width:none}#detail pre{white-space:pre-wrap;font-size:11px}
.stats td{font-family:monospace}
</style></head><body>
<header><h1>Kiln search trace: <span id="spec"></span></h1><span id="counts"></span>
<input id="q" type="search" placeholder="search states and candidates (id, op, reason...)"></header>
<main>
<div style="display:flex;flex-direction:column;gap:10px;min-height:0">
<section style="flex:1"><h2>Search tree</h2><div id="tree"></div></section>
<section style="flex:1"><h2>Pruning</h2><table class="stats" id="pruned"></table></section>
</div>
<div style="display:flex;flex-direction:column;gap:10px;min-height:0">
<section style="flex:1"><h2>Candidates (<span id="ncand"></span>)</h2>
<table id="cands"><thead><tr><th>#</th><th>rank</th><th>kernels</th><th>modeled us</th><th>measured us</th><th>outcome</th><th>schedules</th></tr></thead><tbody></tbody></table></section>
<section style="flex:2" id="detail"><h2 id="dtitle">Select a candidate</h2><div id="graph"></div><div id="cost"></div><div id="path"></div></section>
</div></main>
<div id="kiln-errors" hidden></div>
<script id="kiln-data" type="application/json">KILN_DATA</script>
<script>
"use strict";
window.addEventListener("error", e => { const x = document.getElementById("kiln-errors");
  x.hidden = false; x.textContent += "error: " + e.message + "\n"; });
const D = JSON.parse(document.getElementById("kiln-data").textContent);
const $ = id => document.getElementById(id);
const el = (tag, cls, text) => { const e = document.createElement(tag);
  if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; };
const us = x => x === null || x === undefined ? "" : x.toFixed(2);
$("spec").textContent = D.summary.spec;
$("counts").textContent = D.summary.states.toLocaleString() + " states, " +
  D.summary.costed_candidates + " candidates costed, " + D.summary.verified + " verified" +
  (D.summary.best_verified_us !== null ? ", best " + us(D.summary.best_verified_us) + " us" : "");
for (const [r, n] of Object.entries(D.summary.pruned).sort((a, b) => b[1] - a[1])) {
  const tr = el("tr"); tr.append(el("td", "", r), el("td", "", n.toLocaleString())); $("pruned").append(tr);
}
function outcome(c) { return c.status + (c.reason ? " (" + c.reason + ")" : ""); }
function text(n) { return [n.id, n.kind, n.status, n.reason || "", n.detail || "", n.note || ""].join(" ").toLowerCase(); }
const body = $("cands").tBodies[0];
$("ncand").textContent = D.candidates.length + " of " + D.summary.costed_candidates;
for (const c of D.candidates) {
  const tr = el("tr", "cand"); tr.dataset.id = c.id; tr.dataset.text = text(c);
  tr.append(el("td", "", c.id), el("td", "", c.rank || ""), el("td", "", c.kernels),
            el("td", "", us(c.cost_us)), el("td", "", us(c.measured_us)),
            el("td", c.status, outcome(c)), el("td", "d", c.detail || ""));
  tr.addEventListener("click", () => select(c.id)); body.append(tr);
}
const byId = new Map(D.candidates.map(c => [c.id, c]));
function select(id) {
  const c = byId.get(id); if (!c) return;
  for (const r of body.rows) r.classList.toggle("sel", Number(r.dataset.id) === id);
  $("dtitle").textContent = "Candidate #" + c.id + ": " + us(c.cost_us) + " us modeled" +
    (c.measured_us !== null ? ", " + us(c.measured_us) + " us measured" : "") + ", " + outcome(c);
  $("graph").innerHTML = c.svg || "<p>(no graph: " + (c.graph_error || "not rebuilt") + ")</p>";
  const cost = $("cost"); cost.replaceChildren();
  if (c.cost) {
    const t = el("table", "stats"); const h = el("tr");
    for (const k of ["kernel", "us", "blocks", "iterations", "DRAM read", "DRAM write", "smem/block"]) h.append(el("th", "", k));
    t.append(h);
    for (const k of c.cost.kernels) { const r = el("tr");
      for (const v of [k.name, us(k.time_us), k.blocks, k.iterations, k.dram_read, k.dram_write, k.smem_per_block]) r.append(el("td", "", v === undefined ? "" : v));
      t.append(r); }
    cost.append(el("h2", "", "Cost breakdown"), t);
  }
  const p = $("path"); p.replaceChildren(el("h2", "", "Decisions"));
  const pre = el("pre"); pre.textContent = c.path.map((s, i) => " ".repeat(2 * i) + "#" + s.id + " " + s.kind + ": " + (s.detail || "") + (s.decision ? "  [" + s.decision + "]" : "")).join("\n") +
    (c.note ? "\n\nverdict: " + c.note : "");
  p.append(pre);
}
function treeNode(n) {
  const li = el("li"); const tog = el("span", "tog", n.c && n.c.length ? "+" : " ");
  const label = el("span", "node"); label.dataset.text = text(n);
  label.append(el("span", "kind", "#" + n.id + " " + n.kind + " "), el("span", n.status, outcome(n)),
    document.createTextNode((n.cost_us !== null && n.cost_us !== undefined ? " " + us(n.cost_us) + " us" : "") +
      (n.detail ? ": " + n.detail : "") + (n.note ? " -- " + n.note : "") + (n.n ? "  (" + n.n + " children)" : "")));
  if (n.kind === "candidate" && byId.has(n.id)) { label.style.cursor = "pointer"; label.addEventListener("click", () => select(n.id)); }
  li.append(tog, label);
  if (n.c && n.c.length) {
    const ul = el("ul", "tree"); ul.hidden = true; let built = false;
    const build = () => { if (built) return; built = true; for (const k of n.c) ul.append(treeNode(k));
      if (n.n > n.c.length) ul.append(el("li", "more", "... " + (n.n - n.c.length) + " more: kiln trace FILE tree " + n.id)); };
    tog.addEventListener("click", () => { build(); ul.hidden = !ul.hidden; tog.textContent = ul.hidden ? "+" : "-"; });
    li.append(ul); li._open = () => { build(); ul.hidden = false; tog.textContent = "-"; };
  }
  return li;
}
const rootUl = el("ul", "tree"); rootUl.style.paddingLeft = "0"; rootUl.append(treeNode(D.tree)); $("tree").append(rootUl);
rootUl.firstChild._open();
function search(q) {
  q = q.trim().toLowerCase();
  for (const r of body.rows) r.hidden = q !== "" && !r.dataset.text.includes(q);
  // The tree: open every node that holds a hit, and mark the hits.
  const walk = (li) => { let hit = false; const label = li.querySelector(":scope > .node");
    const mine = q !== "" && label && label.dataset.text.includes(q);
    if (label) label.classList.toggle("hit", mine);
    const ul = li.querySelector(":scope > ul"); if (ul && q !== "") { if (li._open) li._open(); for (const k of ul.children) hit = walk(k) || hit; if (!hit && !mine && ul.parentElement !== rootUl.firstChild) { ul.hidden = true; } }
    return hit || mine; };
  if (q !== "") walk(rootUl.firstChild);
}
$("q").addEventListener("input", e => search(e.target.value));
if (D.candidates.length) select(D.candidates[0].id);
if (location.hash === "#selftest") {
  // What the CI test checks: a click on another candidate's row draws that candidate's graph.
  const rows = body.rows; const row = rows[rows.length > 1 ? 1 : 0];
  if (row) row.click();
  const svg = $("graph").querySelector("svg");
  document.body.dataset.selftest = svg && row && $("dtitle").textContent.includes("#" + row.dataset.id) ? "ok" : "failed";
  search("candidate");
}
</script></body></html>
)html";

nlohmann::json state_json(const TraceRow& r) {
  nlohmann::json j = {
      {"id", r.id}, {"kind", trace_kind_name(r.kind)}, {"status", trace_status_name(r.status)}};
  if (!r.reason.empty()) j["reason"] = r.reason;
  if (!r.detail.empty()) j["detail"] = r.detail;
  if (!r.note.empty()) j["note"] = r.note.size() > 300 ? r.note.substr(0, 300) + "..." : r.note;
  if (r.cost_us >= 0) j["cost_us"] = r.cost_us;
  return j;
}

}  // namespace

HtmlStats write_trace_html(const TraceDb& db, const std::string& path, const HtmlOptions& opt) {
  HtmlStats st;
  nlohmann::json data;
  data["summary"] = db.summary().to_json();

  // Candidates: the cheapest, and every ranked, verified or rejected one.
  std::vector<TraceRow> cands;
  std::set<int64_t> seen;
  TraceFilter f;
  f.kind = TraceKind::Candidate;
  for (TraceStatus s : {TraceStatus::Verified, TraceStatus::Rejected}) {
    f.status = s;
    for (TraceRow& r : db.select(f, opt.max_candidates))
      if (seen.insert(r.id).second) cands.push_back(std::move(r));
  }
  f.status.reset();
  for (TraceRow& r : db.select(f, opt.max_candidates))
    if (static_cast<int64_t>(cands.size()) < opt.max_candidates && seen.insert(r.id).second)
      cands.push_back(std::move(r));
  std::stable_sort(cands.begin(), cands.end(), [](const TraceRow& a, const TraceRow& b) {
    if ((a.rank > 0) != (b.rank > 0)) return a.rank > 0;
    if (a.rank != b.rank) return a.rank < b.rank;
    return a.cost_us < b.cost_us;
  });
  std::optional<TraceGraphs> graphs;
  std::string graph_error;
  try {
    graphs.emplace(db);
  } catch (const UserError& e) {
    graph_error = e.what();
  }
  nlohmann::json cj = nlohmann::json::array();
  for (const TraceRow& r : cands) {
    nlohmann::json c = r.to_json();
    nlohmann::json p = nlohmann::json::array();
    for (const TraceRow& s : db.path(r.id))
      p.push_back({{"id", s.id},
                   {"kind", trace_kind_name(s.kind)},
                   {"detail", s.detail},
                   {"decision", s.decision}});
    c["path"] = std::move(p);
    if (graphs) {
      try {
        KernelGraph g = graphs->graph(r.id);
        c["svg"] = to_svg(g);
        GraphCost gc = estimate_cost(g, target_for(g.arch));
        nlohmann::json ks = nlohmann::json::array();
        for (const KernelCost& k : gc.kernels)
          ks.push_back({{"name", k.name},
                        {"time_us", k.time * 1e6},
                        {"blocks", k.blocks},
                        {"iterations", k.iterations},
                        {"dram_read", k.dram_read},
                        {"dram_write", k.dram_write},
                        {"smem_per_block", k.smem_per_block}});
        c["cost"] = {{"time_us", gc.time * 1e6}, {"kernels", std::move(ks)}};
        ++st.graphs;
      } catch (const UserError& e) {
        c["graph_error"] = e.what();
      }
    } else {
      c["graph_error"] = graph_error;
    }
    cj.push_back(std::move(c));
  }
  st.candidates = static_cast<int64_t>(cj.size());
  data["candidates"] = std::move(cj);

  // The tree, bounded.
  std::function<nlohmann::json(const TraceRow&, int)> tree = [&](const TraceRow& r, int d) {
    nlohmann::json j = state_json(r);
    ++st.tree_states;
    int64_t total = 0;
    std::vector<TraceRow> kids =
        db.children(r.id, d >= opt.tree_depth ? 0 : opt.tree_children, &total);
    if (total) j["n"] = total;
    if (!kids.empty()) {
      nlohmann::json c = nlohmann::json::array();
      for (const TraceRow& k : kids) c.push_back(tree(k, d + 1));
      j["c"] = std::move(c);
    }
    return j;
  };
  data["tree"] = tree(db.get(0), 0);

  std::string json = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // Inside <script>, "</" would end it; "<\/" is the same JSON string.
  std::string safe;
  safe.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') {
      safe += "<\\/";
      ++i;
      continue;
    }
    safe += json[i];
  }
  std::string page = kPage;
  size_t at = page.find("KILN_DATA");
  page.replace(at, 9, safe);
  write_file_text(path, page);
  st.bytes = static_cast<int64_t>(page.size());
  return st;
}

}  // namespace kiln::search
