// Per-sequence KV block accounting on top of the BlockPool: block tables, prefix-cache hits
// and registration, and the capacity half of each step's schedule.
//
// Division of labour with the scheduler (runtime/sched/): the scheduler proposes, in priority
// order, which sequences get how many tokens this step under the token budget; the cache
// manager grants or trims that proposal to what fits in the cache (KVCacheManager::grant):
// running sequences that cannot grow preempt the lowest-priority running ones; waiting
// sequences are admitted in order until one does not fit, after their prefix-cache hits are
// counted. Everything here is plain data, unit-tested with no actors.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "runtime/kv/block_pool.hpp"

namespace troupe {

/// A running sequence asking for room for `num_new_tokens` more tokens.
struct KVRunningAsk {
  uint64_t seq_id = 0;
  std::vector<int32_t> appended_token_ids;  // tokens known since the last ask
  int32_t num_computed_tokens = 0;
  int32_t num_new_tokens = 0;
};

/// A waiting sequence asking to be admitted with up to `max_new_tokens` tokens this step.
struct KVWaitingAsk {
  uint64_t seq_id = 0;
  std::vector<int32_t> token_ids;  // every token known (prompt + outputs after a preemption)
  int32_t max_new_tokens = 0;
  bool allow_prefix_hit = true;   // false when prompt logprobs are wanted
  bool allow_partial = true;      // false without chunked prefill: all remaining tokens or none
  uint64_t cache_salt = 0;
};

/// A sequence finishing (or being aborted): its blocks are released after its computed full
/// blocks are registered for reuse.
struct KVRelease {
  uint64_t seq_id = 0;
  std::vector<int32_t> appended_token_ids;
  int32_t num_computed_tokens = 0;
};

struct KVAsk {
  std::vector<KVRelease> released;
  std::vector<KVRunningAsk> running;  // highest priority first
  std::vector<KVWaitingAsk> waiting;  // in admission order
  int32_t max_running_seqs = 0;       // cap on running.size() after admission
};

struct KVRunningGrant {
  uint64_t seq_id = 0;
  std::vector<int32_t> new_block_ids;
};

struct KVAdmission {
  uint64_t seq_id = 0;
  int32_t num_cached_tokens = 0;  // prefix-cache hit, already in the cache
  int32_t num_new_tokens = 0;     // <= max_new_tokens, fewer when the hit covers some
  std::vector<int32_t> block_ids;  // its whole block table so far
};

struct KVGrant {
  std::vector<KVRunningGrant> running;  // in ask order, preempted ones left out
  std::vector<uint64_t> preempted;      // their blocks are released; recompute from scratch
  std::vector<KVAdmission> admitted;    // a prefix of the waiting asks
};

struct KVStats {
  int32_t num_blocks = 0;
  int32_t num_free_blocks = 0;
  double usage = 0.0;
  uint64_t prefix_queries = 0;  // tokens looked up
  uint64_t prefix_hits = 0;     // tokens found
};

class KVCacheManager {
 public:
  KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching);

  /// Applies one step's ask: releases, then running growth (preempting from the back of
  /// `running` when blocks run out), then admissions (only when nothing was preempted).
  [[nodiscard]] KVGrant grant(const KVAsk& ask);

  /// Number of blocks a sequence of `num_tokens` tokens needs.
  [[nodiscard]] int32_t blocks_for(int32_t num_tokens) const {
    return (num_tokens + block_size_ - 1) / block_size_;
  }
  [[nodiscard]] int32_t block_size() const { return block_size_; }
  [[nodiscard]] int32_t num_blocks() const { return pool_.num_blocks(); }
  [[nodiscard]] bool holds(uint64_t seq_id) const { return seqs_.contains(seq_id); }
  [[nodiscard]] const std::vector<int32_t>& block_table(uint64_t seq_id) const;
  [[nodiscard]] KVStats stats() const;
  [[nodiscard]] const BlockPool& pool() const { return pool_; }

  void reset_prefix_cache() { pool_.reset_prefix_cache(); }

 private:
  struct SeqState {
    std::vector<int32_t> tokens;
    std::vector<int32_t> blocks;
    int32_t num_registered = 0;  // leading blocks registered in the prefix index
    uint64_t salt = 0;
    bool cacheable = true;
  };

  void release(uint64_t seq_id, std::vector<int32_t> appended, int32_t num_computed);
  void free_seq(uint64_t seq_id);
  /// Registers the full blocks among the first `num_tokens` tokens.
  void register_full_blocks(SeqState& s, int32_t num_tokens);
  [[nodiscard]] bool grow(SeqState& s, int32_t total_tokens, std::vector<int32_t>* new_blocks);

  int32_t block_size_;
  bool prefix_caching_;
  BlockPool pool_;
  std::unordered_map<uint64_t, SeqState> seqs_;
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
};

}  // namespace troupe
