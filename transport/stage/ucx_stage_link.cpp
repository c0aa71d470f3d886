#include "transport/stage/ucx_stage_link.hpp"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "runtime/error.hpp"
#include "transport/ucx/am_mailbox.hpp"

namespace troupe {

namespace {

constexpr uint32_t kBlobMagic = 0x4b4e4c53;  // "SLNK"
constexpr unsigned kAmId = 3;
constexpr uint32_t kControl = 0x80000000u;  // source bit of handshake messages
constexpr auto kInitBound = std::chrono::seconds(30);
constexpr auto kIdleSleep = std::chrono::milliseconds(1);

using Clock = std::chrono::steady_clock;

}  // namespace

// The UCX objects, made, used and destroyed on the link's thread only.
struct UcxStageLink::Io {
  struct InFlight {
    std::unique_ptr<ucx::Pending> pending;
    std::vector<uint8_t> data;
    uint64_t tag = 0;
  };
  ucx::Context ctx;
  ucx::Worker worker;
  ucx::Mailbox mailbox;
  std::unique_ptr<ucx::Endpoint> prev, next;
  std::deque<InFlight> in_flight;  // destroyed first: a send still in flight is cancelled
  std::vector<int32_t> hellos;     // stages that answered the handshake

  explicit Io(const ucx::Settings& s)
      : ctx(s, "troupe-stage-link"), worker(ctx), mailbox(worker, kAmId, /*pull_early=*/true) {}
};

UcxStageLink::UcxStageLink(int32_t stage, int32_t num_stages, UcxStageLinkSettings settings)
    : stage_(stage), num_stages_(num_stages), settings_(std::move(settings)) {
  settings_.ucx.validate();
  if (num_stages < 1) fail("stage link: num_stages {} must be at least 1", num_stages);
  if (stage < 0 || stage >= num_stages)
    fail("stage link: stage {} is outside [0, num_stages {})", stage, num_stages);
  if (settings_.max_buffered_bytes == 0)
    fail("stage link settings: max_buffered_bytes must be positive");
  thread_ = std::thread([this] { run(); });
  std::unique_lock lk(mu_);
  const bool ready = cv_.wait_for(lk, kInitBound, [this] { return ready_; });
  const std::string fatal = ready ? fatal_ : std::string("its UCX worker did not start in 30 s");
  if (fatal.empty()) return;
  stop_ = true;
  lk.unlock();
  thread_.join();
  fail("stage link: stage {}: {}", stage_, fatal);
}

UcxStageLink::~UcxStageLink() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake();
  thread_.join();
}

void UcxStageLink::wake() {
  std::lock_guard lk(mu_);
  if (worker_handle_ != nullptr) ucp_worker_signal(static_cast<ucp_worker_h>(worker_handle_));
}

std::string UcxStageLink::who(int32_t s) const {
  if (size_t(s) >= peers_.size()) return fmt::format("stage {}", s);
  return fmt::format("stage {} (pid {} on {})", s, peers_[size_t(s)].pid, peers_[size_t(s)].host);
}

void UcxStageLink::connect(const std::vector<Blob>& blobs) {
  if (blobs.size() != size_t(num_stages_))
    fail("stage link: connect() got {} blobs for {} stages", blobs.size(), num_stages_);
  std::unique_lock lk(mu_);
  if (connected_ || connect_requested_) fail("stage link: connect() called twice");
  connect_blobs_ = blobs;
  connect_requested_ = true;
  lk.unlock();
  wake();
  lk.lock();
  const auto bound = settings_.ucx.timeout + std::chrono::seconds(5);
  if (!cv_.wait_for(lk, bound, [this] { return connected_ || !fatal_.empty(); }))
    fail("stage link: stage {}: connect() did not finish within {} ms", stage_, bound.count());
  if (!fatal_.empty()) fail("stage link: stage {}: {}", stage_, fatal_);
}

