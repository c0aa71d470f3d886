// Collectives for host f32 tensors over UCX active messages: for CPU ranks on different hosts
// (tcp), or wherever shared memory is not an option.
//
// Bootstrap (two-phase, carried by the actors as bytes):
//   UcxCollectives c(rank, size, settings);   // phase 1: context + worker
//   Blob mine = c.blob();                     // -> head; head -> every rank: all blobs, by rank
//   c.connect(all_blobs);                     // phase 2: endpoints + a handshake with each peer
// connect() and every collective wait at most settings.ucx.timeout for a peer and then throw
// troupe::Error naming it ("rank 2 (pid 4242 on host-b)"); a peer that died fails the call as
// soon as UCX reports it (tcp: at once on SIGKILL; keepalive otherwise). After an error the
// object is unusable: it tells every peer why (a small notice, so their errors name the rank
// that caused it, not just this one) and closes every endpoint, so the peers fail at once
// instead of waiting for their timeout.
//
// all_reduce_sum: up to one_shot_max_bytes every rank sends its whole tensor to every other rank
// and sums all of them (one message round); above it, reduce-scatter then all-gather (rank r
// sums chunk r; two rounds, each rank sending 2 (n-1)/n of the tensor). Either way each element
// is summed in rank order in f32 by sum_in_rank_order, so every rank gets the same bits.
#pragma once

#include <memory>
#include <vector>

#include "runtime/backend/collectives.hpp"
#include "transport/bootstrap.hpp"
#include "transport/ucx/am_mailbox.hpp"

namespace troupe {

struct UcxCollectivesSettings {
  ucx::Settings ucx;
  /// all_reduce_sum up to this many bytes sends whole tensors (one round); above, two rounds.
  size_t one_shot_max_bytes = size_t(64) << 10;
  /// Messages up to this many bytes go eagerly (UCP_AM_SEND_FLAG_EAGER: no rendezvous
  /// handshake, one copy on arrival); larger ones by UCX's choice (rendezvous).
  size_t eager_max_bytes = size_t(256) << 10;
};

class UcxCollectives final : public Collectives {
 public:
  UcxCollectives(int32_t rank, int32_t size, UcxCollectivesSettings settings = {});
  ~UcxCollectives() override;

  /// This rank's bootstrap blob (its worker address and who it is).
  [[nodiscard]] Blob blob() const;
  /// Every rank's blob, in rank order (this rank's own included).
  void connect(const std::vector<Blob>& blobs);

  [[nodiscard]] int32_t rank() const override { return rank_; }
  [[nodiscard]] int32_t size() const override { return size_; }
  void all_reduce_sum(const Tensor& x) override;
  void all_gather(const Tensor& in, const Tensor& out) override;

 private:
  // One message round: every peer sends to this rank and this rank to every peer.
  struct Round;
  void check_usable(std::string_view op) const;
  template <class F>
  void guarded(std::string_view op, F&& body);
  void abort_peers(const std::string& why);
  static ucs_status_t on_abort(void* arg, const void* header, size_t header_length, void* data,
                               size_t length, const ucp_am_recv_param_t* param);

  int32_t rank_, size_;
  UcxCollectivesSettings settings_;
  PeerName self_;
  std::unique_ptr<ucx::Context> ctx_;
  std::unique_ptr<ucx::Worker> worker_;
  std::unique_ptr<ucx::Mailbox> mailbox_;
  std::vector<std::unique_ptr<ucx::Endpoint>> eps_;  // by rank; null for this rank
  std::vector<PeerName> peers_;
  std::vector<std::string> aborts_;  // by rank: why that peer gave up (its notice)
  bool connected_ = false;
  std::string broken_;  // the first error; every later call refuses with it
  uint64_t step_ = 0;   // collectives so far; message keys are step * 4 + round
  std::vector<float> scratch_;
};

}  // namespace troupe
