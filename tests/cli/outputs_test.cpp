// Issue 21: the output directory of `kiln optimize -o DIR` holds one run's complete set of files or
// none (killed runs, a smaller --top, concurrent runs), and the cache survives special files and
// damaged entries at its paths. The kiln binary is run as a child process (with a timeout, an
// environment of its own, and several at once).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace {

namespace fs = std::filesystem;

struct Proc {
  pid_t pid = -1;
  std::string errfile;
};

struct Done {
  int exit = -1;   // the exit status, or -1 when killed by a signal
  int signal = 0;  // the signal that ended it
  bool timed_out = false;
  std::string err;  // its stderr
};

// Starts `kiln ARGS...` with `env` (NAME=VALUE) added to this process's environment, stdout to
// /dev/null and stderr to a file.
Proc start(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  static int counter = 0;
  Proc p;
  p.errfile = std::string(KILN_BINARY_DIR) + "/outputs_test_stderr_" + std::to_string(::getpid()) +
              "_" + std::to_string(counter++);
  // Everything the child needs is built before fork: the child only opens, dups and execs.
  const std::string bin = std::string(KILN_BINARY_DIR) + "/kiln";
  std::vector<std::string> argv_s = {bin};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s = env;
  for (char** e = environ; *e; ++e) env_s.push_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  p.pid = ::fork();
  if (p.pid == 0) {
    int err = ::open(p.errfile.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int null = ::open("/dev/null", O_WRONLY);
    if (err < 0 || null < 0) ::_exit(127);
    ::dup2(null, 1);
    ::dup2(err, 2);
    ::execve(bin.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  return p;
}

// Waits for p, killing it after `timeout_s`.
Done finish(const Proc& p, double timeout_s = 120) {
  Done d;
  int st = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    pid_t r = ::waitpid(p.pid, &st, WNOHANG);
    if (r == p.pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      d.timed_out = true;
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, &st, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFEXITED(st)) d.exit = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) d.signal = WTERMSIG(st);
  std::ifstream e(p.errfile);
  d.err.assign(std::istreambuf_iterator<char>(e), {});
  fs::remove(p.errfile);
  return d;
}

Done run(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
         double timeout_s = 120) {
  return finish(start(args, env), timeout_s);
}

// Two tiny specs of other names that give five candidates each in well under a second (the
// examples give one in a short --time-limit: the spec itself).
std::string tiny_spec(const fs::path& dir, const std::string& name) {
  fs::create_directories(dir);
  fs::path p = dir / (name + ".json");
  if (name == "mm")
    std::ofstream(p) << R"({"format": "spec/1", "name": "mm", "inputs": [
      {"name": "X", "shape": [1, 256], "dtype": "f16"},
      {"name": "W", "shape": [256, 32], "dtype": "f16"}],
      "nodes": [{"name": "O", "op": "matmul", "inputs": ["X", "W"]}],
      "outputs": ["O"]})";
  else
    std::ofstream(p) << R"({"format": "spec/1", "name": "gm", "inputs": [
      {"name": "X", "shape": [2, 64], "dtype": "f16"},
      {"name": "W1", "shape": [64, 64], "dtype": "f16"},
      {"name": "W2", "shape": [64, 64], "dtype": "f16"}],
      "nodes": [{"name": "G", "op": "matmul", "inputs": ["X", "W1"]},
                {"name": "S", "op": "silu", "inputs": ["G"]},
                {"name": "U", "op": "matmul", "inputs": ["X", "W2"]},
                {"name": "O", "op": "mul", "inputs": ["S", "U"]}],
      "outputs": ["O"]})";
  return p.string();
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string hex16(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// The message of a run that took its result from the cache.
bool cache_hit(const Done& d) {
  return d.err.find("cached result") != std::string::npos &&
         d.err.find("failed its checks again") == std::string::npos;
}

size_t count_substr(const std::string& s, const std::string& sub) {
  size_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + 1)) ++n;
  return n;
}

