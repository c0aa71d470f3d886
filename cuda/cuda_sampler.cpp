#include "cuda/cuda_sampler.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cuda/cuda_check.hpp"
#include "runtime/sampling/sampler.hpp"

namespace troupe::cuda {

void validate_sampling_row(const SamplingRow& row, int64_t vocab, size_t index) {
  // The reference sampler's checks, so both backends refuse the same rows with the same words.
  check_sampling_row(row, vocab, int64_t(index));
  if (row.num_logprobs > kMaxTopLogprobs)
    fail("sampling row {}: num_logprobs = {} exceeds the CUDA sampler's limit of {}", index,
         row.num_logprobs, kMaxTopLogprobs);
}

// Appends one entry per distinct token the row's bias or penalties touch.
void CudaSampler::add_mods(const SamplingRow& row, int64_t vocab) {
  if (slot_of_.size() < size_t(vocab)) slot_of_.assign(size_t(vocab), -1);
  const size_t begin = mods_.size();
  const auto entry = [&](int32_t token) -> SampleMod& {
    int32_t& slot = slot_of_[size_t(token)];
    if (slot < 0) {
      slot = int32_t(mods_.size());
      mods_.push_back(SampleMod{token, 0, 0, 0, 0});
    }
    return mods_[size_t(slot)];
  };
  // Bias entries grouped by token, each token's in the row's order (a stable sort), so that
  // every token's biases are contiguous in biases_.
  bias_order_.resize(row.logit_bias.size());
  for (size_t i = 0; i < bias_order_.size(); ++i) bias_order_[i] = uint32_t(i);
  std::stable_sort(bias_order_.begin(), bias_order_.end(), [&](uint32_t a, uint32_t b) {
    return row.logit_bias[a].first < row.logit_bias[b].first;
  });
  for (const uint32_t i : bias_order_) {
    const auto& [token, bias] = row.logit_bias[i];
    SampleMod& m = entry(token);
    if (m.bias_count == 0) m.bias_begin = int32_t(biases_.size());
    biases_.push_back(bias);
    ++m.bias_count;
  }
  if (row.has_penalties()) {
    for (const int32_t t : row.output_ids) {
      SampleMod& m = entry(t);
      ++m.output_count;
      m.in_history = 1;
    }
    // The prompt matters only to the repetition penalty.
    if (row.repetition_penalty != 1.0f)
      for (const int32_t t : row.prompt_ids) entry(t).in_history = 1;
  }
  for (size_t i = begin; i < mods_.size(); ++i) slot_of_[size_t(mods_[i].token)] = -1;
}

CudaSampler::~CudaSampler() {
  if (done_ != nullptr) cudaEventDestroy(done_);
}

std::vector<SampledToken> CudaSampler::sample(const Tensor& logits,
                                              std::span<const SamplingRow> rows,
                                              cudaStream_t stream, const int* err_device,
                                              int* err_host) {
  start(logits, rows, stream, err_device, err_host);
  return collect();
}

bool CudaSampler::done() const {
  if (!in_flight_) return true;
  const cudaError_t e = cudaEventQuery(done_);
  if (e == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: clear it
    return false;
  }
  return true;  // done, or failed: collect() reports it
}

void CudaSampler::start(const Tensor& logits, std::span<const SamplingRow> rows,
                        cudaStream_t stream, const int* err_device, int* err_host) {
  if (in_flight_) fail("sample: a sampling is already in flight");
  const int64_t num_rows = logits.dim(0), vocab = logits.dim(1);
  SamplePlan plan{};
  check_cuda(plan_sample(vocab, int32_t(num_rows), &plan), "sample: launch plan");
  params_.clear();
  mods_.clear();
  biases_.clear();
  int32_t scratch_rows = 0;
  int64_t result_ints = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const SamplingRow& row = rows[r];
    validate_sampling_row(row, vocab, r);
    SampleRowParams p{};
    p.temperature = row.temperature;
    p.top_p = row.top_p;
    p.min_p = row.min_p;
    p.presence_penalty = row.presence_penalty;
    p.frequency_penalty = row.frequency_penalty;
    p.repetition_penalty = row.repetition_penalty;
    p.top_k = row.top_k;
    p.greedy = row.greedy() ? 1 : 0;
    p.num_logprobs = row.num_logprobs;
    p.seed = row.seed;
    p.offset = row.offset;
    p.mod_begin = int32_t(mods_.size());
    if (!row.logit_bias.empty() || row.has_penalties()) add_mods(row, vocab);
    p.mod_count = int32_t(mods_.size()) - p.mod_begin;
    // Cached plans apply bias and penalties in shared memory; uncached plans need a processed
    // copy of the rows whose logits change (the others read the raw row).
    p.scratch_row = p.mod_count > 0 && plan.cached == 0 ? scratch_rows++ : -1;
    p.out_offset = int32_t(result_ints);
    result_ints += kSampleResultHeader + 3 * std::max(0, row.num_logprobs);
    if (result_ints > INT32_MAX) fail("sample: {} rows ask for too many logprobs", rows.size());
    params_.push_back(p);
  }

