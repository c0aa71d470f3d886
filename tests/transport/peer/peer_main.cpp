#include <cstdio>
#include <exception>
#include <iostream>
#include <map>

#include "peer.hpp"
#include "runtime/error.hpp"
#include "transport/stdio_bootstrap.hpp"

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
  stdio_say(line);
}

std::vector<Blob> bootstrap(const Blob& mine) {
  return stdio_bootstrap(mine, std::chrono::seconds(30));
}

void wait_go() {
  const std::string line = stdio_read_line(std::chrono::seconds(30));
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
      {"collectives", scenario_collectives},
      {"collectives-fault", scenario_collectives_fault},
      {"ucx-pair", scenario_ucx_pair},
      {"ucx-stream", scenario_ucx_stream},
      {"stage-link", scenario_stage_link},
      {"kv", scenario_kv},
#ifdef TROUPE_PEER_NCCL
      {"nccl", scenario_nccl},
      {"custom-ar", scenario_custom_ar},
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