void UcxStageLink::send_next(uint64_t tag, const void* data, size_t bytes) {
  if (stage_ == num_stages_ - 1)
    fail("stage link: send_next on stage {}, the last of {}: it has no next stage", stage_,
         num_stages_);
  const auto* b = static_cast<const uint8_t*>(data);
  std::vector<uint8_t> copy(b, b + bytes);
  std::unique_lock lk(mu_);
  if (!connected_) fail("stage link: send_next before connect()");
  auto usable = [&] {
    if (!fatal_.empty()) fail("stage link: stage {}: {}", stage_, fatal_);
    if (!next_error_.empty())
      fail("stage link: send_next of step {} from stage {}: {}", tag, stage_, next_error_);
  };
  usable();
  const auto deadline = Clock::now() + settings_.ucx.timeout;
  const bool room = cv_.wait_until(lk, deadline, [&] {
    return buffered_bytes_ == 0 || buffered_bytes_ + bytes <= settings_.max_buffered_bytes ||
           !next_error_.empty() || !fatal_.empty();
  });
  usable();
  if (!room)
    fail(
        "stage link: send_next of step {} from stage {}: {} has not taken the {} bytes already "
        "sent within the {} ms timeout",
        tag, stage_, who(stage_ + 1), buffered_bytes_, settings_.ucx.timeout.count());
  buffered_bytes_ += bytes;
  outbox_.emplace_back(tag, std::move(copy));
  lk.unlock();
  wake();
}

void UcxStageLink::inject_send_failure(uint64_t tag) {
  if (stage_ == num_stages_ - 1)
    fail("stage link: stage {} is the last of {}: it sends nothing to break", stage_, num_stages_);
  std::lock_guard lk(mu_);
  fail_tag_ = tag;
}

void UcxStageLink::recv_prev(uint64_t tag, void* data, size_t bytes) {
  if (stage_ == 0) fail("stage link: recv_prev on stage 0: it has no previous stage");
  std::unique_lock lk(mu_);
  if (!connected_) fail("stage link: recv_prev before connect()");
  const auto deadline = Clock::now() + settings_.ucx.timeout;
  const bool got = cv_.wait_until(lk, deadline, [&] {
    return arrived_.count(tag) != 0 || !prev_error_.empty() || !fatal_.empty();
  });
  auto it = arrived_.find(tag);
  if (it == arrived_.end()) {
    if (!fatal_.empty()) fail("stage link: stage {}: {}", stage_, fatal_);
    if (!prev_error_.empty())
      fail("stage link: recv_prev of step {} on stage {}: {}", tag, stage_, prev_error_);
    if (!got)
      fail(
          "stage link: recv_prev of step {} on stage {}: nothing from {} within the {} ms "
          "timeout",
          tag, stage_, who(stage_ - 1), settings_.ucx.timeout.count());
  }
  Arrived a = std::move(it->second);
  arrived_.erase(it);
  lk.unlock();
  if (!a.error.empty())
    fail("stage link: recv_prev of step {} on stage {}: {}", tag, stage_, a.error);
  if (a.bytes.size() != bytes)
    fail(
        "stage link: step {} from {} carries {} bytes; recv_prev on stage {} expects {} (the "
        "message is dropped)",
        tag, who(stage_ - 1), a.bytes.size(), stage_, bytes);
  if (bytes > 0) std::memcpy(data, a.bytes.data(), bytes);
}

