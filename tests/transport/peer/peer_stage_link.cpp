// Scenario "stage-link": a pipeline of UcxStageLinks. mode=
//   ordered    stage 0 sends steps 1..6 (1 B to 4 MiB); each middle stage checks and forwards
//              its own pattern; the last checks
//   unordered  stage 0 sends steps 5, 3, 9, 1, 7; stage 1 receives 1, 3, 5, 7, 9
//   mismatch   a receive of the wrong size is refused; the link still works afterwards
//   dead       stage `victim` is killed by the test after step 1; its neighbour must fail
#include <chrono>
#include <cstring>
#include <thread>

#include "peer.hpp"
#include "runtime/error.hpp"
#include "transport/stage/ucx_stage_link.hpp"

namespace troupe::peer {

namespace {

std::vector<uint8_t> step_bytes(uint64_t tag, int32_t stage, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t((i * 7 + tag * 13 + size_t(stage) * 101) & 0xff);
  return v;
}

size_t step_size(uint64_t tag) {
  static const size_t sizes[] = {1, 1000, 8192, 65536, 1 << 20, 4 << 20};
  return sizes[(tag - 1) % 6];
}

std::vector<uint8_t> recv(UcxStageLink& link, uint64_t tag, size_t n) {
  std::vector<uint8_t> got(n);
  link.recv_prev(tag, got.data(), n);
  return got;
}

}  // namespace

void scenario_stage_link(const Args& a) {
  UcxStageLinkSettings s;
  s.ucx.tls = a.str("tls", "tcp");
  s.ucx.net_devices = a.str("dev", s.ucx.tls == "tcp" ? "lo" : "");
  s.ucx.timeout = std::chrono::milliseconds(a.num("timeout_ms", 10000));
  const auto stage = int32_t(a.num("rank")), stages = int32_t(a.num("size"));
  UcxStageLink link(stage, stages, s);
  link.connect(bootstrap(link.blob()));
  const std::string mode = a.str("mode", "ordered");
  const bool first = stage == 0, last = stage == stages - 1;

  if (mode == "ordered") {
    for (uint64_t tag = 1; tag <= 6; ++tag) {
      const size_t n = step_size(tag);
      if (!first) {
        const bool ok = recv(link, tag, n) == step_bytes(tag, stage - 1, n);
        say(fmt::format("RESULT step={} bytes={} ok={}", tag, n, int(ok)));
      }
      if (!last) {
        const auto out = step_bytes(tag, stage, n);
        link.send_next(tag, out.data(), n);
      }
    }
  } else if (mode == "unordered") {
    if (first)
      for (uint64_t tag : {5, 3, 9, 1, 7}) {
        const auto out = step_bytes(tag, 0, step_size(tag));
        link.send_next(tag, out.data(), out.size());
      }
    else
      for (uint64_t tag : {1, 3, 5, 7, 9}) {
        const bool ok = recv(link, tag, step_size(tag)) == step_bytes(tag, 0, step_size(tag));
        say(fmt::format("RESULT step={} ok={}", tag, int(ok)));
      }
  } else if (mode == "mismatch") {
    if (first) {
      const auto m1 = step_bytes(1, 0, 100), m2 = step_bytes(2, 0, 200);
      link.send_next(1, m1.data(), m1.size());
      link.send_next(2, m2.data(), m2.size());
    } else {
      std::string refused;
      try {
        recv(link, 1, 200);
      } catch (const Error& e) {
        refused = e.what();
      }
      say(fmt::format("RESULT what=mismatch refused={} message={}", int(!refused.empty()),
                      refused.empty() ? "none" : "see-next-line"));
      say(fmt::format("MARK {}", refused));
      const bool ok = recv(link, 2, 200) == step_bytes(2, 0, 200);
      say(fmt::format("RESULT what=after ok={}", int(ok)));
    }
  } else if (mode == "dead") {
    // Step 1 goes through; then the victim waits to be killed and the others keep working
    // until the link fails.
    const auto victim = int32_t(a.num("victim"));
    if (!first) {
      const bool ok = recv(link, 1, 4096) == step_bytes(1, stage - 1, 4096);
      say(fmt::format("RESULT step=1 ok={}", int(ok)));
    }
    if (!last) {
      const auto out = step_bytes(1, stage, 4096);
      link.send_next(1, out.data(), out.size());
    }
    say("MARK ready");
    if (stage == victim) {
      wait_go();  // the test kills this process instead
      fail("peer: stage {} was not killed", stage);
    }
    for (uint64_t tag = 2; tag < 3000; ++tag) {
      const auto out = step_bytes(tag, stage, 4096);
      if (stage < victim) link.send_next(tag, out.data(), out.size());
      if (stage > victim) recv(link, tag, 4096);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    fail("peer: stage {} never noticed stage {} died", stage, victim);
  } else {
    fail("peer: unknown stage-link mode {}", mode);
  }
}

}  // namespace troupe::peer
