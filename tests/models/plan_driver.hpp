// Drives ModelRunners with hand-made StepPlans the way the scheduler does (new sequences in
// full, known ones as diffs, blocks handed out from a shuffled free list), so that several
// runners can be fed the same steps and their logits compared. The tokens a step samples come
// from one reference runner's result and are appended for everyone, so every runner always
// computes on the same inputs even where another would have sampled differently.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "runtime/protocol/step.hpp"

namespace troupe::testing {

class PlanDriver {
 public:
  PlanDriver(int32_t block_size, int32_t num_blocks, uint64_t seed) : block_size_(block_size) {
    free_.resize(size_t(num_blocks));
    std::iota(free_.begin(), free_.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(free_.begin(), free_.end(), rng);
  }

  /// A sequence with this prompt (greedy unless `sampling` says otherwise); the first plan
  /// that schedules it computes its whole prompt.
  uint64_t add(std::vector<int32_t> prompt, SeqSampling sampling = greedy()) {
    const uint64_t id = next_id_++;
    Seq& s = seqs_[id];
    s.num_prompt = int32_t(prompt.size());
    s.tokens = std::move(prompt);
    s.sampling = std::move(sampling);
    return id;
  }

  /// Greedy, with the sampled token's logprob (num_logprobs = 0) so that tests comparing two
  /// runners compare the logits' log-softmax too, not just the argmax.
  static SeqSampling greedy() {
    SeqSampling s;
    s.temperature = 0.0f;
    s.num_logprobs = 0;
    return s;
  }

  /// A step computing every not-yet-computed token of each listed sequence (its prompt the
  /// first time, then the one token it sampled last).
  StepPlan plan(const std::vector<uint64_t>& ids) {
    StepPlan p;
    p.step_id = next_step_++;
    for (uint64_t id : ids) {
      Seq& s = seqs_.at(id);
      const auto n = int32_t(s.tokens.size());
      if (s.computed >= n) throw std::logic_error("plan_driver: nothing to compute");
      const size_t first_new_block = s.blocks.size();
      while (s.blocks.size() * size_t(block_size_) < size_t(n)) {
        if (free_.empty()) throw std::runtime_error("plan_driver: out of KV blocks");
        s.blocks.push_back(free_.back());
        free_.pop_back();
      }
      if (!s.known) {
        NewSeq ns;
        ns.seq_id = id;
        ns.token_ids = s.tokens;
        ns.num_prompt_tokens = s.num_prompt;
        ns.sampling = s.sampling;
        ns.block_ids = s.blocks;
        ns.num_computed_tokens = s.computed;
        ns.num_new_tokens = n - s.computed;
        p.new_seqs.push_back(std::move(ns));
        s.known = true;
      } else {
        CachedSeq cs;
        cs.seq_id = id;
        cs.appended_token_ids.assign(s.tokens.begin() + ptrdiff_t(s.sent), s.tokens.end());
        cs.new_block_ids.assign(s.blocks.begin() + ptrdiff_t(first_new_block), s.blocks.end());
        cs.num_computed_tokens = s.computed;
        cs.num_new_tokens = n - s.computed;
        p.cached_seqs.push_back(std::move(cs));
      }
      s.sent = size_t(n);
      s.computed = n;
    }
    return p;
  }

  /// Appends the tokens `r` sampled (the reference runner's result for the last plan).
  void apply(const StepResult& r) {
    for (const SeqStepOutput& o : r.outputs)
      if (o.sampled) seqs_.at(o.seq_id).tokens.push_back(o.token);
  }

  [[nodiscard]] int32_t length(uint64_t id) const { return int32_t(seqs_.at(id).tokens.size()); }

 private:
  struct Seq {
    std::vector<int32_t> tokens;
    int32_t num_prompt = 0;
    SeqSampling sampling;
    std::vector<int32_t> blocks;
    int32_t computed = 0;  // tokens whose KV the runners hold
    size_t sent = 0;       // tokens the runners know
    bool known = false;
  };

  int32_t block_size_;
  std::vector<int32_t> free_;
  std::map<uint64_t, Seq> seqs_;
  uint64_t next_id_ = 1;
  uint64_t next_step_ = 1;
};

/// A small CPU runner over the llama_gqa fixture (GQA 4/2 heads of 16): blocks of 4 tokens,
/// 256 of them, decode graphs padded up to 48 tokens (the padding and pipelining tests').
inline ExecutorInit small_cpu_init() {
  ExecutorInit init;
  init.model_dir = std::string(TROUPE_FIXTURES_DIR) + "/models/llama_gqa";
  init.device = "cpu";
  init.block_size = 4;
  init.max_num_batched_tokens = 256;
  init.max_num_seqs = 16;
  init.max_model_len = 128;
  init.num_gpu_blocks_override = 256;
  init.max_seq_len_to_capture = 48;
  return init;
}

/// Random prompts of the given lengths over [0, vocab).
inline std::vector<std::vector<int32_t>> random_prompts(const std::vector<int32_t>& lengths,
                                                        int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<std::vector<int32_t>> out;
  for (int32_t n : lengths) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& t : p) t = tok(rng);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace troupe::testing
