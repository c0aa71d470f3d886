#include "transport/kv/kv_layout.hpp"

#include <cstring>

#include "runtime/error.hpp"

namespace troupe {

KvLayout KvLayout::contiguous(uint64_t num_blocks, uint64_t block_bytes) {
  return KvLayout{num_blocks, 1, block_bytes, block_bytes, num_blocks * block_bytes};
}

KvLayout KvLayout::per_layer(uint32_t num_layers, uint64_t num_blocks, uint64_t slice_bytes) {
  return KvLayout{num_blocks, 2 * num_layers, slice_bytes, slice_bytes, num_blocks * slice_bytes};
}

uint64_t KvLayout::span_bytes() const {
  if (num_blocks == 0 || num_planes == 0) return 0;
  return offset(num_blocks - 1, num_planes - 1) + segment_bytes;
}

std::vector<ucp_dt_iov_t> KvLayout::segments(void* base, uint64_t block) const {
  std::vector<ucp_dt_iov_t> v(num_planes);
  for (uint32_t p = 0; p < num_planes; ++p)
    v[p] = ucp_dt_iov_t{static_cast<uint8_t*>(base) + offset(block, p), segment_bytes};
  return v;
}

void KvLayout::gather(const void* base, uint64_t block, uint8_t* out) const {
  for (uint32_t p = 0; p < num_planes; ++p)
    std::memcpy(out + uint64_t(p) * segment_bytes,
                static_cast<const uint8_t*>(base) + offset(block, p), segment_bytes);
}

void KvLayout::scatter(void* base, uint64_t block, const uint8_t* in) const {
  for (uint32_t p = 0; p < num_planes; ++p)
    std::memcpy(static_cast<uint8_t*>(base) + offset(block, p), in + uint64_t(p) * segment_bytes,
                segment_bytes);
}

void KvLayout::validate(std::string_view who) const {
  if (num_blocks == 0) fail("{}: kv layout num_blocks must be positive", who);
  if (num_planes == 0) fail("{}: kv layout num_planes must be positive", who);
  if (segment_bytes == 0) fail("{}: kv layout segment_bytes must be positive", who);
  // Segments must not overlap: blocks of one plane are block_stride apart, planes
  // plane_stride apart (one of the two strides spans the other's whole extent).
  const bool blocks_inside_planes =
      block_stride >= segment_bytes &&
      (num_planes == 1 || plane_stride >= block_stride * (num_blocks - 1) + segment_bytes);
  const bool planes_inside_blocks =
      plane_stride >= segment_bytes &&
      (num_blocks == 1 || block_stride >= plane_stride * (num_planes - 1) + segment_bytes);
  if (!blocks_inside_planes && !planes_inside_blocks)
    fail(
        "{}: kv layout segments overlap (num_blocks {}, num_planes {}, segment_bytes {}, "
        "block_stride {}, plane_stride {})",
        who, num_blocks, num_planes, segment_bytes, block_stride, plane_stride);
}

}  // namespace troupe
