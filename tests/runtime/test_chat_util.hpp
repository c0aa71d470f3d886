// Shared by the chat-template tests: runs the Python Jinja2 reference
// (tools/chat_reference/render.py) in a child process, bounded in time, and compares its
// results with troupe's ChatTemplate case by case.
#pragma once

#include "runtime/chat/chat_template.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>

extern char** environ;

namespace troupe::chat_test {

using Json = nlohmann::ordered_json;

/// The time strftime_now() sees on both sides: 2026-12-05 14:03:21.654321 UTC.
inline constexpr double fixed_now = 1796479401.654321;
inline std::chrono::system_clock::time_point fixed_clock() {
  return std::chrono::system_clock::time_point(std::chrono::microseconds(1796479401654321LL));
}

/// The Python with Jinja2: $TROUPE_PYTHON, else Debian's /usr/bin/python3 (python3-jinja2,
/// what CI installs), else python3 on PATH.
inline std::string python() {
  if (const char* p = std::getenv("TROUPE_PYTHON"); p && *p) return p;
  if (std::filesystem::exists("/usr/bin/python3")) return "/usr/bin/python3";
  return "python3";
}

struct ReferenceRun {
  bool jinja2_missing = false;
  Json results;  // one per case
};

/// Runs render.py on `request`; fails the test on a crash or after `timeout`.
inline ReferenceRun run_reference(const Json& request,
                                  std::chrono::seconds timeout = std::chrono::seconds(120)) {
  static std::atomic<int> counter{0};
  const auto input =
      std::filesystem::temp_directory_path() /
      ("troupe_chat_ref_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".json");
  {
    std::ofstream out(input, std::ios::binary);
    out << request.dump();
  }
  const std::string script = std::string(TROUPE_SOURCE_DIR) + "/tools/chat_reference/render.py";
  const std::string py = python();
  int out_pipe[2], err_pipe[2];
  REQUIRE(::pipe(out_pipe) == 0);
  REQUIRE(::pipe(err_pipe) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
  posix_spawn_file_actions_addclose(&actions, err_pipe[0]);
  std::string input_str = input.string();
  char* argv[] = {const_cast<char*>(py.c_str()), const_cast<char*>(script.c_str()),
                  input_str.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, py.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    std::filesystem::remove(input);
    ReferenceRun r;
    r.jinja2_missing = true;
    return r;
  }
  std::string out, err;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool out_open = true, err_open = true, timed_out = false;
  while (out_open || err_open) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd fds[2] = {{out_open ? out_pipe[0] : -1, POLLIN, 0},
                     {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(left.count())) < 0) continue;
    char buf[65536];
    for (int k = 0; k < 2; ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[k].fd, buf, sizeof buf);
      if (n <= 0) {
        (k == 0 ? out_open : err_open) = false;
      } else {
        (k == 0 ? out : err).append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  std::filesystem::remove(input);
  REQUIRE_FALSE(timed_out);
  ReferenceRun r;
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 3 || WEXITSTATUS(status) == 127)) {
    r.jinja2_missing = true;
    return r;
  }
  INFO("render.py stderr: " << err);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  r.results = Json::parse(out);
  REQUIRE(r.results.size() == request["cases"].size());
  return r;
}

/// True when Python's Jinja2 is missing: warns (the caller skips), or fails where CI
/// requires the references (TROUPE_REQUIRE_REAL_TOKENIZERS, which CI sets).
inline bool reference_missing(const ReferenceRun& run) {
  if (!run.jinja2_missing) return false;
  if (std::getenv("TROUPE_REQUIRE_REAL_TOKENIZERS"))
    FAIL("python3 with jinja2 missing (" << python()
                                         << "): tools/install-deps.sh installs python3-jinja2");
  WARN("python3 with jinja2 missing: chat-template reference tests skipped");
  return true;
}

/// Python's exception class -> the kind troupe must report for the same failure.
inline std::optional<ChatTemplateError::Kind> expected_kind(const std::string& python_type) {
  using K = ChatTemplateError::Kind;
  if (python_type == "TemplateError") return K::raised;
  if (python_type == "UndefinedError") return K::undefined;
  if (python_type == "SecurityError") return K::security;
  if (python_type == "TemplateSyntaxError" || python_type == "TemplateAssertionError")
    return K::syntax;
  return std::nullopt;
}

inline const char* kind_name(ChatTemplateError::Kind k) {
  using K = ChatTemplateError::Kind;
  switch (k) {
    case K::syntax:
      return "syntax";
    case K::undefined:
      return "undefined";
    case K::type:
      return "type";
    case K::security:
      return "security";
    case K::raised:
      return "raised";
    case K::limit:
      return "limit";
    case K::unsupported:
      return "unsupported";
    case K::input:
      return "input";
  }
  return "?";
}

/// Compares troupe's outcome of one case (`render` renders it) with Python's `expected`:
/// identical text, or both failing (same kind, and the same message for raise_exception).
inline void check_same(const Json& expected, const std::function<std::string()>& render,
                       const std::string& label) {
  INFO(label);
  std::optional<std::string> text;
  std::optional<ChatTemplateError> error;
  try {
    text = render();
  } catch (const ChatTemplateError& e) {
    error = e;
  }
  if (expected["ok"].get<bool>()) {
    INFO("troupe failed: " << (error ? error->what() : ""));
    REQUIRE(text.has_value());
    const std::string want = expected["text"].get<std::string>();
    INFO("python: " << Json(want).dump());
    INFO("troupe: " << Json(*text).dump());
    CHECK(*text == want);
    return;
  }
  const std::string type = expected["type"].get<std::string>();
  const std::string message = expected["message"].get<std::string>();
  INFO("python raised " << type << ": " << message);
  INFO("troupe rendered: " << (text ? Json(*text).dump() : ""));
  REQUIRE(error.has_value());
  INFO("troupe raised (" << kind_name(error->kind()) << "): " << error->what());
  if (auto kind = expected_kind(type)) CHECK(error->kind() == *kind);
  if (type == "TemplateError" || type == "UndefinedError") CHECK(error->message() == message);
}

}  // namespace troupe::chat_test
