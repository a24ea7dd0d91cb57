// The kiln CLI's subcommands. Each registers itself on the app with its options and a callback;
// main() dispatches and maps failures to exit codes (0 ok, 1 failure/"not equivalent",
// 2 invalid input).
#pragma once

#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kiln/ir/file_lock.h"

namespace kiln::cli {

void add_show(CLI::App& app);
void add_eval(CLI::App& app);
void add_verify(CLI::App& app);
void add_optimize(CLI::App& app);
void add_trace(CLI::App& app);
void add_emit(CLI::App& app);
void add_bench(CLI::App& app);
void add_check(CLI::App& app);

// An integer option's check: a whole number in [lo, hi] (CLI11's own checks let 2^31 threads or
// 2·10^9 trials through, which crashed or hung). `what` names the unit in the message.
CLI::Validator whole_number(long long lo, long long hi, const char* what);
// A real option's check: a finite number in [lo, hi] (NaN passes CLI11's range checks, since
// every comparison with it is false). `what` names the quantity in the message.
CLI::Validator real_number(double lo, double hi, const char* what);
// A standard deviation of generated inputs: 0 (the uniform generator) to 1e4 (6 std stays below
// f16's 65504).
CLI::Validator input_std_range();
// Worker threads: 0 (all cores) to 1024.
CLI::Validator thread_count();
// Adds `--memory-limit MB` (64 MB to 16 TB; default half the machine's RAM) to cmd, into mb.
void add_memory_limit(CLI::App* cmd, int64_t& mb);

// Output paths (outputs.cpp): make_dirs creates a directory and its parents, make_parent_dirs
// those of a file about to be written; both throw a UserError that says why and what to do when
// a directory cannot be created. file_name is a path's last component (for header comments).
void make_dirs(const std::string& dir);
void make_parent_dirs(const std::string& path);
std::string file_name(const std::string& path);

// The lock of an output directory (flock on DIR/.kiln.lock), held by `kiln optimize -o DIR` from
// before its search until its output set is committed, so two runs writing DIR take turns and
// never mix their files. A run that finds DIR locked prints "kiln: waiting for another kiln run
// writing DIR ..." once and blocks. UserError (exit 2) when the lock cannot be taken (the lock
// file is not a regular file, or the file system has no flock).
FileLock lock_output_dir(const std::string& dir);

// The files of one `kiln optimize -o DIR` run, replaced as one set (docs/reliability.md, "Output
// sets"). add() writes a file into a private stage directory, DIR/.kiln-stage-PID-N/; commit()
// moves the set into DIR: it removes DIR/report.json first, swaps the staged candidates/ for the
// old one, removes the previous set's files that this set lacks, renames the staged files in and
// writes report.json last, with a "files" list (path, bytes, FNV-1a 64 of each file of the set).
// So a DIR holding a report.json holds exactly the files it lists, all of one run; a DIR without
// one holds no set. A run killed anywhere leaves its stage behind, and the next run removes it.
//
// The caller holds lock_output_dir(DIR) for the object's whole life: the constructor removes
// every other stage directory in DIR as a leftover of a killed run.
class OutputSet {
 public:
  // `replaces`: top-level files this run owns whether or not it writes them (the winner's
  // NAME.mugraph.json, NAME.cu, NAME.h: a run that ships nothing removes them).
  OutputSet(std::string dir, std::vector<std::string> replaces);
  ~OutputSet();  // removes the stage unless committed
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  // Stages a file of the set. `rel`: NAME or candidates/NAME (no other directory).
  void add(const std::string& rel, const std::string& text);
  // Moves the staged set into DIR with `report` (plus its "files" list) as DIR/report.json.
  void commit(nlohmann::json report);

 private:
  struct Staged {
    std::string rel;
    size_t bytes;
    uint64_t fnv1a64;
  };
  std::string dir_, stage_;
  std::set<std::string> replaces_;
  std::vector<Staged> staged_;
  bool committed_ = false;
  void write_journal(const std::set<std::string>& names);
};

// FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3): the hash report.json
// lists for each file of a set.
uint64_t fnv1a64(const std::string& bytes);

// The fault-injection test hook: with KILN_FAULT_KILL_AFTER_WRITES=N in the environment, the N-th
// call raises SIGKILL. OutputSet calls it after each write or rename of an output set (each
// staged file, then every step of the commit), so a test can kill a run at every point of it.
void fault_point();

// Set by a subcommand whose outcome is a negative answer rather than an error (e.g. verify
// finding a difference): main() exits with it after a successful parse.
int& exit_status();

}  // namespace kiln::cli
