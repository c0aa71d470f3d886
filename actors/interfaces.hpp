// The typed interface of every troupe actor: the compiler checks each send and reply.
#pragma once

#include <caf/all.hpp>

#include "actors/messages.hpp"

namespace troupe {

/// One per GPU (or CPU rank); detached (its own thread). May live in a `troupe worker`
/// process, so its messages are the registered cross-process types. finish_atom is its own
/// (it polls the step in flight with it, actors/executor.cpp).
using executor_actor = caf::typed_actor<
    caf::replies_to<init_atom, ExecutorInit>::with<ExecutorInfo>,
    caf::replies_to<execute_atom, StepPlan>::with<StepResult>,
    caf::reacts_to<finish_atom, uint64_t>>;

/// Owns the KV block accounting (runtime/kv) and grants each step's ask.
using cache_manager_actor = caf::typed_actor<
    caf::replies_to<grant_atom, KVAsk>::with<KVGrant>,
    caf::replies_to<stats_atom>::with<KVStats>,
    caf::reacts_to<reset_atom>>;

/// Owns the queues and the step loop (runtime/sched); sends SeqUpdates to its engine.
using scheduler_actor = caf::typed_actor<
    caf::reacts_to<add_atom, SeqSpecs>,
    caf::reacts_to<abort_atom, std::vector<uint64_t>>,
    caf::replies_to<stats_atom>::with<SchedulerStats>,
    caf::reacts_to<tick_atom>>;

/// Encodes prompts and detokenizes outputs incrementally. The pool actor routes detok work by
/// sequence id (each sequence's state lives in one member) and spreads encodes round-robin.
using tokenizer_actor = caf::typed_actor<
    caf::replies_to<encode_atom, std::string, bool>::with<std::vector<int32_t>>,
    caf::replies_to<decode_atom, std::vector<int32_t>, bool>::with<std::string>,
    caf::replies_to<detok_atom, DetokBatch>::with<DetokDeltas>>;

/// The front door. A submit names the actor that receives the request's outputs as
/// (output_atom, RequestOutput) messages; the reply is the request id or an error.
using engine_actor = caf::typed_actor<
    caf::replies_to<submit_atom, EngineRequest, caf::actor>::with<std::string>,
    caf::reacts_to<abort_atom, std::string>,
    caf::reacts_to<updates_atom, SeqUpdates>,
    caf::reacts_to<failed_atom, std::string, bool>,
    caf::replies_to<stats_atom>::with<EngineStats>>;

}  // namespace troupe
