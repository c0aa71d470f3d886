#include "actors/executor.hpp"

#include <spdlog/spdlog.h>

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
  static inline const char* name = "troupe.executor";
};

executor_actor::behavior_type executor_behavior(
    executor_actor::stateful_pointer<executor_state> self) {
  return {
      [=](init_atom, const ExecutorInit& init) -> caf::result<ExecutorInfo> {
        try {
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
        try {
          return self->state.runner->execute(plan);
        } catch (const std::exception& e) {
          spdlog::error("executor: step {} failed: {}", plan.step_id, e.what());
          self->state.runner->reset_batch();
          return make_troupe_error(e.what());
        }
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
