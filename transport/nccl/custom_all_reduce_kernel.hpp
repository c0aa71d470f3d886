// What custom_all_reduce.cpp and its kernel (custom_all_reduce.cu) share: the IPC buffer's
// layout, the launch shape and the launcher. Internal to transport/nccl.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace troupe::car {

inline constexpr int kMaxRanks = 8;
/// CTAs per call (all resident at once on any GPU this runs on: each waits only for the peers'
/// CTA of the same index) and threads per CTA.
inline constexpr int kBlocks = 32;
inline constexpr int kThreads = 512;
/// The buffer: flags [kBlocks][kMaxRanks] u32 (written by the peers), then two data halves.
inline constexpr size_t kFlagBytes = size_t(kBlocks) * kMaxRanks * sizeof(uint32_t);
inline constexpr size_t kDataOffset = (kFlagBytes + 255) / 256 * 256;

/// Every rank's buffer as mapped in this process (its own included), and the half size.
struct Peers {
  char* base[kMaxRanks];
  size_t max_bytes;
};

/// dtype: 0 f32, 1 f16, 2 bf16. err: bit r set when peer r did not arrive within timeout_ns.
cudaError_t launch_one_shot(int dtype, void* x, int64_t n, const Peers& peers, int rank, int size,
                            uint32_t* counters, int* err, uint64_t timeout_ns, cudaStream_t stream);

}  // namespace troupe::car
