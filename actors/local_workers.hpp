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
  /// SIGTERM to every worker, then SIGKILL to those still there after `grace`.
  void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
  /// Whether worker `i`'s process still runs (a stopped one does).
  [[nodiscard]] bool alive(size_t i) const;
  /// Whether worker `i`'s process is stopped (SIGSTOP: frozen; it answers nothing).
  [[nodiscard]] bool stopped(size_t i) const;
  /// Replaces worker `i` (fault recovery): SIGKILL to its process if it still runs (frozen,
  /// say), then a new one in its place, waited for as at the start; endpoints()[i] changes.
  void restart(size_t i);

 private:
  void start(const std::vector<size_t>& which);  // starts these workers, waits for each

  std::vector<pid_t> pids_;  // -1: none
  std::vector<int> outs_;  // read ends of their stdout, open while they run (no SIGPIPE)
  std::vector<std::string> endpoints_;
  std::string binary_;
  std::vector<std::string> extra_;
  std::chrono::milliseconds timeout_{30000};
};

}  // namespace troupe
