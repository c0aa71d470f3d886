#include "transport/kv/kv_remote.hpp"

#include <unistd.h>

#include <algorithm>

#include "runtime/error.hpp"
#include "transport/kv/kv_protocol.hpp"
#include "transport/ucx/am_mailbox.hpp"
#include "transport/ucx/ucx_memory.hpp"

namespace troupe {

struct KvRemote::Io {
  ucx::Context ctx;
  ucx::Worker worker;
  ucx::Mailbox mailbox;
  std::unique_ptr<ucx::Endpoint> ep;
  std::unique_ptr<ucx::RemoteKey> rkey;  // destroyed before ep

  Io(const ucx::Settings& s, const kv::Descriptor& d, const std::string& peer)
      : ctx(s, "troupe-kv-remote"), worker(ctx), mailbox(worker, kv::kReply) {
    ep = std::make_unique<ucx::Endpoint>(worker, d.worker_address, peer);
    rkey = std::make_unique<ucx::RemoteKey>(*ep, d.rkey);
  }
  ~Io() { rkey.reset(); }
};

void KvSettings::validate() const {
  ucx.validate();
  if (method != "auto" && method != "rma" && method != "am")
    fail("kv settings: method \"{}\" is not supported; allowed: \"auto\", \"rma\", \"am\"", method);
}

KvRemote::KvRemote(const Blob& descriptor, void* local_base, KvLayout local_layout,
                   KvSettings settings)
    : settings_(std::move(settings)), local_base_(local_base), local_layout_(local_layout) {
  settings_.validate();
  local_layout_.validate("kv remote (local region)");
  if (local_base == nullptr) fail("kv remote: the local base is null");
  const kv::Descriptor d = kv::read_descriptor(descriptor);
  remote_layout_ = d.layout;
  region_ = d.owner;
  remote_base_ = d.base;
  remote_layout_.validate("kv remote (the region's descriptor)");
  if (remote_layout_.block_bytes() != local_layout_.block_bytes())
    fail(
        "kv remote: blocks differ in size: the region's are {} bytes ({} segments of {}), the "
        "local region's {} ({} of {})",
        remote_layout_.block_bytes(), remote_layout_.num_planes, remote_layout_.segment_bytes,
        local_layout_.block_bytes(), local_layout_.num_planes, local_layout_.segment_bytes);
  // Shared memory is what the transports in force will use: tls "sm", or "auto" to a region
  // on this host. It decides "auto" (RMA there, active messages on tcp) and how multi-segment
  // blocks travel by active messages (iovs there, contiguous copies on tcp).
  const bool same_host = region_.host == PeerName::self().host;
  const bool shared_memory =
      settings_.ucx.tls == "sm" || (settings_.ucx.tls == "auto" && same_host);
  method_ = settings_.method == "auto" ? (shared_memory ? "rma" : "am") : settings_.method;
  contiguous_wire_ = !shared_memory;
  wire_ = contiguous_wire_ ? kv::kContiguous : kv::kSegments;
  io_ = std::make_unique<Io>(
      settings_.ucx, d, fmt::format("the kv region of pid {} on {}", region_.pid, region_.host));
}

KvRemote::~KvRemote() = default;

void KvRemote::check(std::span<const KvBlockMove> moves, std::string_view op) const {
  if (!broken_.empty()) fail("kv remote: {} refused: an earlier move failed ({})", op, broken_);
  for (const KvBlockMove& m : moves) {
    if (m.remote >= remote_layout_.num_blocks)
      fail("kv remote: {} of remote block {}: the region has {} blocks", op, m.remote,
           remote_layout_.num_blocks);
    if (m.local >= local_layout_.num_blocks)
      fail("kv remote: {} of local block {}: the local region has {} blocks", op, m.local,
           local_layout_.num_blocks);
  }
  if (moves.size() >= (size_t(1) << 32))
    fail("kv remote: {} of {} blocks at once", op, moves.size());
}

template <class F>
void KvRemote::guarded(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    broken_ = e.what();
    io_->ep->force_close();
    throw;
  }
}

