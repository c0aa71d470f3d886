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
#include <tuple>
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
  bool custom_all_reduce = true;          // with nccl on one host (--disable-custom-all-reduce)
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
  // A cluster file's spare workers for a rank that moves with its KV cache (migrate): how many
  // are left; the spare that takes rank r (its handle, name and host); and undoing that.
  std::function<size_t()> spares_left;
  std::function<std::tuple<caf::actor, std::string, std::string>(size_t)> take_spare;
  std::function<void(size_t)> give_back_spare;
};

/// What moving a rank to another worker did (ExecutorGroup::migrate).
struct MigrationReport {
  std::string from, to;  // the old executor's name and the new one's
  uint64_t blocks = 0, cpu_blocks = 0, bytes = 0;
  double seconds = 0;       // the whole move
  double copy_seconds = 0;  // of which copying the KV blocks
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
  /// Moves rank `rank` to a fresh worker with its KV cache (a drained worker: no sequence is
  /// recomputed): a new worker process of this group's own (or a cluster file's spare) joins,
  /// the other ranks rejoin their wires around it without reloading, it loads the rank's
  /// shard, copies `blocks` of the old executor's KV cache and `cpu_blocks` of its swap space
  /// (same ids) over UCX, and the old executor and its worker are let go. The caller has no
  /// step in flight. Throws troupe::Error naming the rank and why it cannot move (an
  /// in-process executor, workers troupe did not start, the CUDA backend: not supported yet);
  /// after a failure part-way the ranks' wires may be half-joined, so the caller restarts the
  /// group (restart()). Blocks, as restart() does.
  MigrationReport migrate(size_t rank, const std::vector<int32_t>& blocks,
                          const std::vector<int32_t>& cpu_blocks);
  /// Why rank `rank` cannot move (nothing has been touched), or nothing when it can try.
  [[nodiscard]] std::optional<std::string> migration_refusal(size_t rank);
  /// Where a worker asking to leave (`troupe worker` on SIGTERM, through the group's anchor)
  /// is sent: the engine actor, asked (drain_atom, its rank); the worker hears its answer.
  void on_drain_request(caf::actor engine);

 private:
  void find_workers();   // the workers of every rank (none: one in-process executor)
  void start_ranks();    // joins them and starts an executor per rank
  void stop_executors();
  /// The placement of every rank on `hosts` (one per rank).
  [[nodiscard]] std::vector<ExecutorPlacement> placements(const std::vector<std::string>& hosts) const;
  /// Rank r's init (its shard, device, faults).
  [[nodiscard]] ExecutorInit init_of(int32_t r, const ExecutorPlacement& p) const;
  /// The peers each rank joins, from every rank's endpoints.
  [[nodiscard]] std::vector<WirePeers> peers_of(const std::vector<ExecutorEndpoints>& ends) const;
  // The anchor's view of the workers, to name the rank of one that asks to leave.
  struct DrainTable {
    std::mutex mu;
    std::vector<caf::actor_addr> workers;
    std::vector<std::string> names;
    caf::actor engine;
  };
  void publish_drain_table();
  [[nodiscard]] std::optional<std::string> refusal(size_t rank) const;

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
  std::vector<std::string> hosts_;  // the host each rank runs on
  std::shared_ptr<DrainTable> drain_ = std::make_shared<DrainTable>();
  LocalWorkers local_;
  bool down_ = false;
};

}  // namespace troupe
