// The result cache (cache.h).
#include "kiln/search/cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>

#include "kiln/ir/file_lock.h"
#include "kiln/ir/hash.h"
#include "kiln/ir/json_io.h"
#include "kiln/version.h"

namespace kiln::search {

// The running binary's identity: a hash of its bytes (XXH3 over /proc/self/exe, read once per
// process: ~50 ms for the 126 MB debug build). A rebuilt kiln (another cost model, emitter or
// search) must not serve what an older build ranked, and KILN_VERSION changes only with releases.
// Size and modification time were not enough: a changed constant keeps the size, and installs
// that pin file dates keep the time. Empty where the file cannot be read (the version alone then).
static std::string binary_identity() {
  static const std::string id = hash_file_hex("/proc/self/exe");
  return id;
}

std::string cache_key(const KernelGraph& spec, const SearchConfig& config) {
  return hash_hex(write_mugraph(spec) + "\n" + config.to_json().dump() + "\n" + KILN_VERSION +
                  "\n" + binary_identity());
}

std::string default_cache_dir() {
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/kiln";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/kiln";
  return ".kiln-cache";
}

std::string cache_entry_path(const std::string& dir, const std::string& key) {
  return dir + "/" + key + ".json";
}

CacheLookup cache_load(const std::string& dir, const std::string& key) {
  CacheLookup l;
  l.path = cache_entry_path(dir, key);
  auto damaged = [&](std::string why) {
    l.status = CacheStatus::Damaged;
    l.why = std::move(why);
    return l;
  };
  // stat (not lstat): a link to a stored result is a stored result; a link to a FIFO is a FIFO.
  struct stat st;
  if (::stat(l.path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return l;  // Missing
    return damaged(std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    l.status = CacheStatus::NotRegular;
    l.why = file_kind_name(st.st_mode);
    return l;
  }
  // Non-blocking, in case a FIFO replaced the file since the stat; checked again once open.
  int fd = ::open(l.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return damaged(std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    l.status = CacheStatus::NotRegular;
    l.why = file_kind_name(st.st_mode);
    return l;
  }
  std::string text;
  char buf[1 << 16];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) != 0) {
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return damaged(std::string("read failed: ") + std::strerror(err));
    }
    text.append(buf, size_t(n));
    if (text.size() > kMaxFileBytes) {
      ::close(fd);
      return damaged(fmt::format("more than {} MiB", kMaxFileBytes >> 20));
    }
  }
  ::close(fd);
  try {
    SearchResult r = result_from_json(nlohmann::json::parse(text));
    r.from_cache = true;
    l.status = CacheStatus::Hit;
    l.result = std::move(r);
  } catch (const std::exception& e) {
    // The parser's message can be long (it quotes the input); its first line is enough.
    std::string what = e.what();
    return damaged(what.substr(0, std::min<size_t>(what.find('\n'), 200)));
  }
  return l;
}

bool cache_store(const std::string& dir, const std::string& key, const SearchResult& r) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return false;
  std::string path = cache_entry_path(dir, key);
  // rename() would replace a FIFO or a device at the path (and fail on a directory): leave
  // anything that is not a regular file where it is.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return false;
  std::string tmp = fmt::format("{}.tmp{}", path, static_cast<long>(::getpid()));
  {
    std::ofstream out(tmp);
    if (!out) return false;
    out << result_to_json(r, true).dump(1) << "\n";
    out.close();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return false;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (!ec) return true;
  std::filesystem::remove(tmp, ec);
  return false;
}

FileLock lock_cache_entry(const std::string& dir, const std::string& key,
                          const std::function<void()>& on_wait) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return FileLock(dir + "/" + key + ".lock", on_wait);
}

}  // namespace kiln::search
