#include "actors/cluster_launch.hpp"

#include <caf/io/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "actors/executor_actor.hpp"
#include "actors/local_workers.hpp"
#include "actors/messages.hpp"
#include "actors/worker_actor.hpp"
#include "runtime/error.hpp"

namespace troupe {

namespace {

using Clock = std::chrono::steady_clock;

// Forwards each registration to whoever waits for workers now: the head's thread at the start,
// the recovery's when a lost worker is restarted ((watch_atom, sink) switches it).
caf::behavior registry(caf::stateful_actor<caf::actor>* self, caf::actor sink) {
  self->state = std::move(sink);
  return {
      [=](register_atom, WorkerHello& hello, caf::actor worker) {
        self->send(self->state, register_atom::value, std::move(hello), std::move(worker));
      },
      [=](watch_atom, caf::actor sink) { self->state = std::move(sink); },
  };
}

pid_t start_shell(const std::string& command) {
  const pid_t pid = fork();
  if (pid < 0) fail("launch: fork: {}", std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);  // its own process group, so that stop() reaches ssh / srun children too
    // A worker's own output ("listening on ...", logs) goes to the head's stderr: the head's
    // stdout carries results (generate's JSON lines).
    dup2(STDERR_FILENO, STDOUT_FILENO);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid, pid);
  return pid;
}

std::string exit_status(pid_t pid) {
  int status = 0;
  const pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == 0) return "still running";
  if (r < 0) return "gone";
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return "ended";
}

MultiNodeFlags multi_node_flags(const EngineArgs& args) {
  MultiNodeFlags f;
  f.nnodes = int32_t(args.nnodes);
  f.node_rank = int32_t(args.node_rank);
  f.master_addr = args.master_addr;
  if (args.master_port) f.master_port = int32_t(*args.master_port);
  f.headless = args.headless;
  f.tensor_parallel_size = int32_t(args.tensor_parallel_size);
  f.pipeline_parallel_size = int32_t(args.pipeline_parallel_size);
  f.local_device_count = args.device == "cpu" ? 0 : cuda_device_count();
  return f;
}

}  // namespace

std::optional<ClusterConfig> cluster_of(const EngineArgs& args) {
  if (args.cluster) return load_cluster_config(*args.cluster);
  if (args.nnodes <= 1) return std::nullopt;
  return cluster_from_multi_node_flags(multi_node_flags(args));
}

int run_headless_node(const EngineArgs& args) {
  if (!args.headless) fail("run_headless_node: --headless is not set");
  const ClusterConfig cluster = cluster_from_multi_node_flags(multi_node_flags(args));
  const std::string binary = troupe_binary();
  std::vector<pid_t> pids;
  for (const RankPlacement& r : place_ranks(cluster)) {
    if (r.node_index != args.node_rank) continue;
    const ClusterNode& node = cluster.nodes[size_t(r.node_index)];
    std::vector<std::string> worker = {binary, "worker", "--head",
                                       fmt::format("{}:{}", cluster.head_address, cluster.head_port),
                                       "--rank", std::to_string(r.rank), "--node", node.name,
                                       "--host", "0.0.0.0", "--parent-pid", std::to_string(getpid())};
    std::vector<char*> argv;
    for (auto& a : worker) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) fail("headless: fork: {}", std::strerror(errno));
    if (pid == 0) {
      execv(argv[0], argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  spdlog::info("headless node {}: {} worker(s) joining the head at {}:{}", args.node_rank,
               pids.size(), cluster.head_address, cluster.head_port);
  int status_all = 0;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) status_all = 1;
  }
  return status_all;
}

