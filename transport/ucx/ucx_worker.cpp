#include "transport/ucx/ucx_worker.hpp"

#include <poll.h>
#include <sched.h>

#include <algorithm>

#include "runtime/error.hpp"

namespace troupe::ucx {

namespace {

// After the last piece of work, keep polling this long before sleeping: the next fragment or
// reply usually comes within it, and a sleep costs a wakeup (and, on a busy machine, the CPU).
constexpr auto kSpin = std::chrono::microseconds(100);
constexpr auto kPureSpin = std::chrono::microseconds(10);
// Longest single sleep: not every UCX event reaches the event fd (shared-memory fragments of a
// rendezvous, keepalive timers), so a sleeper looks again at least this often.
constexpr auto kMaxSleep = std::chrono::milliseconds(1);
constexpr auto kCloseBound = std::chrono::milliseconds(2000);
constexpr auto kAbandonBound = std::chrono::milliseconds(1000);

}  // namespace

Worker::Worker(Context& ctx) : ctx_(ctx) {
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucs_status_t st = ucp_worker_create(ctx.get(), &wp, &w_);
  if (st != UCS_OK) fail("ucx: ucp_worker_create failed: {}", status_text(st));
  st = ucp_worker_get_efd(w_, &efd_);
  if (st != UCS_OK) efd_ = -1;  // no wakeup support: waits poll with short sleeps instead
}

Worker::~Worker() {
  if (w_ != nullptr) ucp_worker_destroy(w_);
}

Blob Worker::address() const {
  ucp_address_t* a = nullptr;
  size_t len = 0;
  const ucs_status_t st = ucp_worker_get_address(w_, &a, &len);
  if (st != UCS_OK) fail("ucx: ucp_worker_get_address failed: {}", status_text(st));
  Blob out(reinterpret_cast<uint8_t*>(a), reinterpret_cast<uint8_t*>(a) + len);
  ucp_worker_release_address(w_, a);
  return out;
}

bool Worker::progress() {
  if (ucp_worker_progress(w_) == 0) return false;
  last_activity_ = Clock::now();
  return true;
}

void Worker::rest(Clock::time_point limit) {
  const auto now = Clock::now();
  if (now >= last_activity_ + kSpin) {
    sleep_until_event(limit);
  } else if (now >= last_activity_ + kPureSpin) {
    sched_yield();  // more runnable processes than cores: let the peer we wait for run
  }
}

void Worker::sleep_until_event(Clock::time_point limit) {
  const auto now = Clock::now();
  if (now >= limit) return;
  const auto slice = std::min<Clock::duration>(limit - now, kMaxSleep);
  if (efd_ >= 0) {
    const ucs_status_t st = ucp_worker_arm(w_);
    if (st == UCS_ERR_BUSY) return;  // events are waiting: progress again
    if (st == UCS_OK) {
      pollfd pfd{efd_, POLLIN, 0};
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
      timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
      ppoll(&pfd, 1, &ts, nullptr);
      return;
    }
  }
  // No event fd: a short sleep still leaves the CPU to the peer we wait for.
  const timespec ts{0, 20000};
  nanosleep(&ts, nullptr);
}

bool Worker::progress_until(const std::function<bool()>& done, Clock::time_point deadline) {
  last_activity_ = Clock::now();  // a wait starts hot: its answer is usually close
  for (;;) {
    if (done()) return true;
    if (progress()) continue;
    if (Clock::now() >= deadline) return done();
    rest(deadline);
  }
}

Endpoint::Endpoint(Worker& worker, std::span<const uint8_t> address, std::string peer)
    : worker_(worker), peer_(std::move(peer)) {
  if (address.empty()) fail("ucx: empty worker address for {}", peer_);
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                 UCP_EP_PARAM_FIELD_ERR_HANDLER;
  p.address = reinterpret_cast<const ucp_address_t*>(address.data());
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = &Endpoint::on_error;
  p.err_handler.arg = this;
  const ucs_status_t st = ucp_ep_create(worker.get(), &p, &ep_);
  if (st != UCS_OK)
    fail("ucx: cannot reach {} with tls {}: {}", peer_, worker.context().tls_in_force(),
         status_text(st));
}

void Endpoint::on_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* self = static_cast<Endpoint*>(arg);
  if (self->status_ == UCS_OK) self->status_ = status;
}

void Endpoint::throw_if_failed(std::string_view doing) const {
  if (status_ == UCS_OK) return;
  if (ep_ == nullptr && status_ == UCS_ERR_CANCELED)
    fail("{}: the endpoint to {} was closed after an earlier error", doing, peer_);
  fail("{}: {} failed: {}", doing, peer_, status_text(status_));
}

