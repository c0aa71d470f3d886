#include "actors/cache_manager_actor.hpp"

#include <memory>

namespace troupe {

namespace {

struct cache_manager_state {
  std::unique_ptr<KVCacheManager> kv;
  static inline const char* name = "troupe.cache_manager";
};

cache_manager_actor::behavior_type cache_manager_behavior(
    cache_manager_actor::stateful_pointer<cache_manager_state> self, int32_t num_blocks,
    int32_t block_size, bool prefix_caching, int32_t num_cpu_blocks) {
  self->state.kv =
      std::make_unique<KVCacheManager>(num_blocks, block_size, prefix_caching, num_cpu_blocks);
  return {
      [=](grant_atom, const KVAsk& ask) -> caf::result<KVGrant> {
        try {
          return self->state.kv->grant(ask);
        } catch (const std::exception& e) {
          return make_troupe_error(e.what());
        }
      },
      [=](stats_atom) -> KVStats { return self->state.kv->stats(); },
      [=](migrate_atom) -> caf::result<std::vector<int32_t>, std::vector<int32_t>> {
        auto [gpu, cpu] = self->state.kv->blocks_with_contents();
        return caf::make_result(std::move(gpu), std::move(cpu));
      },
      [=](reset_atom) {
        // After the executors are lost every sequence is gone: start from an empty pool.
        self->state.kv = std::make_unique<KVCacheManager>(num_blocks, block_size, prefix_caching,
                                                          num_cpu_blocks);
      },
  };
}

}  // namespace

cache_manager_actor spawn_cache_manager(caf::actor_system& sys, int32_t num_blocks,
                                        int32_t block_size, bool enable_prefix_caching,
                                        int32_t num_cpu_blocks) {
  return sys.spawn(cache_manager_behavior, num_blocks, block_size, enable_prefix_caching,
                   num_cpu_blocks);
}

}  // namespace troupe