// The contract of an output directory: with a report.json, exactly the files it lists, each with
// its listed size and hash, and nothing else of Kiln's (no other candidate, no other μGraph, .cu
// or .h); without one, no set. Never a temporary file outside a stage directory. Returns "" when
// it holds, else what is wrong. `complete`: a run finished, so the report must be there and the
// stages gone.
std::string check_set(const fs::path& dir, bool complete) {
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
       ++it) {
    std::string name = it->path().filename().string();
    if (it->is_directory() && name.rfind(".kiln-stage-", 0) == 0) {
      if (complete) return "a stage directory remains after a complete run: " + name;
      it.disable_recursion_pending();
      continue;
    }
    if (name.find(".kiln-tmp.") != std::string::npos)
      return "a temporary file: " + it->path().string();
  }
  const fs::path report = dir / "report.json";
  if (!fs::exists(report)) return complete ? "no report.json after a complete run" : "";
  nlohmann::json rep;
  try {
    rep = nlohmann::json::parse(slurp(report));
  } catch (const std::exception& e) {
    return std::string("report.json does not parse: ") + e.what();
  }
  if (!rep.contains("files") || !rep["files"].is_array()) return "report.json lists no files";
  std::set<std::string> listed;
  for (const nlohmann::json& f : rep["files"]) {
    std::string rel = f.at("path").get<std::string>();
    listed.insert(rel);
    fs::path p = dir / rel;
    if (!fs::is_regular_file(p)) return "listed but missing: " + rel;
    std::string bytes = slurp(p);
    if (bytes.size() != f.at("bytes").get<size_t>()) return "size differs from the report: " + rel;
    if (hex16(fnv1a64(bytes)) != f.at("fnv1a64").get<std::string>())
      return "hash differs from the report (another run's file): " + rel;
  }
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name == "report.json" || name == ".kiln.lock" || name.rfind(".kiln-stage-", 0) == 0)
      continue;
    if (name == "candidates") {
      for (const fs::directory_entry& c : fs::directory_iterator(e.path()))
        if (!listed.count("candidates/" + c.path().filename().string()))
          return "a candidate the report does not list: " + c.path().filename().string();
      continue;
    }
    if (!listed.count(name)) return "a file the report does not list: " + name;
  }
  return "";
}

// The name a spec file's "name" gives its outputs.
std::string spec_name(const std::string& spec_file) {
  return nlohmann::json::parse(slurp(spec_file)).at("name").get<std::string>();
}

std::vector<std::string> optimize_args(const std::string& spec, const fs::path& out,
                                       const fs::path& cache, int top) {
  return {"optimize",     spec,           "-o",    out.string(),        "--cache",
          cache.string(), "--no-profile", "--top", std::to_string(top), "--time-limit",
          "10",           "--threads",    "1"};
}

}  // namespace

