// The engine: troupe's front door, usable inside a host application's own actor system.
//
//   caf::actor_system_config cfg;  troupe::register_message_types(cfg);
//   troupe::set_scheduler(cfg, troupe::computes_on_cpu(args));  // optional: CAF's threads
//   caf::actor_system sys{cfg};
//   troupe::Engine engine(sys, args);  // EngineArgs{}: default_model_dir()
//   // then talk to engine.handle() with (submit_atom, EngineRequest, sink) messages; the sink
//   // actor receives (output_atom, RequestOutput) messages.
//
// Constructing an Engine loads the model into its executors (blocking the calling thread, not
// the actor system) and spawns the tokenizer pool, cache manager, scheduler and engine actors.
// Destroying it shuts those actors down. troupe::LLM (llm.hpp) wraps one with its own system.
#pragma once

#include <memory>
#include <string>

#include "actors/engine_actor.hpp"
#include "runtime/checkpoint/default_model.hpp"  // default_model_dir(): EngineArgs.model when empty
#include "runtime/checkpoint/model_config.hpp"
#include "runtime/config/engine_args.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace troupe {

/// What the engine resolved from its arguments at start-up.
struct EngineInfo {
  std::string model_dir;
  std::string tokenizer_dir;  // --tokenizer, else model_dir (its tokenizer_config.json, ...)
  std::string device;  // "cpu" or "cuda"
  int32_t max_model_len = 0;
  int32_t num_kv_blocks = 0;
  int32_t num_cpu_blocks = 0;  // swap space (0 unless preemption_mode = swap)
  int32_t block_size = 0;
  std::string backend;
  double load_seconds = 0.0;
};

/// Whether an engine made with `args` computes on this host's CPU: device "cpu", or "auto"
/// on a machine without a CUDA device (what the engine resolves at start-up).
[[nodiscard]] bool computes_on_cpu(const EngineArgs& args);

class Engine {
 public:
  /// Validates `args`, loads the model and starts the actors. Throws troupe::Error with a
  /// one-line reason on bad arguments, a bad checkpoint or an executor that fails to start.
  Engine(caf::actor_system& sys, EngineArgs args);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  [[nodiscard]] engine_actor handle() const;
  [[nodiscard]] const EngineInfo& info() const;
  [[nodiscard]] const ModelConfig& model_config() const;
  /// Null when skip_tokenizer_init is set.
  [[nodiscard]] std::shared_ptr<const Tokenizer> tokenizer() const;
  /// The sampling defaults of the model's generation_config.json (generation_config = "auto"),
  /// or vLLM's defaults.
  [[nodiscard]] const SamplingParams& default_sampling_params() const;
  /// Moves rank `rank` (tp_rank + pp_rank * tp) to a fresh worker process with its KV cache,
  /// as when its worker is asked to leave (`troupe worker` on SIGTERM): steps pause until the
  /// ones in flight are done, the new worker loads the rank's shard and copies the blocks over
  /// UCX, and the running requests go on without recomputing anything. Returns what it did
  /// (one line). Throws troupe::Error naming why when the rank cannot move (an executor in
  /// this process, workers troupe did not start, the CUDA backend: not supported yet); a move
  /// that fails part-way restarts the executors as after a fault (docs/faults.md).
  std::string drain_rank(size_t rank);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
