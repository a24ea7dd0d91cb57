// The memory limit (`--memory-limit`): what the process may hold. The search checks its resident
// set every few thousand states; the interpreter, the verifier and the float check estimate what
// their tensors need before allocating them (docs/reliability.md, "Memory").
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

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

}  // namespace kiln
