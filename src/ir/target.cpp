// Target descriptions. Resource limits are the architectural ones (CUDA programming guide,
// compute capability tables); rates are measured on the device machines (see docs/cost-model.md).
#include "kiln/ir/target.h"

namespace kiln {

const Target& target_for(Arch a) {
  // sm_80: A100 SXM. 163 KB opt-in shared memory per block (166912 bytes).
  static const Target sm80{Arch::Sm80, "sm_80", 166912, 255,     65536, 1024,
                           108,        1.8e12,  300e12, 19.5e12, 1.5e-6};
  // sm_90a: H100 SXM. 227 KB opt-in shared memory per block (232448 bytes).
  static const Target sm90a{Arch::Sm90a, "sm_90a", 232448, 255,   65536, 1024,
                            132,         3.0e12,   690e12, 60e12, 1.0e-6};
  return a == Arch::Sm80 ? sm80 : sm90a;
}

std::optional<Arch> arch_from_name(std::string_view name) {
  if (name == "sm_80") return Arch::Sm80;
  if (name == "sm_90a" || name == "sm_90") return Arch::Sm90a;
  return std::nullopt;
}

}  // namespace kiln