namespace {

// Calls f(local offset, remote offset, bytes) for the pieces in which block `lb` of `local` and
// block `rb` of `remote` line up: a block is the concatenation of its segments in plane order,
// and the two layouts may cut it differently.
template <class F>
void for_each_piece(const KvLayout& local, uint64_t lb, const KvLayout& remote, uint64_t rb,
                    F&& f) {
  uint32_t lp = 0, rp = 0;
  uint64_t lo = 0, ro = 0;  // bytes used of the current segment on each side
  while (lp < local.num_planes && rp < remote.num_planes) {
    const uint64_t n = std::min(local.segment_bytes - lo, remote.segment_bytes - ro);
    f(local.offset(lb, lp) + lo, remote.offset(rb, rp) + ro, n);
    lo += n;
    ro += n;
    if (lo == local.segment_bytes) lp++, lo = 0;
    if (ro == remote.segment_bytes) rp++, ro = 0;
  }
}

// Blocks per active-message batch: at most 64 MiB of them (the staging copies' bound) and at
// most 4096, at least one.
constexpr uint64_t kBatchBytes = uint64_t(64) << 20;
size_t batch_size(size_t left, uint64_t block_bytes) {
  return size_t(std::clamp<uint64_t>(kBatchBytes / block_bytes, 1, std::min<uint64_t>(left, 4096)));
}

// Waits for posted replies (keys request << 32 | i, i < n) and the sends in `pending`.
// on_done(i) runs as reply i completes (in order), while later ones are still on the wire.
template <class OnDone>
void wait_replies(ucx::Worker& worker, ucx::Mailbox& mailbox, ucx::Endpoint& ep,
                  ucx::Pending& pending, uint64_t request, size_t n,
                  std::span<const KvBlockMove> moves, std::string_view op, OnDone&& on_done) {
  size_t next = 0;  // replies before it are done
  const bool ok = worker.progress_until(
      [&] {
        for (; next < n; ++next) {
          const auto st = mailbox.status(0, kv::reply_key(request, next));
          if (st.state == ucx::Mailbox::State::done) {
            mailbox.forget(0, kv::reply_key(request, next));
            on_done(next);
            continue;
          }
          if (st.state != ucx::Mailbox::State::failed) break;
          ep.throw_if_failed(op);
          if (st.size_mismatch())
            fail("kv remote: {}: {} refused remote block {}", op, ep.peer(), moves[next].remote);
          fail("kv remote: {}: receiving block {} from {} failed: {}", op, moves[next].remote,
               ep.peer(), ucx::status_text(st.ucs));
        }
        if (next < n) ep.throw_if_failed(op);
        return pending.poll() && next == n;
      },
      worker.deadline());
  if (!ok)
    fail("kv remote: {}: {} of {} blocks done when the {} ms timeout passed (waiting for {})", op,
         next, n, worker.context().settings().timeout.count(), ep.peer());
}

}  // namespace

template <class F>
void KvRemote::in_batches(std::span<const KvBlockMove> moves, bool staged, F&& f) {
  const uint64_t bb = local_layout_.block_bytes();
  for (size_t first = 0; first < moves.size();) {
    const size_t n = batch_size(moves.size() - first, bb);
    if (staged && staging_.size() < n * bb) staging_.resize(n * bb);  // before any send
    f(moves.subspan(first, n), next_request_++, bb);
    first += n;
  }
}

