// `kiln optimize SPEC -o DIR`: the superoptimizer end to end. Parses the spec, runs the search
// (or takes its result from the cache), and writes DIR/<name>.mugraph.json (the winner),
// DIR/candidates/ (the top K), DIR/report.json (stop reason, statistics, every ranked candidate's
// cost and verdict) and DIR/<name>.cu (the emitted CUDA of the winner).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "commands.h"
#include "kiln/codegen/emit.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/search/cache.h"
#include "kiln/search/search.h"
#include "kiln/search/trace.h"

namespace kiln::cli {

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) user_error(ErrorCode::Io, "cannot write {}", path);
}

std::string pruned_str(const std::map<std::string, int64_t>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", k, v);
  return s.empty() ? "none" : s;
}

}  // namespace

void add_optimize(CLI::App& app) {
  auto* cmd = app.add_subcommand("optimize", "Search for the fastest verified μGraph of a spec");
  static std::string file, out_dir, target = "sm_90a", trace_file, cache_dir;
  static double time_limit = 120;
  static int threads = 0, top = 5;
  static uint64_t seed = 1;
  static bool no_cache = false;
  cmd->add_option("SPEC", file, "spec JSON file")->required();
  cmd->add_option("-o,--out", out_dir, "output directory")->required();
  cmd->add_option("--time-limit", time_limit, "search time limit in seconds")
      ->capture_default_str();
  cmd->add_option("--threads", threads, "worker threads (0: all cores)")->capture_default_str();
  cmd->add_option("--target", target, "GPU target")
      ->check(CLI::IsMember({"sm_90a", "sm_80"}))
      ->capture_default_str();
  cmd->add_option("--trace", trace_file, "write a JSON Lines trace of the search here");
  cmd->add_option("--top", top, "verified candidates to keep")->capture_default_str();
  cmd->add_option("--seed", seed, "verifier seed")->capture_default_str();
  auto* c = cmd->add_option("--cache", cache_dir, "cache directory (default: ~/.cache/kiln)");
  cmd->add_flag("--no-cache", no_cache, "neither read nor write the cache")->excludes(c);
  cmd->callback([] {
    KernelGraph spec = parse_spec_file(file);
    search::SearchConfig cfg;
    cfg.arch = *arch_from_name(target);
    cfg.time_limit_s = time_limit;
    cfg.threads = threads;
    cfg.top_k = std::max(1, top);
    cfg.seed = seed;
    std::string dir = cache_dir.empty() ? search::default_cache_dir() : cache_dir;
    std::string key = search::cache_key(spec, cfg);
    bool tty = isatty(fileno(stderr));
    std::optional<search::SearchResult> cached;
    // A trace needs a real run.
    if (!no_cache && trace_file.empty()) cached = search::cache_load(dir, key);
    search::SearchResult res;
    if (cached) {
      res = std::move(*cached);
      std::fprintf(stderr, "kiln: %s: cached result %s (from %s)\n", spec.name.c_str(), key.c_str(),
                   dir.c_str());
    } else {
      std::unique_ptr<search::TraceWriter> tw;
      if (!trace_file.empty()) tw = std::make_unique<search::TraceWriter>(trace_file);
      search::ProgressFn progress;
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
      if (!no_cache) search::cache_store(dir, key, res);
    }
    std::filesystem::create_directories(out_dir + "/candidates");
    const search::Candidate& best = res.best();
    write_text(out_dir + "/" + spec.name + ".mugraph.json", write_mugraph(best.graph));
    for (size_t i = 0; i < res.ranked.size(); ++i)
      write_text(fmt::format("{}/candidates/{}_{}.mugraph.json", out_dir, i + 1, spec.name),
                 write_mugraph(res.ranked[i].graph));
    nlohmann::json report = search::result_to_json(res, false);
    report["spec"] = file;
    report["target"] = target;
    report["cache_key"] = key;
    report["from_cache"] = res.from_cache;
    report["config"] = cfg.to_json();
    write_text(out_dir + "/report.json", report.dump(2) + "\n");
    EmitOptions eo;
    eo.arch = cfg.arch;
    eo.verdict = best.verdict;
    eo.source = file;
    write_text(out_dir + "/" + spec.name + ".cu", emit_cuda(best.graph, eo));
    const search::SearchStats& st = res.stats;
    std::fprintf(stderr,
                 "kiln: %s: %s after %.2f s; %lld states, %lld lowered, pruned: %s; %lld verified\n"
                 "kiln: best: %d kernel(s), %.2f us modeled (spec %s); %s\n",
                 spec.name.c_str(), search::stop_reason_name(res.stop), st.elapsed_s,
                 (long long)st.states, (long long)st.lowered, pruned_str(st.pruned).c_str(),
                 (long long)st.verified, best.graph.num_kernels(), best.cost.time * 1e6,
                 best.is_spec ? "itself" : "beaten", best.verdict.c_str());
    std::printf("%s/%s.mugraph.json\n", out_dir.c_str(), spec.name.c_str());
  });
}

}  // namespace kiln::cli
