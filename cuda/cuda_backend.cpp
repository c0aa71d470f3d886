#include "cuda/cuda_backend.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "cuda/cuda_check.hpp"
#include "cuda/cuda_sampler.hpp"
#include "cuda/device_buffer.hpp"
#include "cuda/kernels.hpp"
#include "cuda/lt_gemm.hpp"
#include "cuda/op_args.hpp"
#include "cuda/op_profile.hpp"
#include "runtime/backend/op_checks.hpp"

namespace troupe {

using cuda::check_compute_dtype;
using cuda::check_cuda;
using cuda::check_cuda_attention;

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // "no driver" / "no device" must not linger as the last error
    return 0;
  }
  return n;
}

// ---- CudaGraph ----

CudaGraph::CudaGraph(CudaGraph&& o) noexcept
    : graph_(o.graph_), exec_(o.exec_), stream_(o.stream_) {
  o.graph_ = o.exec_ = o.stream_ = nullptr;
}

CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
  if (this != &o) {
    reset();
    graph_ = o.graph_;
    exec_ = o.exec_;
    stream_ = o.stream_;
    o.graph_ = o.exec_ = o.stream_ = nullptr;
  }
  return *this;
}

CudaGraph::~CudaGraph() {
  reset();
}

void CudaGraph::reset() {
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  graph_ = exec_ = stream_ = nullptr;
}

void CudaGraph::replay() {
  if (exec_ == nullptr)
    fail("CudaGraph::replay: the graph is empty (default-constructed or moved from)");
  check_cuda(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream_)),
      "CudaGraph::replay");
}

namespace {

constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;
constexpr size_t kDecodeWorkspaceBytes = size_t(64) << 20;
constexpr size_t kDecodeCounters = size_t(1) << 16;  // (sequence, KV head) pairs of one step

// A diagnostic switch (TROUPE_CUDA_SYNC_CHECK, TROUPE_OP_PROFILE): set, non-empty and not "0".
bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}

std::string device_error_text(int bits) {
  std::string s;
  const auto add = [&](int bit, const char* what) {
    if ((bits & bit) == 0) return;
    if (!s.empty()) s += "; ";
    s += what;
  };
  add(cuda::kErrEmbeddingId, "embedding: a token id was outside [0, rows of the table)");
  add(cuda::kErrGatherIndex, "gather_rows: an index was outside [0, rows of x)");
  add(cuda::kErrRopePosition, "rope: a position was outside [0, rows of cos_sin)");
  add(cuda::kErrKvSlot,
      "write_kv: a slot_mapping entry was >= num_blocks * block_size (negative skips)");
  add(cuda::kErrBlockTable, "attention: a block_tables entry was outside [0, num_blocks)");
  add(cuda::kErrSeqLayout,
      "attention: query_start_loc / seq_lens were inconsistent (query_start_loc[0] != 0, "
      "decreasing, past T, a query longer than max_query_len or its seq_len, a seq_len over "
      "max_seq_len or the block table)");
  return s;
}

// Backend::capture's result: the CudaGraph behind the backend-neutral interface.
class CapturedCudaGraph final : public CapturedGraph {
 public:
  explicit CapturedCudaGraph(CudaGraph graph) : graph_(std::move(graph)) {}
  void replay() override { graph_.replay(); }

 private:
  CudaGraph graph_;
};

