// Prompt logprob entries kept beside prefix-cached blocks, so that a request with
// `prompt_logprobs` can take cache hits and still return the numbers a run without the cache
// computes (docs/engine.md, "Prompt logprobs from the prefix cache").
//
// The entry of prompt token i (its logprob and rank, and the top-k of the logits at position
// i - 1) is a function of tokens 0..i only, so the entries of the tokens inside a cached block
// belong to that block's identity (parent chain + tokens + salt) as much as its KV does. A block
// holds the entries of all its tokens (block 0: all but token 0, which has none) or none; they
// were computed with top-`k` and serve any request asking for at most `k`. Entries are dropped
// with their block (eviction, reset); the memory they take is bytes() (bounded by num_blocks *
// block_size * (max_logprobs + 1) entries).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "runtime/protocol/step.hpp"

namespace troupe {

/// Entries of one block's tokens: entries[j] is token block_index * block_size + j's (empty
/// for token 0 of the first block), computed with top-`k` (0: only the token's own).
struct BlockPromptLogprobs {
  int32_t k = 0;
  std::vector<PositionLogprobs> entries;  // [block_size]
};

class PromptLogprobStore {
 public:
  /// Keeps `entries` for `block` unless it already holds entries computed with a k at least as
  /// large (both are exact; the larger k serves more requests).
  void put(int32_t block, BlockPromptLogprobs entries);
  /// The entries of `block`, or nullptr.
  [[nodiscard]] const BlockPromptLogprobs* find(int32_t block) const;
  void drop(int32_t block);
  void clear();

  [[nodiscard]] size_t num_blocks() const { return blocks_.size(); }
  /// Bytes held by the entries (LogprobEntry payloads and vector headers).
  [[nodiscard]] size_t bytes() const { return bytes_; }

 private:
  [[nodiscard]] static size_t bytes_of(const BlockPromptLogprobs& b);

  std::unordered_map<int32_t, BlockPromptLogprobs> blocks_;
  size_t bytes_ = 0;
};

}  // namespace troupe
