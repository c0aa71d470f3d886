// The executors of one engine, as the head sees them: where each runs, its rank in the
// tensor x pipeline layout, and their start (prepare, connect, init, start; see
// executor_actor.hpp). Ranks are numbered vLLM's way, TP innermost: rank = pp_rank * tp +
// tp_rank. The last stage's TP rank 0 is the driver, whose StepResults the scheduler applies.
//
// Where executors come from:
// - one rank and no endpoints: an executor actor in this process;
// - executor_endpoints: `troupe worker` processes already listening, joined over CAF;
// - several ranks and no endpoints: `troupe worker` processes this engine starts on its own
//   machine (LocalWorkers) and stops with it;
// - workers that dialled in (troupe launch): their handles, given by the launcher.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "actors/executor_actor.hpp"
#include "actors/local_workers.hpp"
#include "actors/worker_actor.hpp"
#include "runtime/faults/fault_spec.hpp"

namespace troupe {

/// "host:port" -> (host, port); throws troupe::Error naming `field` and the value otherwise.
std::pair<std::string, uint16_t> parse_endpoint(const std::string& ep, std::string_view field);

struct ExecutorGroupSpec {
  int32_t tp = 1, pp = 1;
  std::string device = "cpu";             // cpu | cuda
  std::vector<std::string> endpoints;     // host:port per rank, or empty
  std::vector<caf::actor> joined_workers;  // worker_actor handles per rank (troupe launch)
  std::vector<std::string> joined_names;  // how each joined worker is named in errors
  std::vector<std::string> joined_hosts;  // the host each joined worker runs on
  size_t max_parallel_loading = 0;        // ranks loading weights at once; 0: all
  std::string collectives = "auto";       // auto | shm | ucx | nccl
  std::string ucx_tls = "auto";
  std::string ucx_net_devices;  // the cluster file's [transport] net_device
  int32_t timeout_ms = 30000;             // collectives' and hand-offs' bound
  std::chrono::milliseconds worker_start_timeout{30000};
  std::vector<std::string> worker_args;   // extra `troupe worker` arguments (local workers)
  std::vector<FaultSpec> faults;          // injected faults; each rank gets its own
  // Joined workers' launcher (a cluster file): starts rank r's worker again, returning its
  // handle and name; and whether rank r's launched process still runs.
  std::function<std::pair<caf::actor, std::string>(size_t)> restart_joined;
  std::function<bool(size_t)> joined_alive;
};

class ExecutorGroup {
 public:
  /// Finds or starts the executors and starts them on `init` (its ranks filled in per
  /// executor). Throws troupe::Error naming the executor (and its worker's address) that
  /// failed, after stopping whatever it started.
  ExecutorGroup(caf::actor_system& sys, const ExecutorGroupSpec& spec, const ExecutorInit& init);
  ~ExecutorGroup();
  ExecutorGroup(const ExecutorGroup&) = delete;
  ExecutorGroup& operator=(const ExecutorGroup&) = delete;

  [[nodiscard]] const std::vector<executor_actor>& executors() const { return executors_; }
  /// "executor 1 (tp 1, pp 0; the worker at 127.0.0.1:40001)", per executor.
  [[nodiscard]] const std::vector<std::string>& names() const { return names_; }
  [[nodiscard]] size_t driver() const { return size_t((pp_ - 1) * tp_); }
  [[nodiscard]] const std::vector<ExecutorInfo>& infos() const { return infos_; }
  /// True when the one executor runs in this process (C++ logits processors can reach it).
  [[nodiscard]] bool in_process() const { return workers_.empty(); }
  /// The smallest KV cache (and swap space) every rank holds.
  [[nodiscard]] int32_t num_blocks() const;
  [[nodiscard]] int32_t num_cpu_blocks() const;
  /// One line per rank: node, rank, device, stage (printed before the first step).
  [[nodiscard]] std::string topology() const;
  /// Stops the executors, leaves the workers and stops the local worker processes.
  void shutdown();
  /// Replaces the executors after rank `lost` was lost (fault recovery): every executor is
  /// stopped and every worker's session ended; when `process_lost` (its process died or froze)
  /// the lost rank's worker is started again if this group started it (killed first if it
  /// still runs), or reached again at its endpoint; local workers found dead are started
  /// again too. Then every rank starts afresh (prepare, connect, init, start) on the same
  /// layout. Throws troupe::Error naming the rank that cannot be replaced. Blocks (run it on a
  /// detached actor); shutdown() waits for it.
  void restart(size_t lost, bool process_lost);

 private:
  void find_workers();   // the workers of every rank (none: one in-process executor)
  void start_ranks();    // joins them and starts an executor per rank
  void stop_executors();

  caf::actor_system* sys_ = nullptr;
  ExecutorGroupSpec spec_;
  ExecutorInit init_;
  std::vector<std::string> endpoint_list_;  // host:port per rank, when workers listen
  std::mutex mu_;  // restart() against shutdown()
  int32_t tp_ = 1, pp_ = 1;
  caf::actor anchor_;  // the workers' sessions end when it does
  std::vector<caf::actor> workers_;  // per rank, when remote
  std::vector<executor_actor> executors_;
  std::vector<std::string> names_;
  std::vector<std::string> where_;  // "in this process", "127.0.0.1:40001"
  std::vector<ExecutorEndpoints> endpoints_;
  std::vector<ExecutorInfo> infos_;
  std::vector<std::string> devices_;
  LocalWorkers local_;
  bool down_ = false;
};

}  // namespace troupe
