// A rank of a CPU collectives group killed (SIGKILL) or stopped (SIGSTOP) in the middle of a
// run: every other rank gets a troupe::Error naming it (rank and pid), the killed one within a
// bound far below the timeout, the stopped one at the timeout, never a hang.
#include <catch2/catch.hpp>

#include "collectives_harness.hpp"

using namespace troupe::test;

namespace {

struct FaultCase {
  std::string impl;
  int size;
  int victim;
  std::string how;  // kill | stop
  int timeout_ms;
};

void run_fault(const FaultCase& f) {
  const std::string prefix = shm_prefix();
  ProcessGroup g(
      f.size,
      [&](int r) {
        return std::vector<std::string>{"collectives-fault",
                                        fmt::format("impl={}", f.impl),
                                        fmt::format("rank={}", r),
                                        fmt::format("size={}", f.size),
                                        fmt::format("victim={}", f.victim),
                                        fmt::format("how={}", f.how),
                                        fmt::format("timeout_ms={}", f.timeout_ms),
                                        fmt::format("prefix={}", prefix),
                                        "tls=tcp",
                                        "n=16384",
                                        "at_step=3"};
      },
      prefix);
  const std::string err = g.exchange_blobs(20);
  INFO(err);
  REQUIRE(err.empty());
  const auto mark = g[f.victim].expect("MARK dying", after(20));
  INFO(g[f.victim].transcript());
  REQUIRE(mark);
  REQUIRE(*mark == "MARK dying");
  const auto t0 = Clock::now();
  const std::string name = fmt::format("rank {} (pid {} ", f.victim, g[f.victim].pid());
  for (int r = 0; r < f.size; ++r) {
    if (r == f.victim) continue;
    const auto line = g[r].expect("ERROR", after(f.timeout_ms / 1000.0 + 15));
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    INFO("rank " << r << " after " << s << " s:\n" << g[r].transcript());
    REQUIRE(line);
    CHECK(line->find(name) != std::string::npos);
    if (f.how == "kill") {
      CHECK(s < 5.0);  // death is noticed, not timed out (the timeout is 30 s)
    } else {
      CHECK(s > f.timeout_ms / 1000.0 * 0.8);
      CHECK(s < f.timeout_ms / 1000.0 + 8.0);
    }
    // The rank reports and exits: nothing hangs.
    CHECK(g[r].wait_exit(10).has_value());
  }
}

}  // namespace

TEST_CASE("shm collectives: a rank killed mid-collective is named by every other rank") {
  run_fault({"shm", 3, 2, "kill", 30000});
}
TEST_CASE("shm collectives: a stopped rank hits the timeout, named and reported as stopped") {
  run_fault({"shm", 2, 1, "stop", 1500});
}
TEST_CASE("ucx collectives: a rank killed mid-collective is named by every other rank (tcp)") {
  run_fault({"ucx", 3, 1, "kill", 30000});
}
TEST_CASE("ucx collectives: a stopped rank hits the timeout, not a hang (tcp)") {
  run_fault({"ucx", 2, 1, "stop", 1500});
}
