#include "transport/kv/remote_swap_space.hpp"

#include "runtime/error.hpp"

namespace troupe {

namespace {

KvLayout staging_layout(const RemoteSwapRequest& r) {
  if (r.staging == nullptr || r.num_layers <= 0 || r.staging_blocks <= 0 || r.slice_bytes <= 0)
    fail("remote swap space: an empty staging cache ({} layers, {} blocks of {} bytes a slice)",
         r.num_layers, r.staging_blocks, r.slice_bytes);
  return KvLayout::per_layer(uint32_t(r.num_layers), uint64_t(r.staging_blocks),
                             uint64_t(r.slice_bytes));
}

}  // namespace

KvRemoteSwapSpace::KvRemoteSwapSpace(const Blob& descriptor, const RemoteSwapRequest& request,
                                     KvSettings settings, std::string node)
    : node_(std::move(node)),
      remote_(descriptor, request.staging, staging_layout(request), std::move(settings)) {
  if (remote_.remote_layout().num_blocks < uint64_t(request.num_blocks))
    fail("memory node {}: its region holds {} blocks; the swap space needs {}", node_,
         remote_.remote_layout().num_blocks, request.num_blocks);
}

template <class F>
void KvRemoteSwapSpace::named(std::string_view op, std::span<const RemoteSwapMove> moves,
                              F&& body) {
  moves_.clear();
  for (const RemoteSwapMove& m : moves)
    moves_.push_back(KvBlockMove{uint64_t(m.remote), uint64_t(m.staging)});
  try {
    body();
  } catch (const Error& e) {
    fail("swap space on the memory node {} ({} of {} blocks): {}", node_, op, moves.size(),
         e.what());
  }
}

void KvRemoteSwapSpace::write(std::span<const RemoteSwapMove> moves) {
  named("swap out", moves, [&] { remote_.write(moves_); });
}

void KvRemoteSwapSpace::read(std::span<const RemoteSwapMove> moves) {
  named("swap in", moves, [&] { remote_.read(moves_); });
}

}  // namespace troupe
