// Profiling on the GPU: measure candidates for real and rank them by what was measured.
//
// The cost model (cost_model.h) ranks without a GPU and misranks (docs/benchmarks.md). On a
// machine with nvcc and a GPU, profile_candidates() takes the model's top candidates plus,
// always, the spec's own kernel graph (deduplicated by fingerprint), emits each one's GPU harness
// (codegen/emit.h: emit_harness), compiles them with nvcc in parallel, runs them one at a time
// (two correctness checks against the float64 reference of the spec, on uniform and on normal
// std-1 inputs, then CUDA-graph timing) and parses each harness's output. Candidates that ran and
// matched are ranked by measured median time; a candidate that failed to compile, to run or to
// match is never the winner, and a candidate that fails the GPU check is reported as the bug it is
// (every candidate was verified).
//
// Commands run through a ProcessRunner, so tests substitute a fake nvcc or a fake runner.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/search/search.h"

namespace kiln::search {

// ---- running commands ------------------------------------------------------------------------

struct ProcessResult {
  int exit_code = -1;      // the command's exit status; 128 + signal if killed by one
  bool timed_out = false;  // killed after timeout_s (exit_code is then meaningless)
  std::string output;      // stdout and stderr, interleaved
};
// Runs a shell command (/bin/sh -c) with a wall-clock limit and returns its exit status and
// output. The default runner kills the command's whole process group on timeout.
using ProcessRunner = std::function<ProcessResult(const std::string& command, double timeout_s)>;
ProcessResult run_process(const std::string& command, double timeout_s);

// A string quoted for /bin/sh.
std::string shell_quote(const std::string& s);

// ---- the toolchain and the device ------------------------------------------------------------

// nvcc: `explicit_path` if given (a user error if it is not an executable file), else $CUDACXX
// when set (nullopt if it is not executable), else `nvcc` on $PATH, else
// /usr/local/cuda/bin/nvcc; nullopt when none is found.
std::optional<std::string> find_nvcc(const std::string& explicit_path = {});
// The release line of `nvcc --version` ("Cuda compilation tools, release 12.4, V12.4.131").
std::string nvcc_version(const std::string& nvcc, const ProcessRunner& run = run_process);

struct GpuProbe {
  bool found = false;
  std::string detail;  // the first GPU's line, or why none was found (for messages)
};
// Whether a CUDA GPU is visible: `nvidia-smi -L` lists one; where nvidia-smi is missing, whether
// /dev/nvidia0 exists. Cheap (one process) and never throws.
GpuProbe detect_gpu(const ProcessRunner& run = run_process);

// ---- one harness -----------------------------------------------------------------------------

enum class ProfileStatus {
  Ok,            // compiled, ran, matched the reference, timed
  NotRun,        // not attempted (e.g. its compile was skipped)
  CompileError,  // nvcc failed; see log
  Mismatch,      // ran, but an output differs from the float64 reference (a bug: it was verified)
  CudaError,     // the harness hit a CUDA error (exit 2), e.g. no device or a launch failure
  NoResult,      // exited without a usable KILN_RESULT line
  Timeout,       // compile or run exceeded its limit
};
const char* profile_status_name(ProfileStatus s);

struct Measurement {
  ProfileStatus status = ProfileStatus::NotRun;
  double us = -1;       // measured median µs per call (valid when status is Ok)
  double err = -1;      // max relative error of the checks that counted (when reported)
  int checks = -1;      // checks run (when reported)
  int exempt = -1;      // of which exempt: the reference leaves the f32 range (when reported)
  std::string error;    // why it failed, one line (empty when Ok)
  std::string device;   // the device the harness ran on (its "device:" line)
  std::string harness;  // the emitted .cu
  std::string log;      // the compile log on CompileError, else the run log
  bool ok() const { return status == ProfileStatus::Ok; }
};

struct HarnessRun {
  std::string nvcc;
  Arch arch = Arch::Sm90a;
  uint64_t seed = 1;
  int repeats = 20;  // timed graph replays (the harness's median)
  // Correctness checks: check c uses seed + c, uniform inputs when c is even and normal std 1
  // when c is odd. run_harness asks for at least 2, so every candidate meets both distributions.
  int checks = 2;
  // Input sets the timing rotates over (the harness's --copies); 0: the harness's default, more
  // than twice the L2, so every call reads DRAM. 4 is what shared/bench/torch_baselines.py does.
  int copies = 0;
  double compile_timeout_s = 600, run_timeout_s = 120;
  ProcessRunner runner;  // default run_process
};

// Builds dir/harness.cu (already written) into dir/harness; returns CompileError/Timeout with
// the log at dir/compile.log, or NotRun (meaning: built, ready to run).
Measurement compile_harness(const std::string& dir, const HarnessRun& opt);
// Runs dir/harness and parses its output (kept in dir/run.log).
Measurement run_harness(const std::string& dir, const HarnessRun& opt);
// Parses a harness's output and exit status into a measurement (exposed for tests). On a
// mismatch, m.error names the first failing check's output, input distribution and seed (from
// the harness's `check` lines) and how many checks failed. Keys it does not know are ignored;
// checks= and exempt= are optional (older harnesses print neither).
Measurement parse_harness_output(const ProcessResult& r);

// ---- the profiling pass ----------------------------------------------------------------------

struct ProfileOptions {
  HarnessRun run;
  std::string work_dir;  // one subdirectory per candidate
  int threads = 0;       // parallel nvcc processes (0: all cores; at most oneTBB's threads)
  // Called as each step finishes, one call at a time (a compile's from the oneTBB thread that
  // ran it): ("compiling"|"profiling", done, total).
  std::function<void(const char* phase, int done, int total)> progress;
  // Also measure the spec's own kernel graph (when no candidate is it). Off when the spec failed
  // the search's float check: what failed a check is never measured as a fallback.
  bool spec_fallback = true;
  // Also measure the model's best candidate with its generic block-graph kernels at these
  // thread counts (thread_variants): the model does not tell them apart, the GPU does.
  std::vector<int> thread_variants = {64, 256};
};

// Candidate c with every kernel that runs as the generic block-graph kernel on `arch` at
// `threads` threads per block, rebuilt through the μGraph reader (every invariant checked again);
// nullopt when no kernel changes or the variant breaks a resource rule. The block ops are the
// same, so the verifier's verdict carries over; the GPU check runs on it like on every candidate.
// H100 (session 13), µs with 32 / 64 / 128 / 256 threads: lora's block kernel (16 x 32 output
// tiles) 5.10 / 4.83 / 6.67 / 7.16, lowrank's 18.75 / 10.86 / 10.17 / 9.18, an unseen f32 chain
// of three block kernels 7.24 / 5.93 / 4.99 / 4.75.
std::optional<Candidate> thread_variant(const Candidate& c, int threads, Arch arch);

struct ProfiledCandidate {
  Candidate candidate;
  int model_rank = 0;  // 1-based position in the model's ranking (the appended spec: last + 1)
  Measurement m;
};

struct ProfileResult {
  // Correct candidates by measured time (ties by model rank), then every failure in model order.
  std::vector<ProfiledCandidate> ranked;
  std::string device;  // from the first harness that reported one
  // The measured winner: ranked.front() when it is Ok, else null (nothing could be measured).
  const ProfiledCandidate* winner() const;
  // Candidates that ran and did not match the reference: each one is a bug in Kiln.
  std::vector<const ProfiledCandidate*> mismatches() const;
};

// Profiles `candidates` (the model's ranking, best first) plus the spec's own kernel graph when
// no candidate has its fingerprint. Harnesses go to opt.work_dir/<model rank>_<fingerprint>/.
ProfileResult profile_candidates(const KernelGraph& spec, const std::vector<Candidate>& candidates,
                                 const ProfileOptions& opt);

// report.json's view: one object per profiled candidate, in measured order.
nlohmann::json profile_to_json(const ProfileResult& r);

}  // namespace kiln::search
