// `kiln check DIR|MANIFEST`: regression-tests stored μGraphs against their specs. Every entry (a
// μGraph and its spec) goes through the checks `kiln optimize` puts a winner through before it
// ships — the verifier, the float check as the GPU computes, and, where a GPU is here, the GPU
// harness — plus a time limit against a recorded baseline. Each check passes, fails or is skipped
// with a reason; the result is a table (or --json) and optionally JUnit XML for CI. docs/check.md
// has the inputs, the checks, the outputs and the exit statuses.
//
// Bad input to the command (a missing file, a malformed manifest, a μGraph in a directory without
// its spec) is a UserError: exit 2, nothing checked. A malformed spec or μGraph named by good input
// is a stored graph that broke: that entry fails its schema check, the others still run, exit 1.
#include <stdlib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kiln/codegen/emit.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/search/float_model.h"
#include "kiln/search/profile.h"
#include "kiln/verifier/verify.h"
#include "log.h"

namespace kiln::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kManifestFormat = "kiln-check/1";
constexpr const char* kMugraphSuffix = ".mugraph.json";

enum class Status { Pass, Fail, Skip };

const char* status_name(Status s) {
  switch (s) {
    case Status::Pass:
      return "pass";
    case Status::Fail:
      return "fail";
    case Status::Skip:
      return "skip";
  }
  return "?";
}

struct Check {
  Status status = Status::Skip;
  std::string detail;  // why it failed or was skipped; what it found when it passed
};

// The checks in the order they run and are reported.
enum CheckKind { kSchema, kVerify, kFloat, kGpu, kTime, kNumChecks };
constexpr const char* kCheckNames[kNumChecks] = {"schema", "verify", "float", "gpu", "time"};
// As messages name them.
constexpr const char* kCheckTitles[kNumChecks] = {"schema", "verifier", "float check", "GPU check",
                                                  "time"};

struct Entry {
  std::string name;
  std::string spec, mugraph;  // paths as the user will recognise them
  std::optional<double> baseline_us;
  Check checks[kNumChecks];
  std::optional<double> measured_us;  // the GPU harness's median
  Status verdict = Status::Skip;
  double seconds = 0;
};

// ---- inputs --------------------------------------------------------------------------------

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Every X.mugraph.json directly in `dir` (not in subdirectories), paired with X.json beside it,
// sorted by name. The μGraph format has no key naming its spec, so the pairing is by file name.
std::vector<Entry> collect_directory(const fs::path& dir) {
  std::vector<Entry> entries;
  std::error_code list_ec, ec;
  for (const fs::directory_entry& f : fs::directory_iterator(dir, list_ec)) {
    std::string file = f.path().filename().string();
    if (!ends_with(file, kMugraphSuffix) || file.size() == std::string(kMugraphSuffix).size())
      continue;
    if (!f.is_regular_file(ec)) continue;
    Entry e;
    e.name = file.substr(0, file.size() - std::string(kMugraphSuffix).size());
    e.mugraph = f.path().string();
    e.spec = (dir / (e.name + ".json")).string();
    if (!fs::is_regular_file(e.spec, ec))
      throw UserError(ErrorCode::Io, "no spec beside this μGraph: expected " + e.spec,
                      "in a checked directory X.mugraph.json is paired with the spec X.json; add "
                      "it, or list the pair in a manifest")
          .with_file(e.mugraph);
    entries.push_back(std::move(e));
  }
  if (list_ec)
    throw UserError(ErrorCode::Io, "cannot list the directory: " + list_ec.message())
        .with_file(dir.string());
  if (entries.empty())
    throw UserError(ErrorCode::Io, "no *.mugraph.json files to check",
                    "a checked directory holds X.mugraph.json files with their specs X.json")
        .with_file(dir.string());
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return entries;
}

[[noreturn]] void manifest_error(const std::string& file, const std::string& path, ErrorCode code,
                                 const std::string& message, const std::string& hint = {}) {
  throw UserError(code, message, hint).with_file(file).with_path(path);
}

