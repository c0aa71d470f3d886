#include "actors/recovery.hpp"

#include <spdlog/spdlog.h>

#include "actors/executor_group.hpp"

namespace troupe {

recovery_actor spawn_recovery(caf::actor_system& sys, std::shared_ptr<ExecutorGroup> group) {
  return sys.spawn<caf::detached>(
      [group](recovery_actor::pointer) -> recovery_actor::behavior_type {
        return {
            [group](recover_atom, uint64_t lost, bool process_lost) -> caf::result<ExecutorRanks> {
              try {
                group->restart(size_t(lost), process_lost);
                return ExecutorRanks{group->executors(), group->names(), group->driver()};
              } catch (const std::exception& e) {
                spdlog::error("engine: replacing the executors failed: {}", e.what());
                return make_troupe_error(e.what());
              }
            },
            [group](migrate_atom, uint64_t rank, const std::vector<int32_t>& blocks,
                    const std::vector<int32_t>& cpu_blocks)
                -> caf::result<ExecutorRanks, MigrationReport> {
              if (auto why = group->migration_refusal(size_t(rank)))
                return caf::make_error(caf::sec::feature_disabled, *why);
              try {
                MigrationReport report = group->migrate(size_t(rank), blocks, cpu_blocks);
                return caf::make_result(
                    ExecutorRanks{group->executors(), group->names(), group->driver()},
                    std::move(report));
              } catch (const std::exception& e) {
                spdlog::error("engine: moving rank {} to another worker failed: {}", rank,
                              e.what());
                return make_troupe_error(e.what());
              }
            },
        };
      });
}

}  // namespace troupe
