// Host memory registered for one-sided access (ucp_mem_map) and a peer's registration unpacked
// on an endpoint, plus the RMA calls on them.
//
// RMA is one-sided only in name here: with UCX 1.13's tcp (and with shared memory when peer
// failure handling is on) put/get are emulated over active messages, so the process that
// exposes memory must keep progressing its worker (KvRegion runs a thread for it), and remote
// completion of a put needs a flush (rma_flush).
#pragma once

#include <span>

#include "transport/bootstrap.hpp"
#include "transport/ucx/ucx_worker.hpp"

namespace troupe::ucx {

class MemoryRegion {
 public:
  /// Registers [base, base + bytes) of host memory for remote read and write.
  MemoryRegion(Context& ctx, void* base, size_t bytes);
  /// Allocates `bytes` through UCX (UCP_MEM_MAP_ALLOCATE) and registers them. On shared memory
  /// this is what makes RMA real: UCX places the memory in a segment its posix/sysv transports
  /// can map, so a peer's get/put is a memcpy into it instead of active messages (user memory
  /// registered with the constructor above is not reachable that way). Freed with the region.
  MemoryRegion(Context& ctx, size_t bytes);
  ~MemoryRegion();
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  [[nodiscard]] void* base() const { return base_; }
  [[nodiscard]] size_t bytes() const { return bytes_; }
  /// The remote key, packed for a peer (ucp_rkey_pack): carry it with the base address.
  [[nodiscard]] Blob packed_rkey() const;

 private:
  Context& ctx_;
  void map(void* address, size_t bytes, unsigned flags);
  void* base_ = nullptr;
  size_t bytes_ = 0;
  ucp_mem_h memh_ = nullptr;
};

class RemoteKey {
 public:
  /// Unpacks a peer's packed rkey for use on `ep` (destroy it before the endpoint).
  RemoteKey(Endpoint& ep, std::span<const uint8_t> packed);
  ~RemoteKey();
  RemoteKey(const RemoteKey&) = delete;
  RemoteKey& operator=(const RemoteKey&) = delete;

  [[nodiscard]] ucp_rkey_h get() const { return rkey_; }

 private:
  ucp_rkey_h rkey_ = nullptr;
};

/// Starts a get of `bytes` at `remote_addr` into `dst` / a put of `src` there (local
/// completion: `src` may be reused), adding it to `pending`.
void rma_get(Pending& pending, Endpoint& ep, const RemoteKey& rkey, uint64_t remote_addr, void* dst,
             size_t bytes, std::string_view what);
void rma_put(Pending& pending, Endpoint& ep, const RemoteKey& rkey, uint64_t remote_addr,
             const void* src, size_t bytes, std::string_view what);
/// Starts a flush of `ep`: when it completes, every put before it is in the peer's memory.
void rma_flush(Pending& pending, Endpoint& ep, std::string_view what);

}  // namespace troupe::ucx
