// The reference sampler: one row of logits -> one token, exactly in sampling_row.hpp's order.
// The CPU backend's `sample` calls it per row; the CUDA sampler is tested against it.
//
// Decisions a matching implementation must share:
// - Raw logprobs are log_softmax(logits) with the sum of exponentials taken in double.
//   Tokens are ordered by raw logit, descending, ties by lower id; `rank` is the 1-based
//   place of a token in that order, so top[i].rank == i + 1 and the greedy token has rank 1.
// - Penalties follow vLLM: repetition (tokens in prompt or output, once each) divides a
//   positive logit and multiplies a non-positive one; then frequency subtracts f * count in
//   output and presence subtracts p once for tokens in the output.
// - Greedy: the first index of the maximum processed logit.
// - Sampled: logits / temperature (f32), then in double: min_p drops tokens with
//   p < min_p * p_max; top_k keeps tokens whose logit is >= the k-th largest surviving
//   logit (ties at the boundary survive, as in vLLM); top_p walks the survivors from most
//   likely (ties by lower id) and keeps each while the mass before it is < top_p; the
//   winner is argmax over survivors of (logit - max) - log(q_i), q_i = -log(u_i),
//   u_i = philox::uniform(seed, offset, i), i.e. argmax p_i / q_i; ties go to the lower id.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling/sampling_row.hpp"

namespace troupe {

/// Throws troupe::Error naming the field if `row` is not usable with a vocabulary of
/// `vocab` tokens (temperature < 0, top_p outside (0, 1], a token id outside the
/// vocabulary, ...). `row_index` only labels the message; -1 leaves it out.
void check_sampling_row(const SamplingRow& row, int64_t vocab, int64_t row_index = -1);

/// The processed logits that greedy and sampling start from: `logits` [vocab] plus
/// row.logit_bias, then row's penalties, in place. Exposed so other samplers can compare
/// their intermediate logits. Assumes check_sampling_row passed.
void apply_bias_and_penalties(std::span<float> logits, const SamplingRow& row);

/// Samples one token from `logits` [vocab] f32. Throws troupe::Error on a bad row or when
/// no token can be sampled (every logit -inf or NaN after bias and penalties).
[[nodiscard]] SampledToken sample_row(const float* logits, int64_t vocab, const SamplingRow& row);

/// sample_row for each row of `logits` [rows.size(), vocab] f32, spread over `num_threads`
/// threads (0: hardware concurrency). Every row is checked before any is sampled.
[[nodiscard]] std::vector<SampledToken> sample_rows(const float* logits, int64_t vocab,
                                                    std::span<const SamplingRow> rows,
                                                    int num_threads = 0);

}  // namespace troupe
