// The executor's logic, with no actors: holds one rank's model, its KV cache and the
// persistent batch (every live sequence's tokens, block table and sampling state), and turns a
// StepPlan into a StepResult.
//
// The persistent batch is what lets plans carry diffs: a sequence's tokens and settings
// arrive once; later plans only append tokens and blocks, and name the sequences to forget.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/backend/backend.hpp"
#include "runtime/exec/step.hpp"
#include "runtime/model/model_config.hpp"
#include "runtime/models/model.hpp"

namespace troupe {

class ModelRunner {
 public:
  /// Loads the model described by `init` onto `backend` and sizes the KV cache. Throws
  /// troupe::Error on a bad checkpoint, an unsupported dtype or too little memory.
  ModelRunner(std::unique_ptr<Backend> backend, const ExecutorInit& init);
  ~ModelRunner();
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  [[nodiscard]] const ExecutorInfo& info() const { return info_; }
  [[nodiscard]] const ModelConfig& model_config() const { return config_; }

  /// Runs one step. Throws troupe::Error on an inconsistent plan (unknown sequence, block
  /// table too short): the scheduler and executor disagree, which is a bug to surface.
  [[nodiscard]] StepResult execute(const StepPlan& plan);

  [[nodiscard]] size_t num_live_sequences() const { return seqs_.size(); }
  /// Forgets every sequence (after a failed step the scheduler starts afresh).
  void reset_batch() { seqs_.clear(); }

 private:
  struct LiveSeq {
    std::vector<int32_t> tokens;
    int32_t num_prompt = 0;
    SeqSampling sampling;
    std::vector<int32_t> block_table;
    int32_t num_computed = 0;
  };
  struct Scheduled {
    uint64_t seq_id;
    LiveSeq* seq;
    int32_t start;  // first position computed this step
    int32_t count;  // tokens computed this step
  };

  void size_kv_cache(const ExecutorInit& init);
  void ensure_input_capacity(size_t tokens, size_t seqs, size_t max_blocks);
  [[nodiscard]] PositionLogprobs prompt_logprobs_row(const float* row, int32_t next_token,
                                                     int32_t top_n) const;

  std::unique_ptr<Backend> backend_;
  ModelConfig config_;
  std::unique_ptr<CausalLM> model_;
  ExecutorInfo info_;
  int32_t block_size_ = 16;
  int32_t max_num_batched_tokens_ = 0;
  int32_t max_num_seqs_ = 0;
  int32_t max_logits_rows_ = 0;
  int32_t max_model_len_ = 0;

  Buffer kv_buffer_;
  KVCacheView kv_;

  // Device-side step inputs, grown when a step needs more.
  Buffer input_buffer_;
  size_t input_capacity_bytes_ = 0;

  std::unordered_map<uint64_t, LiveSeq> seqs_;
};

}  // namespace troupe
