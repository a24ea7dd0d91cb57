// `kiln optimize SPEC -o DIR`: the superoptimizer end to end. Parses the spec, runs the search
// (or takes its result from the cache), and writes DIR/<name>.mugraph.json (the winner),
// DIR/candidates/ (the top K), DIR/report.json (stop reason, statistics, every ranked candidate's
// cost and verdict), DIR/<name>.cu (the emitted CUDA of the winner) and DIR/<name>.h (its C
// header). DIR and the --trace file's directory are created when missing, before the search.
// The files of a run are one set, replaced as a whole and under a lock on DIR (OutputSet,
// lock_output_dir in commands.h): report.json, written last, lists them; a run killed anywhere,
// or a second run on DIR, never leaves a mix of two runs' files or stale candidates.
//
// Profiling (search/profile.h): with nvcc and a GPU here, the model's top K candidates and the
// spec's own kernel graph are measured on the GPU and the measured winner is written instead of
// the model's. `--profile [K]` requires it, `--no-profile` skips it, and by default (auto) it runs
// when both nvcc and a GPU are found. Measurements belong to this machine: they are never cached,
// so a cached search result is profiled again on every run.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "commands.h"
#include "kiln/codegen/emit.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/search/cache.h"
#include "kiln/search/generator.h"
#include "kiln/search/profile.h"
#include "kiln/search/search.h"
#include "kiln/search/trace.h"
#include "log.h"

namespace kiln::cli {

namespace {

std::string pruned_str(const std::map<std::string, int64_t>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", k, v);
  return s.empty() ? "none" : s;
}

constexpr int kDefaultProfileK = 8;

// -o must name a directory Kiln can write: created here if missing, and probed with a file, so
// that a bad path fails in a second with a hint instead of after the search (and "" never means
// the filesystem root).
void check_output_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.empty())
    throw UserError(ErrorCode::Io, "-o is empty", "name the output directory, e.g. -o out/NAME");
  std::error_code ec;
  fs::file_status st = fs::symlink_status(dir, ec);
  if (fs::is_symlink(st) && !fs::exists(dir, ec))
    throw UserError(ErrorCode::Io, fmt::format("-o {}: a dangling symbolic link", dir),
                    "remove the link or point it at a directory");
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw UserError(ErrorCode::Io, fmt::format("-o {}: exists and is not a directory", dir),
                    "kiln optimize writes several files there: give a directory");
  make_dirs(dir);  // names the file in the way, if one is
  const std::string probe =
      fmt::format("{}/.kiln-write-test-{}", dir, static_cast<long>(::getpid()));
  FILE* f = std::fopen(probe.c_str(), "w");
  if (!f)
    throw UserError(ErrorCode::Io,
                    fmt::format("-o {}: cannot write there: {}", dir, std::strerror(errno)),
                    "choose a directory you can write");
  std::fclose(f);
  fs::remove(probe, ec);
}

// What the profiling decision found, made before the search (it may raise top_k).
struct ProfilePlan {
  bool on = false;
  int k = 0;
  std::string nvcc, nvcc_version, gpu, reason;  // reason: why profiling is off
};

ProfilePlan plan_profile(const std::string& mode, int k, const std::string& nvcc_opt) {
  ProfilePlan p;
  if (mode == "off") {
    p.reason = "--no-profile";
    return p;
  }
  std::optional<std::string> nvcc = search::find_nvcc(nvcc_opt);
  search::GpuProbe gpu;
  if (nvcc) gpu = search::detect_gpu();
  if (!nvcc || !gpu.found) {
    p.reason = !nvcc ? "no nvcc found ($CUDACXX, PATH, /usr/local/cuda/bin; or --nvcc)"
                     : "no CUDA GPU visible: " + gpu.detail;
    if (mode == "on")
      throw UserError(ErrorCode::Unsupported, "--profile needs nvcc and a GPU: " + p.reason,
                      "run without --profile for the model's ranking only");
    return p;
  }
  p.on = true;
  p.k = k;
  p.nvcc = *nvcc;
  p.nvcc_version = search::nvcc_version(p.nvcc);
  p.gpu = gpu.detail;
  return p;
}

}  // namespace

