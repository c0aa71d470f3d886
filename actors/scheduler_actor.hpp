// The scheduler actor: the step loop. It owns the queues (runtime/sched/Scheduler) and, each
// step, asks the cache manager for room, sends the plan to every executor of the group, applies
// the result and sends the sequences' updates to its engine. One step is in flight at a time,
// or two with async scheduling (the next one planned while one runs; results are applied in
// step order); requests that arrive meanwhile join the next step (continuous batching).
//
// Supervision: it monitors the executors. When one goes down, or a step fails, every sequence
// is failed with the reason (never dropped silently) and the cache manager starts afresh; a
// lost executor leaves the engine refusing new work until it is restarted.
#pragma once

#include <vector>

#include "actors/cache_manager_actor.hpp"
#include "actors/engine_actor.hpp"
#include "actors/executor_actor.hpp"

namespace troupe {

/// Owns the queues and the step loop (runtime/sched); sends SeqUpdates to its engine.
using scheduler_actor = caf::typed_actor<
    caf::reacts_to<add_atom, SeqSpecs>,
    caf::reacts_to<abort_atom, std::vector<uint64_t>>,
    caf::replies_to<stats_atom>::with<SchedulerStats>,
    caf::reacts_to<tick_atom>>;

scheduler_actor spawn_scheduler(caf::actor_system& sys, SchedulerLoopConfig config,
                                cache_manager_actor cache_manager,
                                ExecutorRanks executors, engine_actor engine);

}  // namespace troupe
