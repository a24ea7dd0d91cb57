// Profiling candidates on the GPU (profile.h): emit, build in parallel, run one at a time, parse.
#include "kiln/search/profile.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "kiln/codegen/emit.h"
#include "kiln/codegen/lowerings.h"
#include "kiln/codegen/schedule.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/search/cost_model.h"
#include "kiln/search/generator.h"

namespace kiln::search {

namespace fs = std::filesystem;

// ---- running commands ------------------------------------------------------------------------

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                        "0123456789_./-+=:,@%") == std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

ProcessResult run_process(const std::string& command, double timeout_s) {
  ProcessResult r;
  int fds[2];
  if (pipe(fds) != 0) {
    r.output = "cannot create a pipe";
    return r;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    r.output = "cannot fork";
    return r;
  }
  if (pid == 0) {
    // The child leads its own process group, so a timeout kills nvcc's or the shell's children.
    setpgid(0, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  close(fds[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    ssize_t got = read(fds[0], buf, sizeof buf);
    if (got <= 0) break;  // EOF: every writer (the command and its children) is gone
    r.output.append(buf, static_cast<size_t>(got));
  }
  close(fds[0]);
  int st = 0;
  // After EOF the command may still be running (it closed its output): bound the wait too.
  while (!r.timed_out) {
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) break;
    if (w < 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (r.timed_out) {
    waitpid(pid, &st, 0);
    r.exit_code = -1;
    return r;
  }
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  return r;
}

// ---- the toolchain and the device ------------------------------------------------------------

namespace {

bool executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
}

}  // namespace

std::optional<std::string> find_nvcc(const std::string& explicit_path) {
  if (!explicit_path.empty()) {
    if (!executable(explicit_path))
      throw UserError(ErrorCode::Io, "--nvcc " + explicit_path + " is not an executable file");
    return explicit_path;
  }
  // $CUDACXX is a choice the user made: when it names no nvcc, nvcc is not found (as in CMake).
  if (const char* cx = std::getenv("CUDACXX"); cx && *cx)
    return executable(cx) ? std::optional<std::string>(cx) : std::nullopt;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':'))
      if (!dir.empty() && executable(fs::path(dir) / "nvcc"))
        return (fs::path(dir) / "nvcc").string();
  }
  if (executable("/usr/local/cuda/bin/nvcc")) return std::string("/usr/local/cuda/bin/nvcc");
  return std::nullopt;
}

std::string nvcc_version(const std::string& nvcc, const ProcessRunner& run) {
  ProcessResult r = run(shell_quote(nvcc) + " --version", 30);
  std::stringstream ss(r.output);
  std::string line, last;
  while (std::getline(ss, line)) {
    if (line.find("release") != std::string::npos) return line;
    if (!line.empty()) last = line;
  }
  return last.empty() ? "unknown" : last;
}

GpuProbe detect_gpu(const ProcessRunner& run) {
  GpuProbe g;
  ProcessResult r = run("nvidia-smi -L", 20);
  if (!r.timed_out && r.exit_code == 0) {
    std::stringstream ss(r.output);
    std::string line;
    while (std::getline(ss, line))
      if (line.rfind("GPU ", 0) == 0) {
        g.found = true;
        g.detail = line;
        return g;
      }
    g.detail = "nvidia-smi found none";
    return g;
  }
  if (!r.timed_out && r.exit_code == 127) {
    // No nvidia-smi: a device node is the next best sign (containers may lack the tool).
    if (fs::exists("/dev/nvidia0")) {
      g.found = true;
      g.detail = "/dev/nvidia0 (nvidia-smi not found)";
    } else {
      g.detail = "no nvidia-smi and no /dev/nvidia0";
    }
    return g;
  }
  if (r.output.find("No devices") != std::string::npos) {
    g.detail = "nvidia-smi found none";
    return g;
  }
  g.detail = r.timed_out ? "nvidia-smi timed out"
                         : fmt::format("nvidia-smi failed (exit {})", r.exit_code);
  return g;
}

// ---- one harness -----------------------------------------------------------------------------

const char* profile_status_name(ProfileStatus s) {
  switch (s) {
    case ProfileStatus::Ok:
      return "ok";
    case ProfileStatus::NotRun:
      return "not_run";
    case ProfileStatus::CompileError:
      return "compile_error";
    case ProfileStatus::Mismatch:
      return "mismatch";
    case ProfileStatus::CudaError:
      return "cuda_error";
    case ProfileStatus::NoResult:
      return "no_result";
    case ProfileStatus::Timeout:
      return "timeout";
  }
  return "?";
}

namespace {

const ProcessRunner& runner_of(const HarnessRun& opt) {
  static const ProcessRunner def = run_process;
  return opt.runner ? opt.runner : def;
}

// The first lines of a log, for a one-line error.
std::string first_error_line(const std::string& log) {
  std::stringstream ss(log);
  std::string line;
  while (std::getline(ss, line))
    if (line.find("error") != std::string::npos) return line.substr(0, 200);
  return "";
}

}  // namespace

