// The memory limit's measurements (memory.h).
#include "kiln/ir/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

namespace kiln {

int64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  if (!(f >> pages >> resident)) return 0;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

int64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? static_cast<int64_t>(pages) * size : 0;
}

int64_t default_memory_limit_mb() {
  const int64_t ram = physical_memory_bytes();
  if (ram <= 0) return 8192;
  return std::max<int64_t>(1024, ram / 2 / (1 << 20));
}

std::string bytes_str(double bytes) {
  if (bytes >= 1e9) return fmt::format("{:.1f} GB", bytes / 1e9);
  if (bytes >= 1e6) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.0f} KB", bytes / 1e3);
}

std::string over_memory_limit(double need, int64_t limit_bytes) {
  if (limit_bytes <= 0) return {};
  const double have = static_cast<double>(rss_bytes());
  if (have + need <= static_cast<double>(limit_bytes)) return {};
  return fmt::format("needs ~{} with {} in use, over the {} memory limit", bytes_str(need),
                     bytes_str(have), bytes_str(static_cast<double>(limit_bytes)));
}

namespace {
// Below this a mapping costs more (a system call and whole pages) than zeroing heap memory.
constexpr size_t kMapBytes = size_t{1} << 20;
}  // namespace

void* lazy_zero_allocate(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes < kMapBytes) {
    void* p = std::calloc(1, bytes);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

void lazy_zero_free(void* p, size_t bytes) {
  if (!p) return;
  if (bytes == 0) bytes = 1;
  if (bytes < kMapBytes)
    std::free(p);
  else
    ::munmap(p, bytes);
}

}  // namespace kiln
