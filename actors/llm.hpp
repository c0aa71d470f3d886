// troupe::LLM — the offline API, mirroring vLLM's `LLM`:
//
//   troupe::LLM llm(troupe::EngineArgs{.model = "models/troupe-fortunes"});
//   auto outs = llm.generate({"The future of AI is"},
//                            troupe::SamplingParams{.temperature = 0.8, .top_p = 0.95});
//   std::cout << outs[0].outputs[0].text;
//
// It starts and owns its own CAF actor system (engine, tokenizer pool, scheduler, cache manager
// and executor actors). No CAF type appears in this header.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/api/outputs.hpp"
#include "runtime/config/engine_args.hpp"
#include "runtime/config/sampling_params.hpp"
#include "runtime/kv/kv_cache_manager.hpp"
#include "runtime/sched/scheduler.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace troupe {

/// A prompt: text, or token ids (vLLM's TokensPrompt) when `token_ids` is non-empty.
struct Prompt {
  std::string text;
  std::vector<int32_t> token_ids;
  Prompt() = default;
  Prompt(std::string t) : text(std::move(t)) {}         // NOLINT: implicit, as in vLLM
  Prompt(const char* t) : text(t) {}                    // NOLINT
  Prompt(std::vector<int32_t> ids) : token_ids(std::move(ids)) {}  // NOLINT
};

struct GenerateOptions {
  /// A progress bar on stderr (vLLM's use_tqdm).
  bool use_tqdm = true;
  /// Called after each request finishes, with (finished, total); runs on the calling thread.
  std::function<void(size_t, size_t)> on_progress;
};

class LLM {
 public:
  /// Starts the actor system and the engine. Throws troupe::Error with a one-line reason.
  explicit LLM(EngineArgs args);
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  /// Generates for every prompt with one set of sampling parameters; outputs come back in
  /// prompt order. Bad parameters or prompts throw troupe::Error naming the prompt index and
  /// the field, before anything is generated for later prompts.
  [[nodiscard]] std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                                    const SamplingParams& params,
                                                    const GenerateOptions& options = {});
  /// One SamplingParams per prompt.
  [[nodiscard]] std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                                    const std::vector<SamplingParams>& params,
                                                    const GenerateOptions& options = {});
  /// With the model's default sampling parameters (generation_config.json).
  [[nodiscard]] std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts);

  [[nodiscard]] SamplingParams get_default_sampling_params() const;
  /// Null when skip_tokenizer_init is set.
  [[nodiscard]] std::shared_ptr<const Tokenizer> get_tokenizer() const;
  [[nodiscard]] int32_t max_model_len() const;
  [[nodiscard]] std::string backend() const;
  /// The scheduler's counters now (queues, preemptions, swaps). Throws troupe::Error when the
  /// engine does not answer.
  [[nodiscard]] SchedulerStats scheduler_stats() const;
  /// The cache manager's counters now (GPU and CPU blocks, prefix hits, blocks swapped).
  [[nodiscard]] KVStats kv_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