void check_manifest_keys(const json& obj, const std::string& file, const std::string& path,
                         std::initializer_list<const char*> known) {
  for (const auto& [key, value] : obj.items()) {
    bool ok = false;
    for (const char* k : known) ok |= key == k;
    if (!ok) {
      std::string list;
      for (const char* k : known) list += fmt::format("{}\"{}\"", list.empty() ? "" : ", ", k);
      manifest_error(file, path.empty() ? key : path + "." + key, ErrorCode::Schema,
                     fmt::format("unknown key \"{}\"", key), "known keys: " + list);
    }
  }
}

// A manifest (kiln-check/1); every file it names must exist (paths relative to the manifest).
std::vector<Entry> collect_manifest(const std::string& file) {
  json j = parse_json_text(read_file_text(file), file);
  if (!j.is_object()) manifest_error(file, "", ErrorCode::Schema, "a manifest is a JSON object");
  // The format first: a spec or a μGraph given by mistake is named as such, not as unknown keys.
  if (!j.contains("format") || !j["format"].is_string() || j["format"] != kManifestFormat)
    manifest_error(file, "format", ErrorCode::Schema,
                   fmt::format("expected \"format\": \"{}\", got {}", kManifestFormat,
                               j.contains("format") ? j["format"].dump() : "none"),
                   "kiln check takes a manifest or a directory of X.mugraph.json files with their "
                   "specs X.json");
  check_manifest_keys(j, file, "", {"format", "doc", "entries"});
  if (j.contains("doc") && !j["doc"].is_string())
    manifest_error(file, "doc", ErrorCode::Schema, "doc is a string");
  if (!j.contains("entries") || !j["entries"].is_array() || j["entries"].empty())
    manifest_error(file, "entries", ErrorCode::Schema,
                   "expected \"entries\": a non-empty array of {\"name\", \"spec\", \"mugraph\"}");
  fs::path base = fs::path(file).parent_path();
  std::vector<Entry> entries;
  std::set<std::string> names;
  for (size_t i = 0; i < j["entries"].size(); ++i) {
    const json& o = j["entries"][i];
    std::string at = fmt::format("entries[{}]", i);
    if (!o.is_object()) manifest_error(file, at, ErrorCode::Schema, "an entry is a JSON object");
    check_manifest_keys(o, file, at, {"name", "spec", "mugraph", "baseline_us", "doc"});
    Entry e;
    for (const char* key : {"name", "spec", "mugraph"}) {
      if (!o.contains(key))
        manifest_error(file, at, ErrorCode::Schema, fmt::format("missing \"{}\"", key),
                       "an entry is {\"name\", \"spec\", \"mugraph\"[, \"baseline_us\"]}");
      if (!o[key].is_string() || o[key].get<std::string>().empty())
        manifest_error(file, at + "." + key, ErrorCode::Schema, "expected a non-empty string");
    }
    e.name = o["name"].get<std::string>();
    if (!names.insert(e.name).second)
      manifest_error(file, at + ".name", ErrorCode::Name,
                     fmt::format("duplicate entry name \"{}\"", e.name));
    for (const char* key : {"spec", "mugraph"}) {
      fs::path p = o[key].get<std::string>();
      if (p.is_relative()) p = base / p;
      std::error_code ec;
      if (!fs::is_regular_file(p, ec))
        manifest_error(file, at + "." + key, ErrorCode::Io,
                       fmt::format("no such file: {}", p.string()),
                       "paths are relative to the manifest's directory");
      (std::string(key) == "spec" ? e.spec : e.mugraph) = p.lexically_normal().string();
    }
    if (o.contains("doc") && !o["doc"].is_string())
      manifest_error(file, at + ".doc", ErrorCode::Schema, "doc is a string");
    if (o.contains("baseline_us")) {
      const json& b = o["baseline_us"];
      if (!b.is_number() || !(b.get<double>() > 0) || !std::isfinite(b.get<double>()))
        manifest_error(file, at + ".baseline_us", ErrorCode::Schema,
                       "expected a positive number of microseconds");
      e.baseline_us = b.get<double>();
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

// ---- the checks ----------------------------------------------------------------------------

struct Options {
  double time_tolerance = 0.10;
  int threads = 0;
  uint64_t seed = 1;
};

// Whether the GPU check can run here, decided once per run.
struct GpuSetup {
  std::string nvcc;    // empty: none found
  std::string reason;  // why the GPU check is skipped; empty when it runs
  std::string work_dir;
  bool keep_work_dir = false;  // a GPU check failed: its logs stay
};

std::string bound_str(double bound) {
  if (bound <= 0) return "0";
  return fmt::format("2^{:.1f}", std::log2(bound));
}

std::string element_str(const std::vector<int64_t>& idx) {
  return fmt::format("[{}]", fmt::join(idx, ", "));
}

// The GPU check: kiln bench's steps (emit the harness, build it with nvcc, run its checks on
// uniform and std-1 normal inputs against the spec's float64 reference, time it).
Check gpu_check(Entry& e, const KernelGraph& spec, const KernelGraph& g, size_t index,
                const Options& opt, GpuSetup& gpu) {
  if (gpu.work_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "kiln-check-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) user_error(ErrorCode::Io, "cannot create {}", tmpl);
    gpu.work_dir = tmpl;
  }
  std::string leaf = fmt::format("{}_{}", index + 1, e.name);
  for (char& c : leaf)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  std::string dir = (fs::path(gpu.work_dir) / leaf).string();
  fs::create_directories(dir);
  search::HarnessRun hr;
  hr.nvcc = gpu.nvcc;
  hr.arch = g.arch;
  hr.seed = opt.seed;
  HarnessOptions ho;
  ho.emit.arch = g.arch;
  ho.emit.source = e.mugraph;
  ho.emit.verdict = "kiln check against " + e.spec;
  ho.seed = hr.seed;
  ho.checks = hr.checks;
  ho.repeats = hr.repeats;
  write_file_text(dir + "/harness.cu", emit_harness(g, spec, ho));
  search::Measurement m = search::compile_harness(dir, hr);
  if (m.status == search::ProfileStatus::NotRun) m = search::run_harness(dir, hr);
  if (!m.ok()) {
    gpu.keep_work_dir = true;
    std::string detail = fmt::format("{}: {}", search::profile_status_name(m.status), m.error);
    if (m.error.find(dir) == std::string::npos) detail += " (harness and logs in " + dir + ")";
    return {Status::Fail, detail};
  }
  e.measured_us = m.us;
  return {Status::Pass,
          fmt::format("{:.2f} us, max rel. error {:.2e} on {}", m.us, m.err, m.device)};
}

void run_entry(Entry& e, size_t index, const Options& opt, GpuSetup& gpu) {
  Check* c = e.checks;
  auto skip_rest = [&](int from, const std::string& why) {
    for (int k = from; k < kNumChecks; ++k) c[k] = {Status::Skip, why};
  };
  // (1) schema: both files load, the spec is a spec, and the pair has one interface.
  std::optional<KernelGraph> spec, g;
  try {
    spec = load_graph_file(e.spec);
    if (!spec->is_spec())
      throw UserError(ErrorCode::Schema, "a μGraph where a spec was expected",
                      "the first file of a pair is the spec the μGraph implements")
          .with_file(e.spec);
    g = load_graph_file(e.mugraph);
    verifier::check_compatible(*spec, *g);
    c[kSchema] = {Status::Pass, g->is_spec() ? "spec and spec load" : "spec and μGraph load"};
  } catch (const UserError& err) {
    c[kSchema] = {Status::Fail, err.render()};
    skip_rest(kVerify, "the schema check failed");
    return;
  }

  // (2) the verifier; an unbounded verdict is settled after (3).
  verifier::VerifyOptions vo;
  vo.seed = opt.seed;
  vo.threads = opt.threads;
  verifier::Verdict v;
  try {
    v = verifier::verify(*spec, *g, vo);
  } catch (const UserError& err) {  // a pair the verifier refuses is this entry's failure
    c[kVerify] = {Status::Fail, err.render()};
    skip_rest(kFloat, "the verifier refused the pair");
    return;
  }
  bool unbounded = v.equivalent() && !v.bounded();
  if (v.outcome == verifier::Outcome::Different) {
    c[kVerify] = {Status::Fail,
                  fmt::format("not equivalent: output {} ({}) differs at element {} (seed {}, "
                              "trial seed {:#018x}, after {} trial(s))",
                              v.output, v.output_name, element_str(v.element), v.seed,
                              v.failing_seed, v.trials)};
  } else if (v.outcome == verifier::Outcome::Inconclusive) {
    c[kVerify] = {Status::Fail,
                  fmt::format("inconclusive: {} trials hit a zero divisor in the field",
                              v.inconclusive_trials)};
  } else if (!unbounded) {
    c[kVerify] = {Status::Pass,
                  fmt::format("equivalent, bound {} ({} trials{})", bound_str(v.bound), v.trials,
                              v.scaled ? ", scaled" : "")};
  }

  // (3) the float check, exactly as kiln optimize runs it on a winner. A graph the schedule
  // cannot plan could not ship either: that is this entry's failure, not the run's.
  verifier::FloatCheck fc;
  try {
    fc = verifier::float_check(*spec, *g, opt.seed,
                               search::gpu_float_check_options(*g, unbounded, opt.threads));
  } catch (const UserError& err) {
    c[kFloat] = {Status::Fail, "cannot be planned for the GPU: " + err.render()};
    if (unbounded)
      c[kVerify] = {Status::Fail,
                    "equivalent but unbounded (selections matter), and no float "
                    "check could run: nothing vouches for it"};
    skip_rest(kGpu, "the graph cannot be planned");
    return;
  }
  std::string sets = unbounded ? "uniform, normal 1, signed" : "uniform, normal 1";
  if (fc.skipped) {
    c[kFloat] = {Status::Skip, fmt::format("too costly on the CPU: ~{:.2g} element operations "
                                           "even on sampled rows",
                                           fc.work)};
  } else if (!fc.ok) {
    c[kFloat] = {Status::Fail, fc.failures()};
  } else {
    double worst = 0;
    for (const auto& o : fc.outputs) worst = std::max(worst, o.error / o.tolerance);
    c[kFloat] = {Status::Pass, fmt::format("{}: worst error {:.2g} of the tolerance{}{}{}", sets,
                                           worst, fc.sampled ? ", sampled rows" : "",
                                           fc.exempt.empty() ? "" : "; exempt (range rule): ",
                                           fmt::format("{}", fmt::join(fc.exempt, ", ")))};
  }
  if (unbounded) {
    // The field model bounds nothing here; as in kiln optimize, only a float check on inputs of
    // both signs that ran and passed vouches for the verdict.
    if (!fc.skipped && fc.ok)
      c[kVerify] = {Status::Pass, fmt::format("equivalent, unbounded (selections matter) on {} "
                                              "trials; passes because the float check on signed "
                                              "inputs passed",
                                              v.trials)};
    else
      c[kVerify] = {Status::Fail,
                    fmt::format("equivalent but unbounded (selections matter), and the float check "
                                "on signed inputs {}: nothing vouches for it",
                                fc.skipped ? "was skipped" : "failed")};
  }

  // (4) the GPU check.
  if (!gpu.reason.empty())
    c[kGpu] = {Status::Skip, gpu.reason};
  else
    try {
      c[kGpu] = gpu_check(e, *spec, *g, index, opt, gpu);
    } catch (const UserError& err) {  // e.g. a graph the emitter does not support
      c[kGpu] = {Status::Fail, err.render()};
    }

  // (5) time against the baseline.
  if (!e.baseline_us) {
    c[kTime] = {Status::Skip, "no baseline_us"};
  } else if (!e.measured_us) {
    c[kTime] = {Status::Skip,
                c[kGpu].status == Status::Fail ? "the GPU check failed" : "no GPU measurement"};
  } else {
    double limit = *e.baseline_us * (1 + opt.time_tolerance);
    bool ok = *e.measured_us <= limit;
    c[kTime] = {ok ? Status::Pass : Status::Fail,
                fmt::format("{:.2f} us {} {:.2f} us (baseline {:.2f} us + {:g}%)", *e.measured_us,
                            ok ? "<=" : ">", limit, *e.baseline_us, opt.time_tolerance * 100)};
  }
}

// An entry fails when a check failed. It is skipped when nothing failed but neither the float
// check nor the GPU check ran, so nothing looked at its numbers (the verifier works in a finite
// field: it cannot see an f16 overflow).
Status entry_verdict(const Entry& e) {
  for (const Check& c : e.checks)
    if (c.status == Status::Fail) return Status::Fail;
  if (e.checks[kFloat].status == Status::Skip && e.checks[kGpu].status == Status::Skip)
    return Status::Skip;
  return Status::Pass;
}

// ---- outputs -------------------------------------------------------------------------------

struct Totals {
  int passed = 0, failed = 0, skipped = 0;
};

Totals count(const std::vector<Entry>& entries) {
  Totals t;
  for (const Entry& e : entries)
    (e.verdict == Status::Pass ? t.passed : e.verdict == Status::Fail ? t.failed : t.skipped)++;
  return t;
}

std::string summary_line(const Totals& t) {
  std::string s = fmt::format("{} passed, {} failed", t.passed, t.failed);
  if (t.skipped) s += fmt::format(", {} skipped", t.skipped);
  return s;
}

void print_table(const std::vector<Entry>& entries) {
  size_t w = 4;
  for (const Entry& e : entries) w = std::max(w, e.name.size());
  std::string out = fmt::format("{:<{}}  {:<6}  {:<6}  {:<6}  {:<6}  {:<14}  {}\n", "name", w,
                                "schema", "verify", "float", "gpu", "time", "verdict");
  auto cell = [](const Check& c) {
    return c.status == Status::Fail ? std::string("FAIL") : std::string(status_name(c.status));
  };
  for (const Entry& e : entries) {
    std::string time = e.measured_us ? fmt::format("{:.2f} us", *e.measured_us) : "-";
    if (e.checks[kTime].status == Status::Fail) time += " FAIL";
    out += fmt::format("{:<{}}  {:<6}  {:<6}  {:<6}  {:<6}  {:<14}  {}\n", e.name, w,
                       cell(e.checks[kSchema]), cell(e.checks[kVerify]), cell(e.checks[kFloat]),
                       cell(e.checks[kGpu]), time,
                       e.verdict == Status::Fail ? "FAIL" : status_name(e.verdict));
  }
  // Why each failure failed, one line each; skip reasons once per check and reason.
  std::string failures, skips;
  for (const Entry& e : entries)
    for (int k = 0; k < kNumChecks; ++k)
      if (e.checks[k].status == Status::Fail)
        failures += fmt::format("{}: {} FAILED: {}\n", e.name, kCheckTitles[k], e.checks[k].detail);
  for (int k = 0; k < kNumChecks; ++k) {
    std::vector<std::pair<std::string, int>> reasons;  // in order of first appearance
    for (const Entry& e : entries) {
      const Check& c = e.checks[k];
      if (c.status != Status::Skip || c.detail == "the schema check failed") continue;
      auto it = std::find_if(reasons.begin(), reasons.end(),
                             [&](const auto& r) { return r.first == c.detail; });
      if (it == reasons.end())
        reasons.push_back({c.detail, 1});
      else
        it->second++;
    }
    for (const auto& [why, n] : reasons)
      skips += fmt::format("{} skipped ({} of {}): {}\n", kCheckTitles[k], n, entries.size(), why);
  }
  if (!failures.empty() || !skips.empty()) out += "\n" + failures + skips;
  std::fputs(out.c_str(), stdout);
}

json entry_json(const Entry& e) {
  json checks = json::object();
  for (int k = 0; k < kNumChecks; ++k)
    checks[kCheckNames[k]] = {{"status", status_name(e.checks[k].status)},
                              {"detail", e.checks[k].detail}};
  if (e.measured_us) {
    checks["gpu"]["us"] = *e.measured_us;
    checks["time"]["measured_us"] = *e.measured_us;
  }
  return {{"name", e.name},
          {"spec", e.spec},
          {"mugraph", e.mugraph},
          {"baseline_us", e.baseline_us ? json(*e.baseline_us) : json(nullptr)},
          {"verdict", status_name(e.verdict)},
          {"seconds", e.seconds},
          {"checks", checks}};
}

// Text for XML attributes and character data: markup escaped, and the characters XML 1.0
// forbids (controls other than tab, newline, carriage return) replaced.
std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      case '\n':
        out += "&#10;";
        break;
      case '\t':
        out += "&#9;";
        break;
      case '\r':
        out += "&#13;";
        break;
      default:
        if (c < 0x20 || c == 0x7f)
          out += '?';
        else
          out += ch;
    }
  }
  return out;
}

