// The executor actor: one per GPU (or CPU rank), detached so its blocking device work never
// stalls other actors and so `cudaSetDevice` holds for every call it makes. It owns a
// ModelRunner (runtime/exec) and turns init / execute messages into calls on it; errors go
// back to the requester as caf::error with the runner's message.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "runtime/backend/backend.hpp"

#ifdef TROUPE_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace troupe {

/// One per GPU (or CPU rank); detached (its own thread). May live in a `troupe worker`
/// process, so its messages are the registered cross-process types. finish_atom is its own
/// (it polls the step in flight with it, actors/executor_actor.cpp).
/// Start-up is four messages, so that a parallel group's wires are joined before any rank
/// loads and its ranks start together: prepare (its ends of the wires, ExecutorEndpoints),
/// connect (to its peers), init (load the weights: a few ranks at a time), start (size the KV
/// cache and record the graphs, every rank at once: ExecutorInfo). A lone executor may skip
/// prepare and connect.
using executor_actor = caf::typed_actor<
    caf::replies_to<prepare_atom, ExecutorPlacement>::with<ExecutorEndpoints>,
    caf::replies_to<connect_atom, WirePeers>::with<bool>,
    caf::replies_to<init_atom, ExecutorInit>::with<ExecutorInfo>,
    caf::replies_to<start_atom>::with<ExecutorInfo>,
    caf::replies_to<execute_atom, StepPlan>::with<StepResult>,
    caf::reacts_to<finish_atom, uint64_t>,
    // A rank moving to another executor (a drained worker, ExecutorGroup::migrate): the ranks
    // that stay rejoin their wires around the newcomer without reloading (rewire, then
    // connect), the old one exposes its KV cache and the new one copies it (kv_export,
    // kv_import: the bytes copied).
    caf::replies_to<rewire_atom, ExecutorPlacement>::with<ExecutorEndpoints>,
    caf::replies_to<kv_export_atom>::with<KvExport>,
    caf::replies_to<kv_import_atom, KvImport>::with<uint64_t>>;

/// The executors one scheduler drives, in rank order, with the name of each for errors and the
/// driver: the rank whose StepResults are applied (the last pipeline stage's TP rank 0; the
/// others' replies keep the ranks in lockstep).
struct ExecutorRanks {
  std::vector<executor_actor> handles;
  std::vector<std::string> names;
  size_t driver = 0;
};

/// Spawns an executor on its own thread in `sys`.
executor_actor spawn_executor(caf::actor_system& sys);

/// The backend for `device` ("cpu" or "cuda") and device index. Throws troupe::Error when
/// the device kind is unknown or this build has no CUDA backend.
std::unique_ptr<Backend> make_backend(const std::string& device, int index,
                                      int ranks_on_host = 1);

#ifndef TROUPE_HAVE_CUDA
/// CUDA devices visible to this process (0 without a CUDA build; the CUDA build declares it in
/// cuda/cuda_backend.hpp).
int cuda_device_count();
#endif

}  // namespace troupe
