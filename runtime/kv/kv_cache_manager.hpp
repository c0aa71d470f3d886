// Per-sequence KV block accounting on top of the BlockPool: block tables, prefix-cache hits
// and registration, and the capacity half of each step's schedule.
//
// Division of labour with the scheduler (runtime/sched/): the scheduler proposes, in priority
// order, which sequences get how many tokens this step under the token budget, and its policy
// (runtime/sched/preemption_policy.hpp) says who may be preempted to make room, in which order
// and how (KVAsk::preemption_order). The cache manager grants or trims that proposal to what
// fits in the cache (KVCacheManager::grant): a running sequence that cannot grow gets blocks
// freed by preempting the policy's victims in order; waiting sequences are admitted in order
// until one does not fit, after their prefix-cache hits are counted. It decides no priorities
// itself: it allocates, frees and swaps blocks and says what fits. Everything here is plain
// data, unit-tested with no actors.
//
// Swap space (vLLM V0's preemption by swapping). A victim the policy preempts by swap, with a
// CPU pool of num_cpu_blocks blocks, has the blocks holding its computed tokens copied to free
// CPU blocks (the grant lists the (gpu, cpu) pairs in swap_out) and then drops its GPU
// references exactly as a recompute victim does, so blocks it shares through the prefix cache
// are only read, never changed. When the CPU pool cannot take the whole sequence (the cache
// manager's "no") it is preempted by recompute instead, the only other way to free its blocks
// (logged once). Swapped-out sequences come back in the order the scheduler asks (FIFO), before
// any waiting sequence is admitted, when the GPU pool has room for all their blocks plus this
// step's growth: fresh private blocks, filled from the CPU blocks (swap_in pairs), never
// registered in the prefix index (nor are that sequence's later blocks: their parents would not
// be in the index). A step that swaps out swaps nothing in and admits nothing, so a CPU block
// freed by a swap-in is never overwritten by a swap-out of the same step.
//
// Beam groups (runtime/sched/beam_search.hpp). A fork (KVAsk::forks) gives each child beam its
// parent's whole block table, every block shared by reference count, and then drops the
// parent: a 4-beam request holds one copy of its prompt. Copy-on-write happens when a running
// sequence is granted tokens whose first one falls in a block that another sequence also holds
// (only beam forks share a block that is not full): that block is copied to a fresh one
// (KVGrant::copies, made by the executors before the step) and the sequence keeps the copy.
// A group's sequences are preempted together, by recompute (their shared blocks would otherwise
// be swapped once per beam), and are admitted together or not at all (KVWaitingAsk::group), so
// a group never waits on blocks its own paused beams hold.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>
#include <utility>

#include "runtime/protocol/step.hpp"
#include "runtime/kv/block_pool.hpp"

