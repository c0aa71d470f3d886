#include "runtime/kv/kv_cache_manager.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "runtime/error.hpp"

namespace troupe {

KVCacheManager::KVCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching,
                               int32_t num_cpu_blocks)
    : block_size_(block_size),
      prefix_caching_(enable_prefix_caching),
      pool_(num_blocks, block_size),
      num_cpu_blocks_(std::max(num_cpu_blocks, 0)) {
  if (num_cpu_blocks < 0) fail("KVCacheManager: num_cpu_blocks = {}: must be >= 0", num_cpu_blocks);
  // Highest id on top, so blocks are handed out 0, 1, 2, ... (easier to read in tests).
  cpu_free_.reserve(size_t(num_cpu_blocks_));
  for (int32_t b = num_cpu_blocks_ - 1; b >= 0; --b) cpu_free_.push_back(b);
}

const std::vector<int32_t>& KVCacheManager::block_table(uint64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) fail("KVCacheManager: unknown sequence {}", seq_id);
  return it->second.blocks;
}

KVStats KVCacheManager::stats() const {
  KVStats st;
  st.num_blocks = pool_.num_blocks();
  st.num_free_blocks = pool_.num_free();
  st.usage = pool_.usage();
  st.prefix_queries = prefix_queries_;
  st.prefix_hits = prefix_hits_;
  st.num_cpu_blocks = num_cpu_blocks_;
  st.num_free_cpu_blocks = int32_t(cpu_free_.size());
  st.blocks_swapped_out = blocks_swapped_out_;
  st.blocks_swapped_in = blocks_swapped_in_;
  st.swap_fallbacks = swap_fallbacks_;
  st.prompt_logprob_blocks = int32_t(pool_.prompt_logprobs().num_blocks());
  st.prompt_logprob_bytes = pool_.prompt_logprobs().bytes();
  st.forks = forks_;
  st.blocks_copied = blocks_copied_;
  return st;
}

void KVCacheManager::keep_prompt_logprobs(SeqState& s, const KVPromptLogprobs& in) {
  if (in.entries.empty()) return;
  const auto in_end = in.first_token + int32_t(in.entries.size());
  if (in.first_token < 1 || in_end > int32_t(s.tokens.size()) || in.k < 0)
    fail(
        "KVCacheManager: prompt logprobs of tokens [{}, {}) with k = {}: allowed: tokens 1 .. {} "
        "(the sequence's), k >= 0",
        in.first_token, in_end, in.k, int32_t(s.tokens.size()) - 1);
  if (!s.cacheable || s.plp_done) return;
  const auto end = [&] { return s.plp_first + int32_t(s.plp.size()); };
  if (in.k != s.plp_k || in.first_token > end() || in.first_token < s.plp_first) {
    s.plp.clear();  // a new run of entries (the old one cannot complete a block any more)
    s.plp_first = in.first_token;
    s.plp_k = in.k;
  }
  if (in_end > end())
    s.plp.insert(s.plp.end(), in.entries.end() - (in_end - end()), in.entries.end());
  // Store the entries of each complete block beside the cached block with the same identity
  // (the sequence's own, or the one an identical earlier block registered first).
  const int32_t bs = block_size_;
  const auto full_blocks = int32_t(s.tokens.size()) / bs;
  while (s.plp_blocks < full_blocks) {
    const int32_t b = s.plp_blocks;
    if (std::max(1, b * bs) < s.plp_first || (b + 1) * bs > end()) break;  // not complete yet
    if (s.plp_parent >= 0 && pool_.generation(s.plp_parent) != s.plp_parent_generation) {
      s.plp_done = true;  // the parent was evicted and reused
      break;
    }
    std::span<const int32_t> toks(s.tokens.data() + size_t(b) * size_t(bs), size_t(bs));
    const auto twin = pool_.find_cached(s.plp_parent, toks, s.salt);
    if (!twin) {
      s.plp_done = true;
      break;
    }
    BlockPromptLogprobs stored{s.plp_k, std::vector<PositionLogprobs>(size_t(bs))};
    for (int32_t j = b == 0 ? 1 : 0; j < bs; ++j)
      stored.entries[size_t(j)] = s.plp[size_t(b * bs + j - s.plp_first)];
    pool_.prompt_logprobs().put(*twin, std::move(stored));
    s.plp_parent = *twin;
    s.plp_parent_generation = pool_.generation(*twin);
    ++s.plp_blocks;
  }
  if (s.plp_done) {
    s.plp.clear();
    return;
  }
  // Entries of stored blocks are not needed here any more.
  const int32_t drop = std::clamp(s.plp_blocks * bs - s.plp_first, 0, int32_t(s.plp.size()));
  s.plp.erase(s.plp.begin(), s.plp.begin() + drop);
  s.plp_first += drop;
}