// (a) Killed at every write and rename of its output set (KILN_FAULT_KILL_AFTER_WRITES=N, N = 1,
// 2, ... until a run finishes), a run leaves the directory holding the previous set or its own,
// complete, or none at all; never a mix, a truncated file or a stale candidate. Two specs of other
// names and two --top values alternate, so a mix would show: the stale winner of the other spec,
// more candidates than listed, a file whose hash is the other run's.
TEST(Outputs, KilledRunsLeaveOneCompleteSetOrNone) {
  const fs::path base = fs::path(KILN_BINARY_DIR) / "outputs_kill";
  fs::remove_all(base);
  const fs::path out = base / "out", cache = base / "cache";
  const std::string a = tiny_spec(base, "mm"), b = tiny_spec(base, "gm");
  struct Config {
    std::string spec;
    int top;
  };
  const std::vector<Config> configs = {{a, 5}, {b, 1}, {a, 2}, {b, 5}};
  // Warm the cache, so the killed runs spend their time writing, not searching.
  for (const Config& c : configs) {
    Done d = run(optimize_args(c.spec, out, cache, c.top));
    ASSERT_EQ(d.exit, 0) << d.err;
    ASSERT_EQ(check_set(out, true), "");
  }
  int kills = 0, without_report = 0, old_report = 0, new_report = 0;
  for (const Config& c : configs) {
    for (int n = 1;; ++n) {
      ASSERT_LT(n, 200) << "the run never finished";
      Done d = run(optimize_args(c.spec, out, cache, c.top),
                   {"KILN_FAULT_KILL_AFTER_WRITES=" + std::to_string(n)});
      const bool complete = d.exit == 0;
      if (!complete) {
        ASSERT_EQ(d.signal, SIGKILL) << "N=" << n << ": " << d.err;
        ++kills;
        if (!fs::exists(out / "report.json")) {
          ++without_report;
        } else {
          // Whose set it is: consecutive configurations differ in spec or --top.
          nlohmann::json rep = nlohmann::json::parse(slurp(out / "report.json"));
          bool mine = rep["spec"] == c.spec && rep["config"]["top_k"] == c.top;
          ++(mine ? new_report : old_report);
        }
      }
      std::string why = check_set(out, complete);
      ASSERT_EQ(why, "") << c.spec << " --top " << c.top << ", killed after write " << n;
      if (complete) {
        nlohmann::json rep = nlohmann::json::parse(slurp(out / "report.json"));
        const std::string name = spec_name(c.spec);
        EXPECT_EQ(slurp(out / (name + ".mugraph.json")),
                  slurp(out / "candidates" / ("1_" + name + ".mugraph.json")));
        EXPECT_TRUE(fs::exists(out / (name + ".cu")));
        break;
      }
    }
  }
  // Every stretch of the commit was hit: before it (old set intact), inside it (no set) and
  // after the report (new set complete, stage not yet removed).
  EXPECT_GT(old_report, 0);
  EXPECT_GT(without_report, 0);
  EXPECT_GT(new_report, 0);
  std::printf("[ figures ] %d killed runs: %d left the old set, %d no set, %d the new set\n", kills,
              old_report, without_report, new_report);
}

// (b) A run with a smaller --top replaces candidates/ as a whole: no candidate of the earlier run
// stays behind. A run that ships nothing is a set too (tested in cli_test.cpp, Cli.OptimizeShips*).
TEST(Outputs, ASmallerTopLeavesNoStaleCandidates) {
  const fs::path base = fs::path(KILN_BINARY_DIR) / "outputs_top";
  fs::remove_all(base);
  const fs::path out = base / "out";
  const std::string spec = tiny_spec(base, "mm");
  Done five = run(optimize_args(spec, out, base / "cache", 5));
  ASSERT_EQ(five.exit, 0) << five.err;
  size_t n5 = std::distance(fs::directory_iterator(out / "candidates"), fs::directory_iterator());
  ASSERT_GT(n5, 1u) << "the spec must give several candidates for this test to mean anything";
  Done one = run(optimize_args(spec, out, base / "cache", 1));
  ASSERT_EQ(one.exit, 0) << one.err;
  size_t n1 = std::distance(fs::directory_iterator(out / "candidates"), fs::directory_iterator());
  EXPECT_EQ(n1, 1u);
  EXPECT_TRUE(fs::exists(out / "candidates/1_mm.mugraph.json"));
  EXPECT_EQ(check_set(out, true), "");
}

