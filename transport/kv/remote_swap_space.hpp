// RemoteSwapSpace (runtime/exec/remote_swap.hpp) over KvRemote: the model runner's staging
// cache is the local region (per layer K and V planes), the memory node's KvRegion the remote
// one (contiguous blocks); errors name the memory node as the engine's flag gave it.
#pragma once

#include <string>
#include <vector>

#include "runtime/exec/remote_swap.hpp"
#include "transport/kv/kv_remote.hpp"

namespace troupe {

class KvRemoteSwapSpace final : public RemoteSwapSpace {
 public:
  /// `descriptor`: the memory node's region for this executor (KvRegion::descriptor());
  /// `node`: how errors name it ("127.0.0.1:40001").
  KvRemoteSwapSpace(const Blob& descriptor, const RemoteSwapRequest& request, KvSettings settings,
                    std::string node);

  void write(std::span<const RemoteSwapMove> moves) override;
  void read(std::span<const RemoteSwapMove> moves) override;

  [[nodiscard]] const std::string& method() const { return remote_.method(); }

 private:
  template <class F>
  void named(std::string_view op, std::span<const RemoteSwapMove> moves, F&& body);

  std::string node_;
  KvRemote remote_;
  std::vector<KvBlockMove> moves_;
};

}  // namespace troupe
