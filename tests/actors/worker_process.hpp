// A `troupe worker` child process for tests: started on 127.0.0.1 with a free port, read back
// from its first line of output, and killed if still running when the test ends.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace troupe {

class WorkerProcess {
 public:
  /// `extra`: more `troupe worker` options (e.g. "--fault", "exit-on-init").
  explicit WorkerProcess(std::vector<std::string> extra = {}) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      const std::string exe = std::string(TROUPE_BINARY_DIR) + "/tools/troupe";
      std::vector<std::string> args{exe, "--log-level", "warn", "worker", "--host", "127.0.0.1",
                                    "--port", "0"};
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(exe.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fdopen(fds[0], "r");
    char line[256] = {0};
    if (!out_ || !fgets(line, sizeof line, out_))
      throw std::runtime_error("troupe worker printed nothing (is tools/troupe built?)");
    const std::string s(line);
    const auto at = s.find("listening on ");
    if (at == std::string::npos) throw std::runtime_error("unexpected worker output: " + s);
    endpoint_ = s.substr(at + 13);
    while (!endpoint_.empty() && (endpoint_.back() == '\n' || endpoint_.back() == '\r'))
      endpoint_.pop_back();
  }
  ~WorkerProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_) fclose(out_);
  }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  [[nodiscard]] const std::string& endpoint() const { return endpoint_; }
  [[nodiscard]] pid_t pid() const { return pid_; }

  /// True if the process exits within `seconds`.
  bool wait_exit(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  std::string endpoint_;
  bool exited_ = false;
};

}  // namespace troupe
