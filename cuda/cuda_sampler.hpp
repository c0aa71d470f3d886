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
  /// logits [S, V] f32 on the device; rows.size() == S (checked by the caller).
  /// Synchronises `stream` once. With err_device and err_host (page-locked), the device error
  /// word is copied to err_host behind the results, before that one synchronisation, so the
  /// caller can read it without another round trip (one per decode step saved).
  [[nodiscard]] std::vector<SampledToken> sample(const Tensor& logits,
                                                 std::span<const SamplingRow> rows,
                                                 cudaStream_t stream,
                                                 const int* err_device = nullptr,
                                                 int* err_host = nullptr);

 private:
  void add_mods(const SamplingRow& row, int64_t vocab);

  std::vector<SampleRowParams> params_;
  std::vector<SampleMod> mods_;
  std::vector<float> biases_;
  std::vector<uint32_t> bias_order_;
  std::vector<int32_t> slot_of_;  // [V] index into mods_ of this row's entry, -1 when none
  DeviceBuffer meta_, scratch_, results_;
  PinnedBuffer staging_, results_host_;
};

}  // namespace troupe::cuda
