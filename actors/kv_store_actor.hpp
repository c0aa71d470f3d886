// The memory node: what `troupe worker --kv-store GIB` publishes instead of a worker actor.
// It holds executors' swap spaces in its host memory (transport/kv's KvRegion, one per
// executor) so that an engine's `--swap-space-remote HOST:PORT` preempts by swapping into
// another process's, or another host's, memory.
//
// An executor asks for its region once it knows its KV block size; the reply is the region's
// descriptor, which the executor's KvRemote connects to over UCX (CAF carries only this
// control message, never the blocks). The node monitors the owner named in the request (a lease
// actor living as long as the executor's swap space): a region lives until it goes down (the
// swap space closed, its engine ended, its process died). The regions together never exceed
// --kv-store GiB; a request past that is an error naming the node, the sizes and the limit.
#pragma once

#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "runtime/exec/remote_swap.hpp"
#include "transport/ucx/ucx_context.hpp"

namespace troupe {

/// (kv_region, owner (the executor's lease), num_blocks, block_bytes) -> the region's descriptor
/// bytes.
using kv_store_actor = caf::typed_actor<
    caf::replies_to<kv_region_atom, caf::actor, uint64_t, uint64_t>::with<std::vector<uint8_t>>>;

/// `self_description` names the node in errors ("memory node pid 123 on 10.0.0.2:40001").
kv_store_actor spawn_kv_store(caf::actor_system& sys, uint64_t capacity_bytes,
                              ucx::Settings settings, std::string self_description);

/// The executor's side: a connector that reaches the memory node at `node` (host:port) over
/// the middleman, asks it for a region held by a lease (a small actor the node monitors, ended
/// when the returned swap space is destroyed or its process dies) and connects a KvRemote to
/// it. Every wait is bounded by settings.timeout; errors name `node` and swap_space_remote.
RemoteSwapConnector remote_swap_connector(caf::actor_system& sys, std::string node,
                                          ucx::Settings settings);

}  // namespace troupe
