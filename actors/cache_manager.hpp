// The cache manager actor: owns the KV block accounting (runtime/kv/KVCacheManager) for one
// engine. Each step the scheduler sends one ask and gets one grant back, so a step costs one
// round trip however many sequences it holds.
#pragma once

#include "actors/interfaces.hpp"

namespace troupe {

cache_manager_actor spawn_cache_manager(caf::actor_system& sys, int32_t num_blocks,
                                        int32_t block_size, bool enable_prefix_caching,
                                        PreemptionMode mode = PreemptionMode::recompute,
                                        int32_t num_cpu_blocks = 0);

}  // namespace troupe