  // One upload: [params | mods | biases] (all 4-byte aligned pieces; params 8-byte).
  const size_t params_bytes = params_.size() * sizeof(SampleRowParams);
  const size_t mods_bytes = mods_.size() * sizeof(SampleMod);
  const size_t bias_bytes = biases_.size() * sizeof(float);
  const size_t meta_bytes = params_bytes + mods_bytes + bias_bytes;
  staging_.ensure(meta_bytes, "sample: staging buffer");
  std::memcpy(staging_.data(), params_.data(), params_bytes);
  if (mods_bytes > 0) std::memcpy(staging_.as<char>() + params_bytes, mods_.data(), mods_bytes);
  if (bias_bytes > 0)
    std::memcpy(staging_.as<char>() + params_bytes + mods_bytes, biases_.data(), bias_bytes);
  meta_.ensure(meta_bytes, "sample: row parameters");
  check_cuda(
      cudaMemcpyAsync(meta_.data(), staging_.data(), meta_bytes, cudaMemcpyHostToDevice, stream),
      "sample: upload of row parameters");
  if (scratch_rows > 0)
    scratch_.ensure(size_t(scratch_rows) * size_t(vocab) * sizeof(float),
                    "sample: scratch copy of biased/penalised logits rows");
  results_.ensure(size_t(result_ints) * sizeof(int32_t), "sample: results");
  results_host_.ensure(size_t(result_ints) * sizeof(int32_t), "sample: results");

  const auto* d_params = meta_.as<const SampleRowParams>();
  const auto* d_mods = reinterpret_cast<const SampleMod*>(meta_.as<const char>() + params_bytes);
  const auto* d_biases =
      reinterpret_cast<const float*>(meta_.as<const char>() + params_bytes + mods_bytes);
  check_cuda(
      launch_sample(plan, logits.as<const float>(), vocab, int32_t(num_rows), d_params, d_mods,
                    d_biases, scratch_.as<float>(), scratch_rows, results_.as<int32_t>(), stream),
      "sample: kernel launch");
  check_cuda(cudaMemcpyAsync(results_host_.data(), results_.data(),
                             size_t(result_ints) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
             "sample: download of results");
  if (err_device != nullptr && err_host != nullptr)
    check_cuda(cudaMemcpyAsync(err_host, err_device, sizeof(int), cudaMemcpyDeviceToHost, stream),
               "sample: download of the device error word");
  if (done_ == nullptr)
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "sample: event");
  check_cuda(cudaEventRecord(done_, stream), "sample: event record");
  in_flight_ = true;
}

std::vector<SampledToken> CudaSampler::collect() {
  if (!in_flight_) fail("sample: no sampling is in flight");
  in_flight_ = false;
  check_cuda(cudaEventSynchronize(done_), "sample: kernels");

  std::vector<SampledToken> out(params_.size());
  const int32_t* res = results_host_.as<const int32_t>();
  for (size_t r = 0; r < params_.size(); ++r) {
    const int32_t* p = res + params_[r].out_offset;
    if (p[0] < 0) {  // the CPU reference throws in the same cases
      if (p[0] == kSampleRawInf) fail("sampling row {}: a raw logit is +inf", r);
      if (p[0] == kSampleRawAllNegInf) fail("sampling row {}: every raw logit is -inf or NaN", r);
      fail(
          "sampling row {}: no token left to sample (every logit is -inf or NaN after "
          "logit_bias and penalties, or +inf after temperature)",
          r);
    }
    SampledToken& t = out[r];
    t.token = p[0];
    t.logprob = std::bit_cast<float>(p[1]);
    t.rank = p[2];
    t.top.resize(size_t(p[3]));
    for (int32_t i = 0; i < p[3]; ++i) {
      const int32_t* e = p + kSampleResultHeader + 3 * i;
      t.top[size_t(i)] = TokenLogprob{e[0], std::bit_cast<float>(e[1]), e[2]};
    }
  }
  return out;
}

}  // namespace troupe::cuda
