// The scheduler actor: the step loop. It owns the queues (runtime/sched/Scheduler) and, each
// step, asks the cache manager for room, sends the plan to every executor of the group, applies
// the result and sends the sequences' updates to its engine. One step is in flight at a time,
// or two with async scheduling (the next one planned while one runs; results are applied in
// step order); requests that arrive meanwhile join the next step (continuous batching).
//
// Supervision (issue 22): it monitors the executors. When one goes down, fails a step or leaves
// one unanswered for execute_timeout, every sequence goes back to the waiting queue (to be
// recomputed from its tokens so far: greedy and seeded ones come out exactly as without the
// fault), the cache manager starts afresh and the recovery actor (actors/recovery.hpp) starts
// new executors; then steps resume. With no recovery actor, or after max_executor_restarts
// replacements in a row with no step completing, every sequence fails with the reason (never
// dropped silently) and the engine refuses new work.
#pragma once

#include <vector>

#include "actors/cache_manager_actor.hpp"
#include "actors/engine_actor.hpp"
#include "actors/executor_actor.hpp"
#include "actors/recovery.hpp"

namespace troupe {

/// Owns the queues and the step loop (runtime/sched); sends SeqUpdates to its engine.
using scheduler_actor = caf::typed_actor<
    caf::reacts_to<add_atom, SeqSpecs>,
    caf::reacts_to<abort_atom, std::vector<uint64_t>>,
    caf::replies_to<stats_atom>::with<SchedulerStats>,
    caf::reacts_to<tick_atom>,
    caf::reacts_to<step_atom>,
    caf::replies_to<drain_atom, uint64_t>::with<std::string>>;

scheduler_actor spawn_scheduler(caf::actor_system& sys, SchedulerLoopConfig config,
                                cache_manager_actor cache_manager,
                                ExecutorRanks executors, engine_actor engine,
                                recovery_actor recovery = {});

}  // namespace troupe