ClusterLaunch::ClusterLaunch(caf::actor_system& sys, ClusterConfig config)
    : config_(std::move(config)), sys_(&sys) {
  validate(config_);
  // The ranks, then the spare nodes' workers, numbered on from the last rank: a spare
  // registers as rank world + k and waits, loaded with nothing, to take a lost rank's place.
  std::vector<RankPlacement> ranks = place_ranks(config_);
  const size_t world = ranks.size();
  for (size_t i = 0; i < config_.nodes.size(); ++i) {
    const ClusterNode& n = config_.nodes[i];
    if (!n.spare) continue;
    for (int32_t k = 0; k < n.workers; ++k) {
      RankPlacement p;
      p.rank = int32_t(ranks.size());
      p.node_index = int32_t(i);
      p.local_index = k;
      p.device = n.devices.empty() ? -1 : n.devices[size_t(k)];
      ranks.push_back(p);
    }
  }
  caf::scoped_actor self{sys};
  registry_ = sys.spawn(registry, caf::actor_cast<caf::actor>(self));
  auto bound = sys.middleman().publish(caf::actor_cast<caf::actor>(registry_), config_.head_port,
                                       config_.head_address.c_str(), true);
  if (!bound)
    fail("cluster: the head cannot listen on {}:{}: {}", config_.head_address, config_.head_port,
         error_text(bound.error()));
  port_ = *bound;
  config_.head_port = port_;
  spdlog::info("cluster: head listening on {}:{} for {} worker(s)", config_.head_address, port_,
               ranks.size());

  // ---- start the workers ----
  const std::string binary = troupe_binary();
  std::vector<std::string>& commands = commands_;
  commands.assign(ranks.size(), {});
  pid_of_rank_.assign(ranks.size(), -1);
  node_of_.assign(ranks.size(), 0);
  try {
    for (const RankPlacement& r : ranks) {
      const ClusterNode& node = config_.nodes[size_t(r.node_index)];
      std::vector<std::string> args = {
          "--log-level", worker_log_level(), "--head", fmt::format("{}:{}", config_.head_address, port_), "--rank",
          std::to_string(r.rank), "--node", node.name, "--host",
          node.host.empty() ? "0.0.0.0" : node.host, "--heartbeat-ms",
          std::to_string(config_.heartbeat_interval_ms), "--heartbeat-timeout-ms",
          std::to_string(config_.heartbeat_timeout_ms)};
      if (node.launcher == "local") {
        args.push_back("--parent-pid");
        args.push_back(std::to_string(getpid()));
      }
      commands[size_t(r.rank)] = worker_launch_command(config_, r, binary, args);
      node_of_[size_t(r.rank)] = r.node_index;
      if (node.launcher == "external") {
        spdlog::info("cluster: {} {} on node {} is started by its operator: {}",
                     size_t(r.rank) < world ? "rank" : "spare", r.rank, node.name,
                     commands[size_t(r.rank)]);
        continue;
      }
      launched_.push_back(start_shell(commands[size_t(r.rank)]));
      pid_of_rank_[size_t(r.rank)] = launched_.back();
    }
  } catch (...) {
    stop(500);
    throw;
  }

  // ---- wait until every rank joined ----
  workers_.resize(ranks.size());
  names_.resize(ranks.size());
  hosts_.resize(ranks.size());
  size_t joined = 0;
  const auto deadline = Clock::now() + std::chrono::milliseconds(config_.join_timeout_ms);
  std::string error;
  while (joined < ranks.size() && error.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    self->receive(
        [&](register_atom, const WorkerHello& hello, const caf::actor& worker) {
          if (hello.rank < 0 || size_t(hello.rank) >= ranks.size()) {
            error = fmt::format("cluster: a worker registered as rank {}, outside [0, {})",
                                hello.rank, ranks.size());
            return;
          }
          if (workers_[size_t(hello.rank)]) {
            error = fmt::format("cluster: two workers registered as rank {} ({} and {})",
                                hello.rank, names_[size_t(hello.rank)], hello.address);
            return;
          }
          workers_[size_t(hello.rank)] = worker;
          hosts_[size_t(hello.rank)] = hello.address.substr(0, hello.address.rfind(':'));
          names_[size_t(hello.rank)] =
              fmt::format("the worker at {} (node {}, pid {})", hello.address, hello.node,
                          hello.pid);
          ++joined;
        },
        caf::after(std::min(left, std::chrono::milliseconds(200))) >> [] {});
  }
  if (!error.empty()) {
    stop(500);
    fail("{}", error);
  }
  if (joined == ranks.size()) {
    for (size_t k = world; k < ranks.size(); ++k)
      spares_.push_back(Spare{workers_[k], names_[k], hosts_[k], pid_of_rank_[k], int32_t(k)});
    workers_.resize(world);
    names_.resize(world);
    hosts_.resize(world);
    registers_as_.resize(world);
    for (size_t r = 0; r < world; ++r) registers_as_[r] = int32_t(r);
  }
  if (joined < ranks.size()) {
    std::vector<std::string> missing;
    size_t launched_index = 0;
    for (const RankPlacement& r : ranks) {
      const ClusterNode& node = config_.nodes[size_t(r.node_index)];
      const bool ours = node.launcher != "external";
      if (!workers_[size_t(r.rank)])
        missing.push_back(fmt::format("rank {} (node {}, host {}: `{}` {})", r.rank, node.name,
                                      node.host, commands[size_t(r.rank)],
                                      ours ? exit_status(launched_[launched_index])
                                           : "is the operator's to start"));
      if (ours) ++launched_index;
    }
    stop(500);
    fail("cluster: {} of {} worker(s) did not join the head at {}:{} within {} ms: {}",
         missing.size(), ranks.size(), config_.head_address, port_, config_.join_timeout_ms,
         fmt::join(missing, "; "));
  }
  spdlog::info("cluster: every worker joined; topology:\n{}", format_topology(config_));
}

ClusterLaunch::~ClusterLaunch() { stop(); }

bool ClusterLaunch::launched_alive(size_t rank) const {
  if (rank >= pid_of_rank_.size() || pid_of_rank_[rank] <= 0) return true;  // the operator's
  return waitpid(pid_of_rank_[rank], nullptr, WNOHANG) == 0;
}