Measurement compile_harness(const std::string& dir, const HarnessRun& opt) {
  Measurement m;
  fs::path d(dir);
  m.harness = (d / "harness.cu").string();
  m.log = (d / "compile.log").string();
  // The emitter's own build line, with the nvcc we found.
  std::string line =
      nvcc_command(shell_quote(m.harness), shell_quote((d / "harness").string()), opt.arch, false);
  KILN_ASSERT(line.rfind("nvcc ", 0) == 0, "nvcc_command starts with nvcc: {}", line);
  line = shell_quote(opt.nvcc) + line.substr(4);
  ProcessResult r = runner_of(opt)(line, opt.compile_timeout_s);
  write_file_text(m.log, "$ " + line + "\n" + r.output);
  if (r.timed_out) {
    m.status = ProfileStatus::Timeout;
    m.error = fmt::format("nvcc timed out after {:.0f} s (log: {})", opt.compile_timeout_s, m.log);
  } else if (r.exit_code != 0 || !executable(d / "harness")) {
    m.status = ProfileStatus::CompileError;
    std::string why = first_error_line(r.output);
    m.error = fmt::format("nvcc failed (exit {}){}{} (log: {})", r.exit_code,
                          why.empty() ? "" : ": ", why, m.log);
  }
  return m;
}

namespace {

// The key=value words of a line (words without '=' are skipped).
std::map<std::string, std::string> key_values(const std::string& line) {
  std::map<std::string, std::string> kv;
  std::stringstream fields(line);
  std::string f;
  while (fields >> f)
    if (auto eq = f.find('='); eq != std::string::npos) kv[f.substr(0, eq)] = f.substr(eq + 1);
  return kv;
}

// "output y differs from the float64 reference of the spec on normal1 inputs (seed 2: rel err
// 3.1e-01 > tol 1.0e-04)" for a harness line `check seed=2 dist=normal1 output=y err=3.1e-01
// tol=1.0e-04 nonfinite=0 FAIL` (older harnesses print no dist: their checks were uniform).
std::string describe_failed_check(const std::string& line) {
  std::map<std::string, std::string> kv = key_values(line);
  auto get = [&](const char* k) { return kv.count(k) ? kv[k] : std::string("?"); };
  std::string nonfinite = kv.count("nonfinite") && kv["nonfinite"] != "0"
                              ? fmt::format(", {} non-finite values", kv["nonfinite"])
                              : "";
  return fmt::format(
      "output {} differs from the float64 reference of the spec on {} inputs (seed {}: rel err "
      "{} > tol {}{})",
      get("output"), kv.count("dist") ? kv["dist"] : "uniform", get("seed"), get("err"), get("tol"),
      nonfinite);
}

}  // namespace

Measurement parse_harness_output(const ProcessResult& r) {
  Measurement m;
  std::stringstream ss(r.output);
  std::string line, result, first_fail;
  int failed_checks = 0;
  while (std::getline(ss, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("device: ", 0) == 0 && m.device.empty()) {
      m.device = line.substr(8);
      if (auto p = m.device.find(" ("); p != std::string::npos) m.device.resize(p);
    }
    if (line.rfind("check ", 0) == 0 && line.size() >= 5 &&
        line.compare(line.size() - 5, 5, " FAIL") == 0) {
      if (failed_checks++ == 0) first_fail = line;
    }
    if (line.rfind("KILN_RESULT ", 0) == 0) result = line;
  }
  if (r.timed_out) {
    m.status = ProfileStatus::Timeout;
    m.error = "the harness timed out";
    return m;
  }
  if (result.empty()) {
    m.status = ProfileStatus::NoResult;
    m.error = fmt::format("no KILN_RESULT line (exit {})", r.exit_code);
    return m;
  }
  // key=value fields; error= (CUDA's message) runs to the end of the line.
  std::string cuda_error;
  if (auto p = result.find(" error="); p != std::string::npos) {
    cuda_error = result.substr(p + 7);
    result.resize(p);
  }
  std::map<std::string, std::string> kv = key_values(result.substr(12));
  auto num = [&](const char* k) {
    auto it = kv.find(k);
    if (it == kv.end()) return std::nan("");
    char* end = nullptr;
    double v = std::strtod(it->second.c_str(), &end);
    return end && *end == 0 ? v : std::nan("");
  };
  double err = num("err"), us = num("us"), checks = num("checks"), exempt = num("exempt");
  m.err = std::isnan(err) ? -1 : err;
  if (checks >= 0) m.checks = static_cast<int>(checks);
  if (exempt >= 0) m.exempt = static_cast<int>(exempt);
  if (r.exit_code == 2 || !cuda_error.empty()) {
    m.status = ProfileStatus::CudaError;
    m.error = "CUDA error: " + (cuda_error.empty() ? std::string("(exit 2)") : cuda_error);
  } else if (kv["ok"] != "1" || r.exit_code == 1) {
    m.status = ProfileStatus::Mismatch;
    if (first_fail.empty())
      m.error =
          fmt::format("output differs from the float64 reference of the spec (max rel err {})",
                      kv.count("err") ? kv["err"] : "?");
    else
      m.error = describe_failed_check(first_fail) +
                (failed_checks > 1
                     ? fmt::format("; {} failing (check, output) pairs in all", failed_checks)
                     : "");
  } else if (r.exit_code != 0) {
    m.status = ProfileStatus::NoResult;
    m.error = fmt::format("the harness exited with {}", r.exit_code);
  } else if (!(us > 0) || !std::isfinite(us)) {
    m.status = ProfileStatus::NoResult;
    m.error = "KILN_RESULT has no timing (us=" + kv["us"] + ")";
  } else {
    m.status = ProfileStatus::Ok;
    m.us = us;
  }
  return m;
}

