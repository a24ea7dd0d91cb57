// The one hash Kiln uses for what it keys by content: cache keys, μGraph fingerprints, the
// verifier's per-input streams, interned expression names. XXH3-64 (xxHash, Debian's
// libxxhash-dev): fast, well spread, and the same value on every run and every platform, which
// is what lets a cache key or a fingerprint be stored and compared later.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

uint64_t hash64(std::string_view bytes);
// hash64 as 16 lowercase hex digits.
std::string hash_hex(std::string_view bytes);
// hash_hex of a file's bytes, read in 1 MB chunks (not held in memory); empty if it cannot be read.
std::string hash_file_hex(const std::string& path);

}  // namespace kiln
