// Every hand-written example μGraph verifies against its spec, and the verdict is reproducible.
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/ir/json_io.h"
#include "kiln/verifier/scale.h"
#include "kiln/verifier/verify.h"

namespace kiln::verifier {
namespace {

namespace fs = std::filesystem;

std::vector<std::pair<std::string, std::string>> example_pairs() {
  std::vector<std::pair<std::string, std::string>> r;
  fs::path dir = fs::path(KILN_SOURCE_DIR) / "examples";
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string f = e.path().filename().string();
    const std::string suffix = ".mugraph.json";
    if (f.size() <= suffix.size() || f.compare(f.size() - suffix.size(), suffix.size(), suffix))
      continue;
    fs::path spec = dir / (f.substr(0, f.size() - suffix.size()) + ".json");
    if (fs::exists(spec)) r.emplace_back(spec.string(), e.path().string());
  }
  std::sort(r.begin(), r.end());
  return r;
}

TEST(Examples, EveryMugraphVerifiesAgainstItsSpec) {
  auto pairs = example_pairs();
  EXPECT_FALSE(pairs.empty());
  for (const auto& [spec_file, mugraph_file] : pairs) {
    SCOPED_TRACE(mugraph_file);
    KernelGraph spec = load_graph_file(spec_file), mg = load_graph_file(mugraph_file);
    Verdict v = verify(spec, mg);
    std::printf("%s\n%s\n", fs::path(mugraph_file).filename().c_str(), v.summary().c_str());
    EXPECT_TRUE(v.equivalent()) << v.summary();
    EXPECT_LT(v.bound, std::ldexp(1.0, -60));
    EXPECT_GE(v.trials, 2);
    // Both orders agree, and so does the unscaled instance where it is cheap.
    EXPECT_TRUE(verify(mg, spec).equivalent());
    if (std::max(estimate_work(spec), estimate_work(mg)) < double(1 << 24)) {
      VerifyOptions full;
      full.scale = false;
      full.trials = 1;
      EXPECT_TRUE(verify(spec, mg, full).equivalent());
    }
    FloatCheckOptions fo;
    fo.max_work = double(1 << 22);  // sampled rows for the larger examples
    FloatCheck fc = float_check(spec, mg, 7, fo);
    EXPECT_TRUE(fc.ok) << fc.summary();
  }
}

}  // namespace
}  // namespace kiln::verifier