Measurement run_harness(const std::string& dir, const HarnessRun& opt) {
  fs::path d(dir);
  // At least two checks: the first draws uniform inputs, the second normal std 1 (the range
  // rule), and a candidate must pass both.
  std::string cmd =
      fmt::format("cd {} && ./harness --seed {} --checks {} --repeats {}", shell_quote(d.string()),
                  opt.seed, std::max(opt.checks, 2), opt.repeats);
  if (opt.copies > 0) cmd += fmt::format(" --copies {}", opt.copies);
  ProcessResult r = runner_of(opt)(cmd, opt.run_timeout_s);
  Measurement m = parse_harness_output(r);
  m.harness = (d / "harness.cu").string();
  m.log = (d / "run.log").string();
  write_file_text(m.log, "$ " + cmd + "\n" + r.output);
  if (m.status == ProfileStatus::Timeout)
    m.error = fmt::format("the harness timed out after {:.0f} s", opt.run_timeout_s);
  if (!m.ok()) m.error += " (log: " + m.log + ")";
  return m;
}

// ---- the profiling pass ----------------------------------------------------------------------

const ProfiledCandidate* ProfileResult::winner() const {
  return !ranked.empty() && ranked.front().m.ok() ? &ranked.front() : nullptr;
}

std::vector<const ProfiledCandidate*> ProfileResult::mismatches() const {
  std::vector<const ProfiledCandidate*> v;
  for (const ProfiledCandidate& p : ranked)
    if (p.m.status == ProfileStatus::Mismatch) v.push_back(&p);
  return v;
}

std::optional<Candidate> thread_variant(const Candidate& c, int threads, Arch arch) {
  const kiln::Schedule s = plan_schedule(c.graph, target_for(arch));
  std::set<std::string> generic;
  for (const KernelPlan& kp : s.kernels) {
    if (kp.op < 0 || !kp.as<BlockGraphKernel>()) continue;
    const KernelOp& op = c.graph.ops[kp.op];
    if (op.block && op.block->block_threads != threads) generic.insert(op.name);
  }
  if (generic.empty()) return std::nullopt;
  nlohmann::json j = mugraph_to_json(c.graph);
  for (nlohmann::json& k : j["kernels"])
    if (k.contains("block_threads") && generic.count(k["name"].get<std::string>()))
      k["block_threads"] = threads;
  Candidate v = c;
  try {
    v.graph = mugraph_from_json(j, "thread variant");
  } catch (const UserError&) {
    return std::nullopt;  // e.g. registers per thread x threads over the SM's
  }
  v.graph.arch = c.graph.arch;
  v.fingerprint = fingerprint(v.graph);
  v.cost = estimate_cost(v.graph, target_for(arch));
  v.verdict = fmt::format("{} ({} threads per block)", c.verdict, threads);
  v.state = -1;
  return v;
}

