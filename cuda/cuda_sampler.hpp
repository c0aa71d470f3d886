// Host side of sampling on the GPU: validates the rows, packs their parameters and the tokens
// whose logits change (logit bias and penalties, merged per token on the host from the rows'
// histories, so only distinct tokens with their counts travel), uploads them in one copy,
// launches the kernels of sampling.cu and brings back only token ids and logprobs. Host-only.
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <vector>

#include "cuda/device_buffer.hpp"
#include "cuda/kernels.hpp"
#include "runtime/backend/tensor.hpp"
#include "runtime/sampling/sampling_row.hpp"

namespace troupe::cuda {

/// Throws troupe::Error when a field of `row` is outside what the sampler accepts: the
/// reference sampler's check_sampling_row, plus num_logprobs <= kMaxTopLogprobs.
void validate_sampling_row(const SamplingRow& row, int64_t vocab, size_t index);

class CudaSampler {
 public:
  CudaSampler() = default;
  CudaSampler(const CudaSampler&) = delete;
  CudaSampler& operator=(const CudaSampler&) = delete;
  ~CudaSampler();

  /// logits [S, V] f32 on the device; rows.size() == S (checked by the caller).
  /// Synchronises `stream` once. With err_device and err_host (page-locked), the device error
  /// word is copied to err_host behind the results, before that one synchronisation, so the
  /// caller can read it without another round trip (one per decode step saved).
  [[nodiscard]] std::vector<SampledToken> sample(const Tensor& logits,
                                                 std::span<const SamplingRow> rows,
                                                 cudaStream_t stream,
                                                 const int* err_device = nullptr,
                                                 int* err_host = nullptr);

  /// sample() in two halves: start enqueues the upload, the kernel and the results' (and error
  /// word's) download and returns; collect waits for them and reads the results. One sampling
  /// in flight at a time (start throws while one is).
  void start(const Tensor& logits, std::span<const SamplingRow> rows, cudaStream_t stream,
             const int* err_device = nullptr, int* err_host = nullptr);
  [[nodiscard]] bool in_flight() const { return in_flight_; }
  /// Whether collect() would return without waiting.
  [[nodiscard]] bool done() const;
  [[nodiscard]] std::vector<SampledToken> collect();
  /// Where row r's sampled token lands in device memory (valid while in flight and after).
  [[nodiscard]] const int32_t* device_token(size_t r) const {
    return results_.as<const int32_t>() + params_[r].out_offset;
  }
  [[nodiscard]] size_t rows_in_flight() const { return in_flight_ ? params_.size() : 0; }

 private:
  void add_mods(const SamplingRow& row, int64_t vocab);

  std::vector<SampleRowParams> params_;
  std::vector<SampleMod> mods_;
  std::vector<float> biases_;
  std::vector<uint32_t> bias_order_;
  std::vector<int32_t> slot_of_;  // [V] index into mods_ of this row's entry, -1 when none
  DeviceBuffer meta_, scratch_, results_;
  PinnedBuffer staging_, results_host_;
  cudaEvent_t done_ = nullptr;  // recorded behind the downloads
  bool in_flight_ = false;
};

}  // namespace troupe::cuda
