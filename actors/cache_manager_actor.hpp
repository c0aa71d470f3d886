// The cache manager actor: owns the KV block accounting (runtime/kv/KVCacheManager) for one
// engine. Each step the scheduler sends one ask and gets one grant back, so a step costs one
// round trip however many sequences it holds; the ask carries the scheduler's choice of whom
// to preempt (runtime/sched/preemption_policy.hpp), so no decision is made here.
#pragma once

#include "actors/messages.hpp"

namespace troupe {

/// Owns the KV block accounting (runtime/kv) and grants each step's ask.
using cache_manager_actor = caf::typed_actor<
    caf::replies_to<grant_atom, KVAsk>::with<KVGrant>,
    caf::replies_to<stats_atom>::with<KVStats>,
    caf::reacts_to<reset_atom>,
    // The blocks with contents (GPU, then CPU): what a rank moving to another executor copies.
    caf::replies_to<migrate_atom>::with<std::vector<int32_t>, std::vector<int32_t>>>;

cache_manager_actor spawn_cache_manager(caf::actor_system& sys, int32_t num_blocks,
                                        int32_t block_size, bool enable_prefix_caching,
                                        int32_t num_cpu_blocks = 0);

}  // namespace troupe
