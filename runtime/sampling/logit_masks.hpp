// The bias list one sequence samples a token with: its logit_bias plus the bans that its
// settings and its output so far imply, all as -inf entries, so that every backend applies them
// through the one logit-bias path it already has (no backend knows about bad words or
// allow-lists). vLLM V1 applies allowed_token_ids, bad_words, min_tokens and logit_bias before
// the penalties; a -inf logit stays -inf through them, so one bias list in any order is exact.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "runtime/protocol/step.hpp"

namespace troupe {

using LogitBias = std::vector<std::pair<int32_t, float>>;

/// vLLM's bad_words rule: for each word (token ids), its last token is banned when the tokens
/// before it are the last tokens of `output_ids` (a one-token word is always banned; a word
/// longer than the output plus one is not yet possible). Appends one -inf entry per ban.
void append_bad_word_bans(std::span<const std::vector<int32_t>> bad_words_ids,
                          std::span<const int32_t> output_ids, LogitBias& bias);

/// -inf for every token in [0, vocab) that `allowed` (sorted, unique) does not hold.
void append_disallowed_bans(std::span<const int32_t> allowed, int32_t vocab, LogitBias& bias);

/// What a row of sequence `sp` samples with after `output_ids`: allowed_token_ids' and
/// bad_words' bans, sp.logit_bias, and min_tokens' bans of stop_ids while the output is shorter.
/// `bias` is overwritten (callers reuse its storage).
void sequence_row_bias(const SeqSampling& sp, std::span<const int32_t> output_ids, int32_t vocab,
                       LogitBias& bias);

}  // namespace troupe
