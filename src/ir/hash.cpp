// The content hash (hash.h): XXH3-64 with the default seed.
#include "kiln/ir/hash.h"

#include <xxhash.h>

#include <cstdio>
#include <vector>

#include <fmt/format.h>

namespace kiln {

uint64_t hash64(std::string_view bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::string hash_hex(std::string_view bytes) {
  return fmt::format("{:016x}", hash64(bytes));
}

std::string hash_file_hex(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return {};
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(size_t(1) << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) XXH3_64bits_update(st, buf.data(), n);
  const bool ok = !std::ferror(f);
  std::fclose(f);
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return ok ? fmt::format("{:016x}", h) : std::string();
}

}  // namespace kiln
