// The memory limit (`--memory-limit`): what the process may hold. The search checks its resident
// set every few thousand states; the interpreter, the verifier and the float check estimate what
// their tensors need before allocating them (docs/reliability.md, "Memory").
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace kiln {

// Thrown where work would need more memory than the limit allows; the CLI prints it and exits 1.
struct MemoryLimitExceeded : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t rss_bytes();              // resident set of this process (0 if unknown)
int64_t physical_memory_bytes();  // RAM of the machine (0 if unknown)
// The default --memory-limit: half the machine's RAM, at least 1 GiB (8 GiB where unknown).
int64_t default_memory_limit_mb();
// "3.2 GB"
std::string bytes_str(double bytes);
// Empty when `need` more bytes fit under `limit_bytes` (<= 0: no limit) with the resident set;
// otherwise why not: "needs ~X with Y in use, over the Z memory limit".
std::string over_memory_limit(double need, int64_t limit_bytes);

// Zero-filled memory that costs only what is written: blocks of 1 MiB or more are fresh anonymous
// mappings (MAP_NORESERVE), whose pages the kernel commits on first write, smaller ones are
// zeroed heap blocks. Throws std::bad_alloc when the address space is refused.
void* lazy_zero_allocate(size_t bytes);
void lazy_zero_free(void* p, size_t bytes);

// A std::vector allocator over lazy_zero_allocate: `std::vector<T, LazyZeroAllocator<T>>(n)`
// of a trivial T is n zeros that occupy no memory until written, so that an evaluation of a few
// sampled rows of a huge tensor holds those rows only (docs/reliability.md, "Memory").
// Contract: default construction of a trivial T writes nothing — the memory is already zero
// when it comes from allocate(). A vector that shrinks and grows again within its capacity
// keeps stale values in the regrown tail; callers that resize() must zero it themselves
// (interp::Tensor::reset does).
template <class T>
struct LazyZeroAllocator {
  using value_type = T;
  LazyZeroAllocator() = default;
  template <class U>
  LazyZeroAllocator(const LazyZeroAllocator<U>&) {}
  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    return static_cast<T*>(lazy_zero_allocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) { lazy_zero_free(p, n * sizeof(T)); }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    if constexpr (sizeof...(A) == 0 && std::is_trivially_default_constructible_v<U>)
      return;  // already zero (see the contract above)
    else
      ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
  template <class U>
  bool operator==(const LazyZeroAllocator<U>&) const {
    return true;
  }
};

}  // namespace kiln