std::string junit_xml(const std::string& input, const std::vector<Entry>& entries, double seconds) {
  Totals t = count(entries);
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += fmt::format(
      "<testsuites name=\"kiln check\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" "
      "time=\"{:.3f}\">\n",
      entries.size(), t.failed, t.skipped, seconds);
  x += fmt::format(
      "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" "
      "time=\"{:.3f}\">\n",
      xml_escape("kiln check " + input), entries.size(), t.failed, t.skipped, seconds);
  for (const Entry& e : entries) {
    x += fmt::format(
        "    <testcase classname=\"kiln.check\" name=\"{}\" file=\"{}\" time=\"{:.3f}\">\n",
        xml_escape(e.name), xml_escape(e.mugraph), e.seconds);
    std::string failed, report;
    for (int k = 0; k < kNumChecks; ++k) {
      const Check& c = e.checks[k];
      if (c.status == Status::Fail)
        failed +=
            fmt::format("{}{} FAILED: {}", failed.empty() ? "" : "; ", kCheckTitles[k], c.detail);
      report += fmt::format("{}: {}{}{}\n", kCheckNames[k], status_name(c.status),
                            c.detail.empty() ? "" : ": ", c.detail);
    }
    if (e.verdict == Status::Fail)
      x += fmt::format("      <failure message=\"{}\" type=\"kiln-check\">{}</failure>\n",
                       xml_escape(failed), xml_escape(report));
    else if (e.verdict == Status::Skip)
      x += fmt::format("      <skipped message=\"{}\"/>\n",
                       xml_escape("no float or GPU check ran: " + e.checks[kFloat].detail + "; " +
                                  e.checks[kGpu].detail));
    x += fmt::format("      <system-out>{}</system-out>\n", xml_escape(report));
    x += "    </testcase>\n";
  }
  x += "  </testsuite>\n</testsuites>\n";
  return x;
}

}  // namespace

