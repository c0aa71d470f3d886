// Real rank processes for the transport tests (and troupe_transport_bench): each is
// troupe_transport_peer running one scenario, talking to the test over its stdin/stdout in lines:
//   peer -> test   "BLOB <hex>"            its bootstrap blob (phase 1)
//   test -> peer   "BLOBS <hex> <hex> ..." every rank's blob, in rank order (the head's job)
//   peer -> test   "RESULT ..." / "MARK <what>" lines, then "DONE", or "ERROR <message>"
// Every read has a deadline; the destructor SIGKILLs and reaps whatever still runs and removes
// the shared-memory segments named with the group's prefix, so a failing test leaves nothing.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/bootstrap.hpp"

namespace troupe::test {

using Clock = std::chrono::steady_clock;

/// Now plus `seconds`.
inline Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

#ifdef TROUPE_TRANSPORT_PEER
/// The peer executable's path (built next to the tests).
inline std::string peer_exe() {
  return std::string(TROUPE_TRANSPORT_PEER);
}
#endif

/// A unique shared-memory name prefix for one test ("/troupe-t<pid>-<n>").
inline std::string shm_prefix() {
  static int n = 0;
  return fmt::format("/troupe-t{}-{}", getpid(), n++);
}

/// Removes /dev/shm entries whose name starts with `prefix` (without its leading '/').
inline int remove_shm(const std::string& prefix) {
  int removed = 0;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return 0;
  const std::string p = prefix.substr(1);
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(p, 0) == 0 && shm_unlink(fmt::format("/{}", name).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

class PeerProcess {
 public:
#ifdef TROUPE_TRANSPORT_PEER
  explicit PeerProcess(const std::vector<std::string>& args) : PeerProcess(peer_exe(), args) {}
#endif
  /// Runs `exe` with `args`, its stdin and stdout piped to this object.
  PeerProcess(const std::string& exe, const std::vector<std::string>& args) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(in[0], STDIN_FILENO);
      dup2(out[1], STDOUT_FILENO);
      std::vector<std::string> a{exe};
      a.insert(a.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& s : a) argv.push_back(s.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~PeerProcess() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(to_);
    close(from_);
  }
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  [[nodiscard]] pid_t pid() const {
    return pid_;
  }

  /// The next line (without '\n'), or nullopt at EOF or the deadline.
  std::optional<std::string> read_line(Clock::time_point deadline) {
    for (;;) {
      const auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, int(left)) <= 0) continue;
      char chunk[65536];
      const ssize_t n = ::read(from_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, size_t(n));
    }
  }

  /// The next line that starts with `prefix`, skipping others; nullopt at EOF or the deadline.
  std::optional<std::string> expect(const std::string& prefix, Clock::time_point deadline) {
    while (auto line = read_line(deadline)) {
      lines_.push_back(*line);
      if (line->rfind(prefix, 0) == 0) return line;
      if (line->rfind("ERROR", 0) == 0) return line;
    }
    return std::nullopt;
  }

  void write_line(const std::string& s) {
    const std::string l = fmt::format("{}\n", s);
    size_t off = 0;
    while (off < l.size()) {
      const ssize_t n = ::write(to_, l.data() + off, l.size() - off);
      if (n <= 0) return;
      off += size_t(n);
    }
  }

  /// Sends `sig`; a SIGKILL is also reaped at once, as a good parent does: a killed process
  /// that stays a zombie still "exists", and UCX's shared-memory transport (which checks that
  /// its peer's process exists) then does not notice its death.
  void signal(int sig) {
    ::kill(pid_, sig);
    if (sig == SIGKILL && !reaped_) {
      waitpid(pid_, nullptr, 0);
      reaped_ = true;
    }
  }

  /// Exit status (waitpid's) once it exits within `seconds`, else nullopt.
  std::optional<int> wait_exit(double seconds) {
    const auto deadline = after(seconds);
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return status;
      }
      usleep(5000);
    }
    return std::nullopt;
  }

  /// Every line read so far by expect() (for failure messages).
  [[nodiscard]] std::string transcript() const {
    std::string s;
    for (const auto& l : lines_) s += fmt::format("  | {}\n", l.substr(0, 300));
    return s;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  bool reaped_ = false;
  std::string buf_;
  std::vector<std::string> lines_;
};

/// n peers of one scenario; args_for(rank) gives each its arguments.
class ProcessGroup {
 public:
  template <class F>
  ProcessGroup(const std::string& exe, int n, F&& args_for, std::string shm_prefix = "")
      : shm_prefix_(std::move(shm_prefix)) {
    for (int r = 0; r < n; ++r) peers_.push_back(std::make_unique<PeerProcess>(exe, args_for(r)));
  }
#ifdef TROUPE_TRANSPORT_PEER
  template <class F>
  ProcessGroup(int n, F&& args_for, std::string shm_prefix = "")
      : ProcessGroup(peer_exe(), n, std::forward<F>(args_for), std::move(shm_prefix)) {}
#endif
  ~ProcessGroup() {
    peers_.clear();
    if (!shm_prefix_.empty()) remove_shm(shm_prefix_);
  }

  PeerProcess& operator[](int r) {
    return *peers_[size_t(r)];
  }
  [[nodiscard]] int size() const {
    return int(peers_.size());
  }

  /// Phase 1 and 2 of the bootstrap, as the head does it: gathers every BLOB line, sends BLOBS.
  /// Returns "" or what went wrong.
  std::string exchange_blobs(double seconds) {
    const auto deadline = after(seconds);
    std::string all = "BLOBS";
    for (int r = 0; r < size(); ++r) {
      auto line = (*this)[r].expect("BLOB ", deadline);
      if (!line || line->rfind("BLOB ", 0) != 0)
        return fmt::format("rank {} gave no blob: {}", r, line.value_or("(nothing)"));
      all += fmt::format(" {}", line->substr(5));
    }
    for (int r = 0; r < size(); ++r) (*this)[r].write_line(all);
    return "";
  }

 private:
  std::vector<std::unique_ptr<PeerProcess>> peers_;
  std::string shm_prefix_;
};

}  // namespace troupe::test
