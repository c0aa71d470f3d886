// Collectives over NCCL for CUDA tensors, enqueued on the executor's stream (so they are ordered
// with its kernels and can be captured into its CUDA graphs).
//
// Bootstrap (one phase, carried by the actors as bytes):
//   Blob id = NcclCollectives::make_unique_id();   // on the head (no GPU needed), 128 bytes;
//                                                  // its process must live until all joined
//   // on each rank's executor thread, its device current (cudaSetDevice):
//   NcclCollectives c(rank, size, id, stream);     // non-blocking init, polled until timeout
// Init, every call that NCCL answers "in progress", and synchronize() wait at most
// settings.timeout; on an error or the timeout the communicator is aborted (ncclCommAbort) and
// troupe::Error is thrown: the group is then unusable and must be rebuilt with a new id.
//
// NVLink multicast (NVLS) is forced off (NCCL_NVLS_ENABLE=0 is set before NCCL reads it): on the
// lent H200 machines a program that uses multicast can take the shared GPUs out of service.
// Nothing here calls cuMulticastCreate.
//
// Determinism: NCCL's ring and tree all-reduce compute each element once and send the result
// to every rank, so every rank gets the same bits; the order of the sum is NCCL's (fixed for
// one communicator), not necessarily rank order.
//
// This header has no CUDA or NCCL include: the stream is a cudaStream_t passed as void*.
#pragma once

#include <chrono>
#include <memory>
#include <span>

#include "runtime/backend/collectives.hpp"
#include "transport/bootstrap.hpp"

namespace troupe {

struct NcclSettings {
  /// Longest wait for init, for a call NCCL answers "in progress", and for synchronize().
  std::chrono::milliseconds timeout{60000};
};

class NcclCollectives final : public Collectives {
 public:
  /// ncclGetUniqueId's 128 bytes. Works without a GPU. The calling process hosts NCCL's
  /// bootstrap root: it must stay alive (and reachable) until every rank has joined.
  [[nodiscard]] static Blob make_unique_id();

  /// Joins the group as `rank` of `size` on the current CUDA device; `stream` is a cudaStream_t
  /// (nullptr: the legacy default stream).
  NcclCollectives(int32_t rank, int32_t size, std::span<const uint8_t> unique_id, void* stream,
                  NcclSettings settings = {});
  /// Finalizes (bounded by the timeout) and destroys the communicator; aborts it after an error.
  ~NcclCollectives() override;
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  [[nodiscard]] int32_t rank() const override { return rank_; }
  [[nodiscard]] int32_t size() const override { return size_; }
  /// In place on the stream; f32, f16 or bf16 device tensors (summed in their own dtype).
  void all_reduce_sum(const Tensor& x) override;
  /// On the stream; any dtype (bytes are gathered).
  void all_gather(const Tensor& in, const Tensor& out) override;

  /// Waits until the stream's work is done, polling NCCL for a failed peer; throws (after
  /// aborting the communicator) on an error or the timeout. Use instead of
  /// cudaStreamSynchronize where a peer may die.
  void synchronize();
  /// Throws (after aborting) if NCCL reports an asynchronous error; cheap.
  void check();

 private:
  struct Impl;
  int32_t rank_, size_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