// (c) Four runs at once on one spec (three --top values), one cache and one -o, several rounds: all
// succeed, they take turns (the later ones say they wait, and take the first's result from the
// cache instead of searching again), and the directory holds one complete set after each round.
// Then four runs at once on one spec and one fresh cache but four directories: the cache entry's
// lock alone makes exactly one of them search.
TEST(Outputs, ConcurrentRunsTakeTurns) {
  const fs::path base = fs::path(KILN_BINARY_DIR) / "outputs_concurrent";
  fs::remove_all(base);
  const fs::path out = base / "out";
  const std::string spec = tiny_spec(base, "mm");
  constexpr int kRounds = 5, kRuns = 4;
  int waited = 0, searched = 0;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<Proc> procs;
    for (int i = 0; i < kRuns; ++i)
      procs.push_back(start(optimize_args(spec, out, base / "cache", 1 + (i + round) % 3)));
    for (const Proc& p : procs) {
      Done d = finish(p);
      ASSERT_EQ(d.exit, 0) << "round " << round << ": " << d.err;
      waited += count_substr(d.err, "kiln: waiting for another kiln run writing");
      EXPECT_LE(count_substr(d.err, "kiln: waiting for another kiln run writing"), 1u) << d.err;
      searched += !cache_hit(d);
    }
    ASSERT_EQ(check_set(out, true), "") << "round " << round;
  }
  EXPECT_GT(waited, 0);
  // Three --top values, each searched once; every other run hit the cache.
  EXPECT_EQ(searched, 3);
  const std::string gm = tiny_spec(base, "gm");  // once: the runs read it while it is written
  std::vector<Proc> procs;
  for (int i = 0; i < kRuns; ++i)
    procs.push_back(
        start(optimize_args(gm, base / ("out" + std::to_string(i)), base / "cache2", 1)));
  int hits = 0, entry_waits = 0;
  for (const Proc& p : procs) {
    Done d = finish(p);
    ASSERT_EQ(d.exit, 0) << d.err;
    hits += cache_hit(d);
    entry_waits +=
        d.err.find("kiln: waiting for another kiln run on cache entry") != std::string::npos;
  }
  EXPECT_EQ(hits, kRuns - 1);
  EXPECT_GT(entry_waits, 0);
  std::printf("[ figures ] %d rounds of %d concurrent runs on one -o: %d waits, %d searches\n",
              kRounds, kRuns, waited, searched);
}

// (d) A FIFO at a cache entry's path hung `kiln optimize` forever; now it is reported and left
// alone. A damaged entry is reported and replaced by the new result, which the next run uses.
TEST(Outputs, CacheEntryFifoDoesNotHangAndDamageIsReplaced) {
  const fs::path base = fs::path(KILN_BINARY_DIR) / "outputs_cache";
  fs::remove_all(base);
  const fs::path out = base / "out", cache = base / "cache";
  const std::string spec = tiny_spec(base, "mm");
  Done first = run(optimize_args(spec, out, cache, 1));
  ASSERT_EQ(first.exit, 0) << first.err;
  const std::string key =
      nlohmann::json::parse(slurp(out / "report.json")).at("cache_key").get<std::string>();
  const fs::path entry = cache / (key + ".json");
  ASSERT_TRUE(fs::is_regular_file(entry));
  fs::remove(entry);
  ASSERT_EQ(::mkfifo(entry.c_str(), 0600), 0);
  Done fifo = run(optimize_args(spec, out, cache, 1), {}, 60);
  ASSERT_FALSE(fifo.timed_out) << "a FIFO at the cache entry hung the run";
  EXPECT_EQ(fifo.exit, 0) << fifo.err;
  EXPECT_NE(fifo.err.find("kiln: cache entry " + entry.string() + " is not a regular file"),
            std::string::npos)
      << fifo.err;
  struct stat st;
  ASSERT_EQ(::lstat(entry.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  EXPECT_EQ(check_set(out, true), "");
  fs::remove(entry);
  std::ofstream(entry) << "{\"format\": \"kiln-cache";
  Done damaged = run(optimize_args(spec, out, cache, 1));
  EXPECT_EQ(damaged.exit, 0) << damaged.err;
  EXPECT_NE(damaged.err.find("kiln: cache entry " + entry.string() + " is damaged"),
            std::string::npos)
      << damaged.err;
  EXPECT_NO_THROW(nlohmann::json::parse(slurp(entry))) << "the damaged entry was not replaced";
  Done hit = run(optimize_args(spec, out, cache, 1));
  EXPECT_EQ(hit.exit, 0) << hit.err;
  EXPECT_TRUE(cache_hit(hit)) << hit.err;
}