namespace troupe {

/// Prompt logprob entries a sequence's steps computed, for the prefix cache to keep beside the
/// blocks holding their tokens (runtime/kv/prompt_logprob_store.hpp): entries[i] is token
/// first_token + i's, computed with top-`k`.
struct KVPromptLogprobs {
  int32_t first_token = 0;
  int32_t k = 0;
  std::vector<PositionLogprobs> entries;
};

/// A running sequence asking for room for `num_new_tokens` more tokens.
struct KVRunningAsk {
  uint64_t seq_id = 0;
  std::vector<int32_t> appended_token_ids;  // tokens known since the last ask
  int32_t num_computed_tokens = 0;
  int32_t num_new_tokens = 0;
  // Tokens past the known ones that this step computes: the token a step still in flight
  // samples for it (asynchronous scheduling; 0 or 1). Its KV slot is granted now; the block
  // it completes is registered for prefix reuse once the token is known (a later ask).
  int32_t num_unknown_tokens = 0;
  KVPromptLogprobs prompt_logprobs;  // entries computed since the last ask
  // The executors do not know it yet (a beam just forked): the grant carries its whole table.
  bool needs_block_table = false;
};

/// A waiting sequence asking to be admitted with up to `max_new_tokens` tokens this step.
struct KVWaitingAsk {
  uint64_t seq_id = 0;
  std::vector<int32_t> token_ids;  // every token known (prompt + outputs after a preemption)
  int32_t max_new_tokens = 0;
  bool allow_prefix_hit = true;
  bool allow_partial = true;      // false without chunked prefill: all remaining tokens or none
  uint64_t cache_salt = 0;
  // Prompt logprobs wanted (top-k; -1: none): a hit then takes only blocks whose stored entries
  // were computed with at least this k, backs off one block so that the token after the hit has
  // its entry computed, and the admission carries the stored entries (KVAdmission).
  int32_t prompt_logprobs = -1;
  int32_t num_prompt_tokens = 0;  // entries exist for prompt tokens 1 .. num_prompt_tokens - 1
  // Beam group (0: none). A group's asks come one after another and are admitted all or none,
  // when the free blocks could hold every one of their tokens.
  uint64_t group = 0;
};

/// A beam fork: each child takes the parent's blocks (shared), then the parent is dropped. The
/// children's own new tokens come with their first running ask.
struct KVFork {
  uint64_t parent = 0;
  std::vector<int32_t> appended_token_ids;  // the parent's tokens known since its last ask
  std::vector<uint64_t> children;           // new sequence ids
  uint64_t group = 0;
};

/// A swapped-out sequence asking to come back with room for `num_new_tokens` more tokens.
struct KVSwappedAsk {
  uint64_t seq_id = 0;
  std::vector<int32_t> token_ids;   // every token known
  int32_t num_computed_tokens = 0;  // tokens whose KV sits in its CPU blocks
  int32_t num_new_tokens = 0;
};

/// A sequence finishing (or being aborted): its blocks are released after its computed full
/// blocks are registered for reuse.
struct KVRelease {
  uint64_t seq_id = 0;
  std::vector<int32_t> appended_token_ids;
  int32_t num_computed_tokens = 0;
  KVPromptLogprobs prompt_logprobs;  // entries computed since the last ask
};

enum class PreemptionMode : uint8_t { recompute, swap };

/// A running sequence the scheduler's policy lets the cache manager preempt, and how. `swap`
/// falls back to recompute when the CPU pool cannot take the sequence's computed blocks (or it
/// has none: nothing to keep).
struct KVPreemption {
  uint64_t seq_id = 0;
  PreemptionMode mode = PreemptionMode::recompute;
};

struct KVAsk {
  std::vector<KVRelease> released;
  std::vector<KVFork> forks;          // after the releases, before any growth
  std::vector<KVRunningAsk> running;  // highest priority first
  std::vector<KVSwappedAsk> swapped;  // swapped-out sequences, oldest first
  std::vector<KVWaitingAsk> waiting;  // in admission order (only when every swapped one asks)
  int32_t max_running_seqs = 0;       // cap on running.size() after admission
  // The scheduler's choice of victims (runtime/sched/preemption_policy.hpp), each one of
  // `running`. When a running sequence cannot grow, the cache manager preempts the next victim
  // of this list that is neither preempted nor granted already this step (a grant is never
  // withdrawn: the blocks it registered for prefix reuse are written by this step), until the
  // sequence fits or is itself preempted. When the list runs out the sequence sits this step out
  // (KVGrant::short_of_blocks). Empty while a step is in flight (asynchronous scheduling plans
  // the next one meanwhile): nobody is preempted then, and the scheduler preempts in a later
  // step made with nothing in flight.
  std::vector<KVPreemption> preemption_order;
  // Fault injection (refuse-kv, runtime/faults/fault_spec.hpp): every allocation of this
  // grant fails as if the cache were full (running sequences that must grow are preempted,
  // nothing is admitted or swapped in).
  bool refuse_allocations = false;
};

struct KVRunningGrant {
  uint64_t seq_id = 0;
  std::vector<int32_t> new_block_ids;
  std::vector<int32_t> block_table;  // its whole table, when the ask needs_block_table
};

struct KVAdmission {
  uint64_t seq_id = 0;
  int32_t num_cached_tokens = 0;  // prefix-cache hit, already in the cache
  int32_t num_new_tokens = 0;     // <= max_new_tokens, fewer when the hit covers some
  std::vector<int32_t> block_ids;  // its whole block table so far
  // With KVWaitingAsk::prompt_logprobs: the stored entries of prompt tokens 1 ..
  // min(num_cached_tokens, num_prompt_tokens - 1), trimmed to the asked k (the entry of
  // prompt position p, predicting token p + 1, is element p).
  std::vector<PositionLogprobs> prompt_logprobs;
};

/// A swapped-out sequence back on the GPU: its whole new block table (private blocks).
struct KVSwappedIn {
  uint64_t seq_id = 0;
  std::vector<int32_t> block_ids;
};

struct KVGrant {
  std::vector<KVRunningGrant> running;  // in ask order, preempted ones left out
  std::vector<uint64_t> preempted;      // their blocks are released; recompute from scratch
  std::vector<uint64_t> swapped_out;    // preempted by swapping: their KV is in CPU blocks
  std::vector<KVSwappedIn> swapped_in;  // a prefix of the swapped asks
  std::vector<KVAdmission> admitted;    // a prefix of the waiting asks
  std::vector<BlockSwap> swap_out;      // copies for swapped_out, made before this step
  std::vector<BlockSwap> swap_in;       // copies for swapped_in, made after swap_out
  std::vector<BlockCopyPlan> copies;    // copy-on-write of forked blocks, after swap_out
  // Some running sequences were left out for lack of blocks, with no victim left in the ask's
  // preemption_order (and nothing was swapped in or admitted).
  bool short_of_blocks = false;
};

struct KVStats {
  int32_t num_blocks = 0;
  int32_t num_free_blocks = 0;
  double usage = 0.0;
  uint64_t prefix_queries = 0;  // tokens looked up
  uint64_t prefix_hits = 0;     // tokens found
  int32_t num_cpu_blocks = 0;
  int32_t num_free_cpu_blocks = 0;
  uint64_t blocks_swapped_out = 0;
  uint64_t blocks_swapped_in = 0;
  uint64_t swap_fallbacks = 0;  // swap victims preempted by recompute (CPU pool full)
  int32_t prompt_logprob_blocks = 0;  // cached blocks with prompt logprob entries beside them
  uint64_t prompt_logprob_bytes = 0;  // the memory those entries take (host)
  uint64_t forks = 0;                 // beam forks (one per parent with children)
  uint64_t blocks_copied = 0;         // copy-on-write copies
};

class KVCacheManager {
 public:
  /// `num_cpu_blocks`: the swap space (0: every preemption recomputes).
  KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                 int32_t num_cpu_blocks = 0);

