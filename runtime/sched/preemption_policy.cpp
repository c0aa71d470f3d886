#include "runtime/sched/preemption_policy.hpp"

namespace troupe {

std::vector<KVPreemption> PreemptionPolicy::order(std::span<const KVRunningAsk> running) const {
  std::vector<KVPreemption> victims;
  victims.reserve(running.size());
  for (auto it = running.rbegin(); it != running.rend(); ++it)
    victims.push_back(KVPreemption{it->seq_id, mode_});
  return victims;
}

}  // namespace troupe
