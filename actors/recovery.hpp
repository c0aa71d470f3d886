// The recovery actor (issue 22): replaces an engine's lost executors. The scheduler notices the
// loss (an executor's down message, a failed step, or a step unanswered for execute_timeout),
// puts every sequence back in its waiting queue and asks this actor for a new group of
// executors; it answers with their handles once every rank has started again (on a restarted
// worker where the lost one's process died or froze), or with an error naming the rank that
// cannot be replaced, and then the scheduler fails the requests with it.
//
// Detached: ExecutorGroup::restart blocks (it starts processes and waits for the ranks), and
// must not hold up the actors that keep the engine answering meanwhile.
#pragma once

#include <memory>

#include "actors/executor_actor.hpp"
#include "actors/executor_group.hpp"
#include "actors/messages.hpp"

namespace troupe {

class ExecutorGroup;

using recover_atom = caf::atom_constant<caf::atom("recover")>;

/// (recover_atom, lost rank, whether its process died or froze) -> the new executors.
/// (migrate_atom, rank, GPU blocks, CPU blocks) -> the executors after the rank moved to
/// another worker with those blocks (ExecutorGroup::migrate), and what the move did; an error
/// with code caf::sec::feature_disabled when it cannot move at all (nothing was touched),
/// any other error when it failed part-way (the group must be restarted).
using recovery_actor = caf::typed_actor<
    caf::replies_to<recover_atom, uint64_t, bool>::with<ExecutorRanks>,
    caf::replies_to<migrate_atom, uint64_t, std::vector<int32_t>, std::vector<int32_t>>::with<
        ExecutorRanks, MigrationReport>>;

recovery_actor spawn_recovery(caf::actor_system& sys, std::shared_ptr<ExecutorGroup> group);

}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::ExecutorRanks)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::MigrationReport)
