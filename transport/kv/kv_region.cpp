#include "transport/kv/kv_region.hpp"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>

#include "runtime/error.hpp"
#include "transport/kv/kv_protocol.hpp"
#include "transport/ucx/am_mailbox.hpp"
#include "transport/ucx/ucx_memory.hpp"

namespace troupe {

namespace {
constexpr auto kIdleSleep = std::chrono::milliseconds(1);
constexpr auto kInitBound = std::chrono::seconds(30);
constexpr uint32_t kRefused = 1;  // reply aux: the region refused the block
}  // namespace

// The serving thread's UCX objects and work queues (its thread only).
struct KvRegion::Serve {
  struct Reply {  // one message to send back
    ucp_ep_h ep;
    uint64_t key;
    uint64_t block;  // read: the block to send; ack: unused
    bool ack;
    bool refused;
    bool contiguous;  // read: send a multi-segment block as one contiguous copy
  };
  struct Receive {  // a block being written by rendezvous
    void* req;
    ucp_ep_h ep;
    uint64_t key;
    uint64_t block;
    std::vector<uint8_t> staging;        // a contiguous copy of a multi-segment block
    std::vector<ucp_dt_iov_t> segments;  // or the block's segments, received into directly
  };
  KvRegion& owner;
  ucx::Context ctx;
  ucx::Worker worker;
  ucx::MemoryRegion mr;
  std::deque<Reply> replies;    // queued by the handlers, sent by the loop
  std::list<Receive> receives;  // list: staging buffers stay put while UCX fills them
  struct Send {
    std::unique_ptr<ucx::Pending> pending;
    std::vector<uint8_t> staging;  // back to the pool when the send completes
  };
  std::deque<Send> sends;
  // Staging buffers of one block each, reused: fresh ones every time cost page faults and UCX
  // registrations (a 2 MiB block moved at a tenth of the rate with them).
  std::vector<std::vector<uint8_t>> pool;

  std::vector<uint8_t> take_buffer() {
    if (pool.empty()) return std::vector<uint8_t>(owner.layout_.block_bytes());
    std::vector<uint8_t> b = std::move(pool.back());
    pool.pop_back();
    return b;
  }
  void give_back(std::vector<uint8_t>&& b) {
    if (!b.empty() && pool.size() * b.size() < (size_t(64) << 20)) pool.push_back(std::move(b));
  }

  Serve(KvRegion& o, const ucx::Settings& s)
      : owner(o),
        ctx(s, "troupe-kv-region"),
        worker(ctx),
        mr(o.base_ != nullptr ? ucx::MemoryRegion(ctx, o.base_, o.layout_.span_bytes())
                              : ucx::MemoryRegion(ctx, o.layout_.span_bytes())) {
    if (o.base_ == nullptr) {
      std::memset(mr.base(), 0, o.layout_.span_bytes());
      o.base_ = mr.base();
    }
    set_handler(kv::kReadRequest, &Serve::on_read);
    set_handler(kv::kWriteBlock, &Serve::on_write);
  }
  ~Serve() {
    sends.clear();
    for (Receive& r : receives) {
      ucp_request_cancel(worker.get(), r.req);
      ucp_request_free(r.req);
    }
  }

  void set_handler(unsigned id, ucp_am_recv_callback_t cb) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                    UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = cb;
    hp.arg = this;
    const ucs_status_t st = ucp_worker_set_am_recv_handler(worker.get(), &hp);
    if (st != UCS_OK)
      fail("kv region: cannot register active message {}: {}", id, ucx::status_text(st));
  }

