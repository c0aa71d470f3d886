#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <map>

#include "peer.hpp"
#include "runtime/error.hpp"

namespace troupe::peer {

std::string Args::str(const std::string& k, const std::string& def) const {
  auto it = kv.find(k);
  return it == kv.end() ? def : it->second;
}

int64_t Args::num(const std::string& k, int64_t def) const {
  auto it = kv.find(k);
  return it == kv.end() ? def : std::stoll(it->second);
}

std::vector<int64_t> Args::nums(const std::string& k) const {
  std::vector<int64_t> v;
  std::string s = str(k);
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t comma = s.find(',', pos);
    v.push_back(std::stoll(s.substr(pos, comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return v;
}

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

namespace {

std::string read_stdin_line(int timeout_ms) {
  static std::string buf;
  for (;;) {
    const auto nl = buf.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      return line;
    }
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) fail("peer: no line from the test within {} ms", timeout_ms);
    char chunk[65536];
    const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
    if (n <= 0) fail("peer: the test closed stdin");
    buf.append(chunk, size_t(n));
  }
}

std::string to_hex(const Blob& b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) {
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}


}  // namespace

Blob from_hex(const std::string& s) {
  Blob b;
  auto v = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i + 1 < s.size(); i += 2) b.push_back(uint8_t(v(s[i]) << 4 | v(s[i + 1])));
  return b;
}


std::vector<Blob> bootstrap(const Blob& mine) {
  say("BLOB " + to_hex(mine));
  const std::string line = read_stdin_line(30000);
  if (line.rfind("BLOBS", 0) != 0) fail("peer: expected BLOBS, got '{}'", line.substr(0, 80));
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

void wait_go() {
  const std::string line = read_stdin_line(30000);
  if (line != "GO") fail("peer: expected GO, got '{}'", line.substr(0, 80));
}

std::vector<float> data_for(int64_t rank, size_t n, uint64_t salt) {
  // splitmix64 per element: cheap enough for megabytes per rank on a shared 2-core machine.
  const uint64_t seed = uint64_t(rank) * 0x9E3779B97F4A7C15ull + n * 7919u + salt * 104729u;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    v[i] = float(z >> 40) * 0x1p-23f - 1.0f;  // [-1, 1) in steps of 2^-23
  }
  return v;
}

std::string hash_hex(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return fmt::format("{:016x}", h);
}

}  // namespace troupe::peer

int main(int argc, char** argv) {
  using namespace troupe::peer;
  if (argc < 2) {
    std::cerr << "usage: troupe_transport_peer SCENARIO [key=value ...]\n";
    return 2;
  }
  const std::string name = argv[1];
  Args a;
  for (int i = 2; i < argc; ++i) {
    const std::string s = argv[i];
    const auto eq = s.find('=');
    a.kv[s.substr(0, eq)] = eq == std::string::npos ? "" : s.substr(eq + 1);
  }
  const std::map<std::string, Scenario> scenarios = {
      {"collectives", scenario_collectives}, {"collectives-fault", scenario_collectives_fault},
      {"ucx-pair", scenario_ucx_pair},       {"ucx-stream", scenario_ucx_stream},
      {"stage-link", scenario_stage_link},   {"kv", scenario_kv},
#ifdef TROUPE_PEER_NCCL
      {"nccl", scenario_nccl},
#endif
  };
  auto it = scenarios.find(name);
  if (it == scenarios.end()) {
    say("ERROR unknown scenario " + name);
    return 2;
  }
  try {
    it->second(a);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    say("ERROR " + msg);
    return 3;
  }
  say("DONE");
  return 0;
}
