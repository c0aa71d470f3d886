// Where the KV blocks of a host memory region are, for moving blocks between two regions.
//
// Block b is num_planes segments of segment_bytes; segment p starts at byte
//   p * plane_stride + b * block_stride
// from the region's base. Two layouts cover troupe's host KV memory:
// - contiguous(num_blocks, block_bytes): each block in one piece (one plane);
// - per_layer(num_layers, num_blocks, slice_bytes): the model runner's swap space, one
//   [num_blocks, block_size, num_kv_heads, head_dim] plane per layer for K and one for V
//   (planes in the order layer 0 K, layer 0 V, layer 1 K, ...), so a block is 2 * num_layers
//   slices of slice_bytes = block_size * num_kv_heads * head_dim * dtype bytes.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <ucp/api/ucp.h>

namespace troupe {

struct KvLayout {
  uint64_t num_blocks = 0;
  uint32_t num_planes = 1;
  uint64_t segment_bytes = 0;
  uint64_t block_stride = 0;
  uint64_t plane_stride = 0;

  [[nodiscard]] static KvLayout contiguous(uint64_t num_blocks, uint64_t block_bytes);
  [[nodiscard]] static KvLayout per_layer(uint32_t num_layers, uint64_t num_blocks,
                                          uint64_t slice_bytes);

  /// Bytes one block carries.
  [[nodiscard]] uint64_t block_bytes() const { return uint64_t(num_planes) * segment_bytes; }
  /// Bytes from the base to the end of the last segment (the region to register).
  [[nodiscard]] uint64_t span_bytes() const;
  /// Byte offset of block b's plane p.
  [[nodiscard]] uint64_t offset(uint64_t block, uint32_t plane) const {
    return uint64_t(plane) * plane_stride + block * block_stride;
  }
  /// The segments of block b in memory at `base`, in plane order.
  [[nodiscard]] std::vector<ucp_dt_iov_t> segments(void* base, uint64_t block) const;
  /// Copies block b's segments (in memory at `base`) to `out` / from `in`, block_bytes() bytes.
  void gather(const void* base, uint64_t block, uint8_t* out) const;
  void scatter(void* base, uint64_t block, const uint8_t* in) const;
  /// Throws troupe::Error naming `who` and the field when the layout is empty or its segments
  /// overlap.
  void validate(std::string_view who) const;
};

/// One block to move: block `remote` of the remote region <-> block `local` of the local one.
struct KvBlockMove {
  uint64_t remote = 0;
  uint64_t local = 0;
};

}  // namespace troupe
