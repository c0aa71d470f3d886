// The head's side of `troupe launch CLUSTER.toml -- generate ...` (and of vLLM's --nnodes
// flags): publish a registry on the cluster file's head address, start every worker the file
// names the way its node says (a local process, an ssh or srun command line, a template of the
// operator's; "external" nodes start their own), and wait until each has joined, so that the
// engine can start its executor group on them. The workers dial the head (`troupe worker
// --head ADDR:PORT --rank R`), so nodes behind NAT or in network namespaces need only reach
// the head.
#pragma once

#include <caf/all.hpp>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "runtime/config/cluster_config.hpp"
#include "runtime/config/engine_args.hpp"

namespace troupe {

/// The cluster `args` describe: its cluster file, or vLLM's multi-node flags (nnodes > 1), or
/// none. Throws the cluster file's errors.
std::optional<ClusterConfig> cluster_of(const EngineArgs& args);

/// A --headless node of vLLM's multi-node flags: starts this node's workers, which join the
/// head at master_addr:master_port, and waits until they exit (the head's run is over) or a
/// stop signal. Returns the exit status for the command.
int run_headless_node(const EngineArgs& args);

class ClusterLaunch {
 public:
  /// Publishes the registry, starts the workers and waits (config.join_timeout_ms) for all of
  /// them. Throws troupe::Error naming every rank that did not join (its node, host and launch
  /// command, and how its launcher exited) after stopping what it started.
  ClusterLaunch(caf::actor_system& sys, ClusterConfig config);
  ~ClusterLaunch();
  ClusterLaunch(const ClusterLaunch&) = delete;
  ClusterLaunch& operator=(const ClusterLaunch&) = delete;

  /// The workers' handles (worker_actor) and names, in rank order.
  [[nodiscard]] const std::vector<caf::actor>& workers() const { return workers_; }
  [[nodiscard]] const std::vector<std::string>& names() const { return names_; }
  /// The host each rank's worker registered from (its address without the port).
  [[nodiscard]] const std::vector<std::string>& hosts() const { return hosts_; }
  [[nodiscard]] const ClusterConfig& config() const { return config_; }
  /// Whether every node is this machine (shared memory can join the ranks).
  [[nodiscard]] bool one_host() const;
  /// Stops the launched processes (SIGTERM, then SIGKILL after `grace`).
  void stop(int grace_ms = 2000);
  /// Replaces rank `rank`'s worker (fault recovery): its old process group is killed (a
  /// frozen one too); a spare node's idle worker takes its place if one is left, else its
  /// launch command runs again and its registration is awaited (join_timeout_ms). Returns the
  /// new worker's handle; names() and hosts() follow. Throws troupe::Error for an operator's
  /// worker (launcher = "external") with no spare left, or one that does not join.
  caf::actor restart(size_t rank);
  /// Spare nodes' idle workers left.
  [[nodiscard]] size_t spares_left() const { return spares_.size(); }
  /// Rank `rank` moves to the first spare with its KV cache (a drained worker,
  /// ExecutorGroup::migrate): the spare takes the rank (names(), hosts() follow); the old
  /// worker's process is left to end on its own (it asked to leave) or at stop(). Returns the
  /// spare's handle. Throws troupe::Error when no spare is left.
  caf::actor take_spare(size_t rank);
  /// Undoes take_spare (a move that failed): the rank's old worker is back, the spare idle.
  void give_back_spare(size_t rank);
  /// Whether the process launched for `rank` still runs (true for an operator's worker).
  [[nodiscard]] bool launched_alive(size_t rank) const;

 private:
  ClusterConfig config_;
  caf::actor registry_;
  uint16_t port_ = 0;
  caf::actor_system* sys_ = nullptr;
  std::vector<pid_t> launched_;
  // Per rank, then per spare (index world + k): the launched process (-1: external or gone),
  // the launch command and its node.
  std::vector<pid_t> pid_of_rank_;
  std::vector<std::string> commands_;
  std::vector<int32_t> node_of_;
  std::vector<int32_t> registers_as_;  // per rank: the rank its command registers as
  struct Spare {
    caf::actor worker;
    std::string name, host;
    pid_t pid = -1;
    int32_t registers_as = 0;
  };
  std::vector<Spare> spares_;  // registered and idle, first taken first
  struct Moving {  // a take_spare not yet settled: what the rank had before
    size_t rank = 0;
    Spare spare, old;
    std::string old_command;
  };
  std::optional<Moving> moving_;
  std::vector<caf::actor> workers_;
  std::vector<std::string> names_;
  std::vector<std::string> hosts_;
};

}  // namespace troupe
