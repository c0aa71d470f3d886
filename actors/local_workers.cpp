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
#include <fstream>

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
                           std::chrono::milliseconds timeout)
    : binary_(troupe_binary()), extra_(extra), timeout_(timeout) {
  ranks_ = size_t(count);
  pids_.assign(size_t(count), -1);
  outs_.assign(size_t(count), -1);
  endpoints_.assign(size_t(count), {});
  std::vector<size_t> all(static_cast<size_t>(count));
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  try {
    start(all);
  } catch (...) {
    stop(std::chrono::milliseconds(500));
    throw;
  }
}

void LocalWorkers::start(const std::vector<size_t>& which) {
  const std::string parent = std::to_string(getpid());
  std::vector<std::string> seen(which.size());
  for (size_t i : which) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) fail("starting workers: pipe: {}", std::strerror(errno));
    std::vector<std::string> args = {binary_, "worker", "--host", "127.0.0.1", "--port", "0",
                                     "--parent-pid", parent};
    args.insert(args.end(), extra_.begin(), extra_.end());
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
    pids_[i] = pid;
    outs_[i] = fds[0];
    endpoints_[i].clear();
  }
  const auto deadline = Clock::now() + timeout_;
  size_t ready = 0;
  while (ready < which.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      fail("starting workers: {} of {} did not say where they listen within {} ms",
           which.size() - ready, which.size(), timeout_.count());
    std::vector<pollfd> fds;
    for (size_t i : which) fds.push_back(pollfd{outs_[i], POLLIN, 0});
    if (poll(fds.data(), fds.size(), int(std::min<int64_t>(left.count(), 200))) < 0 &&
        errno != EINTR)
      fail("starting workers: poll: {}", std::strerror(errno));
    for (size_t k = 0; k < which.size(); ++k) {
      const size_t i = which[k];
      if (!endpoints_[i].empty() || !(fds[k].revents & (POLLIN | POLLHUP))) continue;
      char buf[512];
      const ssize_t n = read(outs_[i], buf, sizeof buf);
      if (n > 0) seen[k].append(buf, size_t(n));
      const std::string_view key = "troupe worker listening on ";
      const size_t at = seen[k].find(key);
      const size_t eol = at == std::string::npos ? at : seen[k].find('\n', at);
      if (eol != std::string::npos) {
        endpoints_[i] = seen[k].substr(at + key.size(), eol - at - key.size());
        ++ready;
      } else if (n <= 0) {
        int status = 0;
        waitpid(pids_[i], &status, WNOHANG);
        fail("starting workers: worker {} (pid {}) exited before listening{}", i, pids_[i],
             seen[k].empty() ? "" : ": " + seen[k]);
      }
    }
  }
}

bool LocalWorkers::alive(size_t i) const {
  if (i >= pids_.size() || pids_[i] <= 0) return false;
  return waitpid(pids_[i], nullptr, WNOHANG) == 0;
}

bool LocalWorkers::stopped(size_t i) const {
  if (i >= pids_.size() || pids_[i] <= 0) return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pids_[i]));
  std::string line;
  std::getline(stat, line);
  // "pid (comm) S ...": the state letter follows the last ')'.
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() &&
         (line[close + 2] == 'T' || line[close + 2] == 't');
}

void LocalWorkers::restart(size_t i) {
  if (i >= pids_.size()) fail("local workers: no worker {} (of {})", i, pids_.size());
  if (pids_[i] > 0) {
    kill(pids_[i], SIGKILL);  // a frozen one too
    waitpid(pids_[i], nullptr, 0);
  }
  if (outs_[i] >= 0) close(outs_[i]);
  pids_[i] = -1;
  outs_[i] = -1;
  start({i});
}

std::string LocalWorkers::start_spare() {
  if (pids_.size() != ranks_) fail("local workers: a spare runs already");
  pids_.push_back(-1);
  outs_.push_back(-1);
  endpoints_.emplace_back();
  try {
    start({ranks_});
  } catch (...) {
    drop_spare();
    throw;
  }
  return endpoints_[ranks_];
}

void LocalWorkers::promote_spare(size_t i) {
  if (pids_.size() != ranks_ + 1) fail("local workers: no spare to promote");
  if (i >= ranks_) fail("local workers: no worker {} (of {})", i, ranks_);
  if (pids_[i] > 0) {
    kill(pids_[i], SIGINT);
    retired_.push_back(pids_[i]);
  }
  if (outs_[i] >= 0) close(outs_[i]);
  pids_[i] = pids_[ranks_];
  outs_[i] = outs_[ranks_];
  endpoints_[i] = endpoints_[ranks_];
  pids_.pop_back();
  outs_.pop_back();
  endpoints_.pop_back();
}

void LocalWorkers::drop_spare() {
  if (pids_.size() != ranks_ + 1) return;
  if (pids_[ranks_] > 0) {
    kill(pids_[ranks_], SIGKILL);
    waitpid(pids_[ranks_], nullptr, 0);
  }
  if (outs_[ranks_] >= 0) close(outs_[ranks_]);
  pids_.pop_back();
  outs_.pop_back();
  endpoints_.pop_back();
}

LocalWorkers::~LocalWorkers() { stop(); }

LocalWorkers::LocalWorkers(LocalWorkers&& o) noexcept
    : pids_(std::move(o.pids_)),
      outs_(std::move(o.outs_)),
      endpoints_(std::move(o.endpoints_)),
      binary_(std::move(o.binary_)),
      extra_(std::move(o.extra_)),
      timeout_(o.timeout_) {
  ranks_ = o.ranks_;
  retired_ = std::move(o.retired_);
  o.retired_.clear();
  o.pids_.clear();
  o.outs_.clear();
}

LocalWorkers& LocalWorkers::operator=(LocalWorkers&& o) noexcept {
  if (this != &o) {
    stop();
    pids_ = std::move(o.pids_);
    outs_ = std::move(o.outs_);
    endpoints_ = std::move(o.endpoints_);
    binary_ = std::move(o.binary_);
    extra_ = std::move(o.extra_);
    timeout_ = o.timeout_;
    ranks_ = o.ranks_;
    retired_ = std::move(o.retired_);
    o.retired_.clear();
    o.pids_.clear();
    o.outs_.clear();
  }
  return *this;
}

void LocalWorkers::stop(std::chrono::milliseconds grace) {
  for (int fd : outs_)
    if (fd >= 0) close(fd);
  outs_.clear();
  std::vector<pid_t> left;
  for (pid_t p : pids_)
    if (p > 0) left.push_back(p);
  pids_.clear();
  left.insert(left.end(), retired_.begin(), retired_.end());
  retired_.clear();
  if (left.empty()) return;
  for (pid_t p : left) kill(p, SIGINT);
  const auto deadline = Clock::now() + grace;
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
}

}  // namespace troupe