void KVCacheManager::prefix_hit(const KVWaitingAsk& w, SeqState& s,
                                std::vector<PositionLogprobs>* entries) {
  const auto len = int32_t(w.token_ids.size());
  if (!prefix_caching_ || !w.allow_prefix_hit || len <= 1) return;
  const int32_t bs = block_size_;
  const bool wants = w.prompt_logprobs >= 0;
  const int32_t last_entry = w.num_prompt_tokens - 1;  // the last token with an entry
  // Full blocks among the first len - 1 tokens (one token is always computed, so the step
  // yields logits for the next one).
  const int32_t max_hit_blocks = (len - 1) / bs;
  prefix_queries_ += uint64_t(len);
  int32_t parent = -1;
  for (int32_t b = 0; b < max_hit_blocks; ++b) {
    std::span<const int32_t> toks(s.tokens.data() + size_t(b) * size_t(bs), size_t(bs));
    auto hit = pool_.acquire_cached(parent, toks, s.salt);
    if (!hit) break;
    if (wants && b * bs <= last_entry) {  // the block holds tokens whose entries are wanted
      const BlockPromptLogprobs* e = pool_.prompt_logprobs().find(*hit);
      if (e == nullptr || e->k < w.prompt_logprobs) {
        pool_.release(std::span<const int32_t>(&*hit, 1));
        break;
      }
    }
    s.blocks.push_back(*hit);
    parent = *hit;
  }
  if (wants && !s.blocks.empty()) {
    // The entry of the token right after the hit comes from the logits at the hit's last
    // position: back off one block, so that position is computed (into a private block).
    const auto found = int32_t(s.blocks.size());
    const bool back_off = found * bs <= last_entry;
    const int32_t kv_blocks = found - (back_off ? 1 : 0);
    const int32_t through = std::min(kv_blocks * bs, last_entry);  // entries 1 .. through
    entries->reserve(size_t(std::max(through, 0)));
    for (int32_t t = 1; t <= through; ++t) {
      const BlockPromptLogprobs* e = pool_.prompt_logprobs().find(s.blocks[size_t(t / bs)]);
      PositionLogprobs p = e->entries[size_t(t % bs)];
      if (p.top.size() > size_t(w.prompt_logprobs)) p.top.resize(size_t(w.prompt_logprobs));
      entries->push_back(std::move(p));
    }
    if (back_off) {
      pool_.release(std::span<const int32_t>(&s.blocks.back(), 1));
      s.blocks.pop_back();
    }
  }
  prefix_hits_ += uint64_t(s.blocks.size()) * uint64_t(bs);
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

bool KVCacheManager::grow_running(SeqState& s, int32_t num_computed, int32_t total,
                                  KVRunningGrant& g, KVGrant& out) {
  // The block the first new token goes to, when it exists and another sequence holds it too
  // (a beam fork's partly filled last block), is written only after a private copy is made.
  const auto first = size_t(num_computed / block_size_);
  const bool cow = first < s.blocks.size() && pool_.ref_count(s.blocks[first]) > 1;
  const int32_t grow_by = std::max(0, blocks_for(total) - int32_t(s.blocks.size()));
  const int32_t need = grow_by + (cow ? 1 : 0);
  if (need == 0) return true;
  auto got = pool_.allocate(need);
  if (!got) return false;
  if (cow) {
    const int32_t shared = s.blocks[first];
    out.copies.push_back(BlockCopyPlan{shared, got->back()});
    s.blocks[first] = got->back();
    got->pop_back();
    pool_.release(std::span<const int32_t>(&shared, 1));
    ++blocks_copied_;
  }
  s.blocks.insert(s.blocks.end(), got->begin(), got->end());
  g.new_block_ids.insert(g.new_block_ids.end(), got->begin(), got->end());
  if (cow && int32_t(first) < s.num_registered)
    fail("KVCacheManager: copy-on-write of block {} that is registered for prefix reuse", first);
  return true;
}

void KVCacheManager::fork(const KVFork& f) {
  auto it = seqs_.find(f.parent);
  if (it == seqs_.end()) fail("KVCacheManager: forking sequence {}: holds no blocks", f.parent);
  SeqState parent = it->second;
  parent.tokens.insert(parent.tokens.end(), f.appended_token_ids.begin(),
                       f.appended_token_ids.end());
  parent.group = f.group;
  for (uint64_t child : f.children) {
    if (seqs_.contains(child) || swapped_.contains(child))
      fail("KVCacheManager: fork of {} into sequence {}, which is in use", f.parent, child);
    pool_.share(parent.blocks);
    seqs_.emplace(child, parent);
  }
  // The parent's own references go; its blocks live on in the children.
  free_seq(f.parent);
  ++forks_;
}

void KVCacheManager::preempt_group(uint64_t group, KVGrant& out) {
  std::vector<uint64_t> members;
  for (const auto& [id, st] : seqs_)
    if (st.group == group) members.push_back(id);
  std::sort(members.begin(), members.end());
  for (uint64_t id : members) {
    out.preempted.push_back(id);
    free_seq(id);
  }
}

void KVCacheManager::preempt(const KVRunningAsk& victim, PreemptionMode mode, KVGrant& out) {
  auto it = seqs_.find(victim.seq_id);
  if (it == seqs_.end())
    fail("KVCacheManager: preempting sequence {}: holds no blocks", victim.seq_id);
  const std::vector<int32_t>& blocks = it->second.blocks;
  // Only the blocks holding computed tokens carry KV worth keeping.
  const auto n =
      size_t(std::min<int32_t>(blocks_for(victim.num_computed_tokens), int32_t(blocks.size())));
  bool swapped = false;
  if (mode == PreemptionMode::swap && n > 0) {
    if (cpu_free_.size() >= n) {
      SwappedState sw;
      sw.salt = it->second.salt;
      for (size_t b = 0; b < n; ++b) {
        sw.cpu_blocks.push_back(cpu_free_.back());
        cpu_free_.pop_back();
        out.swap_out.push_back(BlockSwap{blocks[b], sw.cpu_blocks.back()});
      }
      blocks_swapped_out_ += n;
      swapped_.emplace(victim.seq_id, std::move(sw));
      out.swapped_out.push_back(victim.seq_id);
      swapped = true;
    } else {
      ++swap_fallbacks_;
      if (!fallback_logged_) {
        fallback_logged_ = true;
        spdlog::warn(
            "cache manager: the CPU swap space ({} blocks, {} free) cannot hold the {} "
            "blocks of sequence {}: preempting by recompute instead (logged once; raise "
            "--swap-space)",
            num_cpu_blocks_, cpu_free_.size(), n, victim.seq_id);
      }
    }
  }
  if (!swapped) out.preempted.push_back(victim.seq_id);
  free_seq(victim.seq_id);
}

void KVCacheManager::release(const KVRelease& r) {
  const uint64_t seq_id = r.seq_id;
  if (auto sw = swapped_.find(seq_id); sw != swapped_.end()) {  // aborted while swapped out
    cpu_free_.insert(cpu_free_.end(), sw->second.cpu_blocks.rbegin(), sw->second.cpu_blocks.rend());
    swapped_.erase(sw);
    return;
  }
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;  // already preempted: nothing held
  SeqState& s = it->second;
  s.tokens.insert(s.tokens.end(), r.appended_token_ids.begin(), r.appended_token_ids.end());
  register_full_blocks(s, std::min<int32_t>(r.num_computed_tokens, int32_t(s.tokens.size())));
  keep_prompt_logprobs(s, r.prompt_logprobs);
  free_seq(seq_id);
}

KVGrant KVCacheManager::grant(const KVAsk& ask) {
  KVGrant out;
  for (const auto& r : ask.released) release(r);
  for (const auto& f : ask.forks) fork(f);
  // Entries the last steps computed, before any preemption frees their blocks.
  for (const KVRunningAsk& r : ask.running)
    if (auto it = seqs_.find(r.seq_id); it != seqs_.end())
      keep_prompt_logprobs(it->second, r.prompt_logprobs);
  // An injected allocation refusal (ask.refuse_allocations): every free block is held for the
  // length of this grant, so that each allocation fails as with a full cache.
  struct Hold {
    BlockPool& pool;
    std::vector<int32_t> blocks;
    ~Hold() { pool.release(blocks); }
  } hold{pool_, {}};
  if (ask.refuse_allocations && pool_.num_free() > 0)
    hold.blocks = pool_.allocate(pool_.num_free()).value_or(std::vector<int32_t>{});

  // Where each running ask stands this step (by its index in ask.running), and where each of
  // the policy's victims is.
  enum class Fate : uint8_t { pending, granted, preempted };
  std::vector<Fate> fate(ask.running.size(), Fate::pending);
  std::vector<size_t> victim_index;
  victim_index.reserve(ask.preemption_order.size());
  if (!ask.preemption_order.empty()) {
    std::unordered_map<uint64_t, size_t> index;
    for (size_t i = 0; i < ask.running.size(); ++i) index.emplace(ask.running[i].seq_id, i);
    for (const KVPreemption& v : ask.preemption_order) {
      auto it = index.find(v.seq_id);
      if (it == index.end())
        fail("KVCacheManager: preemption_order names sequence {}, not running in this ask",
             v.seq_id);
      victim_index.push_back(it->second);
    }
  }
  size_t next_victim = 0;
  // Beam groups with a sequence granted this step: none of theirs may be preempted now (a grant
  // is never withdrawn, and a group is preempted whole).
  std::unordered_map<uint64_t, bool> group_granted;
  std::unordered_map<uint64_t, size_t> ask_index;
  for (size_t i = 0; i < ask.running.size(); ++i) ask_index.emplace(ask.running[i].seq_id, i);
  const auto group_of = [&](uint64_t id) {
    auto s = seqs_.find(id);
    return s == seqs_.end() ? uint64_t(0) : s->second.group;
  };

  // Running sequences, highest priority first; one that cannot grow preempts the policy's next
  // victim until it fits (the victim may be itself).
  for (size_t i = 0; i < ask.running.size(); ++i) {
    if (fate[i] == Fate::preempted) continue;
    const KVRunningAsk& r = ask.running[i];
    auto it = seqs_.find(r.seq_id);
    if (it == seqs_.end()) fail("KVCacheManager: running sequence {} holds no blocks", r.seq_id);
    SeqState& s = it->second;
    s.tokens.insert(s.tokens.end(), r.appended_token_ids.begin(), r.appended_token_ids.end());
    const int32_t total = r.num_computed_tokens + r.num_new_tokens;
    const int32_t known = int32_t(s.tokens.size());
    if (r.num_unknown_tokens < 0 || r.num_unknown_tokens > 1 ||
        total > known + r.num_unknown_tokens)
      fail("KVCacheManager: sequence {} asks for {} tokens but {} are known ({} unknown)",
           r.seq_id, total, known, r.num_unknown_tokens);
    KVRunningGrant g{r.seq_id, {}, {}};
    const size_t copies_before = out.copies.size();
    // grow_running() takes all the blocks it needs or none, so a victim's table is what it held.
    bool grown = grow_running(s, r.num_computed_tokens, total, g, out);
    while (!grown) {
      while (next_victim < victim_index.size() &&
             (fate[victim_index[next_victim]] != Fate::pending ||
              group_granted.contains(group_of(ask.running[victim_index[next_victim]].seq_id))))
        ++next_victim;
      if (next_victim == victim_index.size()) break;
      const size_t v = victim_index[next_victim];
      if (const uint64_t vg = group_of(ask.running[v].seq_id); vg != 0) {
        // A beam group goes whole, by recompute; its sequences still to be granted sit out.
        const size_t before = out.preempted.size();
        preempt_group(vg, out);
        for (size_t k = before; k < out.preempted.size(); ++k)
          if (auto at = ask_index.find(out.preempted[k]); at != ask_index.end())
            fate[at->second] = Fate::preempted;
      } else {
        preempt(ask.running[v], ask.preemption_order[next_victim].mode, out);
        fate[v] = Fate::preempted;
      }
      if (fate[i] == Fate::preempted) break;
      grown = grow_running(s, r.num_computed_tokens, total, g, out);
    }
    if (fate[i] == Fate::preempted) continue;
    if (!grown) {
      out.short_of_blocks = true;  // sits this step out
      continue;
    }
    register_full_blocks(s, std::min(total, known));
    if (r.needs_block_table) {
      g.block_table = s.blocks;
    } else if (out.copies.size() != copies_before) {
      fail(
          "KVCacheManager: sequence {}, known to the executors, had a block copied on write "
          "(only a fork's children, which ask for their table, share a block being written)",
          r.seq_id);
    }
    if (s.group != 0) group_granted.emplace(s.group, true);
    out.running.push_back(std::move(g));
    fate[i] = Fate::granted;
  }
  // No swap-ins or admissions while memory is short (this also keeps a step from both
  // swapping out and swapping in, so their CPU blocks never overlap).
  if (!out.preempted.empty() || !out.swapped_out.empty() || out.short_of_blocks) return out;

  int32_t running_count = int32_t(out.running.size());
  // Swapped-out sequences come back first, oldest first, each when all its blocks fit.
  for (const KVSwappedAsk& w : ask.swapped) {
    if (ask.max_running_seqs > 0 && running_count >= ask.max_running_seqs) break;
    auto sw = swapped_.find(w.seq_id);
    if (sw == swapped_.end()) fail("KVCacheManager: sequence {} is not swapped out", w.seq_id);
    const std::vector<int32_t>& cpu = sw->second.cpu_blocks;
    if (blocks_for(w.num_computed_tokens) != int32_t(cpu.size()))
      fail("KVCacheManager: sequence {} comes back with {} computed tokens but {} swapped blocks",
           w.seq_id, w.num_computed_tokens, cpu.size());
    const int32_t total = w.num_computed_tokens + w.num_new_tokens;
    if (w.num_new_tokens <= 0 || total > int32_t(w.token_ids.size()))
      fail("KVCacheManager: swapped sequence {} asks for {} tokens but {} are known", w.seq_id,
           total, w.token_ids.size());
    auto got = pool_.allocate(std::max(blocks_for(total), int32_t(cpu.size())));
    if (!got) break;
    for (size_t b = 0; b < cpu.size(); ++b) out.swap_in.push_back(BlockSwap{(*got)[b], cpu[b]});
    blocks_swapped_in_ += cpu.size();
    cpu_free_.insert(cpu_free_.end(), cpu.rbegin(), cpu.rend());
    SeqState s;
    s.tokens = w.token_ids;
    s.blocks = *got;
    s.salt = sw->second.salt;
    s.cacheable = false;  // private copies: see the header comment
    swapped_.erase(sw);
    out.swapped_in.push_back(KVSwappedIn{w.seq_id, s.blocks});
    seqs_.emplace(w.seq_id, std::move(s));
    ++running_count;
  }
  if (!swapped_.empty()) return out;  // waiting sequences wait for the swapped-out ones
  for (size_t wi = 0; wi < ask.waiting.size(); ++wi) {
    const KVWaitingAsk& w = ask.waiting[wi];
    if (ask.max_running_seqs > 0 && running_count >= ask.max_running_seqs) break;
    if (w.group != 0 && (wi == 0 || ask.waiting[wi - 1].group != w.group)) {
      // A beam group comes in whole or not at all: room for every token of every one of them
      // (a bound: prefix hits on blocks in use take no free block).
      size_t end = wi;
      int64_t need = 0;
      for (; end < ask.waiting.size() && ask.waiting[end].group == w.group; ++end)
        need += blocks_for(int32_t(ask.waiting[end].token_ids.size()));
      if ((ask.max_running_seqs > 0 && running_count + int32_t(end - wi) > ask.max_running_seqs) ||
          need > pool_.num_free())
        break;
    }
    if (seqs_.contains(w.seq_id)) fail("KVCacheManager: sequence {} admitted twice", w.seq_id);
    const int32_t len = int32_t(w.token_ids.size());
    if (w.prompt_logprobs >= 0 && (w.num_prompt_tokens < 1 || w.num_prompt_tokens > len))
      fail(
          "KVCacheManager: sequence {} wants prompt logprobs with num_prompt_tokens = {}: "
          "allowed: 1 .. {} (its tokens)",
          w.seq_id, w.num_prompt_tokens, len);
    SeqState s;
    s.tokens = w.token_ids;
    s.salt = w.cache_salt;
    s.cacheable = prefix_caching_;
    s.group = w.group;
    std::vector<PositionLogprobs> entries;
    prefix_hit(w, s, &entries);
    // The hit's entries start the run that the sequence's own steps continue, so the blocks
    // they complete can be stored.
    if (!entries.empty()) keep_prompt_logprobs(s, KVPromptLogprobs{1, w.prompt_logprobs, entries});
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
    out.admitted.push_back(KVAdmission{w.seq_id, cached, n, s.blocks, std::move(entries)});
    seqs_.emplace(w.seq_id, std::move(s));
    ++running_count;
  }
  return out;
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> KVCacheManager::blocks_with_contents() const {
  std::vector<int32_t> cpu;
  for (const auto& [id, sw] : swapped_) cpu.insert(cpu.end(), sw.cpu_blocks.begin(), sw.cpu_blocks.end());
  std::sort(cpu.begin(), cpu.end());
  return {pool_.blocks_with_contents(), std::move(cpu)};
}

}  // namespace troupe
