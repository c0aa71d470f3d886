#include "transport/stdio_bootstrap.hpp"

#include <poll.h>
#include <unistd.h>

#include <cstdio>

#include "runtime/error.hpp"

namespace troupe {

void stdio_say(const std::string& line) {
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string stdio_read_line(std::chrono::milliseconds timeout) {
  static std::string buf;  // what was read past the last line
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto nl = buf.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) fail("stdio bootstrap: no line on stdin within {} ms", timeout.count());
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (poll(&p, 1, int(left)) <= 0) continue;
    char chunk[65536];
    const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
    if (n <= 0) fail("stdio bootstrap: stdin closed");
    buf.append(chunk, size_t(n));
  }
}

std::vector<Blob> stdio_bootstrap(const Blob& mine, std::chrono::milliseconds timeout) {
  stdio_say("BLOB " + to_hex(mine));
  const std::string line = stdio_read_line(timeout);
  if (line.rfind("BLOBS", 0) != 0)
    fail("stdio bootstrap: expected BLOBS, got '{}'", line.substr(0, 80));
  std::vector<Blob> out;
  size_t pos = 6;
  while (pos < line.size()) {
    const size_t sp = line.find(' ', pos);
    out.push_back(from_hex(line.substr(pos, sp - pos)));
    if (sp == std::string::npos) break;
    pos = sp + 1;
  }
  return out;
}

}  // namespace troupe