  /// Applies one step's ask: releases, then running growth (preempting the ask's
  /// preemption_order when blocks run out), then swap-ins and then admissions (both only when
  /// nothing was preempted and nobody sat out; admissions only when nothing is left swapped
  /// out). Throws troupe::Error for an ask that contradicts what it holds.
  [[nodiscard]] KVGrant grant(const KVAsk& ask);

  /// Number of blocks a sequence of `num_tokens` tokens needs.
  [[nodiscard]] int32_t blocks_for(int32_t num_tokens) const {
    return (num_tokens + block_size_ - 1) / block_size_;
  }
  [[nodiscard]] int32_t block_size() const { return block_size_; }
  [[nodiscard]] int32_t num_blocks() const { return pool_.num_blocks(); }
  [[nodiscard]] bool holds(uint64_t seq_id) const { return seqs_.contains(seq_id); }
  [[nodiscard]] bool is_swapped(uint64_t seq_id) const { return swapped_.contains(seq_id); }
  [[nodiscard]] int32_t num_swapped() const { return int32_t(swapped_.size()); }
  [[nodiscard]] int32_t num_cpu_blocks() const { return num_cpu_blocks_; }
  [[nodiscard]] int32_t num_free_cpu_blocks() const { return int32_t(cpu_free_.size()); }
  [[nodiscard]] const std::vector<int32_t>& block_table(uint64_t seq_id) const;
  [[nodiscard]] KVStats stats() const;
  [[nodiscard]] const BlockPool& pool() const { return pool_; }

