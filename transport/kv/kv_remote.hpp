// The other side of a KvRegion (see kv_region.hpp): copies lists of blocks between it and a
// local host region. Runs on the caller's thread; every call waits at most settings.ucx.timeout
// and throws troupe::Error naming the region's process on a failure or the timeout, after which
// the object is unusable.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "transport/bootstrap.hpp"
#include "transport/kv/kv_layout.hpp"
#include "transport/ucx/ucx_context.hpp"

namespace troupe {

struct KvSettings {
  ucx::Settings ucx;
  /// "auto", "rma" or "am" (see kv_region.hpp).
  std::string method = "auto";
  void validate() const;
};

class KvRemote {
 public:
  /// `descriptor` from KvRegion::descriptor(); the local region [local_base, + span) must have
  /// blocks of the same size as the remote one. A block is its segments concatenated in plane
  /// order, so the two sides may cut it differently (a per-layer swap space and a contiguous
  /// staging buffer, say).
  KvRemote(const Blob& descriptor, void* local_base, KvLayout local_layout,
           KvSettings settings = {});
  ~KvRemote();
  KvRemote(const KvRemote&) = delete;
  KvRemote& operator=(const KvRemote&) = delete;

  /// Remote blocks -> local blocks; returns when the local memory holds them.
  void read(std::span<const KvBlockMove> moves);
  /// Local blocks -> remote blocks; returns when they are in the remote memory.
  void write(std::span<const KvBlockMove> moves);

  /// "rma" or "am": the method in use.
  [[nodiscard]] const std::string& method() const { return method_; }
  [[nodiscard]] const KvLayout& remote_layout() const { return remote_layout_; }

 private:
  struct Io;
  void check(std::span<const KvBlockMove> moves, std::string_view op) const;
  template <class F>
  void guarded(F&& body);
  /// Active messages: f(batch, request id, block bytes) for each batch of at most
  /// kBatchBytes, with room for the batch in staging_ when `staged`.
  template <class F>
  void in_batches(std::span<const KvBlockMove> moves, bool staged, F&& f);

  KvSettings settings_;
  void* local_base_;
  KvLayout local_layout_, remote_layout_;
  PeerName region_;
  uint64_t remote_base_ = 0;
  std::string method_;
  std::unique_ptr<Io> io_;
  uint64_t next_request_ = 1;
  // Active messages of multi-segment blocks: one contiguous staging copy per block of a batch,
  // kept between calls (fresh buffers cost page faults and UCX registrations each time).
  std::vector<uint8_t> staging_;
  bool contiguous_wire_ = false;  // multi-segment blocks travel contiguously (tcp) or as iovs
  uint32_t wire_ = 0;             // the same, as the protocol's header value
  std::string broken_;
};

}  // namespace troupe
