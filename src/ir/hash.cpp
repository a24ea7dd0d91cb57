// The content hash (hash.h): XXH3-64 with the default seed.
#include "kiln/ir/hash.h"

#include <xxhash.h>

#include <fmt/format.h>

namespace kiln {

uint64_t hash64(std::string_view bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::string hash_hex(std::string_view bytes) {
  return fmt::format("{:016x}", hash64(bytes));
}

}  // namespace kiln
