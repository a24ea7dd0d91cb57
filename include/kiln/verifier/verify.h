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

#include "kiln/interp/interp.h"
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
  // Past it no further trial starts, and a running one stops between ops: the verdict is then
  // Inconclusive with `cut` set, unless it was already Different.
  Deadline deadline;
  // > 0: Inconclusive (Verdict::memory says why) when the resident set plus what the (scaled)
  // graphs' field values need would pass this many bytes.
  int64_t max_bytes = 0;
};

enum class Outcome : uint8_t { Equivalent, Different, Inconclusive };
const char* outcome_name(Outcome o);

struct Verdict {
  Outcome outcome = Outcome::Inconclusive;
  bool equivalent() const { return outcome == Outcome::Equivalent; }
  // Equivalent with the reported false-positive bound.
  bool bounded() const { return equivalent() && !selection_dependent; }

  // The bound: a non-equivalent pair passes one trial with probability at most
  // per_trial_bound; `bound` = per_trial_bound ^ trials. It holds only when the outputs do not
  // depend on what the graphs' selections select (docs/verifier.md, "Selections").
  int trials = 0;               // conclusive trials run
  int inconclusive_trials = 0;  // trials retried because a divisor was 0 in the field
  // Selection orders dropped from the trials' cycle because each made a divisor 0 on its first
  // two trials while another order ran (docs/verifier.md, "Selections").
  int dropped_orders = 0;
  double per_trial_bound = 1;
  double bound = 1;
  uint64_t degree = 0;      // the degree term of the bound
  uint64_t selections = 0;  // selections evaluated (max, relu, ...) in one evaluation pair
  // Some output of a graph changed when its selections' results were replaced by fresh values:
  // what a selection selects matters (relu, a max that is output), so the field model bounds
  // nothing. An Equivalent verdict then has bound 1 and bounded() is false; `kiln verify` exits
  // 3, and the search accepts it only after a float check on inputs of both signs.
  bool selection_dependent = false;
  std::string dependent_graph;  // the first graph found to depend on its selections
  bool cut = false;             // the deadline stopped the trials (outcome Inconclusive)
  std::string memory;           // the memory limit stopped them: what they needed
  uint64_t seed = 0;            // the base seed; trial i uses trial_seed(seed, i)

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

// Checks that a and b have the same ABI: the same named inputs (shapes, dtypes), and the same
// outputs in the same order with equal names, shapes and dtypes; throws UserError(Shape/Name)
// naming the difference.
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
  // With candidate_f32: the narrowings the GPU schedule applies inside block graphs (16-bit mma
  // operands from float32 tiles), so the check sees the f16 overflow the GPU would.
  std::vector<OperandRounding> operand_rounding;
  double tolerance = 0;  // > 0: instead of spec_tolerance (tests use it as an oracle)
  // Input sets, each checked in full: 0 is the uniform generator, s > 0 normal inputs of
  // standard deviation s (the range rule of the spec format asks for 1).
  std::vector<double> input_stds = {0.0, 1.0};
  // Three more sets, inputs of one sign (-|N(0, 1)|, +|N(0, 1)|) and of alternating sign per
  // input (-, +, -, ...: products of two inputs negative): rows whose max is negative, and so
  // on, which selections against constants (relu, a max initialised to 0) need to show a
  // difference that inputs of random signs almost never show.
  bool signed_inputs = false;
  int threads = 0;
  // The rows are narrowed towards what fits the time left (at an assumed rate, see
  // float_check); a check still running when the deadline passes is skipped with `cut` set
  // (FloatCheck::skipped, ok stays true).
  Deadline deadline;
  // > 0: skipped (FloatCheck::memory says why) when the resident set plus what the check's
  // tensors need would pass this many bytes.
  int64_t max_bytes = 0;
};

struct FloatCheck {
  struct Output {
    std::string name;
    std::string inputs;  // the input set: "uniform", "normal 1", "negative", "positive", ...
    double error = 0, tolerance = 0;
    int64_t rows_checked = 0, rows_total = 0;
    std::vector<int64_t> rows;  // the rows compared when sampled (ascending)
    bool ok = false;
  };
  bool ok = false;
  uint64_t seed = 0;
  bool sampled = false;
  bool skipped = false;         // too costly to evaluate (see max_sampled_work); ok is true
  bool cut = false;             // skipped because the deadline passed or would have
  std::string memory;           // skipped because of the memory limit: what it needed
  double work = 0;              // estimated element operations of one evaluation pair
  std::vector<Output> outputs;  // per input set, per output
  // Input sets on which the spec's float64 reference leaves the float32 range (some op result
  // beyond FLT_MAX): the range rule exempts them, so they are not compared.
  std::vector<std::string> exempt;
  double seconds = 0;
  std::string summary() const;
  // The failing outputs, "Y (normal 1)", comma-separated; empty when ok.
  std::string failures() const;
};

// For each input set, evaluates spec in float64 and cand (float64, or F32 as the options say) on
// the same inputs (generated for spec, matched to cand's inputs by name) and compares every
// output with relative_l2_error against spec_tolerance of the spec output's dtype. Large graphs
// are compared on sampled rows: always the first, the last and a random row of every output (so
// every grid block along every dim an output row index spans is reached at both ends), then more
// while cheap. Throws UserError if the graphs are not compatible.
FloatCheck float_check(const KernelGraph& spec, const KernelGraph& cand, uint64_t seed,
                       const FloatCheckOptions& opt = {});

}  // namespace kiln::verifier
