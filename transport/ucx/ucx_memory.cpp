#include "transport/ucx/ucx_memory.hpp"

#include "runtime/error.hpp"

namespace troupe::ucx {

MemoryRegion::MemoryRegion(Context& ctx, void* base, size_t bytes) : ctx_(ctx) {
  if (base == nullptr || bytes == 0)
    fail("ucx: cannot register an empty memory region ({} bytes at {})", bytes, base);
  map(base, bytes, 0);
}

MemoryRegion::MemoryRegion(Context& ctx, size_t bytes) : ctx_(ctx) {
  if (bytes == 0) fail("ucx: cannot allocate an empty memory region");
  map(nullptr, bytes, UCP_MEM_MAP_ALLOCATE);
}

void MemoryRegion::map(void* address, size_t bytes, unsigned flags) {
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_PROT | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.address = address;
  mp.length = bytes;
  mp.flags = flags;
  mp.prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE |
            UCP_MEM_MAP_PROT_REMOTE_READ | UCP_MEM_MAP_PROT_REMOTE_WRITE;
  ucs_status_t st = ucp_mem_map(ctx_.get(), &mp, &memh_);
  if (st != UCS_OK)
    fail("ucx: ucp_mem_map of {} bytes{} failed: {}", bytes,
         (flags & UCP_MEM_MAP_ALLOCATE) != 0 ? " (allocating)" : "", status_text(st));
  base_ = address;
  bytes_ = bytes;
  if (address != nullptr) return;
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  st = ucp_mem_query(memh_, &attr);
  if (st != UCS_OK) fail("ucx: ucp_mem_query failed: {}", status_text(st));
  base_ = attr.address;  // the allocation (its length may be rounded up)
}

MemoryRegion::~MemoryRegion() {
  if (memh_ != nullptr) ucp_mem_unmap(ctx_.get(), memh_);
}

Blob MemoryRegion::packed_rkey() const {
  void* buf = nullptr;
  size_t len = 0;
  const ucs_status_t st = ucp_rkey_pack(ctx_.get(), memh_, &buf, &len);
  if (st != UCS_OK) fail("ucx: ucp_rkey_pack failed: {}", status_text(st));
  Blob out(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + len);
  ucp_rkey_buffer_release(buf);
  return out;
}

RemoteKey::RemoteKey(Endpoint& ep, std::span<const uint8_t> packed) {
  ep.throw_if_failed("unpacking a remote key");
  const ucs_status_t st = ucp_ep_rkey_unpack(ep.get(), packed.data(), &rkey_);
  if (st != UCS_OK)
    fail("ucx: the remote key of {} ({} bytes) does not unpack: {}", ep.peer(), packed.size(),
         status_text(st));
}

RemoteKey::~RemoteKey() {
  if (rkey_ != nullptr) ucp_rkey_destroy(rkey_);
}

void rma_get(Pending& pending, Endpoint& ep, const RemoteKey& rkey, uint64_t remote_addr, void* dst,
             size_t bytes, std::string_view what) {
  ep.throw_if_failed(what);
  ucp_request_param_t rp{};
  pending.add(ucp_get_nbx(ep.get(), dst, bytes, remote_addr, rkey.get(), &rp), &ep, what);
}

void rma_put(Pending& pending, Endpoint& ep, const RemoteKey& rkey, uint64_t remote_addr,
             const void* src, size_t bytes, std::string_view what) {
  ep.throw_if_failed(what);
  ucp_request_param_t rp{};
  pending.add(ucp_put_nbx(ep.get(), src, bytes, remote_addr, rkey.get(), &rp), &ep, what);
}

void rma_flush(Pending& pending, Endpoint& ep, std::string_view what) {
  ep.throw_if_failed(what);
  ucp_request_param_t rp{};
  pending.add(ucp_ep_flush_nbx(ep.get(), &rp), &ep, what);
}

}  // namespace troupe::ucx
