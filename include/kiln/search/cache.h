// The result cache (checkpoints): a finished search stored under a key hashed from the spec's
// canonical form (its mugraph/1 text), the result-deciding config and KILN_VERSION, so a second
// `kiln optimize` of the same problem returns at once and a new Kiln version never reads an old
// entry.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "kiln/ir/file_lock.h"
#include "kiln/search/search.h"

namespace kiln::search {

// 16 hex digits: a hash of the spec, the result-deciding config, the version and the running
// binary (a hash of its bytes).
std::string cache_key(const KernelGraph& spec, const SearchConfig& config);
// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln, else ./.kiln-cache.
std::string default_cache_dir();
// DIR/KEY.json, the entry's file.
std::string cache_entry_path(const std::string& dir, const std::string& key);

// What cache_load found at an entry's path.
enum class CacheStatus {
  Hit,         // a stored result (which the caller still checks again: recheck_cached)
  Missing,     // no entry
  NotRegular,  // a FIFO, directory, device or socket: never opened for reading, never replaced
  Damaged,     // a file that is not a stored result (unparseable, truncated, unreadable, too
               // large): the next cache_store replaces it
};

struct CacheLookup {
  CacheStatus status = CacheStatus::Missing;
  std::string path;                    // the entry's file
  std::string why;                     // NotRegular, Damaged: what is wrong, for a message
  std::optional<SearchResult> result;  // set iff status == Hit
};

// The stored result for key. Never blocks: the path is checked with stat before it is opened, a
// special file is not opened at all, and the open is non-blocking besides.
CacheLookup cache_load(const std::string& dir, const std::string& key);
// Stores atomically (write to a temporary file, then rename) and returns whether it did. A path
// that exists and is not a regular file is left alone (it is not ours to replace). Failures are
// otherwise ignored: the cache is an optimization.
bool cache_store(const std::string& dir, const std::string& key, const SearchResult& r);

// The lock of one entry (flock on DIR/KEY.lock; the directory is created). Hold it around
// load, recheck, search and store: concurrent runs of one spec then take turns, and the second
// finds the first's result instead of searching again. `on_wait` is called once when another
// run holds it. When it cannot be taken, held() is false and the caller goes on unlocked (the
// worst outcome is a repeated search).
FileLock lock_cache_entry(const std::string& dir, const std::string& key,
                          const std::function<void()>& on_wait = {});

}  // namespace kiln::search
