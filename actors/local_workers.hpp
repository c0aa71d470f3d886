// `troupe worker` processes that an engine starts on its own machine (vLLM's multiprocessing
// executor: --tensor-parallel-size N with no endpoints), and stops when it is done.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace troupe {

/// The `troupe` executable to start workers from: the one beside this process (itself, when it
/// is `troupe`), the build tree's or the install prefix's, then $PATH.
/// Throws troupe::Error listing where it looked.
std::string troupe_binary();

/// This process's log level as `troupe --log-level` spells it, for the workers it starts.
std::string worker_log_level();

class LocalWorkers {
 public:
  LocalWorkers() = default;
  /// Starts `count` workers listening on 127.0.0.1 (any free port), each exiting when this
  /// process does, and waits (at most `timeout`) until each says where it listens. `extra` is
  /// appended to every worker's arguments. Throws troupe::Error with the worker's own output
  /// when one fails to start.
  LocalWorkers(int count, const std::vector<std::string>& extra, std::chrono::milliseconds timeout);
  ~LocalWorkers();
  LocalWorkers(LocalWorkers&& other) noexcept;
  LocalWorkers& operator=(LocalWorkers&& other) noexcept;
  LocalWorkers(const LocalWorkers&) = delete;
  LocalWorkers& operator=(const LocalWorkers&) = delete;

  /// "127.0.0.1:PORT" of each worker, in start order.
  [[nodiscard]] const std::vector<std::string>& endpoints() const { return endpoints_; }
  [[nodiscard]] const std::vector<pid_t>& pids() const { return pids_; }
  /// SIGINT to every worker (it exits at once; SIGTERM would ask its head to move its rank
  /// away first), then SIGKILL to those still there after `grace`.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
  /// Whether worker `i`'s process still runs (a stopped one does).
  [[nodiscard]] bool alive(size_t i) const;
  /// Whether worker `i`'s process is stopped (SIGSTOP: frozen; it answers nothing).
  [[nodiscard]] bool stopped(size_t i) const;
  /// Replaces worker `i` (fault recovery): SIGKILL to its process if it still runs (frozen,
  /// say), then a new one in its place, waited for as at the start; endpoints()[i] changes.
  void restart(size_t i);
  /// Starts one more worker, no rank's yet (a rank moving to it with its KV cache:
  /// ExecutorGroup::migrate), waited for as at the start; returns where it listens.
  std::string start_spare();
  /// The spare takes worker `i`'s place: the old process is asked to exit (SIGINT, SIGKILL
  /// after a grace, reaped at stop()); endpoints()[i] and pids()[i] become the spare's.
  void promote_spare(size_t i);
  /// Stops the spare (a move that failed).
  void drop_spare();

 private:
  void start(const std::vector<size_t>& which);  // starts these workers, waits for each

  std::vector<pid_t> pids_;  // -1: none; one past the ranks while a spare runs
  size_t ranks_ = 0;
  std::vector<pid_t> retired_;  // replaced by a spare, asked to exit
  std::vector<int> outs_;  // read ends of their stdout, open while they run (no SIGPIPE)
  std::vector<std::string> endpoints_;
  std::string binary_;
  std::vector<std::string> extra_;
  std::chrono::milliseconds timeout_{30000};
};

}  // namespace troupe