ProfileResult profile_candidates(const KernelGraph& spec, const std::vector<Candidate>& candidates,
                                 const ProfileOptions& opt) {
  ProfileResult res;
  std::vector<ProfiledCandidate>& all = res.ranked;
  std::set<std::string> seen;
  for (const Candidate& c : candidates)
    if (seen.insert(c.fingerprint).second) all.push_back({c, static_cast<int>(all.size()) + 1, {}});
  // The model's best at other thread counts, after the candidates in model order.
  if (!candidates.empty() && !candidates.front().is_spec)
    for (int t : opt.thread_variants)
      if (std::optional<Candidate> v = thread_variant(candidates.front(), t, opt.run.arch))
        if (seen.insert(v->fingerprint).second)
          all.push_back({std::move(*v), static_cast<int>(all.size()) + 1, {}});
  // The spec's own kernel graph, as a baseline and a fallback (unless it failed a check).
  Candidate sc;
  sc.graph = spec;
  sc.graph.arch = opt.run.arch;
  sc.fingerprint = fingerprint(sc.graph);
  if (opt.spec_fallback && !seen.count(sc.fingerprint)) {
    sc.cost = estimate_cost(sc.graph, target_for(opt.run.arch));
    sc.is_spec = true;
    sc.verified = true;
    sc.verdict = "the spec itself";
    all.push_back({std::move(sc), static_cast<int>(all.size()) + 1, {}});
  }
  const int n = static_cast<int>(all.size());

  // Emit every harness (cheap, here), then compile in parallel.
  std::vector<std::string> dirs(n);
  for (int i = 0; i < n; ++i) {
    ProfiledCandidate& p = all[i];
    dirs[i] =
        (fs::path(opt.work_dir) / (p.candidate.is_spec ? fmt::format("{:02d}_spec", p.model_rank)
                                                       : fmt::format("{:02d}", p.model_rank)))
            .string();
    fs::create_directories(dirs[i]);
    HarnessOptions ho;
    ho.emit.arch = opt.run.arch;
    ho.emit.verdict = p.candidate.verdict;
    ho.emit.source = fmt::format("candidate {} ({})", p.model_rank, p.candidate.fingerprint);
    ho.seed = opt.run.seed;
    ho.checks = opt.run.checks;
    ho.repeats = opt.run.repeats;
    ho.file = "harness.cu";
    write_file_text((fs::path(dirs[i]) / "harness.cu").string(),
                    emit_harness(p.candidate.graph, spec, ho));
    p.m.harness = (fs::path(dirs[i]) / "harness.cu").string();
  }
  // nvcc processes, --threads at a time: one oneTBB arena of that many slots (the search's
  // runtime; its workers wait on the compiler processes).
  int workers = opt.threads > 0 ? opt.threads : tbb::this_task_arena::max_concurrency();
  workers = std::clamp(workers, 1, n);
  std::vector<Measurement> built(n);
  std::mutex progress_mu;  // the callback is called by one thread at a time
  int done = 0;
  if (opt.progress) opt.progress("compiling", 0, n);
  tbb::task_arena arena(workers);
  arena.execute([&] {
    tbb::parallel_for(
        0, n,
        [&](int i) {
          built[i] = compile_harness(dirs[i], opt.run);
          std::lock_guard<std::mutex> l(progress_mu);
          ++done;
          if (opt.progress) opt.progress("compiling", done, n);
        },
        tbb::simple_partitioner());
  });

  // Run one at a time: concurrent harnesses would time each other.
  for (int i = 0; i < n; ++i) {
    if (opt.progress) opt.progress("profiling", i, n);
    all[i].m = built[i].status == ProfileStatus::NotRun ? run_harness(dirs[i], opt.run) : built[i];
    if (res.device.empty()) res.device = all[i].m.device;
  }
  if (opt.progress) opt.progress("profiling", n, n);

  std::stable_sort(all.begin(), all.end(),
                   [](const ProfiledCandidate& a, const ProfiledCandidate& b) {
                     if (a.m.ok() != b.m.ok()) return a.m.ok();
                     if (a.m.ok() && a.m.us != b.m.us) return a.m.us < b.m.us;
                     return a.model_rank < b.model_rank;
                   });
  return res;
}

nlohmann::json profile_to_json(const ProfileResult& r) {
  nlohmann::json cs = nlohmann::json::array();
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const ProfiledCandidate& p = r.ranked[i];
    cs.push_back(
        {{"measured_rank", p.m.ok() ? nlohmann::json(int(i) + 1) : nlohmann::json()},
         {"model_rank", p.model_rank},
         {"fingerprint", p.candidate.fingerprint},
         {"is_spec", p.candidate.is_spec},
         {"kernels", p.candidate.graph.num_kernels()},
         {"model_us", p.candidate.cost.time * 1e6},
         {"measured_us", p.m.ok() ? nlohmann::json(p.m.us) : nlohmann::json()},
         {"gpu_ok", p.m.ok()},
         {"status", profile_status_name(p.m.status)},
         {"max_rel_err", p.m.err >= 0 ? nlohmann::json(p.m.err) : nlohmann::json()},
         {"gpu_checks", p.m.checks >= 0 ? nlohmann::json(p.m.checks) : nlohmann::json()},
         {"gpu_checks_exempt", p.m.exempt >= 0 ? nlohmann::json(p.m.exempt) : nlohmann::json()},
         {"profile_error", p.m.ok() ? nlohmann::json() : nlohmann::json(p.m.error)},
         {"harness", p.m.harness},
         {"log", p.m.log}});
  }
  return cs;
}

}  // namespace kiln::search
