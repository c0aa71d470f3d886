// The wires of an executor in a parallel group, made in two steps so that the actors can carry
// the bootstrap over CAF: prepare_wires() creates this rank's ends and reports them as bytes
// (ExecutorEndpoints); the head gathers every rank's and sends each its peers (WirePeers); then
// connect() joins them. The kinds (ExecutorPlacement::collectives / stage_link) map onto the
// implementations in transport/.
#pragma once

#include <memory>
#include <utility>

#include "runtime/backend/backend.hpp"
#include "runtime/backend/collectives.hpp"
#include "runtime/protocol/step.hpp"

namespace troupe {

class PreparedWires {
 public:
  virtual ~PreparedWires() = default;
  /// What the peers need to reach this rank's ends.
  [[nodiscard]] virtual ExecutorEndpoints endpoints() const = 0;
  /// Connects to the peers (every rank of the group at once) and returns the TP group for
  /// `backend` (null at TP = 1) and the stage link (null at PP = 1). Bounded by the
  /// placement's timeout; throws troupe::Error naming the peer that did not answer.
  virtual std::pair<std::shared_ptr<Collectives>, std::shared_ptr<StageLink>> connect(
      const WirePeers& peers, Backend& backend) = 0;
};

/// This rank's ends of the wires its placement names. Throws troupe::Error for a kind this
/// build does not have or a placement that contradicts itself (TP = 1 with a group wire, a
/// CUDA group on the CPU, ...).
std::unique_ptr<PreparedWires> prepare_wires(const ExecutorPlacement& placement);

}  // namespace troupe