  static bool parse(const void* header, size_t header_length, const ucp_am_recv_param_t* param,
                    ucx::MailHeader& h) {
    if (header_length != sizeof h || (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0)
      return false;
    std::memcpy(&h, header, sizeof h);
    return true;
  }

  static ucs_status_t on_read(void* arg, const void* header, size_t header_length, void* data,
                              size_t length, const ucp_am_recv_param_t* param) {
    auto* s = static_cast<Serve*>(arg);
    ucx::MailHeader h;
    // Requests are sent eagerly (a list of block ids): a rendezvous one is not ours.
    if (!parse(header, header_length, param, h) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
      return UCS_OK;
    const size_t count = length / sizeof(uint64_t);
    for (size_t i = 0; i < count; ++i) {
      uint64_t block;
      std::memcpy(&block, static_cast<const uint8_t*>(data) + i * sizeof block, sizeof block);
      s->replies.push_back(Reply{param->reply_ep, h.key | i, block, false,
                                 block >= s->owner.layout_.num_blocks,
                                 h.source == kv::kContiguous});
    }
    return UCS_OK;
  }

  static ucs_status_t on_write(void* arg, const void* header, size_t header_length, void* data,
                               size_t length, const ucp_am_recv_param_t* param) {
    auto* s = static_cast<Serve*>(arg);
    ucx::MailHeader h;
    if (!parse(header, header_length, param, h)) return UCS_OK;
    const KvLayout& layout = s->owner.layout_;
    const uint64_t block = h.aux;
    if (block >= layout.num_blocks || length != layout.block_bytes()) {
      s->replies.push_back(Reply{param->reply_ep, h.key, block, true, true, false});
      return UCS_OK;  // a rendezvous one is dropped: its sender completes without sending
    }
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
      layout.scatter(s->owner.base_, block, static_cast<const uint8_t*>(data));
      s->replies.push_back(Reply{param->reply_ep, h.key, block, true, false, false});
      return UCS_OK;
    }
    // A block of several segments: straight into them (an iov), or, as the writer asks (tcp),
    // contiguously into a staging buffer scattered when complete.
    Receive& r = s->receives.emplace_back(Receive{nullptr, param->reply_ep, h.key, block, {}, {}});
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
    rp.datatype = ucp_dt_make_contig(1);
    void* buffer = static_cast<uint8_t*>(s->owner.base_) + layout.offset(block, 0);
    size_t count = layout.block_bytes();
    if (layout.num_planes > 1 && h.source == kv::kContiguous) {
      r.staging = s->take_buffer();
      buffer = r.staging.data();
    } else if (layout.num_planes > 1) {
      r.segments = layout.segments(s->owner.base_, block);
      rp.datatype = ucp_dt_make_iov();
      buffer = r.segments.data();
      count = r.segments.size();
    }
    void* req = ucp_am_recv_data_nbx(s->worker.get(), data, buffer, count, &rp);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) {
      s->replies.push_back(Reply{param->reply_ep, h.key, block, true, UCS_PTR_IS_ERR(req), false});
      s->receives.pop_back();
    } else {
      r.req = req;
    }
    return UCS_OK;
  }

