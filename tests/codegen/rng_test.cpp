// The harness's generator (codegen/kiln_rng.h, inlined into every harness) is the documented
// one: rounded to each dtype it gives exactly kiln::random_tensor's values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../../codegen/kiln_rng.h"
#include "kiln/interp/interp.h"

namespace kiln {
namespace {

TEST(Rng, MatchesInterpreterGeneratorBitForBit) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (int input : {0, 1, 5}) {
      TensorDesc t{"x", {3, 1000}, dt};
      HostTensor h = random_tensor(t, 42, input);
      uint64_t stream = kiln_rng_stream(42, input);
      for (size_t e = 0; e < h.data.size(); ++e) {
        float x = kiln_rng_value(stream, e);
        double want = h.data[e];
        if (dt == DType::F32) {
          ASSERT_EQ(double(x), want) << e;
        } else {
          // want is x rounded to nearest even at the dtype's precision; check it is the nearest.
          double q = dt == DType::F16 ? std::ldexp(1.0, std::max(std::ilogb(x), -14) - 10)
                                      : std::ldexp(1.0, std::ilogb(x) - 7);
          ASSERT_LE(std::fabs(want - x), q / 2) << e;
          ASSERT_EQ(std::fmod(want, q), 0.0) << e;
        }
      }
    }
}

}  // namespace
}  // namespace kiln
