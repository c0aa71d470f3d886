// Collectives for host f32 tensors between processes of one host, through POSIX shared memory:
// the CPU backend's tensor parallelism, in CI and on machines without GPUs.
//
// Bootstrap (two-phase, carried by the actors as bytes):
//   ShmCollectives c(rank, size, settings);   // phase 1: creates this rank's segment
//   Blob mine = c.blob();                     // -> head; head -> every rank: all blobs, by rank
//   c.connect(all_blobs);                     // phase 2: maps every peer's segment, then a
//                                             // barrier; each rank then unlinks its own name
// so after connect() nothing is left in /dev/shm even if a process is killed later; a rank
// that dies before it (or a connect() that fails) removes what it can.
//
// Each rank's segment holds a header (a phase counter, a state word, the phase's op and size)
// and two data slots of slot_bytes. A phase: write into slot (phase % 2), publish the phase,
// wait until every peer published it, read the peers' slots. Two slots suffice: a peer that
// published phase k has finished reading phase k - 1. Waiting spins for `spin` (yielding the
// core after 10 us, for machines with more ranks than cores), then sleeps on a futex in the
// peer's header in slices of 10 ms; each slice checks that the peer's process
// lives (a pidfd), that it did not fail or leave, and the deadline (`timeout`). So a rank that
// dies is named within ~10 ms, one that stops (SIGSTOP) at the timeout, and a rank that fails
// marks its header so its peers fail at once with its reason.
//
// all_reduce_sum: up to one_shot_max_bytes every rank reads every slot and sums all of them
// (one phase); above it, rank r sums chunk r into its second slot and every rank copies the
// summed chunks (two phases, each rank reading 2 (n-1)/n of the data). Either way each element is
// summed in rank order by sum_in_rank_order, so every rank gets the same bits. Tensors larger
// than a slot go through in pieces.
//
// Process liveness uses the pid in the blob, so all ranks must share a pid namespace (as
// processes of one host or one container do).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend/collectives.hpp"
#include "transport/bootstrap.hpp"

namespace troupe {

struct ShmCollectivesSettings {
  /// Segment names are "<prefix>-<pid>-<n>-<random>"; a POSIX shm name: '/' then no '/'.
  std::string name_prefix = "/troupe";
  /// Bytes per data slot (each rank maps 2 slots of every rank: 2 * size * slot_bytes).
  size_t slot_bytes = size_t(4) << 20;
  /// Longest wait for a peer, in connect() and in every collective.
  std::chrono::milliseconds timeout{30000};
  /// all_reduce_sum up to this many bytes takes one phase; above, two.
  size_t one_shot_max_bytes = size_t(256) << 10;
  /// Busy-wait this long before sleeping on a futex.
  std::chrono::microseconds spin{200};

  void validate() const;
};

class ShmCollectives final : public Collectives {
 public:
  ShmCollectives(int32_t rank, int32_t size, ShmCollectivesSettings settings = {});
  /// Marks this rank as gone (peers waiting on it fail at once), unmaps, unlinks if needed.
  ~ShmCollectives() override;
  ShmCollectives(const ShmCollectives&) = delete;
  ShmCollectives& operator=(const ShmCollectives&) = delete;

  /// This rank's bootstrap blob: its segment's name and who it is.
  [[nodiscard]] Blob blob() const;
  /// Every rank's blob, in rank order (this rank's own included).
  void connect(const std::vector<Blob>& blobs);

  [[nodiscard]] int32_t rank() const override { return rank_; }
  [[nodiscard]] int32_t size() const override { return size_; }
  void all_reduce_sum(const Tensor& x) override;
  void all_gather(const Tensor& in, const Tensor& out) override;

  /// The segment name this rank created (for tests that check it is gone).
  [[nodiscard]] const std::string& segment_name() const { return name_; }

 private:
  struct Mapping;
  struct Peer;
  enum class Op : uint32_t;
  void check_usable(std::string_view op) const;
  uint8_t* slot(int32_t r, uint32_t phase) const;
  // Publishes this rank's phase (its slot already written) and waits for every peer's.
  void phase(Op op, uint64_t bytes);
  void wait_for(int32_t r, uint32_t phase, Op op, uint64_t bytes);
  [[noreturn]] void fail_peer(int32_t r, const std::string& why) const;
  template <class F>
  void guarded(std::string_view op, F&& body);
  void reduce_one_shot(float* x, size_t n);
  void reduce_two_phase(float* x, size_t n);

  int32_t rank_, size_;
  ShmCollectivesSettings settings_;
  PeerName self_;
  uint64_t nonce_ = 0;
  std::string name_;
  bool unlinked_ = false;
  std::unique_ptr<Mapping> own_;
  std::vector<Peer> peers_;  // by rank (this rank's own entry maps own_)
  bool connected_ = false;
  std::string broken_;
  uint32_t phase_ = 0;   // phases so far
  std::string op_name_;  // the collective in progress, for errors
  uint64_t step_ = 0;
};

}  // namespace troupe
