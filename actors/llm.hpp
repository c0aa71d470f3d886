// troupe::LLM — the offline API, mirroring vLLM's `LLM`:
//
//   troupe::LLM llm(troupe::EngineArgs{});  // the embedded model; .model = "dir" for another
//   auto outs = llm.generate({"The future of AI is"},
//                            troupe::SamplingParams{.temperature = 0.8, .top_p = 0.95});
//   std::cout << outs[0].outputs[0].text;
//
// It starts and owns its own CAF actor system (engine, tokenizer pool, scheduler, cache manager
// and executor actors). No CAF type appears in this header.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/api/beam_search.hpp"
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
  /// Polled while waiting (every 50 ms): once it reads true, every request not finished yet is
  /// aborted (its output comes back with finish_reason "abort") and generate returns when all
  /// have come back. Null: never. For Ctrl-C: set it from a signal handler.
  const std::atomic<bool>* cancel = nullptr;
};

/// Receives each request's final output as soon as the request is complete (finished,
/// failed: `error` set, or aborted: finish_reason "abort"), with its index in the prompts.
using OutputCallback = std::function<void(size_t index, RequestOutput&& output)>;

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
  /// The streaming form: each request's output goes to `on_output` (on the calling thread) as
  /// soon as that request is complete, in the order they complete; nothing is kept. Bad
  /// parameters or prompts throw before anything is generated, as above. When requests fail
  /// (an executor lost), every one still comes back through `on_output` first, then this
  /// throws troupe::Error naming the first failure. If `on_output` throws, the requests still
  /// running are aborted and the exception propagates.
  void generate(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params,
                const OutputCallback& on_output, const GenerateOptions& options = {});

  /// vLLM's LLM.beam_search: beam_width beams per prompt, the beam_width best returned, best
  /// first (runtime/api/beam_search.hpp says how its scores relate to vLLM's). Throws
  /// troupe::Error naming the BeamSearchParams field.
  [[nodiscard]] std::vector<BeamSearchOutput> beam_search(const std::vector<Prompt>& prompts,
                                                          const BeamSearchParams& params);

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
  /// Moves rank `rank` to a fresh worker process with its KV cache while requests run
  /// (Engine::drain_rank; callable from another thread during generate()). Returns what it did.
  std::string drain_rank(size_t rank);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
