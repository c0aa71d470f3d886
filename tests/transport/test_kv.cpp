// KV-block moves between two real processes: a KvRegion in a per-layer layout (the model
// runner's swap space: one plane per layer for K and for V) and a KvRemote over a contiguous
// local region; reads and writes checked byte for byte (and the blocks not moved untouched),
// by RMA and by active messages, on tcp and on shared memory, in the caller's memory and in
// memory UCX allocated; a block outside the region
// refused; a killed region failing the read that needs it.
#include <catch2/catch.hpp>

#include "collectives_harness.hpp"

using namespace troupe::test;

namespace {

void run_kv(const std::string& tls, const std::string& method, const std::string& region = "user",
            const std::string& local = "contiguous") {
  ProcessGroup g(2, [&](int r) {
    return std::vector<std::string>{"kv",
                                    fmt::format("rank={}", r),
                                    "size=2",
                                    fmt::format("tls={}", tls),
                                    fmt::format("method={}", method),
                                    fmt::format("region={}", region),
                                    fmt::format("local={}", local)};
  });
  REQUIRE(g.exchange_blobs(20).empty());
  std::map<std::string, std::map<std::string, std::string>> res;
  for (;;) {
    const auto line = g[1].expect("", after(30));
    INFO(g[1].transcript());
    REQUIRE(line);
    if (*line == "DONE") break;
    REQUIRE(line->rfind("ERROR", 0) != 0);
    if (line->rfind("RESULT", 0) == 0) res[parse_result(*line).at("what")] = parse_result(*line);
  }
  g[0].write_line("GO");
  const auto written = g[0].expect("RESULT", after(30));
  INFO(g[0].transcript());
  REQUIRE(written);
  const auto w = parse_result(*written);
  CHECK(res["method"].at("used") == method);
  CHECK(res["read"].at("ok") == "1");
  CHECK(res["read"].at("untouched") == "1");
  CHECK(res["refused"].at("ok") == "1");
  CHECK(res["write_read_back"].at("ok") == "1");
  CHECK(w.at("ok") == "1");
  CHECK(w.at("untouched") == "1");
  if (method == "am") {  // served by the region's thread: 3 + 2 reads, 2 writes
    CHECK(w.at("served_reads") == "5");
    CHECK(w.at("served_writes") == "2");
  }
}

}  // namespace

TEST_CASE("kv: blocks read and written by active messages over tcp") {
  run_kv("tcp", "am");
}
TEST_CASE("kv: blocks read and written by RMA over tcp") {
  run_kv("tcp", "rma");
}
TEST_CASE("kv: blocks read and written by RMA over sm") {
  run_kv("sm", "rma");
}
TEST_CASE("kv: blocks read and written by active messages over sm") {
  run_kv("sm", "am");
}
TEST_CASE("kv: blocks read and written by RMA over sm into a region UCX allocated") {
  run_kv("sm", "rma", "alloc");
}
TEST_CASE("kv: blocks read and written by active messages over tcp, region UCX allocated") {
  run_kv("tcp", "am", "alloc");
}
TEST_CASE("kv: per-layer layouts on both sides, by active messages (iov on sm, staged on tcp)") {
  run_kv("tcp", "am", "user", "per_layer");
  run_kv("sm", "am", "user", "per_layer");
}
TEST_CASE("kv: per-layer layouts on both sides, by RMA over tcp") {
  run_kv("tcp", "rma", "user", "per_layer");
}
TEST_CASE("kv: a killed region fails the read that needs it, naming its process") {
  ProcessGroup g(2, [](int r) {
    return std::vector<std::string>{
        "kv",        fmt::format("rank={}", r), "size=2", "tls=tcp", "method=am",
        "mode=dead", "timeout_ms=30000"};
  });
  REQUIRE(g.exchange_blobs(20).empty());
  REQUIRE(g[1].expect("MARK ready", after(20)));
  const pid_t pid = g[0].pid();
  g[0].signal(SIGKILL);
  const auto t0 = Clock::now();
  g[1].write_line("GO");
  const auto line = g[1].expect("ERROR", after(40));
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  INFO(g[1].transcript());
  REQUIRE(line);
  CHECK(line->find(fmt::format("pid {} ", pid)) != std::string::npos);
  CHECK(s < 5.0);
}