class CudaBackendImpl final : public CudaBackend {
 public:
  explicit CudaBackendImpl(int device_index) : device_{DeviceKind::cuda, device_index} {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      cudaGetLastError();
      fail("make_cuda_backend: no usable CUDA device ({}: {})", cudaGetErrorName(e),
           cudaGetErrorString(e));
    }
    if (device_index < 0 || device_index >= count)
      fail("make_cuda_backend: device_index = {} is outside the {} CUDA device(s) [0, {})",
           device_index, count, count);
    check_cuda(cudaSetDevice(device_index), "make_cuda_backend: cudaSetDevice");
    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, device_index),
               "make_cuda_backend: cudaGetDeviceProperties");
    num_sms_ = prop.multiProcessorCount;
    gpu_name_ = prop.name;
    cudaStream_t s = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
               "make_cuda_backend: cudaStreamCreate");
    stream_holder_.reset(s);
    stream_ = s;
    err_word_.ensure(sizeof(int), "make_cuda_backend: device error word");
    err_host_.ensure(sizeof(int), "make_cuda_backend: device error word");
    check_cuda(cudaMemsetAsync(err_word_.data(), 0, sizeof(int), stream_),
               "make_cuda_backend: cudaMemset");
    lt_workspace_.ensure(kLtWorkspaceBytes, "make_cuda_backend: cuBLASLt workspace");
    decode_workspace_.ensure(kDecodeWorkspaceBytes, "make_cuda_backend: decode workspace");
    decode_counters_.ensure(kDecodeCounters * sizeof(uint32_t),
                            "make_cuda_backend: decode arrival counters");
    check_cuda(cudaMemsetAsync(decode_counters_.data(), 0, decode_counters_.bytes(), stream_),
               "make_cuda_backend: cudaMemset");
    check_cuda(cuda::attention_decode_init(),
               "make_cuda_backend: decode attention kernel attributes");
    lt_ = std::make_unique<cuda::LtGemm>();
    lt_->set_workspace(lt_workspace_.data(), lt_workspace_.bytes());
    check_cuda(cuda::attention_init(), "make_cuda_backend: attention kernel attributes");
    check_cuda(cuda::gemv_init(), "make_cuda_backend: skinny GEMM kernel attributes");
    check_cuda(cudaStreamSynchronize(stream_), "make_cuda_backend: stream");
    sync_check_ = env_flag("TROUPE_CUDA_SYNC_CHECK");
    if (env_flag("TROUPE_OP_PROFILE")) profiler_ = std::make_unique<cuda::OpProfiler>(stream_);
  }

  ~CudaBackendImpl() override {
    abandon_capture();
    // Work still queued may use the buffers freed below.
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  }

  [[nodiscard]] std::string name() const override {
    return "cuda:" + std::to_string(device_.index) + " (" + gpu_name_ + ")";
  }
  [[nodiscard]] Device device() const override { return device_; }
  [[nodiscard]] DType compute_dtype(DType requested) const override {
    return requested == DType::f16 || requested == DType::bf16 ? requested : DType::f32;
  }

  // ---- CUDA extras ----

  void begin_capture() override {
    if (capturing_) fail("begin_capture: a capture is already running on this backend");
    check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "begin_capture");
    capturing_ = true;
  }

  [[nodiscard]] CudaGraph end_capture() override {
    if (!capturing_) fail("end_capture: no capture is running (call begin_capture first)");
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    check_cuda(cudaStreamEndCapture(stream_, &graph), "end_capture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    if (e != cudaSuccess) {
      cudaGraphDestroy(graph);
      check_cuda(e, "end_capture: cudaGraphInstantiate");
    }
    return wrap_graph(graph, exec, stream_);
  }

  [[nodiscard]] bool can_capture() const override { return true; }

  // Batch-invariant mode (docs/engine.md): every linear runs launch_invariant_gemm (no skinny
  // GEMM, no cuBLASLt, no fused GEMVs), and attention runs the prefill kernel for every row.
  // The other ops already compute a row from that row alone (norms, RoPE, activations) or are
  // invariant by design (the sampler: integer sums, whatever the cluster split).
  void set_batch_invariant(bool on) override { batch_invariant_ = on; }

  [[nodiscard]] std::unique_ptr<CapturedGraph> capture(
      const std::function<void()>& ops) override {
    begin_capture();
    try {
      ops();
    } catch (...) {
      abandon_capture();
      throw;
    }
    return std::make_unique<CapturedCudaGraph>(end_capture());
  }

  [[nodiscard]] void* stream() const override { return stream_; }
  [[nodiscard]] int num_sms() const override { return num_sms_; }

  // ---- memory ----

  [[nodiscard]] Buffer allocate(size_t bytes) override {
    not_capturing("allocate");
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (e != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      fail("allocate: cudaMalloc of {} bytes on {} failed: {} ({} of {} bytes free)", bytes,
           to_string(device_), cudaGetErrorString(e), free_b, total_b);
    }
    return Buffer(p, bytes, device_, [](void* q) { cudaFree(q); });
  }

  void upload(const Tensor& dst, const void* host, size_t bytes) override {
    check_transfer("upload", "dst", dst, host, bytes);
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(dst.data, host, bytes, cudaMemcpyHostToDevice, stream_),
               "upload: cudaMemcpyAsync");
    // From pageable memory the copy has read `host` when the call returns; from page-locked
    // memory it has not, so wait: the caller may reuse `host` as soon as upload returns.
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, host) == cudaSuccess && attr.type == cudaMemoryTypeHost &&
        !capturing_)
      check_cuda(cudaStreamSynchronize(stream_), "upload: copy from page-locked memory");
    cudaGetLastError();
  }

  void download(void* host, const Tensor& src, size_t bytes) override {
    check_transfer("download", "src", src, host, bytes);
    not_capturing("download");
    if (bytes > 0)
      check_cuda(cudaMemcpyAsync(host, src.data, bytes, cudaMemcpyDeviceToHost, stream_),
                 "download: cudaMemcpyAsync");
    sync_and_check("download");
  }

  void copy(const Tensor& dst, const Tensor& src) override {
    const OpCheck check("copy", device_);
    const auto prof = profile("copy", 0);
    check_copy(check, dst, src);
    check.disjoint("dst", dst, "src", src);
    if (src.nbytes() == 0) return;
    check_cuda(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream_),
               "copy: cudaMemcpyAsync");
    after_launch("copy");
  }

  // Swap space: page-locked host memory, so the block copies below are DMA transfers that run
  // in stream order without blocking the host.
  [[nodiscard]] Buffer allocate_host(size_t bytes) override {
    not_capturing("allocate_host");
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      fail(
          "allocate_host: cudaHostAlloc of {} bytes of page-locked memory failed: {} (lower "
          "--swap-space)",
          bytes, cudaGetErrorString(e));
    }
    return Buffer(p, bytes, Device{DeviceKind::cpu, 0}, [](void* q) { cudaFreeHost(q); });
  }

  // One cudaMemcpyAsync per block on the stream: ordered after the step's earlier ops and
  // before its forward, which is the order the executor needs (swap out, swap in, compute).
  void swap_blocks(const Tensor& dst_cache, const Tensor& src_cache,
                   std::span<const BlockCopy> pairs) override {
    not_capturing("swap_blocks");
    const auto prof = profile("swap_blocks", int64_t(pairs.size()));
    const size_t block_bytes = check_swap_blocks(dst_cache, src_cache, pairs, device_);
    const cudaMemcpyKind kind =
        dst_cache.device.kind == DeviceKind::cpu ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
    auto* dst = static_cast<char*>(dst_cache.data);
    const auto* src = static_cast<const char*>(src_cache.data);
    for (const BlockCopy& c : pairs)
      check_cuda(cudaMemcpyAsync(dst + size_t(c.dst) * block_bytes,
                                 src + size_t(c.src) * block_bytes, block_bytes, kind, stream_),
                 "swap_blocks: cudaMemcpyAsync");
    after_launch("swap_blocks");
  }

  void synchronize() override {
    not_capturing("synchronize");
    sync_and_check("synchronize");
  }

  [[nodiscard]] MemoryInfo memory_info() const override {
    size_t free_b = 0, total_b = 0;
    check_cuda(cudaMemGetInfo(&free_b, &total_b), "memory_info: cudaMemGetInfo");
    return MemoryInfo{free_b, total_b};
  }

  // ---- ops ----

  void embedding(const Tensor& ids, const Tensor& table, const Tensor& out) override {
    const OpCheck check("embedding", device_);
    const auto prof = profile("embedding", rows_of(ids));
    check_compute_dtype(check, "table", table);
    check_embedding(check, ids, table, out);
    check.disjoint("out", out, "table", table);
    cuda::launch_gather_rows(table.data, table.dim(0), ids.as<const int32_t>(), out.data,
                             out.dim(0), table.dim(1) * int64_t(dtype_size(table.dtype)),
                             cuda::kErrEmbeddingId, err(), stream_);
    after_launch("embedding");
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
    const OpCheck check("rms_norm", device_);
    const auto prof = profile("rms_norm", rows_of(x));
    check_compute_dtype(check, "x", x);
    check_norm(check, x, weight, eps, out);
    check.fits_int("rows of x", x.dim(0));
    check.disjoint("out", out, "x", x);
    cuda::launch_rms_norm(x.dtype, nullptr, x.data, weight.data, eps, out.data, x.dim(0), x.dim(1),
                          stream_);
    after_launch("rms_norm");
  }

  void rms_norm_heads(const Tensor& x, const Tensor& weight, float eps, int32_t head_begin,
                      int32_t num_heads, int32_t head_dim) override {
    const OpCheck check("rms_norm_heads", device_);
    const auto prof = profile("rms_norm_heads", rows_of(x));
    check_compute_dtype(check, "x", x);
    check_norm_heads(check, x, weight, eps, head_begin, num_heads, head_dim);
    check.fits_int("rows of x", x.dim(0) * std::max(num_heads, 1));
    check.disjoint("weight", weight, "x", x);
    cuda::launch_rms_norm_heads(x.dtype, x.data, weight.data, eps, x.dim(0), x.dim(1), head_begin,
                                num_heads, head_dim, stream_);
    after_launch("rms_norm_heads");
  }

  void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                    const Tensor& out) override {
    const OpCheck check("add_rms_norm", device_);
    const auto prof = profile("add_rms_norm", rows_of(x));
    check_compute_dtype(check, "x", x);
    check_add_norm(check, residual, x, weight, eps, out);
    check.fits_int("rows of x", x.dim(0));
    check.disjoint("residual", residual, "x", x);
    check.disjoint("out", out, "residual", residual);
    check.disjoint("out", out, "x", x);
    cuda::launch_rms_norm(x.dtype, residual.data, x.data, weight.data, eps, out.data, x.dim(0),
                          x.dim(1), stream_);
    after_launch("add_rms_norm");
  }

  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) override {
    const OpCheck check("linear", device_);
    const auto prof = profile("linear", rows_of(x), w);
    check_compute_dtype(check, "x", x);
    check_linear(check, x, w, bias, out);
    const int64_t t = x.dim(0), k = x.dim(1), n = w.dim(0);
    if (t == 0 || n == 0) return;
    const DType bias_dt = bias != nullptr ? bias->dtype : out.dtype;
    const void* bias_p = bias != nullptr ? bias->data : nullptr;
    if (k == 0) {  // an empty sum: out = bias or 0
      if (bias_p != nullptr)
        cuda::launch_add_bias(out.dtype, out.data, bias_dt, bias_p, t, n, false, stream_);
      else
        check_cuda(cudaMemsetAsync(out.data, 0, out.nbytes(), stream_), "linear: cudaMemset");
      after_launch("linear");
      return;
    }
    if (batch_invariant_) {  // one kernel and one reduction order for every row count
      cuda::launch_invariant_gemm(x.dtype, x.data, w.data, bias_dt, bias_p, out.dtype, out.data, t,
                                  n, k, stream_);
      after_launch("linear");
      return;
    }
    const cuda::GemmArgs args{x.dtype,   x.data,   w.data, bias_dt, bias_p,
                              out.dtype, out.data, t,      n,       k};
    // Decode-sized (at most kGemvMaxRows rows): the skinny kernel.
    if (fused_gemv(x, w, bias, out, n, {})) {
      after_launch("linear");
      return;
    }
    switch (lt_->run(args, stream_)) {
      case cuda::LtGemm::Outcome::done:
        break;
      case cuda::LtGemm::Outcome::done_without_bias:
        cuda::launch_add_bias(out.dtype, out.data, bias_dt, bias_p, t, n, true, stream_);
        break;
      case cuda::LtGemm::Outcome::unsupported:
        cuda::launch_fallback_gemm(x.dtype, x.data, w.data, bias_dt, bias_p, out.dtype, out.data, t,
                                   n, k, stream_);
        break;
    }
    after_launch("linear");
  }

  void add(const Tensor& residual, const Tensor& x) override {
    const OpCheck check("add", device_);
    const auto prof = profile("add", rows_of(x));
    check_compute_dtype(check, "x", x);
    check_add(check, residual, x);
    cuda::launch_add(x.dtype, residual.data, x.data, x.numel(), stream_);
    after_launch("add");
  }

  // The fused ops run one fused GEMV (gemv.cu) where it takes the shapes, and otherwise the
  // separate ops (Backend's defaults); both give the same bits.

  void linear_add(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& residual,
                  const Tensor& scratch) override {
    const OpCheck check("linear_add", device_);
    const auto prof = profile("linear_add", rows_of(x), w);
    check_compute_dtype(check, "x", x);
    check_linear(check, x, w, bias, residual);
    if (residual.dtype != x.dtype)
      check.fail("residual {} must be {} like x", describe(residual), dtype_name(x.dtype));
    check.tensor("scratch", scratch, residual.ndim);
    check.same_shape("scratch", scratch, "residual", residual);
    check.disjoint("scratch", scratch, "residual", residual);
    cuda::GemvFusion fusion;
    fusion.add_to_out = true;
    if (fused_gemv(x, w, bias, residual, w.dim(0), fusion)) {
      after_launch("linear_add");
      return;
    }
    Backend::linear_add(x, w, bias, residual, scratch);
  }

  void rms_norm_linear(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& h,
                       const Tensor& w, const Tensor* bias, const Tensor& out) override {
    const OpCheck check("rms_norm_linear", device_);
    const auto prof = profile("rms_norm_linear", rows_of(x), w);
    check_compute_dtype(check, "x", x);
    check_norm_linear(check, x, norm_weight, eps, h, w, bias, out, "out");
    check.fits_int("rows of x", x.dim(0));
    if (fused_gemv(x, w, bias, out, w.dim(0), norm_fusion(x, norm_weight, eps, h))) {
      after_launch("rms_norm_linear");
      return;
    }
    Backend::rms_norm_linear(x, norm_weight, eps, h, w, bias, out);
  }

  void rms_norm_linear_act_mul(const Tensor& x, const Tensor& norm_weight, float eps,
                               const Tensor& h, const Tensor& w, const Tensor* bias,
                               GatedActivation act, const Tensor& gate_up,
                               const Tensor& out) override {
    const OpCheck check("rms_norm_linear_act_mul", device_);
    const auto prof = profile("rms_norm_linear_act_mul", rows_of(x), w);
    check_compute_dtype(check, "x", x);
    check_norm_linear(check, x, norm_weight, eps, h, w, bias, gate_up, "gate_up");
    check.fits_int("rows of x", x.dim(0));
    check_act_mul(check, gate_up, out);
    check.disjoint("out", out, "x", x);
    check.disjoint("out", out, "h", h);
    check.disjoint("out", out, "w", w);
    cuda::GemvFusion fusion = norm_fusion(x, norm_weight, eps, h);
    fusion.act = int(act);
    if (fused_gemv(x, w, bias, out, out.dim(1), fusion)) {
      after_launch("rms_norm_linear_act_mul");
      return;
    }
    Backend::rms_norm_linear_act_mul(x, norm_weight, eps, h, w, bias, act, gate_up, out);
  }

  void rope(const Tensor& q, const Tensor& k, const Tensor& positions, const Tensor& cos_sin,
            int32_t head_dim, int32_t rotary_dim, RopeStyle style) override {
    const OpCheck check("rope", device_);
    const auto prof = profile("rope", rows_of(positions));
    check_compute_dtype(check, "q", q);
    check_rope(check, q, k, positions, cos_sin, head_dim, rotary_dim, style);
    const int64_t tokens = positions.dim(0);
    const int64_t q_heads = q.dim(1) / head_dim, k_heads = k.dim(1) / head_dim;
    check.fits_int("heads * rotary_dim / 2", (q_heads + k_heads) * rotary_dim / 2);
    cuda::launch_rope(q.dtype, q.data, k.data, positions.as<const int32_t>(),
                      cos_sin.as<const float>(), tokens, int(q_heads), int(k_heads), head_dim,
                      rotary_dim, cos_sin.dim(0), style == RopeStyle::neox, err(), stream_);
    after_launch("rope");
  }

  void write_kv(const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                const Tensor& slot_mapping) override {
    const OpCheck check("write_kv", device_);
    const auto prof = profile("write_kv", rows_of(slot_mapping));
    check_compute_dtype(check, "k_cache", k_cache);
    check_write_kv(check, k, v, k_cache, v_cache, slot_mapping);
    const int64_t row = k_cache.dim(2) * k_cache.dim(3);  // num_kv_heads * d
    cuda::launch_write_kv(
        k.data, v.data, k_cache.data, v_cache.data, slot_mapping.as<const int32_t>(), k.dim(0),
        k_cache.dim(0) * k_cache.dim(1), row * int64_t(dtype_size(k.dtype)), err(), stream_);
    after_launch("write_kv");
  }

  void rope_qkv_to_cache(const Tensor& qkv, const Tensor& positions, const Tensor& cos_sin,
                         int32_t head_dim, int32_t rotary_dim, RopeStyle style, int32_t num_heads,
                         int32_t num_kv_heads, const Tensor& k_cache, const Tensor& v_cache,
                         const Tensor& slot_mapping, const Tensor& q_out) override {
    const OpCheck check("rope_qkv_to_cache", device_);
    const auto prof = profile("rope_qkv_to_cache", rows_of(positions));
    check_compute_dtype(check, "qkv", qkv);
    check_rope_qkv(check, qkv, positions, cos_sin, head_dim, rotary_dim, style, num_heads,
                   num_kv_heads, k_cache, v_cache, slot_mapping, q_out);
    check.fits_int("(num_heads + 2 num_kv_heads) * head_dim", qkv.dim(1));
    cuda::launch_rope_qkv_to_cache(qkv.dtype, qkv.data, positions.as<const int32_t>(),
                                   cos_sin.as<const float>(), positions.dim(0), num_heads,
                                   num_kv_heads, head_dim, rotary_dim, cos_sin.dim(0),
                                   style == RopeStyle::neox, slot_mapping.as<const int32_t>(),
                                   k_cache.dim(0) * k_cache.dim(1), k_cache.data, v_cache.data,
                                   q_out.data, err(), stream_);
    after_launch("rope_qkv_to_cache");
  }

  void rms_norm_linear_rope_qkv_to_cache(
      const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& h, const Tensor& w,
      const Tensor* bias, const Tensor& qkv, const Tensor& positions, const Tensor& cos_sin,
      int32_t head_dim, int32_t rotary_dim, RopeStyle style, int32_t num_heads,
      int32_t num_kv_heads, const Tensor& k_cache, const Tensor& v_cache,
      const Tensor& slot_mapping, const Tensor& q_out) override {
    const OpCheck check("rms_norm_linear_rope_qkv_to_cache", device_);
    const auto prof = profile("rms_norm_linear_rope_qkv_to_cache", rows_of(x), w);
    check_compute_dtype(check, "x", x);
    check_norm_linear(check, x, norm_weight, eps, h, w, bias, qkv, "qkv");
    check.fits_int("rows of x", x.dim(0));
    check_rope_qkv(check, qkv, positions, cos_sin, head_dim, rotary_dim, style, num_heads,
                   num_kv_heads, k_cache, v_cache, slot_mapping, q_out);
    check.fits_int("(num_heads + 2 num_kv_heads) * head_dim", qkv.dim(1));
    for (const auto& [name, t] : {std::pair{"q_out", &q_out}, std::pair{"k_cache", &k_cache},
                                  std::pair{"v_cache", &v_cache}}) {
      check.disjoint(name, *t, "x", x);
      check.disjoint(name, *t, "w", w);
    }
    cuda::GemvFusion fusion = norm_fusion(x, norm_weight, eps, h);
    cuda::GemvFusion::Rope& r = fusion.rope;
    r.positions = positions.as<const int32_t>();
    r.cos_sin = cos_sin.as<const float>();
    r.max_positions = cos_sin.dim(0);
    r.slots = slot_mapping.as<const int32_t>();
    r.n_slots = k_cache.dim(0) * k_cache.dim(1);
    r.q_out = q_out.data;
    r.k_cache = k_cache.data;
    r.v_cache = v_cache.data;
    r.num_heads = num_heads;
    r.num_kv_heads = num_kv_heads;
    r.head_dim = head_dim;
    r.rotary_dim = rotary_dim;
    r.neox = style == RopeStyle::neox;
    r.err = err();
    if (fused_gemv(x, w, bias, qkv, w.dim(0), fusion)) {
      after_launch("rms_norm_linear_rope_qkv_to_cache");
      return;
    }
    Backend::rms_norm_linear_rope_qkv_to_cache(x, norm_weight, eps, h, w, bias, qkv, positions,
                                               cos_sin, head_dim, rotary_dim, style, num_heads,
                                               num_kv_heads, k_cache, v_cache, slot_mapping,
                                               q_out);
  }

  void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                 const AttentionBatch& batch, const AttentionShape& shape,
                 const Tensor& out) override {
    const OpCheck check("attention", device_);
    const auto prof =
        profile(batch.max_query_len == 1 ? "attention (decode)" : "attention (prompt)", rows_of(q));
    check_cuda_attention(check, q, k_cache, v_cache, batch, shape, out);
    const cuda::AttentionArgs a = attention_args(q, k_cache, v_cache, batch, shape, out);
    if (q.dtype == DType::f32)
      cuda::launch_attention_f32(a, stream_);
    else
      launch_half_attention(q.dtype, a);
    after_launch("attention");
  }

  /// The kernels' view of attention's arguments (checked by the caller).
  cuda::AttentionArgs attention_args(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                     const AttentionBatch& batch, const AttentionShape& shape,
                                     const Tensor& out) {
    int log2_bs = 0;
    while ((1 << log2_bs) < shape.block_size) ++log2_bs;
    return cuda::AttentionArgs{q.data,
                               k_cache.data,
                               v_cache.data,
                               out.data,
                               batch.query_start_loc.as<const int32_t>(),
                               batch.seq_lens.as<const int32_t>(),
                               batch.block_tables.as<const int32_t>(),
                               q.dim(0),
                               batch.num_seqs,
                               batch.max_query_len,
                               batch.max_seq_len,
                               int32_t(batch.block_tables.dim(1)),
                               int32_t(k_cache.dim(0)),
                               shape.num_heads,
                               shape.num_kv_heads,
                               shape.head_dim,
                               shape.block_size,
                               log2_bs,
                               shape.scale,
                               err(),
                               0,  // decode_split_keys: the launch plans it
                               batch.num_prefill_seqs,
                               batch_invariant_};
  }

  /// f16 / bf16 attention with the decode workspace.
  void launch_half_attention(DType dt, const cuda::AttentionArgs& a) {
    const cuda::DecodeWorkspace ws{
        decode_workspace_.as<float>(), decode_workspace_.bytes() / sizeof(float),
        decode_counters_.as<uint32_t>(), decode_counters_.bytes() / sizeof(uint32_t)};
    cuda::launch_attention_half(dt, a, num_sms_, ws, stream_);
  }

  void act_mul(GatedActivation act, const Tensor& gate_up, const Tensor& out) override {
    const OpCheck check("act_mul", device_);
    const auto prof = profile("act_mul", rows_of(gate_up));
    check_compute_dtype(check, "gate_up", gate_up);
    check_act_mul(check, gate_up, out);
    cuda::launch_act_mul(int(act), out.dtype, gate_up.data, out.data, out.dim(0), out.dim(1),
                         stream_);
    after_launch("act_mul");
  }

  void gather_rows(const Tensor& x, const Tensor& indices, const Tensor& out) override {
    const OpCheck check("gather_rows", device_);
    const auto prof = profile("gather_rows", rows_of(indices));
    check_gather_rows(check, x, indices, out);
    cuda::launch_gather_rows(x.data, x.dim(0), indices.as<const int32_t>(), out.data, out.dim(0),
                             x.dim(1) * int64_t(dtype_size(x.dtype)), cuda::kErrGatherIndex, err(),
                             stream_);
    after_launch("gather_rows");
  }

  void embedding_shard(const Tensor& ids, const Tensor& table, int64_t vocab_start,
                       int64_t vocab_size, const Tensor& out) override {
    const OpCheck check("embedding_shard", device_);
    const auto prof = profile("embedding_shard", rows_of(ids));
    check_compute_dtype(check, "table", table);
    check_embedding_shard(check, ids, table, vocab_start, vocab_size, out);
    const int64_t row_bytes = table.dim(1) * int64_t(dtype_size(table.dtype));
    if (row_bytes % 4 != 0)
      check.fail("rows of {} bytes: the hidden size must make rows a multiple of 4 bytes",
                 row_bytes);
    cuda::launch_embedding_shard(table.data, table.dim(0), vocab_start, vocab_size,
                                 ids.as<const int32_t>(), out.data, out.dim(0), row_bytes, err(),
                                 stream_);
    after_launch("embedding_shard");
  }

  // One 2-D copy per shard: shard p's [L, W] rows land at column p * W of out's [L, P * W].
  void interleave_shards(const Tensor& shards, const Tensor& out) override {
    const OpCheck check("interleave_shards", device_);
    check_interleave_shards(check, shards, out);
    const int64_t p = shards.dim(0), l = shards.dim(1), w = shards.dim(2);
    const size_t es = dtype_size(shards.dtype);
    for (int64_t r = 0; r < p; ++r)
      check_cuda(cudaMemcpy2DAsync(static_cast<char*>(out.data) + size_t(r * w) * es,
                                   size_t(p * w) * es,
                                   static_cast<const char*>(shards.data) + size_t(r * l * w) * es,
                                   size_t(w) * es, size_t(w) * es, size_t(l),
                                   cudaMemcpyDeviceToDevice, stream_),
                 "interleave_shards: cudaMemcpy2DAsync");
  }

  std::vector<SampledToken> sample(const Tensor& logits,
                                   std::span<const SamplingRow> rows) override {
    const auto prof = profile("sample", rows_of(logits));
    check_sample_args("sample", logits, rows);
    if (rows.empty()) return {};
    // The error word comes back with the results, under the sampler's one synchronisation.
    auto result = sampler_.sample(logits, rows, stream_, err_word_.as<const int>(),
                                  err_host_.as<int>());
    raise_device_errors("sample");
    return result;
  }

  void start_sample(const Tensor& logits, std::span<const SamplingRow> rows) override {
    const auto prof = profile("sample", rows_of(logits));  // times the work it enqueues
    check_sample_args("start_sample", logits, rows);
    if (rows.empty()) fail("start_sample: no rows to sample");
    sampler_.start(logits, rows, stream_, err_word_.as<const int>(), err_host_.as<int>());
  }

  bool sample_done() override { return sampler_.done(); }

  std::vector<SampledToken> finish_sample() override {
    if (!sampler_.in_flight()) fail("finish_sample: no sampling is in flight");
    auto result = sampler_.collect();
    raise_device_errors("sample");
    return result;
  }

  void feed_sampled_tokens(const Tensor& dst, std::span<const TokenFeed> feeds) override {
    if (!sampler_.in_flight()) fail("feed_sampled_tokens: no sampling is in flight");
    check_token_feeds(dst, feeds, sampler_.rows_in_flight());
    if (feeds.empty()) return;
    const int32_t* results = sampler_.device_token(0);
    feed_pairs_.clear();
    for (const TokenFeed& f : feeds) {
      feed_pairs_.push_back(sampler_.device_token(size_t(f.row)) - results);
      feed_pairs_.push_back(f.index);
    }
    feed_device_.ensure(feed_pairs_.size() * sizeof(int64_t), "feed_sampled_tokens: feeds");
    // From pageable memory: staged before the call returns, so feed_pairs_ may change after.
    check_cuda(cudaMemcpyAsync(feed_device_.data(), feed_pairs_.data(),
                               feed_pairs_.size() * sizeof(int64_t), cudaMemcpyHostToDevice,
                               stream_),
               "feed_sampled_tokens: upload");
    cuda::launch_feed_tokens(results, feed_device_.as<const int64_t>(), int(feeds.size()),
                             dst.as<int32_t>(), stream_);
    after_launch("feed_sampled_tokens");
  }

 private:
  int* err() const { return err_word_.as<int>(); }

  void check_sample_args(const char* op, const Tensor& logits,
                         std::span<const SamplingRow> rows) const {
    const OpCheck check(op, device_);
    not_capturing(op);
    check_sample(check, logits, rows.size());
    if (logits.dim(1) <= 0 || logits.dim(1) >= cuda::kMaxSampleVocab)
      check.fail("logits {}: vocabulary size must be in [1, {})", describe(logits),
                 cuda::kMaxSampleVocab);
    check.fits_int("rows", logits.dim(0));
    if (sampler_.in_flight()) fail("{}: a sampling is already in flight", op);
  }

  // Ends a capture that will not be used (an op threw inside it) and drops what it recorded;
  // the stream leaves capture mode, so the backend stays usable.
  void abandon_capture() {
    if (!capturing_) return;
    capturing_ = false;
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);  // fails when the capture was invalidated; still ends it
    if (g != nullptr) cudaGraphDestroy(g);
    cudaGetLastError();  // the failed capture's error must not be reported by the next op
  }

  void not_capturing(const char* op) const {
    if (capturing_) fail("{}: not allowed while a CUDA graph is being captured", op);
  }

  // The host can reuse or read its buffer after these.
  void sync_and_check(const char* op) {
    check_cuda(cudaStreamSynchronize(stream_), op);
    check_device_errors(op);
  }

  // Reads (and clears) the device error word; the stream must be idle or about to be synced.
  void check_device_errors(const char* op) {
    check_cuda(cudaMemcpyAsync(err_host_.data(), err_word_.data(), sizeof(int),
                               cudaMemcpyDeviceToHost, stream_),
               op);
    check_cuda(cudaStreamSynchronize(stream_), op);
    raise_device_errors(op);
  }

  // The error word already copied to err_host_ (and the stream synchronised since): clears it
  // on the device and fails when a kernel set a bit.
  void raise_device_errors(const char* op) {
    const int bits = *err_host_.as<int>();
    if (bits == 0) return;
    check_cuda(cudaMemsetAsync(err_word_.data(), 0, sizeof(int), stream_), op);
    check_cuda(cudaStreamSynchronize(stream_), op);
    fail("{}: bad index values reached the GPU since the last check: {}", op,
         device_error_text(bits));
  }

  [[nodiscard]] bool fuses_norm_and_add_into_linear(int64_t rows) const override {
    return !batch_invariant_ && rows >= 1 && rows <= cuda::kGemvMaxFusedRows;
  }

  [[nodiscard]] std::string op_profile_report() override {
    return profiler_ == nullptr ? std::string() : profiler_->report();
  }

  // TROUPE_OP_PROFILE: times the op until the returned scope ends (inert without the
  // profiler and while capturing). The label: op, weight shape ("N x K") and rows bucket.
  cuda::OpProfiler::Scope profile(std::string_view op, int64_t rows, const Tensor& w = {}) {
    if (profiler_ == nullptr || capturing_) return {nullptr, {}};
    std::string label(op);
    if (w.ndim == 2) label += fmt::format(" {}x{}", w.shape[0], w.shape[1]);
    label += " [T " + cuda::OpProfiler::rows_bucket(rows) + "]";
    return {profiler_.get(), std::move(label)};
  }
  static int64_t rows_of(const Tensor& t) { return t.ndim > 0 ? t.shape[0] : 0; }

  void after_launch(const char* op) {
    check_cuda(cudaGetLastError(), fmt::format("{}: kernel launch", op));
    if (sync_check_ && !capturing_) sync_and_check(op);
  }

  void check_transfer(const char* op, const char* name, const Tensor& t, const void* host,
                      size_t bytes) const {
    troupe::check_transfer(OpCheck(op, device_), name, t, host, bytes);
  }

  // The rms_norm prologue of a fused GEMV that reproduces rms_norm(x, weight, eps, h): the
  // plan is the one launch_rms_norm would take for these pointers.
  static cuda::GemvFusion norm_fusion(const Tensor& x, const Tensor& weight, float eps,
                                      const Tensor& h) {
    cuda::GemvFusion f;
    f.norm_weight = weight.data;
    f.eps = eps;
    f.norm_plan = cuda::plan_rms_norm(x.dtype, nullptr, x.data, weight.data, h.data, x.dim(1));
    return f;
  }

  // Launches the skinny GEMM of x [T, K] and w with `fusion` into out (n outputs per row).
  // False, launching nothing, when it does not take these shapes, dtypes or pointers: the
  // caller then runs the separate ops.
  bool fused_gemv(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out,
                  int64_t n, const cuda::GemvFusion& fusion) {
    const int64_t t = x.dim(0), k = x.dim(1);
    // Batch-invariant mode: the skinny GEMM takes one-row steps only, so never (linear's
    // invariant GEMM and the separate ops instead).
    if (t == 0 || n == 0 || k == 0 || batch_invariant_) return false;
    return cuda::launch_gemv(x.dtype, x.data, w.data, bias != nullptr ? bias->dtype : out.dtype,
                             bias != nullptr ? bias->data : nullptr, out.dtype, out.data, t, n, k,
                             stream_, fusion);
  }

  struct StreamDeleter {
    void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
  };

  Device device_;
  int num_sms_ = 0;
  std::string gpu_name_;
  // Declared before the buffers: destroyed after them (members go in reverse order).
  std::unique_ptr<CUstream_st, StreamDeleter> stream_holder_;
  cudaStream_t stream_ = nullptr;
  bool capturing_ = false;
  bool sync_check_ = false;
  bool batch_invariant_ = false;  // set_batch_invariant
  cuda::DeviceBuffer err_word_;
  cuda::PinnedBuffer err_host_;
  cuda::DeviceBuffer lt_workspace_;
  cuda::DeviceBuffer decode_workspace_;
  cuda::DeviceBuffer decode_counters_;
  std::unique_ptr<cuda::LtGemm> lt_;
  cuda::CudaSampler sampler_;
  std::vector<int64_t> feed_pairs_;  // feed_sampled_tokens: (result offset, dst index) pairs
  cuda::DeviceBuffer feed_device_;
  std::unique_ptr<cuda::OpProfiler> profiler_;  // TROUPE_OP_PROFILE; last: goes first
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  return std::make_unique<CudaBackendImpl>(device_index);
}

CudaBackend* cuda_backend_of(Backend& backend) {
  return dynamic_cast<CudaBackend*>(&backend);
}

}  // namespace troupe
