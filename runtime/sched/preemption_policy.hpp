// Who gives its KV blocks back when a running sequence cannot grow, and how: the scheduler's
// decision, as in vLLM (its scheduler preempts; its KV manager only says "no").
//
// The cache manager is an actor of its own and a step costs one round trip to it, so the
// decision travels as data: each ask made with nothing in flight carries the policy's ordered
// victims (KVAsk::preemption_order), and the cache manager takes them in that order until the
// sequence fits (runtime/kv/kv_cache_manager.hpp). A swap victim the CPU pool cannot take is
// recomputed (the cache manager's "no"; KVStats::swap_fallbacks counts them). docs/engine.md
// says why the list, and not a second round trip or a policy object inside the cache manager.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "runtime/kv/kv_cache_manager.hpp"

namespace troupe {

/// vLLM's rule: the lowest-priority running sequence (the one admitted last) is preempted first,
/// then the next lowest, up to the sequence that cannot grow, which preempts itself when nothing
/// below it is left; each by the configured mode (--preemption-mode: recompute, or swap to the
/// CPU swap space).
class PreemptionPolicy {
 public:
  explicit PreemptionPolicy(PreemptionMode mode = PreemptionMode::recompute) : mode_(mode) {}

  [[nodiscard]] static constexpr std::string_view name() { return "lowest_priority_first"; }
  [[nodiscard]] PreemptionMode mode() const { return mode_; }

  /// The victims for a step's running asks (`running`: highest priority first, as in
  /// KVAsk::running), in the order the cache manager takes them.
  [[nodiscard]] std::vector<KVPreemption> order(std::span<const KVRunningAsk> running) const;

 private:
  PreemptionMode mode_;
};

}  // namespace troupe
