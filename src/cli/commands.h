// The kiln CLI's subcommands. Each registers itself on the app with its options and a callback;
// main() dispatches and maps failures to exit codes (0 ok, 1 failure/"not equivalent",
// 2 invalid input).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

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

// Output paths (outputs.cpp): make_dirs creates a directory and its parents, make_parent_dirs
// those of a file about to be written; both throw a UserError that says why and what to do when
// a directory cannot be created. file_name is a path's last component (for header comments).
void make_dirs(const std::string& dir);
void make_parent_dirs(const std::string& path);
std::string file_name(const std::string& path);

// Set by a subcommand whose outcome is a negative answer rather than an error (e.g. verify
// finding a difference): main() exits with it after a successful parse.
int& exit_status();

}  // namespace kiln::cli