void KvRemote::read(std::span<const KvBlockMove> moves) {
  check(moves, "read");
  if (moves.empty()) return;
  guarded([&] {
    Io& io = *io_;
    const std::string what = fmt::format("kv read of {} blocks", moves.size());
    if (method_ == "rma") {
      ucx::Pending pending(io.worker);
      for (const KvBlockMove& m : moves)
        for_each_piece(local_layout_, m.local, remote_layout_, m.remote,
                       [&](uint64_t local, uint64_t remote, uint64_t n) {
                         ucx::rma_get(pending, *io.ep, *io.rkey, remote_base_ + remote,
                                      static_cast<uint8_t*>(local_base_) + local, n, what);
                       });
      pending.wait(io.worker.deadline());
      return;
    }
    // Active messages, in batches of at most kBatchBytes. A block of several segments travels
    // as an iov on shared memory and, on tcp, as one contiguous message through staging copies
    // on both sides (UCX 1.13's rendezvous of an iov over tcp ran at a third of a contiguous
    // one's rate; on shared memory the copies cost more than they save); the batches bound the
    // staging.
    const bool staged = contiguous_wire_ && local_layout_.num_planes > 1;
    in_batches(
        moves, staged, [&](std::span<const KvBlockMove> batch, uint64_t request, uint64_t bb) {
          const size_t n = batch.size();
          for (size_t i = 0; i < n; ++i) {
            if (staged) {
              io.mailbox.post(0, kv::reply_key(request, i), staging_.data() + i * bb, bb);
            } else {
              io.mailbox.post(0, kv::reply_key(request, i),
                              local_layout_.segments(local_base_, batch[i].local));
            }
          }
          std::vector<uint64_t> blocks(n);
          for (size_t i = 0; i < n; ++i) blocks[i] = batch[i].remote;
          ucx::Pending pending(io.worker);
          const void* body = pending.keep(blocks.data(), blocks.size() * sizeof(uint64_t));
          ucx::Mailbox::send(pending, *io.ep, kv::kReadRequest,
                             ucx::MailHeader{kv::reply_key(request, 0), wire_, uint32_t(n)}, body,
                             blocks.size() * sizeof(uint64_t), what,
                             UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER);
          wait_replies(
              io.worker, io.mailbox, *io.ep, pending, request, n, batch, what, [&](size_t i) {
                if (staged)
                  local_layout_.scatter(local_base_, batch[i].local, staging_.data() + i * bb);
              });
        });
  });
}

void KvRemote::write(std::span<const KvBlockMove> moves) {
  check(moves, "write");
  if (moves.empty()) return;
  guarded([&] {
    Io& io = *io_;
    const std::string what = fmt::format("kv write of {} blocks", moves.size());
    if (method_ == "rma") {
      ucx::Pending pending(io.worker);
      for (const KvBlockMove& m : moves)
        for_each_piece(local_layout_, m.local, remote_layout_, m.remote,
                       [&](uint64_t local, uint64_t remote, uint64_t n) {
                         ucx::rma_put(pending, *io.ep, *io.rkey, remote_base_ + remote,
                                      static_cast<uint8_t*>(local_base_) + local, n, what);
                       });
      ucx::rma_flush(pending, *io.ep, what);  // remote completion of every put above
      pending.wait(io.worker.deadline());
      return;
    }
    const bool staged = contiguous_wire_ && local_layout_.num_planes > 1;
    in_batches(
        moves, staged, [&](std::span<const KvBlockMove> batch, uint64_t request, uint64_t bb) {
          const size_t n = batch.size();
          ucx::Pending pending(io.worker);
          for (size_t i = 0; i < n; ++i) {
            if (batch[i].remote >= (uint64_t(1) << 32))
              fail(
                  "kv remote: block {} is beyond what the active-message protocol addresses (2^32)",
                  batch[i].remote);
            io.mailbox.post(0, kv::reply_key(request, i), nullptr, 0);  // the region's ack
            const ucx::MailHeader h{kv::reply_key(request, i), wire_, uint32_t(batch[i].remote)};
            if (staged) {
              io.worker.progress();  // earlier blocks start moving while this one is copied
              local_layout_.gather(local_base_, batch[i].local, staging_.data() + i * bb);
              ucx::Mailbox::send(pending, *io.ep, kv::kWriteBlock, h, staging_.data() + i * bb, bb,
                                 what, UCP_AM_SEND_FLAG_REPLY);
            } else {
              ucx::Mailbox::send(pending, *io.ep, kv::kWriteBlock, h,
                                 local_layout_.segments(local_base_, batch[i].local), what,
                                 UCP_AM_SEND_FLAG_REPLY);
            }
          }
          wait_replies(io.worker, io.mailbox, *io.ep, pending, request, n, batch, what,
                       [](size_t) {});
        });
  });
}

}  // namespace troupe
