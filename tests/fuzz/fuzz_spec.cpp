// libFuzzer entry for the spec reader. The contract under test (spec-format.md, "Errors"): any
// bytes either parse or raise a UserError whose rendering is short, printable UTF-8. Anything
// else (an InternalError or other exception, a sanitizer report, a crash, a hang, unbounded
// memory) escapes or aborts here, and the fuzzer reports it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kiln/ir/diag.h"
#include "kiln/ir/json_io.h"

namespace {

// What a parsed spec must satisfy whatever its text was.
void check_graph(const kiln::KernelGraph& g) {
  if (g.inputs.empty() || g.outputs.empty() || g.ops.empty()) std::abort();
  for (int id : g.outputs)
    if (id < 0 || id >= static_cast<int>(g.tensors.size())) std::abort();
  for (const kiln::TensorDesc& t : g.tensors)
    if (t.shape.size() > static_cast<size_t>(kiln::kMaxRank) ||
        kiln::numel(t.shape) > kiln::kMaxElements)
      std::abort();
}

void check_error(const kiln::UserError& e) {
  const std::string r = e.render();
  if (r.size() > 4096) std::abort();
  for (char c : r)
    if (static_cast<unsigned char>(c) < 0x20) std::abort();
  (void)nlohmann::json(r).dump();  // throws (and so crashes the run) on invalid UTF-8
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    check_graph(kiln::parse_spec(text, "fuzz.json"));
  } catch (const kiln::UserError& e) {
    check_error(e);
  }
  return 0;
}
