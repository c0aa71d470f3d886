// The KV block pool: metadata for a fixed number of KV-cache blocks (the tensors live in the
// executors). Each block has a reference count; blocks with no reference sit in a free list
// ordered least-recently-freed first. A free block that still holds a full, hashed block of
// tokens stays findable in the prefix index until it is reused ("evicted").
//
// The free list is intrusive and doubly linked (vLLM's habit): allocating takes the head,
// freeing appends at the tail, and a prefix-cache hit takes a free block out from the middle,
// all in O(1).
//
// Prefix entries are exact: a block's identity is (parent block identity, its tokens, a salt),
// checked token by token on every hit, so a hash collision can never serve wrong KV.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/kv/prompt_logprob_store.hpp"

namespace troupe {

class BlockPool {
 public:
  BlockPool(int32_t num_blocks, int32_t block_size);

  [[nodiscard]] int32_t num_blocks() const { return int32_t(blocks_.size()); }
  [[nodiscard]] int32_t block_size() const { return block_size_; }
  /// Blocks with no reference (cached-but-unused ones included: they can be evicted).
  [[nodiscard]] int32_t num_free() const { return num_free_; }
  [[nodiscard]] double usage() const {
    return blocks_.empty() ? 0.0 : 1.0 - double(num_free_) / double(blocks_.size());
  }

  /// Takes `n` free blocks (evicting their cache entries), or nothing if fewer are free.
  [[nodiscard]] std::optional<std::vector<int32_t>> allocate(int32_t n);

  /// Drops one reference from each block; blocks reaching zero join the free list's tail in
  /// the order given (callers pass a sequence's blocks last-first, so its tail is evicted
  /// before its shared head).
  void release(std::span<const int32_t> block_ids);

  /// Adds one reference to each block, every one of which must be held already (a beam fork:
  /// the child shares its parent's blocks).
  void share(std::span<const int32_t> block_ids);

  /// Looks up the cached block that follows `parent` (-1 for the first block) and holds
  /// exactly `tokens`. On a hit the block gains a reference (leaving the free list if it was
  /// there). `salt` separates namespaces (adapters, cache salts).
  [[nodiscard]] std::optional<int32_t> acquire_cached(int32_t parent, std::span<const int32_t> tokens,
                                                      uint64_t salt);

  /// The cached block that follows `parent` and holds exactly `tokens`, without taking a
  /// reference (nullopt when there is none).
  [[nodiscard]] std::optional<int32_t> find_cached(int32_t parent, std::span<const int32_t> tokens,
                                                   uint64_t salt) const;

  /// Prompt logprob entries kept beside cached blocks (dropped when their block is evicted).
  [[nodiscard]] PromptLogprobStore& prompt_logprobs() { return prompt_logprobs_; }
  [[nodiscard]] const PromptLogprobStore& prompt_logprobs() const { return prompt_logprobs_; }

  /// Registers a full block (held by the caller) as the child of `parent` holding `tokens`.
  /// A block already registered, or an identical entry already cached, is left as is.
  void register_full(int32_t block, int32_t parent, std::span<const int32_t> tokens, uint64_t salt);

  [[nodiscard]] int32_t ref_count(int32_t block) const { return blocks_.at(size_t(block)).refs; }
  [[nodiscard]] bool is_cached(int32_t block) const { return blocks_.at(size_t(block)).cached; }
  /// Bumped each time the block is reused for new content (so a remembered block id can be
  /// checked to still hold what it held).
  [[nodiscard]] uint32_t generation(int32_t block) const {
    return blocks_.at(size_t(block)).generation;
  }
  [[nodiscard]] size_t num_cached() const { return index_.size(); }

  /// Forgets every prefix entry (blocks in use keep their references).
  void reset_prefix_cache();

  /// The blocks whose contents matter, in id order: those in use and those cached in the prefix
  /// index (what moving the cache to another executor must copy).
  [[nodiscard]] std::vector<int32_t> blocks_with_contents() const;

 private:
  struct Block {
    int32_t refs = 0;
    uint32_t generation = 0;  // bumped each time the block is reused for new content
    bool cached = false;
    uint64_t hash = 0;
    int32_t parent = -1;
    uint32_t parent_generation = 0;
    uint64_t salt = 0;
    int32_t prev = -1, next = -1;  // free list links
    bool in_free_list = false;
  };

  [[nodiscard]] uint64_t hash_of(int32_t parent, std::span<const int32_t> tokens, uint64_t salt) const;
  [[nodiscard]] bool same_content(const Block& b, int32_t block_id, int32_t parent,
                                  std::span<const int32_t> tokens, uint64_t salt) const;
  void push_free_tail(int32_t b);
  void unlink_free(int32_t b);
  void evict(int32_t b);

  int32_t block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> tokens_;  // [num_blocks * block_size]: contents of cached blocks
  int32_t free_head_ = -1, free_tail_ = -1, num_free_ = 0;
  std::unordered_multimap<uint64_t, int32_t> index_;  // hash -> cached block
  PromptLogprobStore prompt_logprobs_;                // of cached blocks only
};

}  // namespace troupe
