// The device headers that emitted files inline, from the copies embedded in the binary.
//
// The runtime (runtime/*.cuh, in the order runtime/kiln_runtime.cuh includes them), the codegen
// device library (runtime/cg/kiln_cg.cuh) and the harness's device code (runtime/harness/: the
// generator kiln_rng.h, harness_runtime.cuh, harness_main.cuh) are embedded at build time
// (embedded_files.h), so `kiln` emits the same text from any directory, copied to any machine, with
// no source tree. The environment does not change what is emitted.
#include <regex>
#include <string_view>

#include "embedded_files.h"
#include "emit_internal.h"
#include "kiln/codegen/emit.h"
#include "kiln/ir/diag.h"

namespace kiln {

namespace {

std::string embedded(std::string_view rel) {
  for (int i = 0; i < cgen::kNumEmbeddedFiles; ++i) {
    const cgen::EmbeddedFile& f = cgen::kEmbeddedFiles[i];
    if (rel == f.path) return std::string(reinterpret_cast<const char*>(f.data), f.size);
  }
  // The build embeds every file named here (CMakeLists.txt, KILN_DEVICE_HEADERS).
  KILN_ASSERT(false, "device header {} is not embedded in this build", rel);
  return {};
}

}  // namespace

const std::string& rng_text() {
  static const std::string text = embedded("runtime/harness/kiln_rng.h");
  return text;
}

const std::string& harness_runtime_text() {
  static const std::string text = embedded("runtime/harness/harness_runtime.cuh");
  return text;
}

const std::string& harness_main_text() {
  static const std::string text = embedded("runtime/harness/harness_main.cuh");
  return text;
}

const std::string& device_library_text() {
  static const std::string text = [] {
    std::string umbrella = embedded("runtime/kiln_runtime.cuh");
    std::string out;
    std::regex inc(R"re(#include\s+"([A-Za-z0-9_]+\.cuh)")re");
    for (auto it = std::sregex_iterator(umbrella.begin(), umbrella.end(), inc);
         it != std::sregex_iterator(); ++it) {
      std::string name = (*it)[1];
      out += "// ---- runtime/" + name + " " + std::string(60, '-') + "\n";
      out += embedded("runtime/" + name);
      out += "\n";
    }
    out += "// ---- runtime/cg/kiln_cg.cuh " + std::string(60, '-') + "\n";
    out += embedded("runtime/cg/kiln_cg.cuh");
    return out;
  }();
  return text;
}

}  // namespace kiln
