#include "runtime/kv/kv_cache_manager.hpp"

#include <algorithm>

#include "runtime/error.hpp"

namespace troupe {

KVCacheManager::KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching), pool_(num_blocks, block_size) {}

const std::vector<int32_t>& KVCacheManager::block_table(uint64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) fail("KVCacheManager: unknown sequence {}", seq_id);
  return it->second.blocks;
}

KVStats KVCacheManager::stats() const {
  return KVStats{pool_.num_blocks(), pool_.num_free(), pool_.usage(), prefix_queries_,
                 prefix_hits_};
}

void KVCacheManager::register_full_blocks(SeqState& s, int32_t num_tokens) {
  if (!s.cacheable) return;
  const int32_t full = std::min<int32_t>(num_tokens / block_size_, int32_t(s.blocks.size()));
  for (int32_t b = s.num_registered; b < full; ++b) {
    const int32_t parent = b > 0 ? s.blocks[size_t(b - 1)] : -1;
    std::span<const int32_t> toks(s.tokens.data() + size_t(b) * size_t(block_size_),
                                  size_t(block_size_));
    pool_.register_full(s.blocks[size_t(b)], parent, toks, s.salt);
  }
  s.num_registered = std::max(s.num_registered, full);
}

bool KVCacheManager::grow(SeqState& s, int32_t total_tokens, std::vector<int32_t>* new_blocks) {
  const int32_t need = blocks_for(total_tokens) - int32_t(s.blocks.size());
  if (need <= 0) return true;
  auto got = pool_.allocate(need);
  if (!got) return false;
  s.blocks.insert(s.blocks.end(), got->begin(), got->end());
  if (new_blocks) new_blocks->insert(new_blocks->end(), got->begin(), got->end());
  return true;
}

void KVCacheManager::free_seq(uint64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  std::vector<int32_t> reversed(it->second.blocks.rbegin(), it->second.blocks.rend());
  pool_.release(reversed);
  seqs_.erase(it);
}

void KVCacheManager::release(uint64_t seq_id, std::vector<int32_t> appended, int32_t num_computed) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;  // already preempted: nothing held
  SeqState& s = it->second;
  s.tokens.insert(s.tokens.end(), appended.begin(), appended.end());
  register_full_blocks(s, std::min<int32_t>(num_computed, int32_t(s.tokens.size())));
  free_seq(seq_id);
}

KVGrant KVCacheManager::grant(const KVAsk& ask) {
  KVGrant out;
  for (const auto& r : ask.released) release(r.seq_id, r.appended_token_ids, r.num_computed_tokens);

  // Running sequences, highest priority first; when one cannot grow, the lowest-priority
  // running sequence still holding blocks is preempted (possibly the one asking).
  size_t end = ask.running.size();
  for (size_t i = 0; i < end; ++i) {
    const KVRunningAsk& r = ask.running[i];
    auto it = seqs_.find(r.seq_id);
    if (it == seqs_.end()) fail("KVCacheManager: running sequence {} holds no blocks", r.seq_id);
    SeqState& s = it->second;
    s.tokens.insert(s.tokens.end(), r.appended_token_ids.begin(), r.appended_token_ids.end());
    const int32_t total = r.num_computed_tokens + r.num_new_tokens;
    if (total > int32_t(s.tokens.size()))
      fail("KVCacheManager: sequence {} asks for {} tokens but {} are known", r.seq_id, total,
           s.tokens.size());
    KVRunningGrant g{r.seq_id, {}};
    bool self_preempted = false;
    while (!grow(s, total, &g.new_block_ids)) {
      const uint64_t victim = ask.running[end - 1].seq_id;
      out.preempted.push_back(victim);
      --end;
      if (victim == r.seq_id) {
        self_preempted = true;
        break;
      }
      free_seq(victim);
    }
    if (self_preempted) {
      // Give back what this attempt took, then everything it held.
      free_seq(r.seq_id);
      break;
    }
    register_full_blocks(s, total);
    out.running.push_back(std::move(g));
  }
  if (!out.preempted.empty()) return out;  // no admissions while memory is short

  int32_t running_count = int32_t(out.running.size());
  for (const KVWaitingAsk& w : ask.waiting) {
    if (ask.max_running_seqs > 0 && running_count >= ask.max_running_seqs) break;
    if (seqs_.contains(w.seq_id)) fail("KVCacheManager: sequence {} admitted twice", w.seq_id);
    const int32_t len = int32_t(w.token_ids.size());
    SeqState s;
    s.tokens = w.token_ids;
    s.salt = w.cache_salt;
    s.cacheable = prefix_caching_;
    // Prefix hit: full blocks among the first len - 1 tokens (one token is always computed,
    // so the step yields logits for the next one).
    if (prefix_caching_ && w.allow_prefix_hit && len > 1) {
      const int32_t max_hit_blocks = (len - 1) / block_size_;
      prefix_queries_ += uint64_t(len);
      int32_t parent = -1;
      for (int32_t b = 0; b < max_hit_blocks; ++b) {
        std::span<const int32_t> toks(s.tokens.data() + size_t(b) * size_t(block_size_),
                                      size_t(block_size_));
        auto hit = pool_.acquire_cached(parent, toks, s.salt);
        if (!hit) break;
        s.blocks.push_back(*hit);
        parent = *hit;
      }
      prefix_hits_ += uint64_t(s.blocks.size()) * uint64_t(block_size_);
    }
    s.num_registered = int32_t(s.blocks.size());
    const int32_t cached = int32_t(s.blocks.size()) * block_size_;
    const int32_t remaining = len - cached;
    const int32_t n = std::min(w.max_new_tokens, remaining);
    const bool fits_budget = n > 0 && (w.allow_partial || n == remaining);
    if (!fits_budget || !grow(s, cached + n, nullptr)) {
      std::vector<int32_t> reversed(s.blocks.rbegin(), s.blocks.rend());
      pool_.release(reversed);
      break;
    }
    register_full_blocks(s, cached + n);
    out.admitted.push_back(KVAdmission{w.seq_id, cached, n, s.blocks});
    seqs_.emplace(w.seq_id, std::move(s));
    ++running_count;
  }
  return out;
}

}  // namespace troupe