  void reset_prefix_cache() { pool_.reset_prefix_cache(); }

  /// The GPU blocks with contents (in use or prefix-cached) and the CPU blocks holding swapped
  /// sequences, in id order: what a rank's move to another executor copies, so that every
  /// block table and prefix entry stays valid there.
  [[nodiscard]] std::pair<std::vector<int32_t>, std::vector<int32_t>> blocks_with_contents() const;

 private:
  struct SeqState {
    std::vector<int32_t> tokens;
    std::vector<int32_t> blocks;
    int32_t num_registered = 0;  // leading blocks registered in the prefix index
    uint64_t salt = 0;
    bool cacheable = true;
    // Prompt logprob entries computed for tokens [plp_first, plp_first + plp.size()), waiting
    // for their blocks to be complete; plp_blocks leading blocks have had theirs stored, the
    // last beside cached block plp_parent.
    std::vector<PositionLogprobs> plp;
    int32_t plp_first = 0;
    int32_t plp_k = -1;
    int32_t plp_blocks = 0;
    int32_t plp_parent = -1;
    uint32_t plp_parent_generation = 0;
    bool plp_done = false;  // the chain of cached twins broke: nothing more is stored
    uint64_t group = 0;     // beam group, 0: none
  };

  /// A sequence swapped out: its CPU blocks, one per GPU block that held computed tokens.
  struct SwappedState {
    std::vector<int32_t> cpu_blocks;
    uint64_t salt = 0;
  };

  void release(const KVRelease& r);
  /// Preempts running sequence `victim` (by swap when `mode` says so and the CPU pool has room)
  /// and releases its GPU blocks.
  void preempt(const KVRunningAsk& victim, PreemptionMode mode, KVGrant& out);
  void free_seq(uint64_t seq_id);
  void fork(const KVFork& f);
  /// Preempts, by recompute, every sequence of beam group `group` (their ids into `out`).
  void preempt_group(uint64_t group, KVGrant& out);
  /// Growth of a running sequence to `total` tokens from `num_computed`, with the copy-on-write
  /// of a shared block it writes (all its blocks or none); false when the pool is short.
  [[nodiscard]] bool grow_running(SeqState& s, int32_t num_computed, int32_t total,
                                  KVRunningGrant& g, KVGrant& out);
  /// Registers the full blocks among the first `num_tokens` tokens.
  void register_full_blocks(SeqState& s, int32_t num_tokens);
  [[nodiscard]] bool grow(SeqState& s, int32_t total_tokens, std::vector<int32_t>* new_blocks);
  /// Takes a sequence's newly computed prompt logprob entries and stores those of its complete
  /// blocks beside the cached blocks holding the same tokens.
  void keep_prompt_logprobs(SeqState& s, const KVPromptLogprobs& in);
  /// Prefix hit of waiting ask `w` into s.blocks (see KVWaitingAsk); fills `entries` when it
  /// wants prompt logprobs.
  void prefix_hit(const KVWaitingAsk& w, SeqState& s, std::vector<PositionLogprobs>* entries);

  int32_t block_size_;
  bool prefix_caching_;
  BlockPool pool_;
  std::unordered_map<uint64_t, SeqState> seqs_;
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0;

  int32_t num_cpu_blocks_;
  std::vector<int32_t> cpu_free_;  // free CPU blocks (a stack: which one is reused is moot)
  std::unordered_map<uint64_t, SwappedState> swapped_;
  uint64_t blocks_swapped_out_ = 0, blocks_swapped_in_ = 0, swap_fallbacks_ = 0;
  uint64_t forks_ = 0, blocks_copied_ = 0;
  bool fallback_logged_ = false;
};

}  // namespace troupe