void UcxStageLink::run() {
  std::unique_ptr<Io> io;
  try {
    io = std::make_unique<Io>(settings_.ucx);
    Blob blob = BlobWriter(kBlobMagic)
                    .i32(stage_)
                    .i32(num_stages_)
                    .peer(PeerName::self())
                    .bytes(io->worker.address())
                    .take();
    std::lock_guard lk(mu_);
    blob_ = std::move(blob);
    worker_handle_ = io->worker.get();
    ready_ = true;
  } catch (const std::exception& e) {
    std::lock_guard lk(mu_);
    fatal_ = e.what();
    ready_ = true;
    cv_.notify_all();
    return;
  }
  cv_.notify_all();

  // Arrivals: handshakes to io->hellos, steps from the previous stage to arrived_.
  auto absorb = [&] {
    auto ready = io->mailbox.take_ready();
    const std::string& protocol = io->mailbox.protocol_error();
    if (ready.empty() && protocol.empty()) return false;
    std::lock_guard lk(mu_);
    for (auto& m : ready) {
      if (m.source & kControl) {
        io->hellos.push_back(int32_t(m.source & ~kControl));
        continue;
      }
      if (int32_t(m.source) != stage_ - 1) continue;  // only the previous stage sends here
      Arrived a;
      if (m.ucs != UCS_OK)
        a.error = fmt::format("receiving it from {} failed: {}", who(stage_ - 1),
                              ucx::status_text(m.ucs));
      a.bytes = std::move(m.bytes);
      arrived_[m.key] = std::move(a);
    }
    if (!protocol.empty() && prev_error_.empty())
      prev_error_ = fmt::format("{} broke the protocol: {}", who(stage_ - 1), protocol);
    cv_.notify_all();
    return true;
  };

  auto connect_io = [&](const std::vector<Blob>& blobs) {
    std::vector<PeerName> peers(blobs.size());
    std::vector<Blob> addresses(blobs.size());
    for (size_t s = 0; s < blobs.size(); ++s) {
      BlobReader rd(blobs[s], kBlobMagic, fmt::format("stage link blob {}", s));
      const int32_t bs = rd.i32(), bn = rd.i32();
      peers[s] = rd.peer();
      addresses[s] = rd.bytes();
      rd.finish();
      if (bs != int32_t(s) || bn != num_stages_)
        fail("blob {} belongs to stage {} of {}, expected stage {} of {}", s, bs, bn, s,
             num_stages_);
    }
    {
      std::lock_guard lk(mu_);
      peers_ = peers;
    }
    std::vector<int32_t> neighbours;
    if (stage_ > 0) {
      io->prev = std::make_unique<ucx::Endpoint>(io->worker, addresses[size_t(stage_ - 1)],
                                                 who(stage_ - 1));
      neighbours.push_back(stage_ - 1);
    }
    if (stage_ + 1 < num_stages_) {
      io->next = std::make_unique<ucx::Endpoint>(io->worker, addresses[size_t(stage_ + 1)],
                                                 who(stage_ + 1));
      neighbours.push_back(stage_ + 1);
    }
    ucx::Pending hellos(io->worker);
    for (int32_t n : neighbours) {
      ucx::Endpoint& ep = n < stage_ ? *io->prev : *io->next;
      ucx::Mailbox::send(hellos, ep, kAmId, ucx::MailHeader{0, kControl | uint32_t(stage_), 0},
                         nullptr, 0, "stage link handshake");
    }
    const auto deadline = io->worker.deadline();
    const bool ok = io->worker.progress_until(
        [&] {
          absorb();
          if (io->prev) io->prev->throw_if_failed("stage link handshake");
          if (io->next) io->next->throw_if_failed("stage link handshake");
          for (int32_t n : neighbours)
            if (std::find(io->hellos.begin(), io->hellos.end(), n) == io->hellos.end())
              return false;
          return hellos.poll();
        },
        deadline);
    if (!ok) {
      std::string missing;
      for (int32_t n : neighbours)
        if (std::find(io->hellos.begin(), io->hellos.end(), n) == io->hellos.end())
          missing += (missing.empty() ? "" : ", ") + who(n);
      fail("no handshake from {} within the {} ms timeout",
           missing.empty() ? std::string("the neighbours (sends pending)") : missing,
           settings_.ucx.timeout.count());
    }
  };

  bool stopping = false;
  Clock::time_point stop_deadline{};
  for (;;) {
    std::vector<Blob> blobs;
    bool do_connect = false;
    std::deque<std::pair<uint64_t, std::vector<uint8_t>>> sends;
    {
      std::lock_guard lk(mu_);
      if (connect_requested_ && !connected_ && fatal_.empty()) {
        blobs = connect_blobs_;
        do_connect = true;
      }
      sends.swap(outbox_);
      if (stop_ && !stopping) {
        stopping = true;
        stop_deadline = Clock::now() +
                        std::min<Clock::duration>(settings_.ucx.timeout, std::chrono::seconds(5));
      }
    }
    if (do_connect) {
      std::string error;
      try {
        connect_io(blobs);
      } catch (const std::exception& e) {
        error = e.what();
      }
      std::lock_guard lk(mu_);
      connect_requested_ = false;
      if (error.empty())
        connected_ = true;
      else
        fatal_ = fmt::format("connect failed: {}", error);
      cv_.notify_all();
    }
    for (auto& [tag, data] : sends) {
      bool inject = false;
      {
        std::lock_guard lk(mu_);
        inject = fail_tag_ && *fail_tag_ == tag;
      }
      if (inject && io->next) {
        spdlog::warn("stage link: stage {}: injected fault: the connection to {} breaks at the "
                     "send of step {}",
                     stage_, who(stage_ + 1), tag);
        io->next->force_close(UCS_ERR_CONNECTION_RESET);
        io->next.reset();
        std::lock_guard lk(mu_);
        next_error_ = fmt::format("the connection to {} broke at step {} (injected fault)",
                                  who(stage_ + 1), tag);
      }
      Io::InFlight f;
      f.pending = std::make_unique<ucx::Pending>(io->worker);
      f.data = std::move(data);
      f.tag = tag;
      try {
        if (!io->next) fail("not connected");
        ucx::Mailbox::send(*f.pending, *io->next, kAmId, ucx::MailHeader{tag, uint32_t(stage_), 0},
                           f.data.data(), f.data.size(),
                           fmt::format("send of step {} to {}", tag, who(stage_ + 1)));
        io->in_flight.push_back(std::move(f));
      } catch (const std::exception& e) {
        std::lock_guard lk(mu_);
        if (next_error_.empty()) next_error_ = e.what();
        buffered_bytes_ -= f.data.size();
        cv_.notify_all();
      }
    }
    bool busy = false;
    for (int i = 0; i < 64 && io->worker.progress(); ++i) busy = true;
    for (auto it = io->in_flight.begin(); it != io->in_flight.end();) {
      std::string error;
      bool done = false;
      try {
        done = it->pending->poll();
      } catch (const std::exception& e) {
        error = e.what();
        done = true;
      }
      if (!done) {
        ++it;
        continue;
      }
      std::lock_guard lk(mu_);
      buffered_bytes_ -= it->data.size();
      if (!error.empty() && next_error_.empty()) next_error_ = error;
      cv_.notify_all();
      it = io->in_flight.erase(it);
      busy = true;
    }
    busy = absorb() || busy;
    {
      std::lock_guard lk(mu_);
      if (io->prev && io->prev->failed() && prev_error_.empty()) {
        prev_error_ =
            fmt::format("{} failed: {}", who(stage_ - 1), ucx::status_text(io->prev->status()));
        cv_.notify_all();
      }
      if (io->next && io->next->failed() && next_error_.empty()) {
        next_error_ =
            fmt::format("{} failed: {}", who(stage_ + 1), ucx::status_text(io->next->status()));
        cv_.notify_all();
      }
    }
    if (stopping) {
      bool idle = false;
      {
        std::lock_guard lk(mu_);
        idle = outbox_.empty();
      }
      if ((idle && io->in_flight.empty()) || Clock::now() >= stop_deadline) break;
    }
    if (!busy) io->worker.rest(Clock::now() + kIdleSleep);
  }
  {
    std::lock_guard lk(mu_);
    worker_handle_ = nullptr;
  }
  io.reset();
}

}  // namespace troupe