void Endpoint::force_close(ucs_status_t reason) {
  if (status_ == UCS_OK) status_ = reason;
  if (ep_ == nullptr) return;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* req = ucp_ep_close_nbx(ep_, &p);
  ep_ = nullptr;
  if (req == nullptr || UCS_PTR_IS_ERR(req)) return;
  worker_.progress_until([&] { return ucp_request_check_status(req) != UCS_INPROGRESS; },
                         Clock::now() + kAbandonBound);
  ucp_request_free(req);
}

Endpoint::~Endpoint() {
  if (ep_ == nullptr) return;
  if (failed()) {
    force_close();
    return;
  }
  // Flush first (bounded), and close gracefully only once everything sent has left: closing an
  // endpoint whose operations are stuck (a stopped peer) would leave UCX requests behind that
  // ucp_worker_destroy asserts on, so a flush that does not finish in time means a forced close.
  const auto bound = std::min<Clock::duration>(worker_.context().settings().timeout, kCloseBound);
  ucp_request_param_t fp{};
  void* flush = ucp_ep_flush_nbx(ep_, &fp);
  if (UCS_PTR_IS_ERR(flush)) {
    force_close();
    return;
  }
  if (flush != nullptr) {
    auto done = [&] { return ucp_request_check_status(flush) != UCS_INPROGRESS; };
    const bool flushed = worker_.progress_until(done, Clock::now() + bound) &&
                         ucp_request_check_status(flush) == UCS_OK;
    if (!flushed) {
      force_close();
      worker_.progress_until(done, Clock::now() + kAbandonBound);
    }
    ucp_request_free(flush);
    if (!flushed) return;
  }
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = 0;  // everything has left: a graceful close
  void* req = ucp_ep_close_nbx(ep_, &p);
  ep_ = nullptr;
  if (req == nullptr || UCS_PTR_IS_ERR(req)) return;
  worker_.progress_until([&] { return ucp_request_check_status(req) != UCS_INPROGRESS; },
                         Clock::now() + bound);
  ucp_request_free(req);
}

void Pending::add(ucs_status_ptr_t req, Endpoint* ep, std::string_view what) {
  if (req == nullptr) return;  // completed in place
  if (UCS_PTR_IS_ERR(req)) {
    if (ep != nullptr) ep->throw_if_failed(what);
    fail("{}{}{} failed: {}", what, ep != nullptr ? " to " : "", ep != nullptr ? ep->peer() : "",
         status_text(UCS_PTR_STATUS(req)));
  }
  if (names_.empty() || names_.back() != what) names_.emplace_back(what);
  if (ep != nullptr && std::find(eps_.begin(), eps_.end(), ep) == eps_.end()) eps_.push_back(ep);
  ops_.push_back(Op{req, ep, uint32_t(names_.size() - 1)});
}

void Pending::fail_op(const Op& op, ucs_status_t st) {
  const std::string& what = names_[op.what];
  if (op.ep != nullptr) op.ep->throw_if_failed(what);
  fail("{}{}{} failed: {}", what, op.ep != nullptr ? " to " : "",
       op.ep != nullptr ? op.ep->peer() : "", status_text(st));
}

bool Pending::poll() {
  while (!ops_.empty()) {
    const ucs_status_t st = ucp_request_check_status(ops_.front().req);
    if (st == UCS_INPROGRESS) break;
    const Op op = ops_.front();
    ops_.pop_front();
    ucp_request_free(op.req);
    if (st != UCS_OK) fail_op(op, st);
  }
  if (ops_.empty()) return true;
  for (Endpoint* ep : eps_)
    if (ep->failed()) ep->throw_if_failed(names_.empty() ? "an operation" : names_.back());
  return false;
}

void Pending::wait(Clock::time_point deadline) {
  if (worker_.progress_until([&] { return poll(); }, deadline)) return;
  const Op& op = ops_.front();
  const auto ms = worker_.context().settings().timeout.count();
  fail("{}{}{}: no completion within the {} ms timeout", names_[op.what],
       op.ep != nullptr ? " to " : "", op.ep != nullptr ? op.ep->peer() : "", ms);
}

const void* Pending::keep(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return kept_.emplace_back(b, b + n).data();
}

const void* Pending::keep(std::vector<uint8_t>&& bytes) {
  return kept_.emplace_back(std::move(bytes)).data();
}

void Pending::abandon() {
  for (Op& op : ops_) {
    if (ucp_request_check_status(op.req) == UCS_INPROGRESS) {
      ucp_request_cancel(worker_.get(), op.req);
      if (op.ep != nullptr) op.ep->force_close();
    }
  }
  worker_.progress_until(
      [&] {
        return std::all_of(ops_.begin(), ops_.end(), [](const Op& op) {
          return ucp_request_check_status(op.req) != UCS_INPROGRESS;
        });
      },
      Clock::now() + kAbandonBound);
  for (Op& op : ops_) ucp_request_free(op.req);
  ops_.clear();
}

Pending::~Pending() {
  if (!ops_.empty()) abandon();
}

}  // namespace troupe::ucx
