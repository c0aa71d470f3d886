#include "transport/collectives/ucx_collectives.hpp"

#include <cstring>

#include "runtime/error.hpp"
#include "transport/collectives/host_reduce.hpp"
#include "transport/ucx/ucx_memory.hpp"

namespace troupe {

namespace {
constexpr uint32_t kBlobMagic = 0x4c4f4355;  // "UCOL"
constexpr unsigned kAmId = 1;
constexpr unsigned kAbortAmId = 2;
constexpr auto kAbortFlushBound = std::chrono::milliseconds(200);
}  // namespace

// Receives posted into the caller's buffers plus the sends of one round, awaited together.
struct UcxCollectives::Round {
  UcxCollectives& c;
  std::string_view op;
  uint64_t key;
  ucx::Pending sends;
  struct Recv {
    int32_t from;
    size_t bytes;
  };
  std::vector<Recv> recvs;

  Round(UcxCollectives& owner, std::string_view op_name, uint32_t round)
      : c(owner), op(op_name), key(owner.step_ * 4 + round), sends(*owner.worker_) {}

  void recv(int32_t from, void* dst, size_t bytes) {
    c.mailbox_->post(uint32_t(from), key, dst, bytes);
    recvs.push_back(Recv{from, bytes});
  }
  void send(int32_t to, const void* data, size_t bytes) {
    const ucx::MailHeader h{key, uint32_t(c.rank_), 0};
    ucx::Mailbox::send(sends, *c.eps_[size_t(to)], kAmId, h, data, bytes,
                       fmt::format("{} step {} (rank {})", op, c.step_, c.rank_),
                       bytes <= c.settings_.eager_max_bytes ? UCP_AM_SEND_FLAG_EAGER : 0);
  }
  [[nodiscard]] std::string where() const {
    return fmt::format("ucx collectives: {} step {} on rank {}", op, c.step_, c.rank_);
  }
  bool done() {
    for (const Recv& r : recvs)
      if (!c.aborts_[size_t(r.from)].empty())
        fail("{}: {} failed: {}", where(), c.eps_[size_t(r.from)]->peer(),
             c.aborts_[size_t(r.from)]);
    if (!c.mailbox_->protocol_error().empty())
      fail("{}: protocol error: {}", where(), c.mailbox_->protocol_error());
    bool all = true;
    for (const Recv& r : recvs) {
      const auto st = c.mailbox_->status(uint32_t(r.from), key);
      if (st.state == ucx::Mailbox::State::done) continue;
      const std::string& peer = c.eps_[size_t(r.from)]->peer();
      if (st.size_mismatch())
        fail(
            "{}: {} sent {} bytes where this rank expects {} (do all ranks call the same "
            "collective on tensors of one size?)",
            where(), peer, st.arrived_bytes, r.bytes);
      if (st.state == ucx::Mailbox::State::failed)
        fail("{}: receiving from {} failed: {}", where(), peer, ucx::status_text(st.ucs));
      c.eps_[size_t(r.from)]->throw_if_failed(where());
      all = false;
    }
    return sends.poll() && all;
  }
  void wait() {
    if (!c.worker_->progress_until([this] { return done(); }, c.worker_->deadline())) {
      std::string missing;
      for (const Recv& r : recvs)
        if (c.mailbox_->status(uint32_t(r.from), key).state != ucx::Mailbox::State::done)
          missing += (missing.empty() ? "" : ", ") + c.eps_[size_t(r.from)]->peer();
      if (missing.empty()) missing = "its sends' completion";
      fail("{}: nothing from {} within the {} ms timeout", where(), missing,
           c.settings_.ucx.timeout.count());
    }
    for (const Recv& r : recvs) c.mailbox_->forget(uint32_t(r.from), key);
  }
};

UcxCollectives::UcxCollectives(int32_t rank, int32_t size, UcxCollectivesSettings settings)
    : rank_(rank), size_(size), settings_(std::move(settings)), self_(PeerName::self()) {
  if (size < 1) fail("ucx collectives: size {} must be at least 1", size);
  if (rank < 0 || rank >= size)
    fail("ucx collectives: rank {} is outside [0, size {})", rank, size);
  ctx_ = std::make_unique<ucx::Context>(settings_.ucx, "troupe-collectives");
  worker_ = std::make_unique<ucx::Worker>(*ctx_);
  mailbox_ = std::make_unique<ucx::Mailbox>(*worker_, kAmId);
  aborts_.resize(size_t(size_));
  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                  UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  hp.id = kAbortAmId;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.cb = &UcxCollectives::on_abort;
  hp.arg = this;
  const ucs_status_t st = ucp_worker_set_am_recv_handler(worker_->get(), &hp);
  if (st != UCS_OK)
    fail("ucx collectives: cannot register the abort notice: {}", ucx::status_text(st));
}

ucs_status_t UcxCollectives::on_abort(void* arg, const void* header, size_t header_length,
                                      void* data, size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxCollectives*>(arg);
  int32_t from = -1;
  if (header_length == sizeof from) std::memcpy(&from, header, sizeof from);
  const bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  if (from >= 0 && from < self->size_ && !rndv && self->aborts_[size_t(from)].empty())
    self->aborts_[size_t(from)].assign(static_cast<const char*>(data), length);
  return UCS_OK;
}

void UcxCollectives::abort_peers(const std::string& why) {
  // Best effort, bounded: a notice to every peer still reachable, a flush, then closing.
  const std::string text = why.substr(0, 4000);
  {
    ucx::Pending notices(*worker_);
    for (auto& ep : eps_) {
      if (!ep || ep->failed()) continue;
      ucp_request_param_t rp{};
      rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      rp.flags = UCP_AM_SEND_FLAG_EAGER;
      const void* hdr = notices.keep(&rank_, sizeof rank_);
      const void* body = notices.keep(text.data(), text.size());
      try {
        notices.add(
            ucp_am_send_nbx(ep->get(), kAbortAmId, hdr, sizeof rank_, body, text.size(), &rp),
            ep.get(), "abort notice");
        ucx::rma_flush(notices, *ep, "abort notice");
      } catch (const Error&) {
        // that peer is gone already
      }
    }
    try {
      notices.wait(ucx::Clock::now() + kAbortFlushBound);
    } catch (const Error&) {
      // a peer that does not take the notice learns from the closed endpoint
    }
  }
  for (auto& ep : eps_)
    if (ep) ep->force_close();
}

UcxCollectives::~UcxCollectives() = default;

Blob UcxCollectives::blob() const {
  return BlobWriter(kBlobMagic).i32(rank_).i32(size_).peer(self_).bytes(worker_->address()).take();
}

void UcxCollectives::check_usable(std::string_view op) const {
  if (!connected_) fail("ucx collectives: {} before connect()", op);
  if (!broken_.empty())
    fail("ucx collectives: {} refused: the group failed earlier ({})", op, broken_);
}

template <class F>
void UcxCollectives::guarded(std::string_view op, F&& body) {
  check_usable(op);
  try {
    body();
  } catch (const Error& e) {
    broken_ = e.what();
    abort_peers(broken_);
    throw;
  }
}

void UcxCollectives::connect(const std::vector<Blob>& blobs) {
  if (connected_ || !eps_.empty()) fail("ucx collectives: connect() called twice");
  if (blobs.size() != size_t(size_))
    fail("ucx collectives: connect() got {} blobs for a group of {} ranks", blobs.size(), size_);
  peers_.resize(size_t(size_));
  eps_.resize(size_t(size_));
  for (int32_t r = 0; r < size_; ++r) {
    BlobReader rd(blobs[size_t(r)], kBlobMagic, fmt::format("ucx collectives blob {}", r));
    const int32_t br = rd.i32(), bs = rd.i32();
    peers_[size_t(r)] = rd.peer();
    const Blob address = rd.bytes();
    rd.finish();
    if (br != r || bs != size_)
      fail("ucx collectives: blob {} belongs to rank {} of a group of {}, expected rank {} of {}",
           r, br, bs, r, size_);
    if (r != rank_)
      eps_[size_t(r)] =
          std::make_unique<ucx::Endpoint>(*worker_, address, peers_[size_t(r)].describe(r));
  }
  connected_ = true;
  // Handshake: every peer answers within the timeout, so a wrong address fails here.
  guarded("connect", [&] {
    const int32_t mine[2] = {rank_, size_};
    std::vector<int32_t> theirs(size_t(size_) * 2, -1);
    Round round(*this, "connect", 0);
    for (int32_t r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      round.recv(r, &theirs[size_t(r) * 2], sizeof mine);
      round.send(r, mine, sizeof mine);
    }
    round.wait();
    for (int32_t r = 0; r < size_; ++r)
      if (r != rank_ && (theirs[size_t(r) * 2] != r || theirs[size_t(r) * 2 + 1] != size_))
        fail("ucx collectives: {} answered as rank {} of {}", peers_[size_t(r)].describe(r),
             theirs[size_t(r) * 2], theirs[size_t(r) * 2 + 1]);
  });
}

void UcxCollectives::all_reduce_sum(const Tensor& x) {
  check_all_reduce_arg("ucx collectives", x);
  guarded("all_reduce_sum", [&] {
    ++step_;
    if (size_ == 1) return;
    const size_t n = size_t(x.numel());
    float* xp = x.as<float>();
    std::vector<const float*> srcs(static_cast<size_t>(size_));
    if (n * sizeof(float) <= settings_.one_shot_max_bytes || n < size_t(size_)) {
      scratch_.resize(size_t(size_) * n);
      Round round(*this, "all_reduce_sum", 0);
      for (int32_t r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        round.recv(r, scratch_.data() + size_t(r) * n, n * sizeof(float));
        round.send(r, xp, n * sizeof(float));
      }
      round.wait();
      for (int32_t r = 0; r < size_; ++r)
        srcs[size_t(r)] = r == rank_ ? xp : scratch_.data() + size_t(r) * n;
      sum_in_rank_order(xp, srcs, n);
      return;
    }
    // Reduce-scatter: rank r sums chunk r of every rank's tensor...
    const Chunk mine = chunk_of(n, size_, rank_);
    scratch_.resize(size_t(size_) * mine.size());
    {
      Round round(*this, "all_reduce_sum", 0);
      for (int32_t r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        const Chunk theirs = chunk_of(n, size_, r);
        round.recv(r, scratch_.data() + size_t(r) * mine.size(), mine.size() * sizeof(float));
        round.send(r, xp + theirs.begin, theirs.size() * sizeof(float));
      }
      round.wait();
    }
    for (int32_t r = 0; r < size_; ++r)
      srcs[size_t(r)] = r == rank_ ? xp + mine.begin : scratch_.data() + size_t(r) * mine.size();
    sum_in_rank_order(xp + mine.begin, srcs, mine.size());
    // ... then all-gather the summed chunks, straight into x.
    Round round(*this, "all_reduce_sum", 1);
    for (int32_t r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const Chunk theirs = chunk_of(n, size_, r);
      round.recv(r, xp + theirs.begin, theirs.size() * sizeof(float));
      round.send(r, xp + mine.begin, mine.size() * sizeof(float));
    }
    round.wait();
  });
}

void UcxCollectives::all_gather(const Tensor& in, const Tensor& out) {
  check_all_gather_args("ucx collectives", in, out, size_);
  guarded("all_gather", [&] {
    ++step_;
    const size_t bytes = in.nbytes();
    auto* o = static_cast<uint8_t*>(out.data);
    Round round(*this, "all_gather", 0);
    for (int32_t r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      round.recv(r, o + size_t(r) * bytes, bytes);
      round.send(r, in.data, bytes);
    }
    std::memmove(o + size_t(rank_) * bytes, in.data, bytes);
    round.wait();
  });
}

}  // namespace troupe
