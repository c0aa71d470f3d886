// What KvRegion and KvRemote agree on: the descriptor's bytes and the active messages.
#pragma once

#include "transport/bootstrap.hpp"
#include "transport/kv/kv_layout.hpp"

namespace troupe::kv {

constexpr uint32_t kDescriptorMagic = 0x4e474552;  // "REGN"
// Active message ids. Requests go to the region (reply endpoint attached), replies come back.
constexpr unsigned kReadRequest = 10;  // header: key = request << 32, aux = count; body: u64 blocks
constexpr unsigned kWriteBlock =
    11;                          // header: key = request << 32 | index, aux = block; body: block
constexpr unsigned kReply = 12;  // header: key as above; body: the block (read) or nothing (ack)

// MailHeader::source of a read request or a written block: how a multi-segment block travels.
constexpr uint32_t kSegments = 0;    // as its segments (an iov): best on shared memory
constexpr uint32_t kContiguous = 1;  // as one contiguous staging copy: best on tcp

inline uint64_t reply_key(uint64_t request, uint64_t index) {
  return request << 32 | index;
}

struct Descriptor {
  PeerName owner;
  Blob worker_address;
  Blob rkey;
  uint64_t base = 0;
  KvLayout layout;
};

inline Blob write_descriptor(const Descriptor& d) {
  return BlobWriter(kDescriptorMagic)
      .peer(d.owner)
      .bytes(d.worker_address)
      .bytes(d.rkey)
      .u64(d.base)
      .u64(d.layout.num_blocks)
      .u32(d.layout.num_planes)
      .u64(d.layout.segment_bytes)
      .u64(d.layout.block_stride)
      .u64(d.layout.plane_stride)
      .take();
}

inline Descriptor read_descriptor(const Blob& b) {
  BlobReader rd(b, kDescriptorMagic, "kv region descriptor");
  Descriptor d;
  d.owner = rd.peer();
  d.worker_address = rd.bytes();
  d.rkey = rd.bytes();
  d.base = rd.u64();
  d.layout.num_blocks = rd.u64();
  d.layout.num_planes = rd.u32();
  d.layout.segment_bytes = rd.u64();
  d.layout.block_stride = rd.u64();
  d.layout.plane_stride = rd.u64();
  rd.finish();
  return d;
}

}  // namespace troupe::kv
