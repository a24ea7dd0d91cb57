// The nvcc the compile-only tests use: $NVCC, the one CMake found (KILN_NVCC_PATH), or the usual
// places; "" when there is none (the tests then skip themselves).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kiln::testing {

inline std::string find_nvcc() {
  namespace fs = std::filesystem;
  if (const char* e = std::getenv("NVCC"); e && *e && fs::exists(e)) return e;
#ifdef KILN_NVCC_PATH
  if (fs::exists(KILN_NVCC_PATH)) return KILN_NVCC_PATH;
#endif
  for (const char* p : {"/usr/local/cuda/bin/nvcc", "/usr/bin/nvcc"})
    if (fs::exists(p)) return p;
  return "";
}

}  // namespace kiln::testing
