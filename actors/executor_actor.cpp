#include "actors/executor_actor.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "actors/kv_store_actor.hpp"
#include "actors/wires.hpp"
#include "cpu/cpu_backend.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/model_runner.hpp"
#include "runtime/faults/fault_spec.hpp"
#include "transport/kv/kv_region.hpp"
#include "transport/kv/kv_remote.hpp"

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
  // A rank moving (ExecutorGroup::migrate): the wires a rewire prepared, joined by the next
  // connect in place of the current ones; and, on the rank that leaves, its KV cache (and
  // swap space) exposed to the executor taking its place.
  std::unique_ptr<PreparedWires> next_wires;
  ExecutorPlacement next_placement;
  std::vector<std::unique_ptr<KvRegion>> exported;
  // The step whose sampling is in flight (ModelRunner::start_sampling) and its requester's
  // promise, delivered by the next execute (after enqueueing that step's forward) or by the
  // finish poll, whichever comes first.
  std::optional<std::pair<uint64_t, caf::typed_response_promise<StepResult>>> waiting;
  // Injected faults (runtime/faults/fault_spec.hpp): this rank's, from its init.
  struct Faults {
    std::vector<FaultSpec> specs;
    bool in_worker_process = false;
    bool unanswering = false;  // frozen in-process, or a plan was dropped: nothing is answered
    std::vector<caf::typed_response_promise<StepResult>> unanswered;  // kept, never delivered
    std::set<uint64_t> drop_result;
    std::map<uint64_t, int32_t> delay_result;  // step -> ms
  } faults;
  static inline const char* name = "troupe.executor";
};

using self_ptr = executor_actor::stateful_pointer<executor_state>;

// Delivers a step's result, unless an injected fault holds it back, delays it or slows the step.
void deliver_result(self_ptr self, uint64_t step_id, caf::typed_response_promise<StepResult>& rp,
                    StepResult result) {
  auto& f = self->state.faults;
  for (const FaultSpec& spec : f.specs)
    if (spec.kind == FaultKind::slow && step_id >= spec.step)
      std::this_thread::sleep_for(std::chrono::duration<double>(
          (spec.factor - 1.0) * std::max(result.execute_seconds, 1e-4)));
  if (f.drop_result.erase(step_id) > 0) {
    f.unanswered.push_back(rp);
    return;
  }
  if (auto it = f.delay_result.find(step_id); it != f.delay_result.end()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(it->second));
    f.delay_result.erase(it);
  }
  rp.deliver(std::move(result));
}

