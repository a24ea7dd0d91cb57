// GPU targets and the exact resource rule for block graphs.
//
// The rule (also in docs/mugraph-format.md) is what the factories check and what the emitter
// must stay within:
//   shared memory = sum over input-iterator tiles of numel * sizeof(tensor dtype)
//                 + sum over every other tile that is not an accumulator and not consumed only by
//                   accumulators, of numel * 4 (float32 staging)
//   registers/thread = 32 + sum over accumulators and tiles consumed only by accumulators of
//                      ceil(numel / block_threads)   (float32, one register each)
// and it must hold that shared memory <= smem_per_block, registers/thread <= 255 and
// block_threads * registers/thread <= regs_per_sm.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class Arch : uint8_t { Sm80, Sm90a };

struct Target {
  Arch arch;
  const char* name;           // "sm_80", "sm_90a"
  int64_t smem_per_block;     // bytes a block may opt into
  int regs_per_thread_max;    // 255
  int regs_per_sm;            // 65536
  int max_threads_per_block;  // 1024
  int sm_count;               // A100: 108, H100 SXM: 132
  double dram_bytes_per_s;    // achievable copy bandwidth
  double tc_flops_per_s;      // dense fp16 tensor-core rate
  double fp32_flops_per_s;    // CUDA-core fp32 FMA rate (2 flops per FMA)
  double launch_s;            // one launch replayed from a CUDA graph
};

const Target& target_for(Arch a);
std::optional<Arch> arch_from_name(std::string_view name);  // "sm_80", "sm_90a" (also "sm_90")
inline const Target& default_target() {
  return target_for(Arch::Sm90a);
}

}  // namespace kiln
