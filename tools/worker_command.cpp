// troupe worker: a process that serves one executor actor over CAF's middleman, for an
// engine in another process (EngineArgs.executor_endpoints = ["host:port"]). It prints
// "troupe worker listening on HOST:PORT" once ready and exits when its executor is shut down.
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>

#include "actors/executor_actor.hpp"
#include "actors/messages.hpp"
#include "runtime/error.hpp"
#include "tools/commands.hpp"

namespace troupe::cli {
namespace {

// An executor whose process exits, with no reply, on the engine's init request
// (--fault exit-on-init).
executor_actor spawn_faulty_executor(caf::actor_system& sys) {
  return sys.spawn<caf::detached>([]() -> executor_actor::behavior_type {
    return {
        [](init_atom, const ExecutorInit&) -> caf::result<ExecutorInfo> {
          std::cout.flush();
          std::_Exit(3);
        },
        [](execute_atom, const StepPlan&) -> caf::result<StepResult> {
          return make_troupe_error("worker: --fault: no steps");
        },
        [](finish_atom, uint64_t) {},
    };
  });
}

}  // namespace

Runner add_worker_command(CLI::App& app) {
  struct Options {
    std::string host = "127.0.0.1";
    uint16_t port = 0;
    int heartbeat_ms = 500;
    std::string fault;
  };
  auto o = std::make_shared<Options>();
  app.add_option("--host", o->host, "address to listen on")->capture_default_str();
  app.add_option("--port", o->port, "port to listen on (0: any free port)")->capture_default_str();
  app.add_option("--heartbeat-ms", o->heartbeat_ms,
                 "middleman heartbeat interval, so a frozen peer is noticed (0: off)")
      ->capture_default_str();
  // Fault injection for the engine's tests: the process dies as a worker that is killed
  // while it loads its model would (the OOM killer, a crash), without answering.
  app.add_option("--fault", o->fault, "fault injection for tests: exit-on-init")
      ->check(CLI::IsMember({"exit-on-init"}));
  return [o] {
    caf::actor_system_config cfg;
    register_message_types(cfg);
    if (o->heartbeat_ms > 0)
      cfg.set("middleman.heartbeat-interval",
              caf::timespan{std::chrono::milliseconds(o->heartbeat_ms)});
    caf::actor_system sys{cfg};
    auto exec = o->fault.empty() ? spawn_executor(sys) : spawn_faulty_executor(sys);
    auto port = sys.middleman().publish(exec, o->port, o->host.c_str(), true);
    if (!port) {
      caf::anon_send_exit(exec, caf::exit_reason::user_shutdown);
      fail("worker: cannot listen on {}:{}: {}", o->host, o->port, error_text(port.error()));
    }
    std::cout << "troupe worker listening on " << o->host << ":" << *port << std::endl;
    {
      caf::scoped_actor self{sys};
      self->monitor(exec);
      self->receive([](const caf::down_msg&) {});
    }
    spdlog::info("worker: executor stopped; exiting");
    sys.middleman().unpublish(exec, *port);
    return 0;
  };
}

}  // namespace troupe::cli