  // Sends what the handlers queued; true when there was something to do.
  bool pump() {
    bool busy = false;
    while (!replies.empty()) {
      const Reply r = replies.front();
      replies.pop_front();
      busy = true;
      auto pending = std::make_unique<ucx::Pending>(worker);
      std::vector<uint8_t> staging;
      const uint32_t aux = r.refused ? kRefused : 0;
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
      const ucx::MailHeader h{r.key, 0, aux};
      const void* hdr = pending->keep(&h, sizeof h);
      void* req = nullptr;
      if (r.ack || r.refused) {
        // An ack is empty; a refusal carries one byte, which the requester's size check rejects.
        static const uint8_t refused_byte = 1;
        rp.datatype = ucp_dt_make_contig(1);
        req =
            ucp_am_send_nbx(r.ep, kv::kReply, hdr, sizeof h, &refused_byte, r.refused ? 1 : 0, &rp);
      } else {
        // A block of several segments goes out gathered by UCX (an iov) or, as the reader asks
        // (tcp, where an iov rendezvous ran at a third of the rate), as one contiguous copy.
        const KvLayout& layout = owner.layout_;
        rp.datatype = ucp_dt_make_contig(1);
        const void* data = static_cast<uint8_t*>(owner.base_) + layout.offset(r.block, 0);
        size_t count = layout.block_bytes();
        if (layout.num_planes > 1 && r.contiguous) {
          worker.progress();  // earlier replies start moving while this one is copied
          staging = take_buffer();
          layout.gather(owner.base_, r.block, staging.data());
          data = staging.data();
        } else if (layout.num_planes > 1) {
          const auto segments = layout.segments(owner.base_, r.block);
          rp.datatype = ucp_dt_make_iov();
          data = pending->keep(segments.data(), segments.size() * sizeof(ucp_dt_iov_t));
          count = segments.size();
        }
        req = ucp_am_send_nbx(r.ep, kv::kReply, hdr, sizeof h, data, count, &rp);
        ++owner.blocks_read_;
      }
      if (UCS_PTR_IS_ERR(req)) {  // the requester is gone
        give_back(std::move(staging));
        continue;
      }
      pending->add(req, nullptr, "kv region reply");
      sends.push_back(Send{std::move(pending), std::move(staging)});
    }
    for (auto it = receives.begin(); it != receives.end();) {
      const ucs_status_t st = ucp_request_check_status(it->req);
      if (st == UCS_INPROGRESS) {
        ++it;
        continue;
      }
      ucp_request_free(it->req);
      if (st == UCS_OK && !it->staging.empty())
        owner.layout_.scatter(owner.base_, it->block, it->staging.data());
      give_back(std::move(it->staging));
      if (st == UCS_OK) ++owner.blocks_written_;
      replies.push_back(Reply{it->ep, it->key, 0, true, st != UCS_OK, false});
      it = receives.erase(it);
      busy = true;
    }
    for (auto it = sends.begin(); it != sends.end();) {
      bool done = true;
      try {
        done = it->pending->poll();
      } catch (const Error&) {
        // the requester is gone: nothing to tell
      }
      if (done) {
        give_back(std::move(it->staging));
        it = sends.erase(it);
        busy = true;
      } else {
        ++it;
      }
    }
    return busy;
  }
};

KvRegion::KvRegion(void* base, KvLayout layout, ucx::Settings settings)
    : base_(base), layout_(layout), settings_(std::move(settings)) {
  if (base == nullptr) fail("kv region: base is null");
  start();
}

KvRegion::KvRegion(KvLayout layout, ucx::Settings settings)
    : base_(nullptr), layout_(layout), settings_(std::move(settings)) {
  start();
}

void KvRegion::start() {
  layout_.validate("kv region");
  settings_.validate();
  // How the thread says its UCX objects are made (or why not).
  struct Ready {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto ready = std::make_shared<Ready>();
  thread_ = std::thread([ready, this] {
    std::unique_ptr<Serve> serve;
    try {
      serve = std::make_unique<Serve>(*this, settings_);
      descriptor_ = kv::write_descriptor(
          kv::Descriptor{PeerName::self(), serve->worker.address(), serve->mr.packed_rkey(),
                         uint64_t(reinterpret_cast<uintptr_t>(base_)), layout_});
      std::lock_guard lk(mu_);
      worker_handle_ = serve->worker.get();
    } catch (const std::exception& e) {
      fatal_ = e.what();
    }
    {
      std::lock_guard lk(ready->mu);
      ready->done = true;
      ready->cv.notify_all();
    }
    if (!serve) return;
    while (!stop_.load()) {
      bool busy = false;
      for (int i = 0; i < 64 && serve->worker.progress(); ++i) busy = true;
      busy = serve->pump() || busy;
      if (!busy) serve->worker.rest(ucx::Clock::now() + kIdleSleep);
    }
    {
      std::lock_guard lk(mu_);
      worker_handle_ = nullptr;
    }
  });
  std::unique_lock lk(ready->mu);
  if (!ready->cv.wait_for(lk, kInitBound, [&] { return ready->done; })) {
    // The thread uses this object: it must end before the constructor throws. It stops as soon
    // as UCX's (local) init returns.
    stop_ = true;
    lk.unlock();
    thread_.join();
    fail("kv region: its UCX worker did not start in 30 s");
  }
  if (!fatal_.empty()) {
    lk.unlock();
    thread_.join();
    fail("kv region: {}", fatal_);
  }
}

KvRegion::~KvRegion() {
  stop_ = true;
  {
    std::lock_guard lk(mu_);
    if (worker_handle_ != nullptr) ucp_worker_signal(static_cast<ucp_worker_h>(worker_handle_));
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace troupe
