// The custom all-reduce of issue 23: a one-shot sum of small messages between GPUs of one host
// over CUDA IPC buffers, in one kernel on the caller's stream (so it is ordered with the
// executor's kernels and can be captured into its CUDA graphs).
//
// Bootstrap (the two phases every transport here has, carried by the actors as bytes):
//   CustomAllReduce c(rank, size);          // on the rank's device (current CUDA device):
//                                           // allocates its IPC buffer
//   Blob mine = c.blob();                   // the buffer's IPC handle, host, pid, device
//   c.connect(all_blobs, stream);           // every rank's blob in rank order: opens the
//                                           // peers' buffers; calls go on `stream`
// Then all_reduce_sum(x) for any x of at most max_bytes, on every rank in the same order.
//
// The kernel (custom_all_reduce.cu). Each rank's IPC buffer holds arrival flags (one per CTA and
// peer) and two data halves of max_bytes. A call numbered g (each CTA counts its calls in device
// memory, so graph replays count too): every CTA copies its share of x into half g % 2 of its
// own buffer, raises its flag g in every peer's buffer (release, system scope), waits until each
// peer's CTA of the same index has raised g in its own buffer (acquire), then sums that share
// over the ranks' halves in rank order (f32 accumulation, one rounding to x's dtype) into x. So
// every rank computes the same bits, and a rank's sum of two float32/float16/bfloat16 values is
// the one NCCL's ring computes. A peer can be at most one call ahead (it waits for this rank's
// flags), and entering call g + 1 means it finished reading call g, so two halves suffice and no
// second barrier is needed. A peer that never arrives (dead, stopped) makes the waiting CTAs
// give up after settings.timeout and set the error word: check() and synchronize() then throw,
// naming this rank; the group is then unusable.
//
// Works between processes on one GPU too (the test: two ranks on one device, the GPU time-slicing
// their spinning kernels), and between GPUs of one host with peer access. NVLink multicast is
// not used (nothing here calls cuMulticastCreate).
//
// This header has no CUDA include: the stream is a cudaStream_t passed as void*.
#pragma once

#include <chrono>
#include <memory>
#include <span>

#include "runtime/backend/collectives.hpp"
#include "transport/bootstrap.hpp"

namespace troupe {

struct CustomAllReduceSettings {
  /// The largest message (bytes) a call takes; the IPC buffer holds twice this.
  size_t max_bytes = size_t(4) << 20;
  /// How long a CTA waits for a peer's arrival before it gives up and reports it.
  std::chrono::milliseconds timeout{10000};
  /// The CUDA device to allocate on (cudaSetDevice first); -1: the current one.
  int device = -1;
};

class CustomAllReduce final : public Collectives {
 public:
  static constexpr int32_t kMaxRanks = 8;

  CustomAllReduce(int32_t rank, int32_t size, CustomAllReduceSettings settings = {});
  ~CustomAllReduce() override;
  CustomAllReduce(const CustomAllReduce&) = delete;
  CustomAllReduce& operator=(const CustomAllReduce&) = delete;

  /// Phase 1: this rank's end (its buffer's IPC handle, host, pid, device, max_bytes).
  [[nodiscard]] Blob blob() const;
  /// Phase 2: every rank's blob in rank order; opens the peers' buffers. Calls are enqueued on
  /// `stream` (a cudaStream_t; nullptr: the legacy default stream). Throws naming the peer for
  /// a blob from another host, another max_bytes, or a handle that does not open.
  void connect(std::span<const Blob> blobs, void* stream);

  [[nodiscard]] int32_t rank() const override { return rank_; }
  [[nodiscard]] int32_t size() const override { return size_; }
  /// Whether all_reduce_sum takes a message of `bytes` (at most max_bytes).
  [[nodiscard]] bool takes(size_t bytes) const;
  /// In place on the stream; f32, f16 or bf16 CUDA tensors of at most max_bytes.
  void all_reduce_sum(const Tensor& x) override;
  /// Not offered (NCCL's gather serves the logits); throws.
  void all_gather(const Tensor& in, const Tensor& out) override;

  /// Throws if a call gave up waiting for a peer (reads the error word; synchronizes).
  void check();
  /// Waits for the stream (at most the timeout plus a second), then check().
  void synchronize();

 private:
  struct Impl;
  int32_t rank_, size_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
