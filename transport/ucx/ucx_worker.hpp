// A UCP worker, endpoints to peers with peer failure handling, and the one way troupe waits for
// UCX operations: progress until done or a deadline, never forever.
//
// Progress discipline: a waiting thread calls ucp_worker_progress while UCX has work, spins
// 100 us more (the next fragment or reply usually follows), then arms the worker and sleeps on
// its event fd in slices of at most 1 ms (not every UCX event reaches the fd), so a rank waiting
// for a slow peer leaves the CPU to it. Threads that serve a worker (KvRegion, UcxStageLink)
// follow the same rule through progress() and rest(). Every wait has a deadline (Settings::timeout
// from now, unless the caller says otherwise); at the deadline the operations in flight are
// cancelled (their endpoints are force-closed, as UCX requires for a peer that stopped answering)
// and a troupe::Error names the peer. An endpoint whose peer died (error callback) fails every wait
// that involves it.
//
// Threads: a Worker and everything made from it belong to one thread at a time (the worker is
// created UCS_THREAD_MODE_SINGLE).
#pragma once

#include <deque>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transport/bootstrap.hpp"
#include "transport/ucx/ucx_context.hpp"

namespace troupe::ucx {

class Worker {
 public:
  explicit Worker(Context& ctx);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  [[nodiscard]] ucp_worker_h get() const { return w_; }
  [[nodiscard]] Context& context() const { return ctx_; }
  /// This worker's address, to be carried to peers (e.g. in a CAF message) for Endpoint.
  [[nodiscard]] Blob address() const;
  /// Settings::timeout from now.
  [[nodiscard]] Clock::time_point deadline() const {
    return Clock::now() + ctx_.settings().timeout;
  }

  /// One round of progress; true when UCX did something.
  bool progress();
  /// Nothing to do now: returns at once within 100 us of the last progress (keep polling),
  /// else sleeps until an event, `limit` or 1 ms, whichever comes first.
  void rest(Clock::time_point limit);
  /// Progresses until done() holds or `deadline` passes; returns done(). done() may throw.
  bool progress_until(const std::function<bool()>& done, Clock::time_point deadline);
  /// Sleeps on the event fd until UCX has something to do or `limit` passes (at most).
  void sleep_until_event(Clock::time_point limit);

 private:
  Context& ctx_;
  ucp_worker_h w_ = nullptr;
  int efd_ = -1;
  Clock::time_point last_activity_{};
};

/// An endpoint to one peer (by its worker address) with UCP_ERR_HANDLING_MODE_PEER: a peer that
/// dies turns every operation on it into an error instead of a hang.
class Endpoint {
 public:
  /// `peer` names the peer in errors, e.g. "rank 1 (pid 4242 on host-a)".
  Endpoint(Worker& worker, std::span<const uint8_t> address, std::string peer);
  /// Flushes what was sent and closes gracefully, within min(timeout, 2 s); forcefully when the
  /// peer failed or the flush does not finish in time.
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  [[nodiscard]] ucp_ep_h get() const { return ep_; }
  [[nodiscard]] const std::string& peer() const { return peer_; }
  [[nodiscard]] bool failed() const { return status_ != UCS_OK; }
  [[nodiscard]] ucs_status_t status() const { return status_; }
  /// Throws troupe::Error "<doing>: <peer> failed: <reason>" if the peer failed.
  void throw_if_failed(std::string_view doing) const;
  /// Ends the endpoint now (UCP_EP_CLOSE_FLAG_FORCE): operations in flight on it complete with
  /// an error, and every later use fails. `reason` is what later errors say.
  void force_close(ucs_status_t reason = UCS_ERR_CANCELED);

 private:
  static void on_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  Worker& worker_;
  ucp_ep_h ep_ = nullptr;
  std::string peer_;
  ucs_status_t status_ = UCS_OK;
};

/// UCX operations in flight that one call waits for together.
class Pending {
 public:
  explicit Pending(Worker& worker) : worker_(worker) {}
  /// Operations still in flight (after an error or a timeout) are cancelled: their endpoints
  /// are force-closed and the requests awaited for up to a second, then released.
  ~Pending();
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;

  /// Takes the result of a ucp_*_nbx call on `ep` (nullptr for a local operation); `what`
  /// names it in errors ("send of all_reduce_sum step 3"). An immediate error throws.
  void add(ucs_status_ptr_t req, Endpoint* ep, std::string_view what);
  /// True when every operation completed; throws troupe::Error on a failed one.
  bool poll();
  /// Waits for all of them until `deadline`; throws troupe::Error on a failure or the deadline.
  void wait(Clock::time_point deadline);
  [[nodiscard]] bool empty() const { return ops_.empty(); }
  /// A copy of `n` bytes at `p` that lives as long as this object: AM headers and iov lists
  /// must stay valid until their send completes.
  const void* keep(const void* p, size_t n);
  /// Takes `bytes` (no copy) for as long as this object lives.
  const void* keep(std::vector<uint8_t>&& bytes);

 private:
  struct Op {
    void* req;
    Endpoint* ep;
    uint32_t what;  // index into names_ (thousands of RMA ops share one name)
  };
  [[noreturn]] void fail_op(const Op& op, ucs_status_t st);
  void abandon();
  Worker& worker_;
  // Checked from the front only: every op must complete anyway, so polling the later ones
  // before the first is done would make a call with n operations cost n^2 checks.
  std::deque<Op> ops_;
  std::vector<std::string> names_;
  std::vector<Endpoint*> eps_;  // the distinct endpoints of ops_, checked for failure each poll
  std::deque<std::vector<uint8_t>> kept_;  // deque: pointers stay valid as it grows
};

}  // namespace troupe::ucx
