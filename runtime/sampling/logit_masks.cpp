#include "runtime/sampling/logit_masks.hpp"

#include <algorithm>
#include <cmath>

namespace troupe {

void append_bad_word_bans(std::span<const std::vector<int32_t>> bad_words_ids,
                          std::span<const int32_t> output_ids, LogitBias& bias) {
  for (const auto& word : bad_words_ids) {
    if (word.empty() || word.size() > output_ids.size() + 1) continue;
    const size_t prefix = word.size() - 1;
    if (std::equal(word.begin(), word.begin() + std::ptrdiff_t(prefix),
                   output_ids.end() - std::ptrdiff_t(prefix)))
      bias.emplace_back(word.back(), -INFINITY);
  }
}

void append_disallowed_bans(std::span<const int32_t> allowed, int32_t vocab, LogitBias& bias) {
  size_t next = 0;  // the first allowed id not passed yet
  for (int32_t t = 0; t < vocab; ++t) {
    while (next < allowed.size() && allowed[next] < t) ++next;
    if (next < allowed.size() && allowed[next] == t) continue;
    bias.emplace_back(t, -INFINITY);
  }
}

void sequence_row_bias(const SeqSampling& sp, std::span<const int32_t> output_ids, int32_t vocab,
                       LogitBias& bias) {
  bias.clear();
  if (!sp.allowed_token_ids.empty()) append_disallowed_bans(sp.allowed_token_ids, vocab, bias);
  append_bad_word_bans(sp.bad_words_ids, output_ids, bias);
  bias.insert(bias.end(), sp.logit_bias.begin(), sp.logit_bias.end());
  if (int64_t(output_ids.size()) < sp.min_tokens)
    for (int32_t t : sp.stop_ids) bias.emplace_back(t, -INFINITY);
}

}  // namespace troupe
