// What a backend needs to sample one row of logits, and what it gives back.
//
// Randomness is counter-based (Philox-4x32-10, see philox.hpp): the draw for vocabulary
// entry i of a sequence's k-th sampled token is a pure function of (seed, k, i). A seeded
// request therefore samples the same tokens whatever else is in its batch and on whichever
// backend (CPU or CUDA) it runs.
//
// Order of processing, as in vLLM V1: raw logprobs (for the returned logprobs) are taken from
// the raw logits; then logit bias (which also carries min_tokens' bans as -inf), penalties,
// greedy argmax or temperature -> min_p -> top_k -> top_p -> an exponential race over the
// surviving probabilities (argmax p_i / q_i, q_i ~ Exp(1)), which is an exact sample.
//
// The reference implementation is runtime/sampling/sampler.hpp (sample_row); its header
// spells out the choices every backend must share (tie order, rank, top_k ties, top_p walk).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "runtime/sampling/sampling_knobs.hpp"

namespace troupe {

/// Temperatures below this are greedy (vLLM's _SAMPLING_EPS).
inline constexpr float kGreedyTemperature = 1e-5f;

/// One row's knobs (sampling_knobs.hpp) and what the step adds: where the sequence stands, its
/// tokens for the penalties and its bias.
struct SamplingRow : SamplingKnobs {
  uint64_t offset = 0;        // index of the token being sampled within this sequence's output
  // -1: no logprobs at all (vLLM's logprobs=None: the sampled token's logprob and rank are not
  // computed and stay 0); N >= 0: the sampled token's and the top N.
  int32_t num_logprobs = -1;
  // Host views, valid for the duration of the sample call.
  std::span<const int32_t> prompt_ids;  // for repetition_penalty
  std::span<const int32_t> output_ids;  // for all three penalties
  std::span<const std::pair<int32_t, float>> logit_bias;  // added first; -inf bans a token

  [[nodiscard]] bool greedy() const { return temperature < kGreedyTemperature; }
  [[nodiscard]] bool has_penalties() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t rank = 0;  // 1 = most likely under the raw distribution
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;             // raw log-softmax of the sampled token (num_logprobs >= 0)
  int32_t rank = 0;                 // its rank in the raw distribution (num_logprobs >= 0)
  std::vector<TokenLogprob> top;    // num_logprobs entries, most likely first
};

}  // namespace troupe