void add_check(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "check", "Regression-test stored μGraphs against their specs (verifier, float check, GPU)");
  static std::string input, junit, nvcc;
  static bool gpu_required = false, as_json = false;
  static double tolerance = 0.10;
  static int threads = 0;
  static uint64_t seed = 1;
  cmd->add_option("INPUT", input,
                  "a directory (each X.mugraph.json with the spec X.json beside it) or a "
                  "manifest JSON file (format kiln-check/1)")
      ->required();
  cmd->add_flag("--gpu", gpu_required,
                "require the GPU check: no nvcc or no CUDA GPU here is an error (exit 2) instead "
                "of a skipped check");
  cmd->add_flag("--json", as_json, "print a JSON document instead of the table");
  cmd->add_option("--junit", junit, "also write JUnit XML to FILE (its directory is created)")
      ->type_name("FILE");
  cmd->add_option("--time-tolerance", tolerance,
                  "an entry with baseline_us fails when the GPU measures more than baseline * "
                  "(1 + F)")
      ->check(real_number(0, 100, "fraction"))
      ->capture_default_str();
  cmd->add_option("--threads", threads, "worker threads of the verifier and float check (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--seed", seed, "seed of the verifier's trials, the float check and the harness")
      ->capture_default_str();
  cmd->add_option("--nvcc", nvcc,
                  "nvcc for the GPU check (default: $CUDACXX, else nvcc on PATH, else "
                  "/usr/local/cuda/bin/nvcc)");
  cmd->footer(
      "Inputs: a directory pairs every X.mugraph.json in it (not in subdirectories) with X.json "
      "beside it;\na manifest {\"format\": \"kiln-check/1\", \"entries\": [{\"name\", \"spec\", "
      "\"mugraph\",\n\"baseline_us\" (optional)}]} names the pairs, paths relative to the "
      "manifest.\n"
      "Checks, per entry, each pass, fail or skip with a reason:\n"
      "  schema  both files load (a malformed file fails its entry), same inputs and outputs\n"
      "  verify  the verifier: equivalent with a bound; an unbounded verdict (selections matter)\n"
      "          passes only if the float check on inputs of both signs ran and passed\n"
      "  float   the float check as kiln optimize runs it: F32 with 16-bit storage as the GPU\n"
      "          keeps it, uniform and std-1 normal inputs, rows from every block\n"
      "  gpu     with nvcc and a GPU: build and run the GPU harness (kiln bench's check);\n"
      "          skipped without them unless --gpu\n"
      "  time    with baseline_us and a GPU time: fails above baseline * (1 + tolerance)\n"
      "An entry fails if a check failed; it is skipped if nothing failed but neither the float\n"
      "nor the GPU check ran. The last line is `N passed, M failed[, K skipped]`.\n"
      "Exit status: 0 every entry passed (or was skipped); 1 an entry failed; 2 invalid input\n"
      "(missing file, malformed manifest, a μGraph without its spec, --gpu without a GPU).");
  cmd->callback([] {
    std::error_code ec;
    if (!fs::exists(input, ec))
      throw UserError(ErrorCode::Io, "no such file or directory").with_file(input);
    std::vector<Entry> entries =
        fs::is_directory(input, ec) ? collect_directory(input) : collect_manifest(input);

    Options opt;
    opt.time_tolerance = tolerance;
    opt.threads = threads;
    opt.seed = seed;
    GpuSetup gpu;
    std::optional<std::string> found = search::find_nvcc(nvcc);
    if (!found) {
      gpu.reason = "no nvcc found (--nvcc, $CUDACXX, PATH, /usr/local/cuda/bin/nvcc)";
    } else {
      gpu.nvcc = *found;
      search::GpuProbe probe = search::detect_gpu();
      if (!probe.found) gpu.reason = "no CUDA GPU visible (" + probe.detail + ")";
    }
    if (gpu_required && !gpu.reason.empty())
      throw UserError(ErrorCode::Unsupported, "--gpu: " + gpu.reason,
                      "run on a machine with nvcc and a CUDA GPU, or leave out --gpu to skip "
                      "the GPU check");

    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < entries.size(); ++i) {
      Entry& e = entries[i];
      auto t = std::chrono::steady_clock::now();
      run_entry(e, i, opt, gpu);
      e.verdict = entry_verdict(e);
      e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
      std::string failed;
      for (int k = 0; k < kNumChecks; ++k)
        if (e.checks[k].status == Status::Fail)
          failed += fmt::format("{}{}", failed.empty() ? " (" : ", ", kCheckTitles[k]);
      if (notes_shown())
        std::fprintf(stderr, "kiln check: [%zu/%zu] %s: %s%s (%.2f s)\n", i + 1, entries.size(),
                     e.name.c_str(), e.verdict == Status::Fail ? "FAIL" : status_name(e.verdict),
                     failed.empty() ? "" : (failed + ")").c_str(), e.seconds);
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!gpu.work_dir.empty()) {
      if (gpu.keep_work_dir) {
        if (notes_shown())
          std::fprintf(stderr, "kiln check: harnesses and logs kept in %s\n", gpu.work_dir.c_str());
      } else {
        fs::remove_all(gpu.work_dir, ec);
      }
    }

    Totals t = count(entries);
    if (as_json) {
      json j = {{"format", "kiln-check-result/1"},
                {"input", input},
                {"seed", seed},
                {"time_tolerance", tolerance},
                {"gpu", gpu.reason.empty() ? json({{"available", true}, {"nvcc", gpu.nvcc}})
                                           : json({{"available", false}, {"reason", gpu.reason}})},
                {"seconds", seconds},
                {"entries", json::array()},
                {"summary", summary_line(t)},
                {"totals",
                 {{"entries", entries.size()},
                  {"passed", t.passed},
                  {"failed", t.failed},
                  {"skipped", t.skipped}}}};
      for (const Entry& e : entries) j["entries"].push_back(entry_json(e));
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      print_table(entries);
      std::printf("%s\n", summary_line(t).c_str());
    }
    if (!junit.empty()) {
      fs::path parent = fs::path(junit).parent_path();
      if (!parent.empty()) {
        fs::create_directories(parent, ec);
        if (ec)
          throw UserError(ErrorCode::Io, "cannot create the directory: " + ec.message())
              .with_file(parent.string());
      }
      write_file_text(junit, junit_xml(input, entries, seconds));
    }
    if (t.failed) exit_status() = 1;
  });
}

}  // namespace kiln::cli
