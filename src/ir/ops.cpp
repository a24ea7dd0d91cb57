// The op table, expanded from KILN_OPS.
#include "kiln/ir/ops.h"

#include <algorithm>

#include "kiln/ir/diag.h"

namespace kiln {

const std::vector<OpInfo>& all_ops() {
  static const std::vector<OpInfo> table = {
#define KILN_OP_INFO(E, N, MIN, MAX, C, L, A) {OpKind::E, N, MIN, MAX, OpClass::C, L, A},
      KILN_OPS(KILN_OP_INFO)
#undef KILN_OP_INFO
  };
  return table;
}

const OpInfo& op_info(OpKind k) {
  const auto& t = all_ops();
  size_t i = static_cast<size_t>(k);
  KILN_ASSERT(i < t.size() && t[i].kind == k, "op kind {} out of table", i);
  return t[i];
}

std::optional<OpKind> op_from_name(std::string_view name) {
  for (const OpInfo& i : all_ops())
    if (name == i.name) return i.kind;
  return std::nullopt;
}

static size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_op_name(std::string_view name, uint8_t level) {
  if (name.size() > 64) return {};
  std::string best;
  size_t best_d = 3;  // suggest only near misses
  for (const OpInfo& i : all_ops()) {
    if (!(i.levels & level)) continue;
    size_t d = edit_distance(name, i.name);
    if (d < best_d) best_d = d, best = i.name;
  }
  return best;
}

}  // namespace kiln
