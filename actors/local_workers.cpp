#include "actors/local_workers.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "runtime/error.hpp"

#ifndef TROUPE_BUILD_TOOLS_DIR
#define TROUPE_BUILD_TOOLS_DIR ""
#endif
#ifndef TROUPE_INSTALL_BIN_DIR
#define TROUPE_INSTALL_BIN_DIR ""
#endif

namespace troupe {

namespace fs = std::filesystem;

namespace {

bool executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
}

using Clock = std::chrono::steady_clock;

}  // namespace

std::string worker_log_level() {
  // spdlog names "warning" and "critical" what the command line calls warn and error.
  std::string level(spdlog::level::to_string_view(spdlog::get_level()).data());
  if (level == "warning") return "warn";
  if (level == "critical") return "error";
  return level;
}

std::string troupe_binary() {
  // The `troupe` beside this program (itself, when it is troupe), the build tree's, the install
  // prefix's, then each directory of $PATH: the first executable one.
  std::vector<std::string> candidates;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(self.parent_path() / "troupe");
  candidates.push_back(std::string(TROUPE_BUILD_TOOLS_DIR) + "/troupe");
  candidates.push_back(std::string(TROUPE_INSTALL_BIN_DIR) + "/troupe");
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest(path);
    while (!rest.empty()) {
      const size_t colon = rest.find(':');
      if (colon != 0) candidates.push_back(std::string(rest.substr(0, colon)) + "/troupe");
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  for (const std::string& c : candidates)
    if (executable(c)) return c;
  fail("cannot find the `troupe` executable to start workers from; looked at {}",
       fmt::join(candidates, ", "));
}

LocalWorkers::LocalWorkers(int count, const std::vector<std::string>& extra,
                           std::chrono::milliseconds timeout) {
  const std::string binary = troupe_binary();
  const std::string parent = std::to_string(getpid());
  struct Child {
    pid_t pid;
    int out;  // read end of its stdout
    std::string seen;
  };
  std::vector<Child> children;
  try {
    for (int i = 0; i < count; ++i) {
      int fds[2];
      if (pipe2(fds, O_CLOEXEC) != 0) fail("starting workers: pipe: {}", std::strerror(errno));
      std::vector<std::string> args = {binary, "worker", "--host", "127.0.0.1", "--port", "0",
                                       "--parent-pid", parent};
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      const pid_t pid = fork();
      if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        fail("starting workers: fork: {}", std::strerror(errno));
      }
      if (pid == 0) {  // the child: only async-signal-safe calls until exec
        dup2(fds[1], STDOUT_FILENO);
        execv(argv[0], argv.data());
        _exit(127);
      }
      close(fds[1]);
      pids_.push_back(pid);
      outs_.push_back(fds[0]);
      children.push_back(Child{pid, fds[0], {}});
    }
    endpoints_.resize(children.size());
    const auto deadline = Clock::now() + timeout;
    size_t ready = 0;
    while (ready < children.size()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0)
        fail("starting workers: {} of {} did not say where they listen within {} ms",
             children.size() - ready, children.size(), timeout.count());
      std::vector<pollfd> fds;
      for (Child& c : children) fds.push_back(pollfd{c.out, POLLIN, 0});
      if (poll(fds.data(), fds.size(), int(std::min<int64_t>(left.count(), 200))) < 0 &&
          errno != EINTR)
        fail("starting workers: poll: {}", std::strerror(errno));
      for (size_t i = 0; i < children.size(); ++i) {
        if (!endpoints_[i].empty() || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
        char buf[512];
        const ssize_t n = read(children[i].out, buf, sizeof buf);
        if (n > 0) children[i].seen.append(buf, size_t(n));
        const std::string_view key = "troupe worker listening on ";
        const size_t at = children[i].seen.find(key);
        const size_t eol = at == std::string::npos ? at : children[i].seen.find('\n', at);
        if (eol != std::string::npos) {
          endpoints_[i] = children[i].seen.substr(at + key.size(), eol - at - key.size());
          ++ready;
        } else if (n <= 0) {
          int status = 0;
          waitpid(children[i].pid, &status, WNOHANG);
          fail("starting workers: worker {} (pid {}) exited before listening{}", i,
               children[i].pid,
               children[i].seen.empty() ? "" : ": " + children[i].seen);
        }
      }
    }
  } catch (...) {
    stop(std::chrono::milliseconds(500));
    throw;
  }
}

LocalWorkers::~LocalWorkers() { stop(); }

LocalWorkers::LocalWorkers(LocalWorkers&& o) noexcept
    : pids_(std::move(o.pids_)), outs_(std::move(o.outs_)), endpoints_(std::move(o.endpoints_)) {
  o.pids_.clear();
  o.outs_.clear();
}

LocalWorkers& LocalWorkers::operator=(LocalWorkers&& o) noexcept {
  if (this != &o) {
    stop();
    pids_ = std::move(o.pids_);
    outs_ = std::move(o.outs_);
    endpoints_ = std::move(o.endpoints_);
    o.pids_.clear();
    o.outs_.clear();
  }
  return *this;
}

void LocalWorkers::stop(std::chrono::milliseconds grace) {
  for (int fd : outs_) close(fd);
  outs_.clear();
  if (pids_.empty()) return;
  for (pid_t p : pids_) kill(p, SIGTERM);
  const auto deadline = Clock::now() + grace;
  std::vector<pid_t> left = pids_;
  while (!left.empty()) {
    for (auto it = left.begin(); it != left.end();) {
      const pid_t r = waitpid(*it, nullptr, WNOHANG);
      it = (r == *it || (r < 0 && errno == ECHILD)) ? left.erase(it) : it + 1;
    }
    if (left.empty() || Clock::now() >= deadline) break;
    usleep(20000);
  }
  for (pid_t p : left) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  pids_.clear();
}

}  // namespace troupe
