// The op table, expanded from KILN_OPS.
#include "kiln/ir/ops.h"

#include "json_util.h"
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

AccumKind accum_kind(OpKind k) {
  if (k == OpKind::AccumSum) return AccumKind::Sum;
  if (k == OpKind::AccumMax) return AccumKind::Max;
  KILN_ASSERT(k == OpKind::AccumRescale, "{} is not an accumulator", op_info(k).name);
  return AccumKind::Rescale;
}

std::optional<OpKind> op_from_name(std::string_view name) {
  for (const OpInfo& i : all_ops())
    if (name == i.name) return i.kind;
  return std::nullopt;
}

std::string closest_op_name(std::string_view name, uint8_t level) {
  std::vector<std::string_view> names;
  for (const OpInfo& i : all_ops())
    if (i.levels & level) names.push_back(i.name);
  return closest_name(name, names);
}

}  // namespace kiln
