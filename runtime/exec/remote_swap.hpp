// Swap space held in another process's host memory (a memory node, `troupe worker --kv-store`).
// The model runner copies a swap's blocks between its KV cache and a small host staging cache
// (Backend::swap_blocks, as the local swap does), and a RemoteSwapSpace moves them between the
// staging cache and the memory node. runtime/ knows no UCX: the executor actor makes the
// implementation (transport/kv/remote_swap_space.hpp, over KvRemote) through a connector.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace troupe {

/// The most blocks the runner stages at once: bounds the local host memory a remote swap space
/// costs (64 blocks of a Llama-3-8B are 128 MiB) while batching enough blocks per transfer.
constexpr int64_t kRemoteSwapStagingBlocks = 64;

/// One block to move: block `remote` of the memory node's region <-> block `staging` of the
/// runner's staging cache.
struct RemoteSwapMove {
  int64_t remote = 0;
  int64_t staging = 0;
};

class RemoteSwapSpace {
 public:
  virtual ~RemoteSwapSpace() = default;
  /// Staging blocks -> remote blocks; returns when they are in the remote memory. Throws
  /// troupe::Error naming the memory node on a failure or a timeout.
  virtual void write(std::span<const RemoteSwapMove> moves) = 0;
  /// Remote blocks -> staging blocks; returns when the staging cache holds them. Throws as write.
  virtual void read(std::span<const RemoteSwapMove> moves) = 0;
};

/// What the runner asks for once it knows its block size: a remote region of num_blocks
/// blocks of block_bytes, and the staging cache it copies from and to: staging_blocks blocks
/// laid out per layer (planes layer 0 K, layer 0 V, layer 1 K, ..., each
/// [staging_blocks, block_size, num_kv_heads, head_dim], slice_bytes per block in a plane).
struct RemoteSwapRequest {
  int64_t num_blocks = 0;
  int64_t block_bytes = 0;
  void* staging = nullptr;
  int32_t num_layers = 0;
  int64_t staging_blocks = 0;
  int64_t slice_bytes = 0;
};

using RemoteSwapConnector =
    std::function<std::unique_ptr<RemoteSwapSpace>(const RemoteSwapRequest&)>;

}  // namespace troupe
