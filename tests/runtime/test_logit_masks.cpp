// allowed_token_ids, bad_words and min_tokens as the bias list a row samples with
// (runtime/sampling/logit_masks.hpp), by hand-worked cases of vLLM's rules and through the
// reference sampler against a float64 argmax / distribution over the tokens left.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "runtime/sampling/logit_masks.hpp"
#include "runtime/sampling/sampler.hpp"

using namespace troupe;

namespace {

std::set<int32_t> banned(const LogitBias& bias) {
  std::set<int32_t> out;
  for (const auto& [t, b] : bias) {
    REQUIRE(std::isinf(b));
    REQUIRE(b < 0);
    out.insert(t);
  }
  return out;
}

}  // namespace

TEST_CASE("bad_words: the last token is banned only after the word's other tokens", "[masks]") {
  const std::vector<std::vector<int32_t>> words = {{7}, {3, 4}, {1, 2, 5}, {}};
  const auto bans = [&](std::vector<int32_t> out) {
    LogitBias b;
    append_bad_word_bans(words, out, b);
    return banned(b);
  };
  CHECK(bans({}) == std::set<int32_t>{7});            // one-token words: always
  CHECK(bans({3}) == std::set<int32_t>{7, 4});        // "3" ends the output: ban 4
  CHECK(bans({3, 9}) == std::set<int32_t>{7});        // 3 is not the last token any more
  CHECK(bans({9, 1, 2}) == std::set<int32_t>{7, 5});  // the tail matches 1 2
  CHECK(bans({1, 9, 2}) == std::set<int32_t>{7});     // not contiguous
  CHECK(bans({2}) == std::set<int32_t>{7});           // shorter than the prefix
  CHECK(bans({1, 2, 3}) == std::set<int32_t>{7, 4});
}

TEST_CASE("allowed_token_ids bans exactly the other tokens", "[masks]") {
  LogitBias b;
  append_disallowed_bans(std::vector<int32_t>{0, 3, 4, 9}, 10, b);
  CHECK(banned(b) == std::set<int32_t>{1, 2, 5, 6, 7, 8});
  CHECK(b.size() == 6);
}

TEST_CASE("a row's bias: allow-list, bad words, logit_bias and min_tokens together", "[masks]") {
  SeqSampling sp;
  sp.allowed_token_ids = {2, 3, 4, 5};
  sp.bad_words_ids = {{4, 5}};
  sp.logit_bias = {{3, 1.5f}};
  sp.min_tokens = 2;
  sp.stop_ids = {2};
  LogitBias b;
  const std::vector<int32_t> out = {4};
  sequence_row_bias(sp, out, 8, b);
  std::map<int32_t, float> sum;
  for (const auto& [t, v] : b) sum[t] += v;
  CHECK(sum.at(3) == 1.5f);
  for (int32_t t : {0, 1, 6, 7, 5, 2}) CHECK(std::isinf(sum.at(t)));  // 5: bad word, 2: min_tokens
  CHECK_FALSE(sum.contains(4));
  // Past min_tokens and off the bad word's prefix: only the allow-list and the bias are left.
  const std::vector<int32_t> later = {4, 3};
  sequence_row_bias(sp, later, 8, b);
  sum.clear();
  for (const auto& [t, v] : b) sum[t] += v;
  CHECK(sum.size() == 5);  // 0, 1, 6, 7 banned; 3 biased
  CHECK_FALSE(sum.contains(2));
  CHECK_FALSE(sum.contains(5));
}

TEST_CASE(
    "the sampler under an allow-list: greedy is the argmax over the allowed tokens, "
    "samples never leave them",
    "[masks]") {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  const int32_t vocab = 300;
  std::vector<float> logits(static_cast<size_t>(vocab));
  const std::vector<int32_t> allowed = {11, 57, 58, 123, 299};
  for (int trial = 0; trial < 50; ++trial) {
    for (float& x : logits) x = dist(rng);
    SeqSampling sp;
    sp.allowed_token_ids = allowed;
    LogitBias bias;
    sequence_row_bias(sp, {}, vocab, bias);
    SamplingRow row;
    row.logit_bias = bias;
    row.temperature = 0.0f;
    int32_t best = allowed[0];
    for (int32_t t : allowed)
      if (double(logits[size_t(t)]) > double(logits[size_t(best)])) best = t;
    CHECK(sample_row(logits.data(), vocab, row).token == best);
    row.temperature = 1.0f;
    row.seed = uint64_t(trial);
    const int32_t s = sample_row(logits.data(), vocab, row).token;
    CHECK(std::find(allowed.begin(), allowed.end(), s) != allowed.end());
  }
}
