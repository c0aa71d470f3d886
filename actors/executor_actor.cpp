#include "actors/executor_actor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <thread>
#include <utility>

#include "actors/wires.hpp"
#include "cpu/cpu_backend.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/model_runner.hpp"

#ifdef TROUPE_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace troupe {

namespace {

struct executor_state {
  // A start in a parallel group (prepare, connect, init, start): the placement, this rank's
  // ends of the wires, and once connected the backend (with its group) and the stage link.
  ExecutorPlacement placement;
  std::unique_ptr<PreparedWires> wires;
  std::unique_ptr<Backend> backend;
  std::optional<std::pair<std::shared_ptr<Collectives>, std::shared_ptr<StageLink>>> connected;
  std::unique_ptr<ModelRunner> runner;
  // The step whose sampling is in flight (ModelRunner::start_sampling) and its requester's
  // promise, delivered by the next execute (after enqueueing that step's forward) or by the
  // finish poll, whichever comes first.
  std::optional<std::pair<uint64_t, caf::typed_response_promise<StepResult>>> waiting;
  static inline const char* name = "troupe.executor";
};

using self_ptr = executor_actor::stateful_pointer<executor_state>;

// Delivers the step in flight's result, or its error (the batch is then reset, as after any
// failed step).
void finish_waiting(self_ptr self) {
  auto& st = self->state;
  if (!st.waiting) return;
  auto [step_id, rp] = std::move(*st.waiting);
  st.waiting.reset();
  try {
    rp.deliver(st.runner->finish());
  } catch (const std::exception& e) {
    spdlog::error("executor: step {} failed: {}", step_id, e.what());
    st.runner->reset_batch();
    rp.deliver(make_troupe_error(e.what()));
  }
}

// Pipelined steps (model_runner.hpp): step N+1's forward is enqueued before step N's tokens
// are read back, so the device runs N's sampling and N+1's forward back to back. The actor
// then polls N+1 with finish messages to itself: a poll that finds the step still running
// sends another, so an execute that arrives meanwhile (async scheduling keeps the next plan
// coming) is handled before the step's result is waited for.
caf::result<StepResult> execute_step(self_ptr self, const StepPlan& plan) {
  auto& st = self->state;
  auto rp = self->make_response_promise<StepResult>();
  if (st.waiting && st.runner->must_finish_before(plan)) finish_waiting(self);
  try {
    st.runner->launch(plan);
  } catch (const std::exception& e) {
    spdlog::error("executor: step {} failed: {}", plan.step_id, e.what());
    finish_waiting(self);
    st.runner->reset_batch();
    rp.deliver(make_troupe_error(e.what()));
    return rp;
  }
  if (st.waiting) {
    const uint64_t before = st.waiting->first;
    finish_waiting(self);
    if (!st.runner->launched()) {  // the step in flight failed: this one ran on its tokens
      rp.deliver(make_troupe_error(fmt::format(
          "step {} was not run: it was computed on the tokens of step {}, which failed",
          plan.step_id, before)));
      return rp;
    }
  }
  try {
    st.runner->start_sampling();
  } catch (const std::exception& e) {
    spdlog::error("executor: step {} failed: {}", plan.step_id, e.what());
    st.runner->reset_batch();
    rp.deliver(make_troupe_error(e.what()));
    return rp;
  }
  st.waiting.emplace(plan.step_id, rp);
  self->send(self, finish_atom::value, plan.step_id);
  return rp;
}

executor_actor::behavior_type executor_behavior(self_ptr self) {
  return {
      [=](prepare_atom, const ExecutorPlacement& placement) -> caf::result<ExecutorEndpoints> {
        auto& st = self->state;
        try {
          if (st.waiting) finish_waiting(self);
          st.runner.reset();  // a new start replaces the model and the wires
          st.connected.reset();
          st.wires = prepare_wires(placement);
          st.placement = placement;
          return st.wires->endpoints();
        } catch (const std::exception& e) {
          return make_troupe_error(e.what());
        }
      },
      [=](connect_atom, const WirePeers& peers) -> caf::result<bool> {
        auto& st = self->state;
        if (!st.wires) return make_troupe_error("executor: connect before prepare");
        try {
          // The backend is made here, on the executor's own thread, as the wires may live on
          // its device (NCCL on its stream).
          st.backend = make_backend(st.placement.device, st.placement.device_index,
                                    st.placement.ranks_on_host);
          st.connected = st.wires->connect(peers, *st.backend);
          st.backend->set_collectives(st.connected->first);
          return true;
        } catch (const std::exception& e) {
          st.backend.reset();
          st.connected.reset();
          return make_troupe_error(e.what());
        }
      },
      [=](init_atom, const ExecutorInit& init) -> caf::result<ExecutorInfo> {
        auto& st = self->state;
        try {
          if (st.waiting) finish_waiting(self);
          st.runner.reset();  // a re-init replaces the model
          std::unique_ptr<Backend> backend;
          std::shared_ptr<StageLink> link;
          RunnerOptions options;
          if (st.connected) {  // prepared and connected in a group: start() follows
            backend = std::move(st.backend);
            link = st.connected->second;
            options.defer_start = true;
          } else {
            backend = make_backend(init.device, init.device_index);
          }
          if (!backend)
            return make_troupe_error("executor: init after a failed start; prepare it again");
          st.runner = std::make_unique<ModelRunner>(std::move(backend), init, options, link);
          return st.runner->info();
        } catch (const std::exception& e) {
          return make_troupe_error(e.what());
        }
      },
      [=](start_atom) -> caf::result<ExecutorInfo> {
        auto& st = self->state;
        if (!st.runner) return make_troupe_error("executor: start before init");
        try {
          if (!st.runner->started()) st.runner->start();
          return st.runner->info();
        } catch (const std::exception& e) {
          return make_troupe_error(e.what());
        }
      },
      [=](execute_atom, const StepPlan& plan) -> caf::result<StepResult> {
        if (!self->state.runner) return make_troupe_error("executor: execute before init");
        return execute_step(self, plan);
      },
      [=](finish_atom, uint64_t step_id) {
        auto& st = self->state;
        if (!st.waiting || st.waiting->first != step_id) return;  // delivered already
        if (!st.runner->pending_done()) {
          self->send(self, finish_atom::value, step_id);
          return;
        }
        finish_waiting(self);
      },
  };
}

}  // namespace

executor_actor spawn_executor(caf::actor_system& sys) {
  return sys.spawn<caf::detached>(executor_behavior);
}

#ifndef TROUPE_HAVE_CUDA
int cuda_device_count() { return 0; }  // the CUDA build's is in cuda/cuda_backend.cpp
#endif

std::unique_ptr<Backend> make_backend(const std::string& device, int index, int ranks_on_host) {
  if (device == "cpu") {
    if (ranks_on_host <= 1) return make_cpu_backend();  // every core
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    return make_cpu_backend(std::max(1, cores / ranks_on_host));
  }
  if (device == "cuda") {
#ifdef TROUPE_HAVE_CUDA
    if (index < 0 || index >= cuda_device_count())
      fail("device = cuda:{}: this machine has {} CUDA device(s)", index, cuda_device_count());
    return make_cuda_backend(index);
#else
    (void)index;
    fail("device = cuda: this build of troupe has no CUDA backend (nvcc was not found at build "
         "time)");
#endif
  }
  fail("device = '{}': expected cpu or cuda", device);
}

}  // namespace troupe
