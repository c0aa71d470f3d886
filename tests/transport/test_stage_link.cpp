// UcxStageLink between real stage processes: tags in order through three stages (1 B to 4 MiB,
// contents checked at every stage) on tcp and sm; tags received in another order than sent;
// a receive of the wrong size refused (and the link still usable); a dead neighbour (SIGKILL)
// failing the stage that needs it, in both directions.
#include <catch2/catch.hpp>

#include "collectives_harness.hpp"

using namespace troupe::test;

namespace {

void check_all_ok(const std::vector<RankOutcome>& stages, size_t expected) {
  size_t results = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    INFO("stage " << s << ": " << stages[s].end);
    REQUIRE(stages[s].end == "DONE");
    for (const auto& r : stages[s].results) {
      INFO("step " << r.at("step"));
      CHECK(r.at("ok") == "1");
      ++results;
    }
  }
  CHECK(results == expected);
}

void run_dead(const std::string& tls, int victim) {
  const int stages = 3;
  ProcessGroup g(stages, [&](int r) {
    return std::vector<std::string>{"stage-link",
                                    fmt::format("rank={}", r),
                                    fmt::format("size={}", stages),
                                    fmt::format("tls={}", tls),
                                    "mode=dead",
                                    fmt::format("victim={}", victim),
                                    "timeout_ms=30000"};
  });
  const std::string err = g.exchange_blobs(20);
  INFO(err);
  REQUIRE(err.empty());
  for (int r = 0; r < stages; ++r) {
    const auto line = g[r].expect("MARK ready", after(20));
    INFO(g[r].transcript());
    REQUIRE(line);
    REQUIRE(*line == "MARK ready");
  }
  const pid_t pid = g[victim].pid();
  g[victim].signal(SIGKILL);
  const auto t0 = Clock::now();
  for (int r : {victim - 1, victim + 1}) {
    if (r < 0 || r >= stages) continue;
    const auto line = g[r].expect("ERROR", after(30));
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    INFO("stage " << r << " after " << s << " s:\n" << g[r].transcript());
    REQUIRE(line);
    CHECK(line->find(fmt::format("stage {} (pid {} ", victim, pid)) != std::string::npos);
    CHECK(s < 5.0);  // the timeout is 30 s: the death was noticed
  }
}

}  // namespace

TEST_CASE("stage link: steps in order through three stages over tcp, contents checked") {
  check_all_ok(run_ranks("stage-link", 3, {"tls=tcp", "mode=ordered"}, 60), 12);
}
TEST_CASE("stage link: steps in order through three stages over sm, contents checked") {
  check_all_ok(run_ranks("stage-link", 3, {"tls=sm", "mode=ordered"}, 60), 12);
}
TEST_CASE("stage link: tags received in another order than sent are kept for their recv") {
  check_all_ok(run_ranks("stage-link", 2, {"tls=tcp", "mode=unordered"}, 60), 5);
}
TEST_CASE("stage link: a receive of the wrong size is refused, and the link still works") {
  ProcessGroup g(2, [](int r) {
    return std::vector<std::string>{"stage-link", fmt::format("rank={}", r), "size=2", "tls=tcp",
                                    "mode=mismatch"};
  });
  REQUIRE(g.exchange_blobs(20).empty());
  const auto refused = g[1].expect("RESULT what=mismatch", after(20));
  const auto message = g[1].expect("MARK", after(20));
  const auto after_ok = g[1].expect("RESULT what=after", after(20));
  INFO(g[1].transcript());
  REQUIRE(refused);
  CHECK(refused->find("refused=1") != std::string::npos);
  REQUIRE(message);
  CHECK(message->find("step 1 from stage 0 (pid") != std::string::npos);
  CHECK(message->find("carries 100 bytes; recv_prev on stage 1 expects 200") != std::string::npos);
  REQUIRE(after_ok);
  CHECK(after_ok->find("ok=1") != std::string::npos);
}
TEST_CASE("stage link: a killed stage fails the stages before and after it (tcp)") {
  run_dead("tcp", 1);
}
TEST_CASE("stage link: a killed stage fails the stages before and after it (sm)") {
  run_dead("sm", 1);
}
