// KV-block moves between hosts (or processes): one side exposes a host memory region of KV
// blocks (KvRegion), the other copies lists of blocks from or to it (KvRemote).
//
//   KvRegion region(base, layout, settings);   // the owner of the memory, e.g. a swap space
//   Blob d = region.descriptor();              // -> carried by the actors to the other side
//   KvRemote remote(d, local_base, local_layout, kv_settings);
//   remote.read({{remote_block, local_block}, ...});   // remote -> local
//   remote.write({{remote_block, local_block}, ...});  // local -> remote, in its memory on return
//
// Two methods, chosen by KvSettings::method:
// - "rma": ucp_get / ucp_put + flush on the registered region (its packed rkey travels in the
//   descriptor), one operation per segment;
// - "am": active messages: a read sends the block list and the region's thread answers with one
//   message per block gathered from its segments; a write sends one message per block that the
//   region scatters into place (rendezvous straight into its segments) and acknowledges.
// "auto" takes RMA where the transports in force are shared memory (tls "sm", or "auto" with the
// region on this host) and active messages otherwise: UCX 1.13 over tcp emulates put/get with
// active messages at a fraction of the bandwidth (docs/benchmarks.md, "Transport").
//
// A KvRegion runs a thread that owns its UCX worker and progresses it all the time (RMA here is
// not one-sided: the target must progress). Its owner may use the memory while it is exposed;
// keeping a block still while a peer moves it is the caller's business (the cache manager's).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "transport/bootstrap.hpp"
#include "transport/kv/kv_layout.hpp"
#include "transport/ucx/ucx_context.hpp"

namespace troupe {

class KvRegion {
 public:
  /// Exposes [base, base + layout.span_bytes()) of the caller's host memory.
  KvRegion(void* base, KvLayout layout, ucx::Settings settings = {});
  /// Allocates the region through UCX (zeroed) and exposes it: on shared memory peers then get
  /// and put with a memcpy into it (see ucx::MemoryRegion), so a host swap space meant for
  /// same-host peers should be made this way. data() is its memory.
  explicit KvRegion(KvLayout layout, ucx::Settings settings = {});
  /// Stops serving (in-flight replies are cut off) and unregisters the memory.
  ~KvRegion();
  KvRegion(const KvRegion&) = delete;
  KvRegion& operator=(const KvRegion&) = delete;

  /// What a KvRemote needs: this process, its worker address, the rkey, the base, the layout.
  [[nodiscard]] const Blob& descriptor() const { return descriptor_; }
  [[nodiscard]] const KvLayout& layout() const { return layout_; }
  /// The region's memory (the caller's base, or what UCX allocated).
  [[nodiscard]] void* data() const { return base_; }
  /// Blocks served by active messages so far (RMA does not pass through this side's code).
  [[nodiscard]] uint64_t blocks_read() const { return blocks_read_.load(); }
  [[nodiscard]] uint64_t blocks_written() const { return blocks_written_.load(); }

 private:
  struct Serve;
  void start();

  void* base_;
  KvLayout layout_;
  ucx::Settings settings_;
  Blob descriptor_;
  std::string fatal_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // guards worker_handle_ against the thread's teardown
  void* worker_handle_ = nullptr;
  std::atomic<uint64_t> blocks_read_{0}, blocks_written_{0};
  std::thread thread_;
};

}  // namespace troupe
