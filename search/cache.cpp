// The result cache (cache.h).
#include "kiln/search/cache.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>

#include "kiln/ir/json_io.h"
#include "kiln/version.h"

namespace kiln::search {

std::string cache_key(const KernelGraph& spec, const SearchConfig& config) {
  std::string text = write_mugraph(spec) + "\n" + config.to_json().dump() + "\n" + KILN_VERSION;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

std::string default_cache_dir() {
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/kiln";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/kiln";
  return ".kiln-cache";
}

std::optional<SearchResult> cache_load(const std::string& dir, const std::string& key) {
  std::string path = dir + "/" + key + ".json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    std::stringstream ss;
    ss << in.rdbuf();
    SearchResult r = result_from_json(nlohmann::json::parse(ss.str()));
    r.from_cache = true;
    return r;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void cache_store(const std::string& dir, const std::string& key, const SearchResult& r) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return;
  std::string path = dir + "/" + key + ".json";
  std::string tmp = fmt::format("{}.tmp{}", path, static_cast<long>(::getpid()));
  {
    std::ofstream out(tmp);
    if (!out) return;
    out << result_to_json(r, true).dump(1) << "\n";
    if (!out) return;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

}  // namespace kiln::search
