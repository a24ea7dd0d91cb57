// Probabilistic equivalence of two kernel graphs (specs or μGraphs, in any mix), and the float
// check that backs it up.
//
// verify() evaluates both graphs with the shared evaluation core (eval_core.h, block_walk.h) in
// the finite-field domain (field.h) on uniformly random inputs, trial after trial with fresh
// seeds and rotating prime pairs, and compares every output element. Equal on every trial means
// equivalent up to the reported false-positive bound: Schwartz-Zippel per trial, (degree bound
// from the degree domain, degree.h) / q, raised to the number of trials; the default number of
// trials makes it < 2^-60. Large graphs are first scaled to a smaller instance of the same
// structure (scale.h); if that is still too big, sampled output rows are compared (partial
// evaluation). docs/verifier.md has the soundness argument and its limits.
//
// float_check() is the second line of defence that the search runs on every winner: the
// float64 interpreter on both graphs, on the documented random inputs, compared per output with
// the spec's tolerance (on sampled rows when the graphs are large).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/kernel_graph.h"

namespace kiln::verifier {

struct VerifyOptions {
  int trials = 0;           // 0: enough for the bound to be below 2^-target_bits
  double target_bits = 60;  // default trial count drives the bound below 2^-target_bits
  uint64_t seed = 1;
  bool scale = true;                     // shrink to a smaller instance when it is large
  double max_work = double(1 << 20);     // element ops per graph evaluation before scaling
  double sample_work = double(1 << 24);  // ... after scaling, before sampling output rows
  int threads = 0;                       // 0: all cores (oneTBB default)
};

enum class Outcome : uint8_t { Equivalent, Different, Inconclusive };
const char* outcome_name(Outcome o);

struct Verdict {
  Outcome outcome = Outcome::Inconclusive;
  bool equivalent() const { return outcome == Outcome::Equivalent; }

  // The bound: a non-equivalent pair passes one trial with probability at most
  // per_trial_bound; `bound` = per_trial_bound ^ trials (selection caveat: docs/verifier.md).
  int trials = 0;               // conclusive trials run
  int inconclusive_trials = 0;  // trials retried because a divisor was 0 in the field
  double per_trial_bound = 1;
  double bound = 1;
  uint64_t degree = 0;      // the degree term of the bound
  uint64_t selections = 0;  // selections evaluated (max, relu, ...) in one evaluation pair
  uint64_t seed = 0;        // the base seed; trial i uses trial_seed(seed, i)

  // Where the graphs differ (outcome Different).
  int output = -1;                      // output position
  std::string output_name;              // its name in the first graph
  std::vector<int64_t> element;         // multi-index at full size
  std::vector<int64_t> scaled_element;  // multi-index in the scaled instance
  uint64_t failing_seed = 0;            // the trial seed that showed the difference
  int failing_pair = -1;                // index into prime_pairs()

  // How the work was cut.
  bool scaled = false;
  std::string scaling;  // which sizes shrank, e.g. "8192 -> 512 (unit 64 -> 4), ..."
  bool sampled = false;
  int64_t rows_checked = 0, rows_total = 0;  // per trial, over all outputs
  double seconds = 0;

  std::string summary() const;  // multi-line, human-readable
};

// The seed of trial i of a verification with base seed s.
uint64_t trial_seed(uint64_t s, int i);

// Checks that a and b have the same named inputs (shapes, dtypes) and the same number of
// outputs with equal shapes by position; throws UserError(Shape/Name) naming the difference.
void check_compatible(const KernelGraph& a, const KernelGraph& b);

Verdict verify(const KernelGraph& a, const KernelGraph& b, const VerifyOptions& opt = {});

struct FloatCheckOptions {
  double max_work = double(1 << 27);  // evaluate whole graphs below this, else sample rows
  int64_t rows = 8;                   // at most this many rows per output when sampling
  // Skip the check (FloatCheck::skipped, ok stays true) when even one sampled row per output
  // costs more than this: a candidate whose blocks each span every row (a [4096, 2] tile of a
  // 4096^3 product) would take minutes in the interpreter. The verifier's proof still stands.
  double max_sampled_work = double(1LL << 31);
  bool candidate_f32 = false;  // evaluate the candidate in F32 (stores rounded)
  double tolerance = 0;        // > 0: instead of spec_tolerance (tests use it as an oracle)
  int threads = 0;
};

struct FloatCheck {
  struct Output {
    std::string name;
    double error = 0, tolerance = 0;
    int64_t rows_checked = 0, rows_total = 0;
    bool ok = false;
  };
  bool ok = false;
  uint64_t seed = 0;
  bool sampled = false;
  bool skipped = false;  // too costly to evaluate (see max_sampled_work); ok is true
  double work = 0;       // estimated element operations of the evaluation
  std::vector<Output> outputs;
  double seconds = 0;
  std::string summary() const;
};

// Evaluates spec and cand in float64 on random_inputs(spec, seed) (matched to cand's inputs by
// name) and compares every output with relative_l2_error against spec_tolerance of the spec
// output's dtype. Throws UserError if the graphs are not compatible.
FloatCheck float_check(const KernelGraph& spec, const KernelGraph& cand, uint64_t seed,
                       const FloatCheckOptions& opt = {});

}  // namespace kiln::verifier
