// StageLink over UCX active messages: one pipeline stage's hidden states to the next, between
// processes of one host (sm or tcp) or across hosts (tcp).
//
// Bootstrap (two-phase, carried by the actors as bytes), for one pipeline of `num_stages`
// stages (with TP, one link group per TP rank: the stages that share that rank):
//   UcxStageLink link(stage, num_stages, settings);  // phase 1: its own thread + UCX worker
//   Blob mine = link.blob();                         // -> head; head -> every stage: all blobs
//   link.connect(all_blobs);                         // phase 2: endpoints to the previous and
//                                                    // next stage, a handshake with each
// The link runs a thread that owns the UCX worker and progresses it all the time, so a stage
// that is computing still takes its neighbours' messages and finishes its own sends:
// - send_next copies the bytes and returns at once (the copy goes out in the background; at most
//   max_buffered_bytes wait at a time, beyond which send_next waits, bounded by the timeout);
// - every message that arrives is received at once (a large one pulled by rendezvous straight
//   into a buffer the link owns) and kept by its tag, so recv_prev takes tags in any order.
// Errors: a size mismatch is refused (the message is dropped, the link stays usable); a
// neighbour that died fails the calls that need it (messages that arrived before its death are
// still delivered); a wait longer than the timeout throws troupe::Error naming the stage, its
// process and the tag.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/backend/collectives.hpp"
#include "transport/bootstrap.hpp"
#include "transport/ucx/ucx_context.hpp"

namespace troupe {

struct UcxStageLinkSettings {
  ucx::Settings ucx;
  /// Bytes sent but not yet taken by the next stage, beyond which send_next waits.
  size_t max_buffered_bytes = size_t(1) << 30;
};

class UcxStageLink final : public StageLink {
 public:
  UcxStageLink(int32_t stage, int32_t num_stages, UcxStageLinkSettings settings = {});
  /// Lets what was sent leave (bounded by the timeout), then stops the thread.
  ~UcxStageLink() override;
  UcxStageLink(const UcxStageLink&) = delete;
  UcxStageLink& operator=(const UcxStageLink&) = delete;

  [[nodiscard]] Blob blob() const { return blob_; }
  /// Every stage's blob, in stage order (this stage's own included).
  void connect(const std::vector<Blob>& blobs);

  void send_next(uint64_t tag, const void* data, size_t bytes) override;
  void recv_prev(uint64_t tag, void* data, size_t bytes) override;
  /// Closes the endpoint to the next stage forcibly when step `tag` is to be sent, so that
  /// send fails here and the next stage sees this one fail (as after a broken connection).
  void inject_send_failure(uint64_t tag) override;

  [[nodiscard]] int32_t stage() const { return stage_; }
  [[nodiscard]] int32_t num_stages() const { return num_stages_; }

 private:
  struct Io;  // the thread's UCX objects
  struct Arrived {
    std::vector<uint8_t> bytes;
    std::string error;  // a failed receive
  };
  void run();
  void wake();
  [[nodiscard]] std::string who(int32_t stage) const;

  int32_t stage_, num_stages_;
  UcxStageLinkSettings settings_;
  Blob blob_;
  std::vector<PeerName> peers_;  // by stage, after connect

  std::mutex mu_;
  std::condition_variable cv_;
  // Guarded by mu_: what the caller and the thread exchange.
  bool ready_ = false;  // the thread made its worker (or failed: fatal_)
  bool stop_ = false;
  std::vector<Blob> connect_blobs_;  // a connect() request
  bool connect_requested_ = false, connected_ = false;
  std::string fatal_;  // the thread cannot go on (init or connect failed)
  std::string prev_error_, next_error_;
  std::map<uint64_t, Arrived> arrived_;                           // from the previous stage, by tag
  std::deque<std::pair<uint64_t, std::vector<uint8_t>>> outbox_;  // to the next stage
  size_t buffered_bytes_ = 0;                                     // in outbox_ or in flight
  std::optional<uint64_t> fail_tag_;  // inject_send_failure: the step whose send breaks
  void* worker_handle_ = nullptr;  // for ucp_worker_signal from the caller

  std::thread thread_;
};

}  // namespace troupe
