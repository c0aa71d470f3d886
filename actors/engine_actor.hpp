// The engine actor (internal): the messaging around the output processor
// (runtime/api/output_processor.hpp, which holds the request logic: checks that need the model,
// fan-out of n > 1 into sequences, stop strings, finish reasons, the assembly of
// RequestOutputs). It encodes prompts and detokenizes outputs through the tokenizer pool, hands
// sequences to the scheduler and aborts them there, and sends each request's outputs to its
// sink.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/cache_manager_actor.hpp"
#include "actors/executor_actor.hpp"
#include "actors/messages.hpp"
#include "actors/recovery.hpp"
#include "actors/tokenizer_pool.hpp"

namespace troupe {

/// The front door. A submit names the actor that receives the request's outputs as
/// (output_atom, RequestOutput) messages; the reply is the request id or an error. A watcher
/// (watch_atom, actor) is sent (failed_atom, reason, true) once the engine can no longer serve
/// (at once if it already cannot).
using engine_actor = caf::typed_actor<
    caf::replies_to<submit_atom, EngineRequest, caf::actor>::with<std::string>,
    caf::reacts_to<abort_atom, std::string>,
    caf::reacts_to<watch_atom, caf::actor>,
    caf::reacts_to<updates_atom, SeqUpdates>,
    caf::reacts_to<failed_atom, std::string, bool>,
    caf::replies_to<stats_atom>::with<EngineStats>,
    // Moves a rank to another worker with its KV cache (a drained worker; the scheduler's
    // drain): answers how it went, or an error.
    caf::replies_to<drain_atom, uint64_t>::with<std::string>>;

/// Everything the engine actor needs, resolved by troupe::Engine before it is spawned.
struct EngineContext {
  OutputProcessorConfig requests;              // what requests are checked and built against
  std::shared_ptr<const Tokenizer> tokenizer;  // null with skip_tokenizer_init
  TokenizerPool tokenizers;
  cache_manager_actor cache_manager;
  ExecutorRanks executors;
  SchedulerLoopConfig scheduler;
  recovery_actor recovery;  // replaces lost executors; null: a lost executor is fatal
};

/// Spawns the engine actor, which spawns (and owns) its scheduler.
engine_actor spawn_engine_actor(caf::actor_system& sys, EngineContext context);

}  // namespace troupe
