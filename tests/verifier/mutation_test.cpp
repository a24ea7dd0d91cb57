// The automatic mutation suite: every plausible one-bug mutant of every example μGraph (and of a
// split-KV flash-decoding μGraph with max subtraction) that still builds and still matches the
// spec's interface, and that the float64 interpreter shows to compute something else, must be
// rejected by verify() -- with scaling forced on, so the scaled instance is what is judged.
// Large examples are mutated at a smaller size (see bases()) so the float64 oracle stays cheap.
// Mutants that compute the same function (a re-tiling) should be accepted. The test prints the
// catch rate per mutation operator.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "graphs.h"
#include "kiln/interp/interp.h"
#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"
#include "kiln/verifier/scale.h"
#include "kiln/verifier/verify.h"
#include "mutants.h"

namespace kiln::verifier {
namespace {

namespace fs = std::filesystem;

struct Base {
  std::string name;
  KernelGraph spec, mugraph;
};

std::vector<Base> bases() {
  std::vector<Base> r;
  fs::path dir = fs::path(KILN_SOURCE_DIR) / "examples";
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string f = e.path().filename().string();
    const std::string suffix = ".mugraph.json";
    if (f.size() <= suffix.size() || f.compare(f.size() - suffix.size(), suffix.size(), suffix))
      continue;
    std::string stem = f.substr(0, f.size() - suffix.size());
    fs::path spec = dir / (stem + ".json");
    if (!fs::exists(spec)) continue;
    Base b{stem, load_graph_file(spec.string()), load_graph_file(e.path().string())};
    // Keep the float64 oracle cheap: large examples are mutated at a smaller size (units of 16,
    // else 8 where that is still large, which the verifier still shrinks further), after
    // checking that the smaller pair agrees.
    auto work = [](const KernelGraph& x, const KernelGraph& y) {
      return std::max(estimate_work(x), estimate_work(y));
    };
    if (work(b.spec, b.mugraph) > double(1 << 22)) {
      const Base full = b;
      for (int64_t unit : {16, 8}) {
        ScaledPair sp = scale_pair(full.spec, full.mugraph, ScaleOptions{unit});
        if (!sp.scaled) break;
        FloatCheckOptions fo;
        fo.tolerance = 1e-9;
        EXPECT_TRUE(float_check(sp.a, sp.b, 3, fo).ok) << stem;
        b = Base{stem + " (unit " + std::to_string(unit) + ")", sp.a, sp.b};
        if (work(b.spec, b.mugraph) <= double(1 << 22)) break;
      }
    }
    r.push_back(std::move(b));
  }
  std::sort(r.begin(), r.end(), [](const Base& x, const Base& y) { return x.name < y.name; });
  r.push_back({"flash_decoding", testing::attention_spec(2, 8, 16, 256),
               testing::flash_decoding(2, 8, 16, 256, 4, 4, 4)});
  return r;
}

// The oracle: does the mutant compute another function than the spec? float64 on sampled rows
// first, on everything when the sample shows no difference.
bool oracle_differs(const KernelGraph& spec, const KernelGraph& m) {
  FloatCheckOptions sample;
  sample.max_work = 0;
  sample.rows = 4;
  sample.tolerance = 1e-9;
  // Structural bugs show on the uniform generator; a selection against a constant (a running
  // max initialised to 0) only on rows of one sign, which uniform rows almost never are.
  sample.input_stds = {0.0};
  sample.signed_inputs = true;
  if (!float_check(spec, m, 11, sample).ok) return true;
  FloatCheckOptions full = sample;
  full.max_work = 1e30;
  return !float_check(spec, m, 11, full).ok;
}

// Does element `idx` of output `o` differ between spec and m in float64? (Checks that a
// verdict points at a real difference, through the scaled-to-full index mapping.)
bool element_differs(const KernelGraph& spec, const KernelGraph& m, int o,
                     const std::vector<int64_t>& idx) {
  const Shape& shape = spec.tensor(spec.outputs[o]).shape;
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  int64_t cols = shape.empty() ? 1 : shape.back(), row = flat / cols, col = flat % cols;
  std::vector<std::vector<int64_t>> rows(spec.outputs.size());
  rows[o] = {row};
  // On the uniform generator, and on normal inputs of alternating sign per input (a difference
  // behind a selection against a constant shows only on rows whose max is negative).
  for (int set = 0; set < 2; ++set) {
    std::vector<HostTensor> in = random_inputs(spec, 5, set ? 1.0 : 0.0), in_m;
    if (set)
      for (size_t i = 0; i < in.size(); ++i)
        for (double& v : in[i].data) v = (i % 2 ? 1 : -1) * std::fabs(v);
    for (int t : m.inputs)
      for (size_t i = 0; i < spec.inputs.size(); ++i)
        if (spec.tensor(spec.inputs[i]).name == m.tensor(t).name) in_m.push_back(in[i]);
    double x = evaluate_rows(spec, in, rows)[o].data[col];
    double y = evaluate_rows(m, in_m, rows)[o].data[col];
    if (!(std::fabs(x - y) <= 1e-9 * (std::fabs(x) + std::fabs(y)))) return true;
  }
  return false;
}

struct Count {
  int different = 0, caught = 0, same = 0, accepted = 0;
};

TEST(Mutation, EveryWrongMutantOfEveryExampleIsRejected) {
  VerifyOptions opt;
  opt.max_work = 0;  // always judge the scaled instance where there is one
  if (const char* seed = std::getenv("KILN_VERIFY_SEED")) opt.seed = std::strtoull(seed, 0, 10);
  int generated = 0, invalid = 0, incompatible = 0;
  std::map<std::string, Count> by_kind;
  Count total;
  std::vector<std::string> escapes, false_alarms, unconfirmed;
  int confirmed = 0, cut_caught = 0, cut_applied = 0, unbounded = 0;
  int dtype_mutants = 0, dtype_rejected = 0;
  for (const Base& b : bases()) {
    auto t0 = std::chrono::steady_clock::now();
    int before = generated;
    ASSERT_TRUE(verify(b.spec, b.mugraph, opt).equivalent()) << b.name;
    // An output stored in another dtype is another ABI: refused, whatever the values.
    for (int t : b.mugraph.outputs)
      for (DType d : {DType::F16, DType::BF16, DType::F32})
        if (d != b.mugraph.tensor(t).dtype) {
          KernelGraph m = b.mugraph;
          m.tensors[t].dtype = d;
          ++dtype_mutants;
          try {
            verify(b.spec, m, opt);
          } catch (const UserError&) {
            ++dtype_rejected;
          }
        }
    for (testing::Mutant& mu : testing::mutants_of(b.mugraph)) {
      ++generated;
      KernelGraph m;
      try {
        m = rebuild_graph(mu.g);
      } catch (const UserError&) {
        ++invalid;  // the checking builders refuse it
        continue;
      }
      try {
        check_compatible(b.spec, m);
      } catch (const UserError&) {
        ++incompatible;  // another interface: verify() refuses it with a UserError
        continue;
      }
      Verdict v = verify(b.spec, m, opt);
      // The same pair judged after prefix cutting as well (fewer blocks / iterations).
      ScaledPair cut = scale_pair(b.spec, m, ScaleOptions{4, true});
      VerifyOptions as_is;
      as_is.scale = false;
      // Accepted with a bound (an unbounded verdict is reported, like a rejection).
      bool cut_equivalent = verify(cut.a, cut.b, as_is).bounded();
      cut_applied += cut.description.find("units") != std::string::npos;
      Count& c = by_kind[mu.kind];
      if (oracle_differs(b.spec, m)) {
        ++c.different, ++total.different;
        if (!cut_equivalent)
          ++cut_caught;
        else
          escapes.push_back(b.name + ": " + mu.what + " (after prefix cutting: " + cut.description +
                            ")");
        if (!v.equivalent()) {
          ++c.caught, ++total.caught;
          if (element_differs(b.spec, m, v.output, v.element))
            ++confirmed;
          else
            unconfirmed.push_back(b.name + ": " + mu.what + "\n" + v.summary());
        } else if (!v.bounded()) {
          // Equivalent on every trial but reported unbounded (the outputs depend on a
          // selection): not shipped without a float check on signed inputs, so reported.
          ++c.caught, ++total.caught, ++unbounded, ++confirmed;
        } else
          escapes.push_back(b.name + ": " + mu.what + "\n" + v.summary());
      } else {
        ++c.same, ++total.same;
        if (v.equivalent())
          ++c.accepted, ++total.accepted;
        else
          false_alarms.push_back(b.name + ": " + mu.what + "\n" + v.summary());
      }
    }
    std::printf("%s: %d mutants, %.1f s\n", b.name.c_str(), generated - before,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf(
      "mutants generated %d: %d refused by the builders, %d with another interface, "
      "%d wrong, %d equivalent (re-tilings)\n",
      generated, invalid, incompatible, total.different, total.same);
  std::printf("%-24s %8s %8s %10s %9s\n", "operator", "wrong", "caught", "equivalent", "accepted");
  for (const auto& [kind, c] : by_kind)
    std::printf("%-24s %8d %8d %10d %9d\n", kind.c_str(), c.different, c.caught, c.same,
                c.accepted);
  std::printf("catch rate: %d / %d = %.1f%%; equivalent mutants accepted: %d / %d\n", total.caught,
              total.different, total.different ? 100.0 * total.caught / total.different : 100.0,
              total.accepted, total.same);
  std::printf("of those, reported unbounded (selections): %d\n", unbounded);
  std::printf("output dtype changed: %d / %d rejected as another interface\n", dtype_rejected,
              dtype_mutants);
  EXPECT_EQ(dtype_rejected, dtype_mutants);
  std::printf("differing element confirmed by float64: %d / %d\n", confirmed, total.caught);
  std::printf("caught after prefix cutting too: %d / %d (it cut units in %d pairs)\n", cut_caught,
              total.different, cut_applied);
  for (const std::string& e : unconfirmed) std::printf("unconfirmed element: %s\n", e.c_str());
  for (const std::string& e : escapes) ADD_FAILURE() << "accepted a wrong mutant: " << e;
  for (const std::string& e : false_alarms) std::printf("false alarm: %s\n", e.c_str());
  EXPECT_EQ(total.caught, total.different);
  EXPECT_EQ(cut_caught, total.different);
  // Every reported element is a real difference at full size (the scaled-to-full index mapping
  // is right). A difference behind a selection (max, relu) could show at another element than
  // in floats, since the field ranks values by a hash; none of these bases has one.
  EXPECT_EQ(confirmed, total.caught);
  EXPECT_GT(total.different, 100);
}

}  // namespace
}  // namespace kiln::verifier
