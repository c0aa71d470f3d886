// The UCX layer between two real processes, on tcp (loopback) and on shared memory: active
// messages eager and rendezvous (1 MiB) with contents checked, RMA get / put + flush with
// contents checked, a peer killed (SIGKILL) mid-transfer giving an error within a bound, and a
// stopped peer (SIGSTOP) hitting the timeout instead of a hang.
#include <catch2/catch.hpp>

#include "collectives_harness.hpp"

using namespace troupe::test;

namespace {

void run_pair(const std::string& tls) {
  const auto ranks = run_ranks("ucx-pair", 2, {fmt::format("tls={}", tls)}, 30);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << ranks[size_t(r)].end);
    REQUIRE(ranks[size_t(r)].end == "DONE");
  }
  std::map<std::string, std::map<std::string, std::string>> by_what;
  for (const auto& rank : ranks)
    for (const auto& res : rank.results) by_what[res.at("what")] = res;
  for (const char* what : {"am_eager", "am_rndv", "am_rndv_received", "rma_get", "rma_put"}) {
    INFO(what);
    REQUIRE(by_what.count(what) == 1);
    CHECK(by_what[what].at("ok") == "1");
  }
  // The 1 MiB messages took the rendezvous path (ucp_am_recv_data_nbx) on both sides.
  CHECK(std::stoi(by_what["am_rndv"].at("rndv_seen")) >= 1);
  CHECK(std::stoi(by_what["am_rndv_received"].at("rndv_seen")) >= 1);
}

// Rank `sender` streams 8 MiB messages to the other; the test signals rank `victim` once both
// stream. The survivor must report an error naming the victim: within `bound_s` of a SIGKILL,
// or after its timeout for a SIGSTOP.
void run_stream_fault(const std::string& tls, int sender, int victim, int sig, int timeout_ms,
                      double bound_s) {
  ProcessGroup g(2, [&](int r) {
    return std::vector<std::string>{"ucx-stream",
                                    fmt::format("rank={}", r),
                                    "size=2",
                                    fmt::format("tls={}", tls),
                                    fmt::format("sender={}", sender),
                                    fmt::format("timeout_ms={}", timeout_ms)};
  });
  const std::string err = g.exchange_blobs(20);
  INFO(err);
  REQUIRE(err.empty());
  for (int r = 0; r < 2; ++r) {
    const auto mark = g[r].expect("MARK streaming", after(20));
    INFO(g[r].transcript());
    REQUIRE(mark);
    REQUIRE(*mark == "MARK streaming");
  }
  g[victim].signal(sig);
  const auto t0 = Clock::now();
  const int survivor = 1 - victim;
  const auto line = g[survivor].expect("ERROR", after(timeout_ms / 1000.0 + 15));
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  INFO("survivor rank " << survivor << " after " << s << " s:\n" << g[survivor].transcript());
  REQUIRE(line);
  CHECK(line->find(fmt::format("rank {} (pid {} ", victim, g[victim].pid())) != std::string::npos);
  CHECK(s < bound_s);
  if (sig == SIGSTOP) {
    CHECK(s > timeout_ms / 1000.0 * 0.8);
    CHECK(line->find("timeout") != std::string::npos);
  }
  CHECK(g[survivor].wait_exit(10).has_value());
}

}  // namespace

TEST_CASE("ucx: active messages (eager, 1 MiB rendezvous) and RMA get/put+flush over tcp") {
  run_pair("tcp");
}
TEST_CASE("ucx: active messages (eager, 1 MiB rendezvous) and RMA get/put+flush over sm") {
  run_pair("sm");
}
TEST_CASE("ucx: a sender killed mid-transfer fails the receiver within 3 s (tcp)") {
  run_stream_fault("tcp", 1, 1, SIGKILL, 30000, 3.0);
}
TEST_CASE("ucx: a receiver killed mid-transfer fails the sender within 3 s (tcp)") {
  run_stream_fault("tcp", 1, 0, SIGKILL, 30000, 3.0);
}
TEST_CASE("ucx: a sender killed mid-transfer fails the receiver within 5 s (sm)") {
  run_stream_fault("sm", 1, 1, SIGKILL, 30000, 5.0);
}
TEST_CASE("ucx: a receiver killed mid-transfer fails the sender within 5 s (sm)") {
  run_stream_fault("sm", 1, 0, SIGKILL, 30000, 5.0);
}
TEST_CASE("ucx: a stopped sender hits the receiver's timeout, not a hang (tcp)") {
  run_stream_fault("tcp", 1, 1, SIGSTOP, 1500, 10.0);
}
TEST_CASE("ucx: a stopped receiver hits the sender's timeout, not a hang (sm)") {
  run_stream_fault("sm", 1, 0, SIGSTOP, 1500, 10.0);
}
