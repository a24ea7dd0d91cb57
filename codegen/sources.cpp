// Finding and reading the device headers that emitted files inline.
//
// The runtime (runtime/*.cuh, in the order runtime/kiln_runtime.cuh includes them) and the
// codegen device library (codegen/kiln_cg.cuh) are read from the source tree at emit time. The
// tree is $KILN_SOURCE_DIR when set, else KILN_SOURCE_DIR from the build, else the directory this
// file was compiled from, so `kiln` works from any working directory.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "kiln/codegen/emit.h"
#include "kiln/ir/diag.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

std::string source_dir() {
  if (const char* env = std::getenv("KILN_SOURCE_DIR"); env && *env) return env;
#ifdef KILN_SOURCE_DIR
  if (fs::exists(fs::path(KILN_SOURCE_DIR) / "runtime")) return KILN_SOURCE_DIR;
#endif
  return fs::path(__FILE__).parent_path().parent_path().string();
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    throw UserError(ErrorCode::Io, "cannot read " + p.string(),
                    "set KILN_SOURCE_DIR to Kiln's source tree (it holds runtime/ and codegen/)");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

const std::string& rng_text() {
  static const std::string text = slurp(fs::path(source_dir()) / "codegen" / "kiln_rng.h");
  return text;
}

const std::string& device_library_text() {
  static const std::string text = [] {
    fs::path root = source_dir();
    std::string umbrella = slurp(root / "runtime" / "kiln_runtime.cuh");
    std::string out;
    std::regex inc(R"re(#include\s+"([A-Za-z0-9_]+\.cuh)")re");
    for (auto it = std::sregex_iterator(umbrella.begin(), umbrella.end(), inc);
         it != std::sregex_iterator(); ++it) {
      std::string name = (*it)[1];
      out += "// ---- runtime/" + name + " " + std::string(60, '-') + "\n";
      out += slurp(root / "runtime" / name);
      out += "\n";
    }
    out += "// ---- codegen/kiln_cg.cuh " + std::string(60, '-') + "\n";
    out += slurp(root / "codegen" / "kiln_cg.cuh");
    return out;
  }();
  return text;
}

}  // namespace kiln
