#include "runtime/kv/prompt_logprob_store.hpp"

namespace troupe {

size_t PromptLogprobStore::bytes_of(const BlockPromptLogprobs& b) {
  size_t n = sizeof(BlockPromptLogprobs) + b.entries.size() * sizeof(PositionLogprobs);
  for (const PositionLogprobs& e : b.entries) n += e.top.size() * sizeof(LogprobEntry);
  return n;
}

void PromptLogprobStore::put(int32_t block, BlockPromptLogprobs entries) {
  auto it = blocks_.find(block);
  if (it != blocks_.end()) {
    if (it->second.k >= entries.k) return;
    bytes_ -= bytes_of(it->second);
    blocks_.erase(it);
  }
  bytes_ += bytes_of(entries);
  blocks_.emplace(block, std::move(entries));
}

const BlockPromptLogprobs* PromptLogprobStore::find(int32_t block) const {
  auto it = blocks_.find(block);
  return it == blocks_.end() ? nullptr : &it->second;
}

void PromptLogprobStore::drop(int32_t block) {
  auto it = blocks_.find(block);
  if (it == blocks_.end()) return;
  bytes_ -= bytes_of(it->second);
  blocks_.erase(it);
}

void PromptLogprobStore::clear() {
  blocks_.clear();
  bytes_ = 0;
}

}  // namespace troupe
