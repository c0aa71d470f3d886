// The CUDA backend: every op of runtime/backend/backend.hpp on one NVIDIA GPU, for the compute
// dtypes bf16, f16 and f32 (compute_dtype(requested) returns `requested` for those three; f32
// for anything else), plus CUDA-graph capture and replay for the executor.
//
// Plain C++ (no CUDA headers, no CAF): the executor includes this from g++-compiled code.
//
// Threads and devices: the constructor calls cudaSetDevice(device_index) on the calling thread
// and creates one non-default stream; every later call must come from that same thread (the
// executor's own thread). All ops are enqueued on that stream, in call order.
//
// Errors: shapes, dtypes and devices are checked on the host and throw troupe::Error. Index
// values that live on the device (token ids, slots, positions, block tables, sequence lengths)
// are checked by the kernels, which skip the bad element and record it in a device error word;
// the next download() or synchronize() throws troupe::Error naming what was wrong. CUDA and
// cuBLAS failures throw troupe::Error with the library's message.
//
// Debug aid: with TROUPE_CUDA_SYNC_CHECK=1 in the environment every op synchronises after its
// launches (outside graph capture), so a failing kernel is reported by the op that launched it.
//
// Kernels (one concern per .cu file): linear is cuBLASLt (lt_gemm.cpp; CUBLAS_COMPUTE_32F, so
// f32 never uses TF32; the bias rides the epilogue when it has out's dtype) with a plain tiled
// GEMM as fallback for shapes/alignments cuBLASLt declines; attention runs the tensor-core
// FlashAttention-2 kernel (attention_prefill.cu) for sequences with >= 2 query rows and the
// split-KV decode kernel (attention_decode.cu) for sequences with 1, both reading K/V through
// the block table (head dims 64/80/96/128/256, block sizes 8/16/32; others are an Error); f32
// attention uses a simple CUDA-core kernel (attention_f32.cu). sample() runs sampling.cu.
//
// Memory: the backend keeps a 32 MiB cuBLASLt workspace and a 64 MiB split-KV decode workspace
// from construction on, and the sampler grows small metadata buffers plus a scratch copy of the
// logits rows that carry a logit bias or penalties (rows x vocab f32), on first need.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/backend/backend.hpp"

namespace troupe {

/// Number of CUDA devices the runtime sees; 0 when there is no driver or no GPU (never throws).
[[nodiscard]] int cuda_device_count();

/// An instantiated CUDA graph bound to the stream of the backend that captured it. Move-only.
/// Replaying it re-runs the captured ops on the same device buffers with the same shapes and
/// kernel choices: values in those buffers (token ids, positions, block tables, slot mappings,
/// sequence lengths) may change between replays, pointers and host-side arguments may not.
class CudaGraph {
 public:
  CudaGraph() = default;
  CudaGraph(CudaGraph&&) noexcept;
  CudaGraph& operator=(CudaGraph&&) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph();

  /// Enqueues the whole graph on the capturing backend's stream (asynchronous, like an op).
  void replay();
  [[nodiscard]] bool valid() const { return exec_ != nullptr; }

 private:
  friend class CudaBackend;
  CudaGraph(void* graph, void* exec, void* stream) : graph_(graph), exec_(exec), stream_(stream) {}
  void reset();
  void* graph_ = nullptr;   // cudaGraph_t
  void* exec_ = nullptr;    // cudaGraphExec_t
  void* stream_ = nullptr;  // cudaStream_t of the backend; must outlive the graph
};

/// The concrete backend, for the executor's CUDA-only needs (graphs, the stream for NCCL).
/// Create it through make_cuda_backend and downcast, or use cuda_backend_of().
/// Backend::capture(ops) is begin_capture(), ops(), end_capture() behind the backend-neutral
/// interface (an exception from ops ends the capture and drops it, so the stream stays usable).
class CudaBackend : public Backend {
 public:
  /// Starts recording the ops called on this backend into a graph instead of running them.
  /// Ops stay capturable: they neither synchronise nor allocate. Not capturable: upload,
  /// download, synchronize, allocate and sample() (these throw while capturing).
  /// Run the same op sequence once before capturing it: the first call of a shape loads
  /// kernel modules and makes its cuBLASLt plan, which is best kept out of a capture.
  /// Grid sizes come from host-side arguments (AttentionBatch's num_seqs, max_query_len,
  /// max_seq_len, tensor shapes): capture with the largest values a replay will see; kernels
  /// read the actual lengths from the device tensors at replay time.
  virtual void begin_capture() = 0;
  /// Ends the capture and instantiates the graph. Throws troupe::Error when capture failed
  /// (e.g. an op tried something not capturable).
  [[nodiscard]] virtual CudaGraph end_capture() = 0;
  /// The backend's stream as a cudaStream_t (for NCCL calls ordered with the ops).
  [[nodiscard]] virtual void* stream() const = 0;
  /// Multiprocessor count of the device (sizes the decode attention split).
  [[nodiscard]] virtual int num_sms() const = 0;
  /// With TROUPE_OP_PROFILE=1 set when the backend was made: the GPU time of each op run
  /// outside graphs so far, one line per op label (op, weight shape, rows bucket), the same
  /// table the backend prints to stderr when it goes away. Empty without the profiler.
  [[nodiscard]] virtual std::string op_profile_report() = 0;

 protected:
  /// For implementations: wraps an instantiated graph (CudaGraph's constructor is private).
  static CudaGraph wrap_graph(void* graph, void* exec, void* stream) {
    return CudaGraph(graph, exec, stream);
  }
};

/// A backend on CUDA device `device_index`. Throws troupe::Error when there is no such device
/// (the message says how many there are, or why none is usable).
[[nodiscard]] std::unique_ptr<Backend> make_cuda_backend(int device_index);

/// `backend` as a CudaBackend, or nullptr when it is another kind.
[[nodiscard]] CudaBackend* cuda_backend_of(Backend& backend);

}  // namespace troupe
