// Active messages addressed by (source, key), received straight into the caller's buffers in
// whatever order they arrive.
//
// A sender sends `bytes` bytes as message (source, key) of one AM id (send_mail); a receiver
// posts where message (source, key) goes (post) and polls it (status). A message that arrives
// before its post is kept (eager data as UCX's own persistent descriptor or a copy; a
// rendezvous one as its descriptor, so its bytes stay with the sender) and delivered when the
// post comes, so peers may run ahead by any number of messages. Rendezvous messages (large
// ones: UCP_AM_RECV_ATTR_FLAG_RNDV) are pulled with ucp_am_recv_data_nbx directly into the
// posted buffer, which may be a list of segments (an iov).
//
// With pull_early, nothing is posted: every message is received as it arrives into memory the
// mailbox owns (a rendezvous one is pulled at once, so its sender completes without waiting for
// the receiver's next call) and handed out by take_ready(); a link run by its own progress
// thread uses this.
//
// A message whose size differs from its post fails that post (the size it carried is kept for
// the error); the caller decides what to say. Keys are unique per source: a second message with
// a key still kept or posted is a protocol error, recorded in protocol_error().
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "transport/ucx/ucx_worker.hpp"

namespace troupe::ucx {

/// The AM header of every mailbox message.
struct MailHeader {
  uint64_t key = 0;
  uint32_t source = 0;
  uint32_t aux = 0;  // free for the protocol above (e.g. a block index)
};

class Mailbox {
 public:
  Mailbox(Worker& worker, unsigned am_id, bool pull_early = false);
  /// Releases kept messages and unregisters the handler.
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  enum class State { waiting, receiving, done, failed };
  struct Status {
    State state = State::waiting;
    size_t arrived_bytes = 0;   // the message's size, once it arrived
    ucs_status_t ucs = UCS_OK;  // a failed rendezvous receive's status
    [[nodiscard]] bool size_mismatch() const { return state == State::failed && ucs == UCS_OK; }
  };

  /// Message (source, key) goes to `dst`, exactly `bytes` bytes.
  void post(uint32_t source, uint64_t key, void* dst, size_t bytes);
  /// ... or to these segments, in order (their lengths sum to the message's size).
  void post(uint32_t source, uint64_t key, std::vector<ucp_dt_iov_t> dst);
  /// The posted receive's state (checks a rendezvous receive in flight).
  [[nodiscard]] Status status(uint32_t source, uint64_t key);
  /// Forgets a posted receive (done or failed; one still receiving is cancelled).
  void forget(uint32_t source, uint64_t key);
  /// Whether message (source, key) arrived before its post and is kept.
  [[nodiscard]] bool has_kept(uint32_t source, uint64_t key) const;
  [[nodiscard]] size_t kept_count() const { return kept_.size(); }
  /// pull_early mode: the messages received completely since the last call (a failed pull
  /// comes with its status and no bytes).
  struct Arrived {
    uint32_t source = 0;
    uint64_t key = 0;
    ucs_status_t ucs = UCS_OK;
    std::vector<uint8_t> bytes;
  };
  [[nodiscard]] std::vector<Arrived> take_ready();
  /// How the messages so far arrived (tests check that both protocols ran).
  struct Stats {
    uint64_t eager = 0;
    uint64_t rndv = 0;
  };
  [[nodiscard]] const Stats& stats() const { return stats_; }
  /// Non-empty once a peer broke the protocol (a duplicate key, a malformed header).
  [[nodiscard]] const std::string& protocol_error() const { return protocol_error_; }

  /// Sends message (h.source, h.key) of AM `am_id` on `ep`, adding the send to `pending`
  /// (whose completion means `data` may be reused). `flags`: UCP_AM_SEND_FLAG_*.
  static void send(Pending& pending, Endpoint& ep, unsigned am_id, const MailHeader& h,
                   const void* data, size_t bytes, std::string_view what, uint32_t flags = 0);
  /// ... gathering the message from segments.
  static void send(Pending& pending, Endpoint& ep, unsigned am_id, const MailHeader& h,
                   const std::vector<ucp_dt_iov_t>& segments, std::string_view what,
                   uint32_t flags = 0);

 private:
  using Key = std::pair<uint32_t, uint64_t>;
  struct Posted {
    std::vector<ucp_dt_iov_t> dst;
    size_t bytes = 0;
    Status status;
    void* req = nullptr;  // rendezvous receive in flight
  };
  struct Kept {
    size_t length = 0;
    bool rndv = false;
    void* desc = nullptr;               // UCX's descriptor (rendezvous or persistent eager data)
    std::vector<uint8_t> copy;          // eager data UCX would not let us keep, or a pulled message
    void* req = nullptr;                // pull_early: the pull in flight into `copy`
    ucs_status_t pull_failed = UCS_OK;  // pull_early: the pull could not start
  };
  static ucs_status_t on_message(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);
  void deliver(Posted& p, void* data, size_t length, bool rndv, bool release_desc);
  Worker& worker_;
  unsigned am_id_;
  bool pull_early_;
  std::map<Key, Posted> posted_;  // map: nodes stay put while UCX writes into their iov lists
  std::map<Key, Kept> kept_;
  std::string protocol_error_;
  Stats stats_;
};

}  // namespace troupe::ucx
