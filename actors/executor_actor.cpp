#include "actors/executor_actor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <optional>
#include <utility>

#include "cpu/cpu_backend.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/model_runner.hpp"

#ifdef TROUPE_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace troupe {

namespace {

struct executor_state {
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
      [=](init_atom, const ExecutorInit& init) -> caf::result<ExecutorInfo> {
        try {
          if (self->state.waiting) finish_waiting(self);
          self->state.runner.reset();  // a re-init replaces the model
          self->state.runner =
              std::make_unique<ModelRunner>(make_backend(init.device, init.device_index), init);
          return self->state.runner->info();
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

std::unique_ptr<Backend> make_backend(const std::string& device, int index) {
  if (device == "cpu") return make_cpu_backend();
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