caf::actor ClusterLaunch::restart(size_t rank) {
  if (rank >= workers_.size()) fail("cluster: no rank {}", rank);
  const ClusterNode* node = &config_.nodes[size_t(node_of_[size_t(registers_as_[rank])])];
  if (spares_.empty() && node->launcher == "external")
    fail("cluster: rank {} was lost and is started by its operator (launcher = \"external\"); "
         "troupe cannot restart it",
         rank);
  // The old process (its whole group: ssh or srun and the worker) goes first, frozen or not.
  if (const pid_t old = pid_of_rank_[rank]; old > 0) {
    kill(-old, SIGKILL);
    waitpid(old, nullptr, 0);
    launched_.erase(std::remove(launched_.begin(), launched_.end(), old), launched_.end());
    pid_of_rank_[rank] = -1;
  }
  // A spare takes the rank when there is one: it is running and registered already.
  if (!spares_.empty()) {
    Spare sp = spares_.front();
    spares_.erase(spares_.begin());
    workers_[rank] = sp.worker;
    names_[rank] = sp.name + " (a spare)";
    hosts_[rank] = sp.host;
    pid_of_rank_[rank] = sp.pid;
    commands_[rank] = commands_[size_t(sp.registers_as)];
    registers_as_[rank] = sp.registers_as;
    spdlog::warn("cluster: rank {} is taken over by the spare {}", rank, sp.name);
    return workers_[rank];
  }
  caf::scoped_actor self{*sys_};
  caf::anon_send(caf::actor_cast<caf::actor>(registry_), watch_atom::value,
                 caf::actor_cast<caf::actor>(self));
  spdlog::warn("cluster: restarting rank {} on node {}: {}", rank, node->name, commands_[rank]);
  const pid_t pid = start_shell(commands_[rank]);
  launched_.push_back(pid);
  pid_of_rank_[rank] = pid;
  const auto deadline = Clock::now() + std::chrono::milliseconds(config_.join_timeout_ms);
  bool joined = false;
  while (!joined) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      fail("cluster: rank {} restarted on node {} did not join the head within {} ms (`{}` {})",
           rank, node->name, config_.join_timeout_ms, commands_[rank], exit_status(pid));
    self->receive(
        [&](register_atom, const WorkerHello& hello, const caf::actor& worker) {
          if (hello.rank != registers_as_[rank]) return;  // a stale registration
          workers_[rank] = worker;
          hosts_[rank] = hello.address.substr(0, hello.address.rfind(':'));
          names_[rank] = fmt::format("the worker at {} (node {}, pid {})", hello.address,
                                     hello.node, hello.pid);
          joined = true;
        },
        caf::after(std::min(left, std::chrono::milliseconds(200))) >> [] {});
  }
  return workers_[rank];
}

caf::actor ClusterLaunch::take_spare(size_t rank) {
  if (rank >= workers_.size()) fail("cluster: no rank {}", rank);
  if (spares_.empty())
    fail("cluster: no spare node's worker is left to move rank {} to (spare = true)", rank);
  Moving m;
  m.rank = rank;
  m.spare = spares_.front();
  spares_.erase(spares_.begin());
  m.old = Spare{workers_[rank], names_[rank], hosts_[rank], pid_of_rank_[rank],
                registers_as_[rank]};
  m.old_command = commands_[rank];
  workers_[rank] = m.spare.worker;
  names_[rank] = m.spare.name + " (a spare)";
  hosts_[rank] = m.spare.host;
  pid_of_rank_[rank] = m.spare.pid;
  commands_[rank] = commands_[size_t(m.spare.registers_as)];
  registers_as_[rank] = m.spare.registers_as;
  moving_ = std::move(m);
  spdlog::warn("cluster: rank {} moves to the spare {}", rank, names_[rank]);
  return workers_[rank];
}

void ClusterLaunch::give_back_spare(size_t rank) {
  if (!moving_ || moving_->rank != rank) return;
  const Moving m = std::move(*moving_);
  moving_.reset();
  workers_[rank] = m.old.worker;
  names_[rank] = m.old.name;
  hosts_[rank] = m.old.host;
  pid_of_rank_[rank] = m.old.pid;
  commands_[rank] = m.old_command;
  registers_as_[rank] = m.old.registers_as;
  spares_.insert(spares_.begin(), m.spare);
}

bool ClusterLaunch::one_host() const {
  for (const ClusterNode& n : config_.nodes)
    if (n.host != config_.nodes.front().host || n.launcher == "ssh" || n.launcher == "srun")
      return false;
  return true;
}

void ClusterLaunch::stop(int grace_ms) {
  if (registry_) {
    sys_->middleman().unpublish(caf::actor_cast<caf::actor>(registry_), port_);
    caf::anon_send_exit(registry_, caf::exit_reason::user_shutdown);
    registry_ = nullptr;
  }
  if (launched_.empty()) return;
  for (pid_t p : launched_) kill(-p, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::milliseconds(grace_ms);
  std::vector<pid_t> left = launched_;
  while (!left.empty() && Clock::now() < deadline) {
    for (auto it = left.begin(); it != left.end();) {
      const pid_t r = waitpid(*it, nullptr, WNOHANG);
      it = (r == *it || r < 0) ? left.erase(it) : it + 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t p : left) {
    kill(-p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  launched_.clear();
}

}  // namespace troupe
