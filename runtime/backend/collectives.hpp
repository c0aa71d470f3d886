// The wires the model program and the executor see, as interfaces: a tensor-parallel group's
// collectives and the link that carries one pipeline stage's hidden states to the next.
//
// runtime/ knows only these interfaces; the implementations live in transport/ (shared memory
// and UCX for host tensors, NCCL for CUDA tensors), and the executor actor picks one and hands
// it to its backend (Backend::set_collectives) and model runner. So the model program calls
// Backend::all_reduce like any other op, and a fused backend keeps its fusion where no
// collective sits between two ops.
//
// Every blocking call has a bound: an implementation waits at most its configured timeout for
// its peers and then throws troupe::Error naming the rank (and, where it knows one, the
// address) it waited for, as it does when a peer is known to be dead. A collective that failed
// leaves the group unusable; the executor reports the error and the group is rebuilt.
#pragma once

#include "runtime/error.hpp"

#include <cstddef>
#include <cstdint>

#include "runtime/backend/tensor.hpp"

namespace troupe {

/// One tensor-parallel group, seen from one rank. Tensors live on the device of the backend
/// the group is attached to: host memory for the CPU backend, device memory for CUDA (where
/// the ops are enqueued on the backend's stream, so they are ordered like any op and can be
/// captured into CUDA graphs).
class Collectives {
 public:
  virtual ~Collectives() = default;

  [[nodiscard]] virtual int32_t rank() const = 0;
  [[nodiscard]] virtual int32_t size() const = 0;

  /// x = the elementwise sum over ranks of x, in place. Every rank ends with the same bits
  /// (the sum is taken in one fixed order, whatever order the peers' data arrives in), so
  /// ranks that sample from all-reduced values draw the same tokens. x: f32 on the host;
  /// f32, bf16 or f16 on a device (summed in f32 where the implementation can).
  virtual void all_reduce_sum(const Tensor& x) = 0;

  /// out = every rank's `in` concatenated in rank order (out.numel() == size() * in.numel(),
  /// same dtype). Bytes are copied, never reduced: every rank ends with the same bits.
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
};

/// The point-to-point link between consecutive pipeline stages, carrying each step's hidden
/// states [T, H] in host memory (a device backend stages them through pinned host buffers).
/// One link object per executor; the first stage has no previous peer, the last no next.
class StageLink {
 public:
  virtual ~StageLink() = default;

  /// Sends `bytes` bytes to the next stage, tagged with `tag` (the step id). Returns when
  /// `data` may be reused.
  virtual void send_next(uint64_t tag, const void* data, size_t bytes) = 0;

  /// Receives exactly `bytes` bytes tagged `tag` from the previous stage into `data`. Messages
  /// with other tags that arrive first are kept for their own recv. Throws troupe::Error on a
  /// size mismatch, a dead peer or the timeout.
  virtual void recv_prev(uint64_t tag, void* data, size_t bytes) = 0;

  /// Fault injection (issue 22, `ucx-fail`): the send of step `tag` fails as a broken
  /// connection does, for this stage and for the next. Links with nothing to break refuse.
  virtual void inject_send_failure(uint64_t tag) {
    fail("stage link: cannot inject a failure of step {}'s transfer: this link has no "
         "connection to break",
         tag);
  }
};

}  // namespace troupe