// Delivers the step in flight's result, or its error (the batch is then reset, as after any
// failed step).
void finish_waiting(self_ptr self) {
  auto& st = self->state;
  if (!st.waiting) return;
  auto [step_id, rp] = std::move(*st.waiting);
  st.waiting.reset();
  try {
    deliver_result(self, step_id, rp, st.runner->finish());
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

// The injection points of the faults that act on an executor (fault_spec.hpp), run as a
// step's plan arrives. Returns the answer to give instead of running it (an error, or a
// promise that is never kept), or nothing to run it.
std::optional<caf::result<StepResult>> inject_faults(self_ptr self, const StepPlan& plan) {
  auto& st = self->state;
  auto& f = st.faults;
  auto hold = [&]() -> caf::result<StepResult> {
    auto rp = self->make_response_promise<StepResult>();
    f.unanswered.push_back(rp);
    return rp;
  };
  if (f.unanswering) return hold();
  for (const FaultSpec& spec : f.specs) {
    if (spec.step != plan.step_id) continue;
    spdlog::warn("executor: injected fault '{}' at step {}", spec.text, plan.step_id);
    switch (spec.kind) {
      case FaultKind::kill_worker:
        spdlog::default_logger()->flush();
        ::kill(::getpid(), SIGKILL);
        break;
      case FaultKind::kill_executor: {
        const std::string why = fmt::format("injected fault '{}' at step {}", spec.text,
                                            plan.step_id);
        self->quit(make_troupe_error(why));
        return caf::result<StepResult>(make_troupe_error(why));
      }
      case FaultKind::freeze:
        if (f.in_worker_process) {
          spdlog::default_logger()->flush();
          ::raise(SIGSTOP);  // the whole process stops until SIGCONT (or SIGKILL)
          break;
        }
        f.unanswering = true;
        return hold();
      case FaultKind::drop:
        if (spec.message == FaultMessage::result) {
          f.drop_result.insert(plan.step_id);
          break;
        }
        // A plan lost on the way leaves this rank out of step with the others: it answers
        // nothing any more, as a rank whose connection broke.
        f.unanswering = true;
        return hold();
      case FaultKind::delay:
        if (spec.message == FaultMessage::result)
          f.delay_result[plan.step_id] = spec.ms;
        else
          std::this_thread::sleep_for(std::chrono::milliseconds(spec.ms));
        break;
      case FaultKind::ucx_fail:
        if (!st.connected || !st.connected->second)
          return caf::result<StepResult>(make_troupe_error(fmt::format(
              "injected fault '{}': this rank has no stage link to break", spec.text)));
        try {
          st.connected->second->inject_send_failure(plan.step_id);
        } catch (const std::exception& e) {
          return caf::result<StepResult>(make_troupe_error(e.what()));
        }
        break;
      case FaultKind::slow:       // deliver_result
      case FaultKind::refuse_kv:  // the cache manager's
      case FaultKind::drain:      // the scheduler's
        break;
    }
  }
  return std::nullopt;
}

// The UCX settings of this executor's KV moves: its group's transports where it has a group.
ucx::Settings kv_wire(const executor_state& st) {
  ucx::Settings wire;
  if (st.connected) {
    wire.tls = st.placement.ucx_tls;
    wire.net_devices = st.placement.ucx_net_devices;
    wire.timeout = std::chrono::milliseconds(st.placement.timeout_ms);
  }
  return wire;
}

KvLayout kv_layout_of(const ModelRunner::KvMemory& m) {
  return KvLayout::per_layer(uint32_t(m.num_layers), uint64_t(m.num_blocks),
                             uint64_t(m.slice_bytes));
}

// Exposes this rank's KV cache and local swap space for the executor taking its place.
KvExport export_kv(executor_state& st) {
  if (!st.runner) fail("executor: kv_export before init");
  if (st.waiting) fail("executor: kv_export with step {} in flight", st.waiting->first);
  st.exported.clear();
  const auto t0 = std::chrono::steady_clock::now();
  KvExport out;
  const ucx::Settings wire = kv_wire(st);
  const ModelRunner::KvMemory cache = st.runner->kv_memory(false);
  st.exported.push_back(std::make_unique<KvRegion>(cache.base, kv_layout_of(cache), wire));
  out.cache = st.exported.back()->descriptor();
  const ModelRunner::KvMemory swap = st.runner->kv_memory(true);
  if (swap.base != nullptr) {
    st.exported.push_back(std::make_unique<KvRegion>(swap.base, kv_layout_of(swap), wire));
    out.swap = st.exported.back()->descriptor();
  }
  spdlog::info("executor: its KV cache ({:.1f} MiB{}) is exposed for the executor taking its "
               "place ({:.1f} ms)",
               double(kv_layout_of(cache).span_bytes()) / double(1 << 20),
               swap.base ? " and a swap space" : "",
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                   .count());
  return out;
}

// Copies the listed blocks (same ids) of the leaving rank's KV cache and swap space into this
// executor's; returns the bytes copied.
uint64_t import_kv(executor_state& st, const KvImport& in) {
  if (!st.runner || !st.runner->started()) fail("executor: kv_import before start");
  if (st.waiting) fail("executor: kv_import with step {} in flight", st.waiting->first);
  KvSettings kv;
  kv.ucx = kv_wire(st);
  uint64_t bytes = 0;
  auto copy = [&](const std::vector<uint8_t>& from, bool swap, const std::vector<int32_t>& ids) {
    if (ids.empty()) return;
    const char* what = swap ? "swap space" : "KV cache";
    const ModelRunner::KvMemory here = st.runner->kv_memory(swap);
    if (here.base == nullptr || from.empty())
      fail("executor: {} swapped-out KV block(s) to take over, but {} no local swap space (a "
           "memory node's swap space cannot move yet)",
           ids.size(), from.empty() ? "the leaving rank has" : "this executor has");
    const KvLayout layout = kv_layout_of(here);
    const auto c0 = std::chrono::steady_clock::now();
    KvRemote remote(from, here.base, layout, kv);
    spdlog::info("executor: reached the leaving rank's {} ({}) in {:.1f} ms", what,
                 remote.method(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0)
                     .count());
    constexpr size_t kChunk = 256;  // blocks per read: bounds what is in flight at once
    std::vector<KvBlockMove> moves;
    for (size_t i = 0; i < ids.size(); i += kChunk) {
      moves.clear();
      for (size_t k = i; k < std::min(ids.size(), i + kChunk); ++k) {
        const int32_t b = ids[k];
        if (b < 0 || b >= here.num_blocks)
          fail("executor: {} block {} to take over is outside its {} blocks", what, b,
               here.num_blocks);
        moves.push_back(KvBlockMove{uint64_t(b), uint64_t(b)});
      }
      remote.read(moves);
    }
    bytes += uint64_t(ids.size()) * layout.block_bytes();
  };
  const auto t1 = std::chrono::steady_clock::now();
  copy(in.from.cache, false, in.blocks);
  copy(in.from.swap, true, in.cpu_blocks);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  spdlog::info("executor: took over {} KV block(s) and {} swap block(s), {:.1f} MiB, in {:.1f} "
               "ms ({:.0f} MiB/s)",
               in.blocks.size(), in.cpu_blocks.size(), double(bytes) / double(1 << 20), ms,
               ms > 0 ? double(bytes) / double(1 << 20) / (ms / 1000.0) : 0.0);
  return bytes;
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
        if (st.next_wires) {  // rejoining its group around a rank that moved (rewire)
          try {
            auto wires = std::move(st.next_wires);
            auto joined = wires->connect(peers, st.runner->backend());
            st.runner->replace_wires(joined.first, joined.second);
            st.wires = std::move(wires);
            st.connected = std::move(joined);
            st.placement = st.next_placement;
            return true;
          } catch (const std::exception& e) {
            return make_troupe_error(e.what());
          }
        }
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
          if (!init.swap_space_remote.empty()) {
            // The memory node's region lives as long as the runner's swap space.
            ucx::Settings wire;
            if (st.connected) {
              wire.tls = st.placement.ucx_tls;
              wire.net_devices = st.placement.ucx_net_devices;
            }
            options.remote_swap =
                remote_swap_connector(self->system(), init.swap_space_remote, wire);
          }
          st.runner = std::make_unique<ModelRunner>(std::move(backend), init, options, link);
          st.faults = {};
          st.faults.specs = parse_fault_specs(init.faults);
          st.faults.in_worker_process = init.in_worker_process;
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
        if (auto held = inject_faults(self, plan)) return *held;
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
      [=](rewire_atom, const ExecutorPlacement& placement) -> caf::result<ExecutorEndpoints> {
        auto& st = self->state;
        try {
          if (!st.runner || !st.runner->started())
            fail("executor: rewire before start (a rank that has not started rejoins by prepare)");
          if (st.waiting) fail("executor: rewire with step {} in flight", st.waiting->first);
          if (placement.tp_rank != st.placement.tp_rank || placement.pp_rank != st.placement.pp_rank)
            fail("executor: rewire to tp {} pp {}: it is tp {} pp {}", placement.tp_rank,
                 placement.pp_rank, st.placement.tp_rank, st.placement.pp_rank);
          st.next_wires = prepare_wires(placement);
          st.next_placement = placement;
          return st.next_wires->endpoints();
        } catch (const std::exception& e) {
          st.next_wires.reset();
          return make_troupe_error(e.what());
        }
      },
      [=](kv_export_atom) -> caf::result<KvExport> {
        try {
          return export_kv(self->state);
        } catch (const std::exception& e) {
          return make_troupe_error(e.what());
        }
      },
      [=](kv_import_atom, const KvImport& in) -> caf::result<uint64_t> {
        try {
          return import_kv(self->state, in);
        } catch (const std::exception& e) {
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
