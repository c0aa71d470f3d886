// troupe worker: a process that lends its executor to engines in other processes, run after
// run. It publishes a worker actor (actors/worker_actor.hpp) on --host:--port and prints
// "troupe worker listening on HOST:PORT" once ready; each engine that joins gets a fresh
// executor for its session, and a busy worker refuses a second engine with the name of the
// one it serves. It runs until SIGTERM / SIGINT, or until --parent-pid exits (the engine that
// started it). A SIGTERM while it serves an engine first asks that engine to move its rank, with
// its KV cache, to another worker (at most --drain-timeout seconds; docs/faults.md).
//
// With --kv-store GIB it is a memory node instead: it publishes a kv_store actor
// (actors/kv_store_actor.hpp) that holds engines' swap spaces (--swap-space-remote) in up to
// GIB of its host memory, and runs no executor.
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <signal.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "actors/executor_actor.hpp"
#include "actors/kv_store_actor.hpp"
#include "actors/messages.hpp"
#include "actors/worker_actor.hpp"
#include "runtime/error.hpp"
#include "tools/commands.hpp"

namespace troupe::cli {
namespace {

std::atomic<int> stop_signal{0};
// The first SIGTERM / SIGINT stops the wait below; a second one (while a drain waits, say)
// ends the process at once.
extern "C" void on_stop_signal(int sig) {
  if (stop_signal.exchange(sig) != 0) _exit(128 + sig);
}

// An executor whose process exits, with no reply, on the engine's init request
// (--fault exit-on-init): a worker killed while it loads its model (the OOM killer, a crash).
executor_actor spawn_faulty_executor(caf::actor_system& sys) {
  return sys.spawn<caf::detached>([]() -> executor_actor::behavior_type {
    return {
        [](prepare_atom, const ExecutorPlacement&) -> caf::result<ExecutorEndpoints> {
          ExecutorEndpoints e;
          e.pid = int32_t(getpid());
          return e;
        },
        [](connect_atom, const WirePeers&) -> caf::result<bool> { return true; },
        [](init_atom, const ExecutorInit&) -> caf::result<ExecutorInfo> {
          std::cout.flush();
          std::_Exit(3);
        },
        [](start_atom) -> caf::result<ExecutorInfo> {
          return make_troupe_error("worker: --fault: no start");
        },
        [](execute_atom, const StepPlan&) -> caf::result<StepResult> {
          return make_troupe_error("worker: --fault: no steps");
        },
        [](finish_atom, uint64_t) {},
        [](rewire_atom, const ExecutorPlacement&) -> caf::result<ExecutorEndpoints> {
          return make_troupe_error("worker: --fault: no rewire");
        },
        [](kv_export_atom) -> caf::result<KvExport> {
          return make_troupe_error("worker: --fault: no KV cache");
        },
        [](kv_import_atom, const KvImport&) -> caf::result<uint64_t> {
          return make_troupe_error("worker: --fault: no KV cache");
        },
    };
  });
}

// Dials the head's registry (retrying while it starts, at most 30 s) and registers this worker.
caf::actor join_head(caf::actor_system& sys, const std::string& head, const WorkerHello& hello,
                     const caf::actor& worker) {
  const auto colon = head.rfind(':');
  int port = -1;
  try {
    if (colon != std::string::npos) port = std::stoi(head.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (colon == std::string::npos || colon == 0 || port <= 0 || port > 65535)
    fail("worker: --head '{}' is not host:port (port 1..65535)", head);
  std::string host = head.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  caf::error last;
  for (int attempt = 0; attempt < 300; ++attempt) {
    auto registry = sys.middleman().remote_actor(host, uint16_t(port));
    if (registry) {
      caf::anon_send(*registry, register_atom::value, hello, worker);
      spdlog::info("worker: joined the head at {} as rank {}", head, hello.rank);
      return *registry;
    }
    last = registry.error();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  fail("worker: cannot reach the head at {}: {}", head, error_text(last));
}

}  // namespace

Runner add_worker_command(CLI::App& app) {
  struct Options {
    std::string host = "127.0.0.1";
    uint16_t port = 0;
    int heartbeat_ms = 500;
    int heartbeat_timeout_ms = 5000;
    int parent_pid = 0;
    std::string head;  // host:port of a head's registry to join (troupe launch)
    int rank = -1;
    std::string node;
    std::string fault;
    double kv_store_gib = 0;  // > 0: a memory node of this many GiB
    double drain_timeout_s = 60;
  };
  auto o = std::make_shared<Options>();
  app.add_option("--host", o->host, "address to listen on")->capture_default_str();
  app.add_option("--port", o->port, "port to listen on (0: any free port)")->capture_default_str();
  app.add_option("--heartbeat-ms", o->heartbeat_ms,
                 "middleman heartbeat interval, so that a frozen peer is noticed (0: off)")
      ->capture_default_str();
  app.add_option("--heartbeat-timeout-ms", o->heartbeat_timeout_ms,
                 "a connection silent this long is dropped (its engine's session ends)")
      ->capture_default_str();
  app.add_option("--parent-pid", o->parent_pid,
                 "exit when this process does (set by an engine that starts its own workers)");
  app.add_option("--head", o->head,
                 "host:port of the head to join (set by `troupe launch`); the worker then serves "
                 "that head's engine and exits with it");
  app.add_option("--drain-timeout", o->drain_timeout_s,
                 "on SIGTERM while serving an engine, wait at most this many seconds for the "
                 "engine to move this worker's rank, with its KV cache, to another worker "
                 "before exiting (0: exit at once; SIGINT always exits at once)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--rank", o->rank, "this worker's rank in the cluster (with --head)");
  app.add_option("--node", o->node, "the cluster file's name of this worker's node (with --head)");
  // Fault injection for the engine's tests: the process dies as a worker that is killed
  // while it loads its model would (the OOM killer, a crash), without answering.
  app.add_option("--fault", o->fault, "fault injection for tests: exit-on-init")
      ->check(CLI::IsMember({"exit-on-init"}));
  app.add_option("--kv-store", o->kv_store_gib,
                 "be a memory node: hold engines' swap spaces (--swap-space-remote) in up to this "
                 "many GiB of host memory, and run no executor")
      ->check(CLI::Range(0.0, 65536.0));
  return [o]() -> int {
    if (o->kv_store_gib > 0 && (!o->head.empty() || !o->fault.empty()))
      fail(
          "worker: --kv-store {} with --{}: a memory node joins no head and injects no faults; "
          "allowed: --kv-store with --host, --port, --parent-pid and the heartbeat options",
          o->kv_store_gib, o->head.empty() ? "fault" : "head");
    std::signal(SIGTERM, on_stop_signal);
    std::signal(SIGINT, on_stop_signal);
    caf::actor_system_config cfg;
    register_message_types(cfg);
    set_heartbeat(cfg, std::chrono::milliseconds(o->heartbeat_ms),
                  std::chrono::milliseconds(o->heartbeat_timeout_ms));
    // A worker on a host without a GPU computes on its cores (or, a memory node, serves
    // copies): CAF's workers there sleep instead of polling, as in a CPU engine's process.
    // On a GPU host the worker keeps CAF's defaults, as before.
    if (cuda_device_count() == 0) set_scheduler(cfg, true);
    caf::actor_system sys{cfg};
    const bool memory_node = o->kv_store_gib > 0;
    const std::string self_name = fmt::format(
        "the {} pid {} on {}", memory_node ? "memory node" : "worker", getpid(), o->host);
    // Published typed, so that remote_actor<worker_actor / kv_store_actor> accepts it.
    caf::actor worker;
    caf::expected<uint16_t> port = caf::make_error(caf::sec::invalid_argument);
    if (memory_node) {
      const auto bytes = uint64_t(o->kv_store_gib * double(uint64_t(1) << 30));
      auto store = spawn_kv_store(sys, bytes, ucx::Settings{}, self_name);
      worker = caf::actor_cast<caf::actor>(store);
      port = sys.middleman().publish(store, o->port, o->host.c_str(), true);
      spdlog::info("worker: a memory node of {} GiB", o->kv_store_gib);
    } else {
      auto w = spawn_worker(sys, self_name,
                            o->fault.empty() ? ExecutorFactory(spawn_executor)
                                             : ExecutorFactory(spawn_faulty_executor));
      worker = caf::actor_cast<caf::actor>(w);
      port = sys.middleman().publish(w, o->port, o->host.c_str(), true);
    }
    if (!port) {
      caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
      fail("worker: cannot listen on {}:{}: {}", o->host, o->port, error_text(port.error()));
    }
    std::cout << "troupe worker listening on " << o->host << ":" << *port << std::endl;
    // Launched by a head (troupe launch): join it, and leave with it.
    caf::actor head_registry;
    caf::scoped_actor self{sys};
    if (!o->head.empty()) {
      head_registry = join_head(
          sys, o->head,
          WorkerHello{o->rank, o->node, fmt::format("{}:{}", o->host, *port), int32_t(getpid())},
          worker);
      self->monitor(head_registry);
    }
    // Wait for a stop signal, the parent's end or the head's; sessions come and go meanwhile.
    bool head_gone = false;
    while (stop_signal.load() == 0 && !head_gone) {
      if (o->parent_pid > 0 && (getppid() != o->parent_pid && kill(o->parent_pid, 0) != 0)) {
        spdlog::info("worker: the process that started it ({}) is gone; exiting", o->parent_pid);
        break;
      }
      self->receive([&](const caf::down_msg&) { head_gone = true; },
                    caf::after(std::chrono::milliseconds(100)) >> [] {});
      if (head_gone) spdlog::info("worker: its head {} went away; exiting", o->head);
    }
    // SIGTERM while serving an engine: ask it to move this worker's rank elsewhere (with its KV
    // cache) and wait, bounded, until the session ends; then leave as on any stop.
    if (stop_signal.load() == SIGTERM && !memory_node && o->drain_timeout_s > 0) {
      const auto bound = std::chrono::milliseconds(int64_t(o->drain_timeout_s * 1000));
      self->request(caf::actor_cast<worker_actor>(worker), bound, drain_atom::value)
          .receive(
              [&](std::string& refusal) {
                if (!refusal.empty())
                  spdlog::warn("worker: leaving without a move: {}", refusal);
              },
              [&](caf::error& e) {
                spdlog::warn("worker: the engine did not move its rank within --drain-timeout "
                             "{} s ({}); leaving anyway",
                             o->drain_timeout_s, error_text(e));
              });
    }
    spdlog::info("worker: stopping");
    sys.middleman().unpublish(worker, *port);
    self->monitor(worker);
    caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
    bool stopped = false;
    self->receive([&](const caf::down_msg&) { stopped = true; },
                  caf::after(std::chrono::seconds(5)) >> [] {});
    if (!stopped) spdlog::warn("worker: its actors did not stop within 5 s; exiting anyway");
    // Ends here rather than in ~actor_system: CAF 0.17's destructor waits without a bound for
    // every detached actor (the session's executor) to be destroyed, and after the head
    // vanished the middleman may still hold the last reference to it (seen with `troupe
    // launch`: one worker of two hung there after its session ended). The OS frees what the
    // executor held (memory, the CUDA context).
    spdlog::default_logger()->flush();
    std::cout.flush();
    std::_Exit(0);
  };
}

}  // namespace troupe::cli
