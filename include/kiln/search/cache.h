// The result cache (checkpoints): a finished search stored under a key hashed from the spec's
// canonical form (its mugraph/1 text), the result-deciding config and KILN_VERSION, so a second
// `kiln optimize` of the same problem returns at once and a new Kiln version never reads an old
// entry.
#pragma once

#include <optional>
#include <string>

#include "kiln/search/search.h"

namespace kiln::search {

// 16 hex digits.
std::string cache_key(const KernelGraph& spec, const SearchConfig& config);
// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln, else ./.kiln-cache.
std::string default_cache_dir();
// The stored result for key, if any and readable (a damaged entry is ignored).
std::optional<SearchResult> cache_load(const std::string& dir, const std::string& key);
// Stores atomically (write to a temporary file, then rename). Failures are ignored: the cache
// is an optimization.
void cache_store(const std::string& dir, const std::string& key, const SearchResult& r);

}  // namespace kiln::search