void add_optimize(CLI::App& app) {
  auto* cmd = app.add_subcommand("optimize", "Search for the fastest verified μGraph of a spec");
  static std::string file, out_dir, target = "sm_90a", trace_file, cache_dir;
  // The default keeps a whole run within about a minute on a 2-core machine (the suite's
  // budget): generation stops at the limit, then the candidates are merged, ranked and the
  // first is verified (a few seconds; all of the suite's cases exhaust in under 20 s).
  static double time_limit = 45, progress_every = 5;
  static int threads = 0, top = 5;
  static uint64_t seed = 1;
  static bool no_cache = false, no_profile = false;
  static std::string profile_arg, nvcc;
  static int profile_repeats = 20;
  cmd->add_option("SPEC", file, "spec JSON file")->required();
  cmd->add_option("-o,--out", out_dir, "output directory (created when missing)")->required();
  // NaN passes CLI11's range checks (every comparison is false), so the bound is spelled out.
  const CLI::Validator seconds(
      [](std::string& v) -> std::string {
        char* end = nullptr;
        double d = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != 0 || !(d > 0 && d <= 86400))
          return "must be a number of seconds in (0, 86400], got " + v;
        return {};
      },
      "SECONDS");
  cmd->add_option("--time-limit", time_limit,
                  "search time limit in seconds (ranking and verifying the first candidate "
                  "follow it)")
      ->check(seconds)
      ->capture_default_str();
  cmd->add_option("--progress-every", progress_every,
                  "seconds between progress lines when stderr is not a terminal (-q: none)")
      ->check(real_number(0.1, 3600, "seconds"))
      ->capture_default_str();
  cmd->add_option("--threads", threads, "worker threads (0: all cores)")
      ->check(thread_count())
      ->capture_default_str();
  cmd->add_option("--target", target, "GPU target")
      ->check(CLI::IsMember({"sm_90a", "sm_80"}))
      ->capture_default_str();
  cmd->add_option("--trace", trace_file,
                  "write the search tree here (a SQLite database; explore it with kiln trace)");
  cmd->add_option("--top", top, "verified candidates to keep")
      ->check(whole_number(1, 1000, "candidates"))
      ->capture_default_str();
  cmd->add_option("--seed", seed, "verifier seed")->capture_default_str();
  static int algebra_graphs = search::VariantOptions{}.algebra_graphs;
  static bool no_algebra = false;
  cmd->add_option("--algebra-graphs", algebra_graphs,
                  "kernel graphs the algebra pass hands the search, the spec as written "
                  "included (docs/algebra.md)")
      ->check(whole_number(1, 64, "graphs"))
      ->capture_default_str();
  cmd->add_flag("--no-algebra", no_algebra,
                "search the spec as written only (no e-graph rewrites: reassociation, sums "
                "through matmuls, cancelled softmax shifts, ...)");
  auto* c = cmd->add_option("--cache", cache_dir, "cache directory (default: ~/.cache/kiln)");
  cmd->add_flag("--no-cache", no_cache, "neither read nor write the cache")->excludes(c);
  static CLI::Option* prof = nullptr;
  prof = cmd->add_option("--profile", profile_arg,
                         fmt::format("measure the top K candidates (and the best one's generic "
                                     "block kernels at 64 and 256 threads) and the spec on the "
                                     "GPU and write the measured winner (K default {}; raises "
                                     "--top to K); default: when nvcc and a GPU are found",
                                     kDefaultProfileK))
             ->expected(0, 1)
             ->type_name("[K]");
  cmd->add_flag("--no-profile", no_profile, "rank by the cost model only")->excludes(prof);
  cmd->add_option("--nvcc", nvcc, "nvcc for profiling (default: $CUDACXX, PATH, /usr/local/cuda)");
  cmd->add_option("--profile-repeats", profile_repeats, "timed replays per profiled candidate")
      ->check(whole_number(1, 100000, "replays"))
      ->capture_default_str();
  static int64_t memory_limit_mb = 0;
  add_memory_limit(cmd, memory_limit_mb);
  cmd->callback([] {
    const auto t_start = std::chrono::steady_clock::now();
    KernelGraph spec = parse_spec_file(file);
    check_output_dir(out_dir);  // before minutes of search, not after
    int profile_k = kDefaultProfileK;
    if (!profile_arg.empty()) {
      char* end = nullptr;
      long v = std::strtol(profile_arg.c_str(), &end, 10);
      if (*end != 0 || v < 1 || v > 1000)
        throw UserError(ErrorCode::Schema,
                        "--profile takes a count of candidates, got " + profile_arg);
      profile_k = int(v);
    }
    const std::string mode = no_profile ? "off" : prof->count() > 0 ? "on" : "auto";
    ProfilePlan plan = plan_profile(mode, profile_k, nvcc);
    // Output directories before the search: a path that cannot be written fails now, not after.
    if (!trace_file.empty()) make_parent_dirs(trace_file);
    // DIR is ours from here until the set is committed (the end of this callback): a second run
    // writing DIR waits for it. Then the stage, which clears what killed runs left.
    FileLock dir_lock = lock_output_dir(out_dir);
    OutputSet outputs(out_dir, {spec.name + ".mugraph.json", spec.name + ".cu", spec.name + ".h"});
    if (plan.on)
      note("profiling the top {} candidates and the spec on {} ({})", plan.k, plan.gpu,
           plan.nvcc_version);
    else
      note("ranking by the cost model only ({})", plan.reason);
    search::SearchConfig cfg;
    cfg.arch = *arch_from_name(target);
    cfg.time_limit_s = time_limit;
    cfg.max_memory_mb = memory_limit_mb;
    // What the limit must also cover: the time spent so far (parsing, probing the GPU) and the
    // writing after the search, which grows with the spec (~20 us per op: the report, the μGraphs,
    // the .cu; measured on a 100,000-node chain).
    cfg.reserve_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count() +
        20e-6 * static_cast<double>(spec.ops.size());
    cfg.threads = threads;
    cfg.top_k = std::max({1, top, plan.on ? plan.k : 0});
    cfg.variants.algebra = !no_algebra;
    cfg.variants.algebra_graphs = algebra_graphs;
    cfg.seed = seed;
    std::string dir = cache_dir.empty() ? search::default_cache_dir() : cache_dir;
    std::string key = search::cache_key(spec, cfg);
    // The live progress line is for a terminal (and not under -q); elsewhere (a CI log, a file)
    // a plain line every few seconds says the run is alive.
    const bool tty = isatty(fileno(stderr)) && notes_shown();
    std::optional<search::SearchResult> cached;
    // A trace needs a real run: no lock, no load. Its result is stored only when it is what an
    // untraced run gives (below).
    const bool use_cache = !no_cache && trace_file.empty();
    bool may_store = use_cache;
    // The entry's lock, held through load, recheck, search and store: a second run of this spec
    // waits, then takes this run's result from the cache instead of searching again.
    FileLock entry_lock;
    if (use_cache) {
      entry_lock = search::lock_cache_entry(dir, key, [&] {
        note("waiting for another kiln run on cache entry {} in {} ...", key, dir);
      });
      if (!entry_lock.held())
        warn("cannot lock cache entry {}/{}.lock ({}); going on unlocked", dir, key,
             entry_lock.error());
      search::CacheLookup found = search::cache_load(dir, key);
      switch (found.status) {
        case search::CacheStatus::Hit:
          cached = std::move(found.result);
          break;
        case search::CacheStatus::Missing:
          break;
        case search::CacheStatus::NotRegular:
          // Someone put it there: neither read nor replaced.
          warn("cache entry {} is not a regular file ({}); not used", found.path, found.why);
          may_store = false;
          break;
        case search::CacheStatus::Damaged:
          warn("cache entry {} is damaged ({}); searching again and replacing it", found.path,
               found.why);
          break;
      }
    }
    if (cached) {
      // Never trust the file: check its candidates again (milliseconds for the verifier, the
      // float check of the winner, the spec and unbounded verdicts).
      int bad = search::recheck_cached(spec, *cached, cfg);
      if (bad > 0 || cached->ranked.empty()) {
        warn(
            "{}: cached result {} in {} failed its checks again ({} candidate(s)): ignoring it "
            "and searching",
            spec.name, key, dir, bad);
        cached.reset();
      }
    }
    search::SearchResult res;
    std::unique_ptr<search::TraceWriter> tw;
    if (cached) {
      res = std::move(*cached);
      note("{}: cached result {} (from {})", spec.name, key, dir);
    } else {
      if (!trace_file.empty()) tw = std::make_unique<search::TraceWriter>(trace_file);
      search::ProgressFn progress;
      if (!tty && notes_shown())
        progress = [every = std::make_shared<double>(progress_every)](const search::Progress& p) {
          if (p.elapsed_s < *every && std::string_view(p.phase) != "done") return;
          *every = p.elapsed_s + progress_every;
          if (std::string_view(p.phase) == "done") return;
          note("[{}] {:.1f}/{:.0f} s, {} states, {} lowered, {} verified, best {}", p.phase,
               p.elapsed_s, p.limit_s, p.states, p.lowered, p.verified,
               p.best_us > 0 ? fmt::format("{:.2f} us modeled", p.best_us) : std::string("-"));
        };
      if (tty)
        progress = [](const search::Progress& p) {
          double rate = p.elapsed_s > 0 ? double(p.states) / p.elapsed_s : 0;
          std::fprintf(stderr,
                       "\r\033[K[%s] %.1f/%.0f s  %lld states (%.0f/s)  lowered %lld  pruned: %s  "
                       "verified %lld  best %.2f us",
                       p.phase, p.elapsed_s, p.limit_s, (long long)p.states, rate,
                       (long long)p.lowered, pruned_str(p.pruned).c_str(), (long long)p.verified,
                       p.best_us);
          std::fflush(stderr);
        };
      res = search::run_search(spec, cfg, tw.get(), progress);
      if (tty) std::fprintf(stderr, "\n");
      // A result with nothing to ship is not worth keeping: the next run searches again. A traced
      // run is a little slower, so under a limit it may explore less than an untraced one; its
      // result is stored only when no limit cut it (exhausted, every check run), where the search
      // is deterministic and an untraced run finds the same.
      if (may_store && !res.ranked.empty()) search::cache_store(dir, key, res);
      if (tw && !no_cache && !res.ranked.empty() && res.stop == search::StopReason::Exhausted &&
          res.cut.empty()) {
        FileLock l = search::lock_cache_entry(dir, key);
        if (search::cache_load(dir, key).status != search::CacheStatus::NotRegular)
          search::cache_store(dir, key, res);
      }
    }
    entry_lock.release();
    for (const std::string& cut : res.cut) note("cut: {}", cut);
    // What every report.json holds, whatever happens next.
    auto base_report = [&] {
      nlohmann::json r = search::result_to_json(res, false);
      r["spec"] = file;
      r["target"] = target;
      r["cache_key"] = key;
      r["from_cache"] = res.from_cache;
      r["config"] = cfg.to_json();
      return r;
    };
    // Never ship what failed a check: with nothing ranked, keep the rejected μGraphs for
    // inspection, write the report, and exit 1 without a winner or a .cu. The set is the report
    // and candidates/failed_*; its commit removes an earlier run's winner files (the OutputSet
    // owns them).
    auto ship_nothing = [&](const std::string& why, nlohmann::json report) {
      for (size_t i = 0; i < res.rejected.size(); ++i)
        outputs.add(fmt::format("candidates/failed_{}_{}.mugraph.json", i + 1, spec.name),
                    write_mugraph(res.rejected[i].graph));
      report["winner"] = nullptr;
      report["shipped"] = false;
      report["why_nothing_shipped"] = why;
      outputs.commit(std::move(report));
      warn("{}: NOTHING SHIPPED: {}", spec.name, why);
      for (const search::Candidate& c : res.rejected)
        warn("  {}{}: {}", c.is_spec ? "spec " : "", c.fingerprint, c.verdict);
      warn("the failing μGraphs are in {}/candidates/ (failed_*)", out_dir);
      exit_status() = 1;
    };
    if (res.ranked.empty()) {
      nlohmann::json report = base_report();
      std::string why =
          res.out_of_time
              ? fmt::format(
                    "the {:g} s time limit passed before a float check could run on any "
                    "candidate or the spec (nothing unchecked ships); raise --time-limit",
                    time_limit)
              : "every candidate, the spec's own kernel graph included, failed the verifier or the "
                "float check (uniform and std-1 normal inputs, f16/bf16 storage as the GPU keeps "
                "it)";
      // A likely cause the user can act on: the spec's own values leave their dtype's range.
      if (!res.out_of_time) try {
          for (const std::string& h : search::range_hints(spec)) why += "; likely cause: " + h;
        } catch (const std::exception&) {
          // A hint is a courtesy: the report stands without it.
        }
      ship_nothing(why, report);
      return;
    }
    // Profile after the cache: measurements are this machine's and are never stored.
    std::optional<search::ProfileResult> prof_res;
    if (plan.on) {
      search::ProfileOptions po;
      po.run.nvcc = plan.nvcc;
      po.run.arch = cfg.arch;
      po.run.seed = seed;
      po.run.repeats = profile_repeats;
      po.work_dir = out_dir + "/profile";
      po.threads = threads;
      if (tty)
        po.progress = [](const char* phase, int done, int total) {
          std::fprintf(stderr, "\r\033[K%s %d/%d ...", phase, done, total);
          std::fflush(stderr);
        };
      std::vector<search::Candidate> top(
          res.ranked.begin(), res.ranked.begin() + std::min<size_t>(plan.k, res.ranked.size()));
      std::filesystem::remove_all(po.work_dir);
      // The spec is measured as a fallback only when it passed the same checks.
      for (const search::Candidate& r : res.rejected) po.spec_fallback &= !r.is_spec;
      prof_res = search::profile_candidates(spec, top, po);
      if (tty) std::fprintf(stderr, "\r\033[K");
      if (tw)
        for (const search::ProfiledCandidate& p : prof_res->ranked)
          tw->measured(p.candidate.state, p.m.ok() ? p.m.us : -1,
                       search::profile_status_name(p.m.status));
    }
    const search::Candidate& model_best = res.best();
    const search::ProfiledCandidate* measured = prof_res ? prof_res->winner() : nullptr;
    if (prof_res && !measured) {
      // Profiling ran and no candidate passed the GPU check: nothing checked to ship.
      std::string fails;
      for (const search::ProfiledCandidate& p : prof_res->ranked)
        fails += fmt::format("\n  model #{} {}{}: {}: {}", p.model_rank,
                             p.candidate.is_spec ? "(spec) " : "", p.candidate.fingerprint,
                             search::profile_status_name(p.m.status), p.m.error);
      nlohmann::json report = base_report();
      report["profile"] = search::profile_to_json(*prof_res);
      ship_nothing("no candidate passed the GPU check (uniform and std-1 normal inputs):" + fails,
                   report);
      return;
    }
    const search::Candidate& best = measured ? measured->candidate : model_best;
    outputs.add(spec.name + ".mugraph.json", write_mugraph(best.graph));
    for (size_t i = 0; i < res.ranked.size(); ++i)
      outputs.add(fmt::format("candidates/{}_{}.mugraph.json", i + 1, spec.name),
                  write_mugraph(res.ranked[i].graph));
    nlohmann::json report = base_report();
    nlohmann::json pj = {{"mode", mode}, {"profiled", plan.on}};
    if (!plan.on) {
      pj["reason"] = plan.reason;
    } else {
      pj["device"] = prof_res->device.empty() ? plan.gpu : prof_res->device;
      pj["nvcc"] = plan.nvcc;
      pj["nvcc_version"] = plan.nvcc_version;
      pj["k"] = plan.k;
      pj["repeats"] = profile_repeats;
      pj["winner_by_model"] = model_best.fingerprint;
      pj["winner_by_measurement"] =
          measured ? nlohmann::json(measured->candidate.fingerprint) : nlohmann::json();
      nlohmann::json bugs = nlohmann::json::array();
      for (const search::ProfiledCandidate* p : prof_res->mismatches())
        bugs.push_back(p->candidate.fingerprint);
      pj["gpu_check_failures"] = bugs;
      pj["candidates"] = search::profile_to_json(*prof_res);
    }
    report["profile"] = pj;
    // Per ranked candidate: its measurement, or nulls where it was not profiled.
    for (nlohmann::json& c : report["ranked"]) {
      c["measured_us"] = nullptr;
      c["gpu_ok"] = nullptr;
      c["profile_error"] = nullptr;
      if (!prof_res) continue;
      for (const search::ProfiledCandidate& p : prof_res->ranked)
        if (p.candidate.fingerprint == c["fingerprint"]) {
          c["measured_us"] = p.m.ok() ? nlohmann::json(p.m.us) : nlohmann::json();
          c["gpu_ok"] = p.m.ok();
          c["profile_error"] = p.m.ok() ? nlohmann::json() : nlohmann::json(p.m.error);
        }
    }
    report["winner"] = best.fingerprint;
    EmitOptions eo;
    eo.arch = cfg.arch;
    eo.verdict = best.verdict;
    eo.source = file;
    eo.cu_file = spec.name + ".cu";
    eo.header_file = spec.name + ".h";
    const Schedule sched =
        plan_schedule(best.graph, target_for(eo.arch), PlanOptions{eo.lowerings});
    outputs.add(eo.cu_file, emit_cuda(best.graph, sched, eo));
    outputs.add(eo.header_file, emit_header(best.graph, sched, eo));
    outputs.commit(std::move(report));  // report.json last: the set is complete
    const search::SearchStats& st = res.stats;
    note("{}: {} after {:.2f} s; {} states, {} lowered, pruned: {}; {} verified", spec.name,
         search::stop_reason_name(res.stop), st.elapsed_s, st.states, st.lowered,
         pruned_str(st.pruned), st.verified);
    if (!st.algebra.empty()) {
      note("{}: algebra {}", spec.name, st.algebra);
      for (const std::string& l : st.algebra_graphs) detail("  {}", l);
    }
    detail(
        "{}: algebra {:.2f} s, generation {:.2f} s, checks {:.2f} s, first valid at {:.2f} s, "
        "cache key {} in {}",
        spec.name, st.algebra_s, st.generate_s - st.algebra_s, st.verify_s, st.time_first_valid_s,
        key, dir);
    if (prof_res) {
      note("measured on {}:", pj["device"].get<std::string>());
      for (const search::ProfiledCandidate& p : prof_res->ranked)
        note("  model #{:<2} {}{:<9} {:8.2f} us modeled  {}", p.model_rank,
             p.candidate.is_spec ? "spec " : "     ",
             p.m.ok() ? fmt::format("{:.2f} us", p.m.us) : std::string("-"),
             p.candidate.cost.time * 1e6,
             p.m.ok() ? std::string("ok")
                      : std::string(search::profile_status_name(p.m.status)) + ": " + p.m.error);
      for (const search::ProfiledCandidate* p : prof_res->mismatches())
        if (p->candidate.float_checked)
          warn(
              "BUG: model #{} ({}) passed the verifier and the float check but FAILED the GPU "
              "check: {}",
              p->model_rank, p->candidate.fingerprint, p->m.error);
        else
          warn(
              "model #{} ({}), not float-checked on the CPU, FAILED the GPU check and is not "
              "shipped: {}",
              p->model_rank, p->candidate.fingerprint, p->m.error);
    }
    note("best: {} kernel(s), {:.2f} us modeled{} (spec {}); {}", best.graph.num_kernels(),
         best.cost.time * 1e6,
         measured ? fmt::format(", {:.2f} us measured", measured->m.us) : std::string(),
         best.is_spec ? "itself" : "beaten", best.verdict);
    if (tw) {
      tw->close();  // waits for the writer: the last rows, the indexes
      std::error_code ec;
      auto bytes = std::filesystem::file_size(trace_file, ec);
      note("trace: {} ({:.1f} MB; kiln trace {} summary)", trace_file,
           ec ? 0.0 : double(bytes) / 1e6, trace_file);
    }
    std::printf("%s/%s.mugraph.json\n", out_dir.c_str(), spec.name.c_str());
  });
}

}  // namespace kiln::cli
