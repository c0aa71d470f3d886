// The CPU collectives (shared memory and UCX over tcp) with 2, 3 and 4 real rank processes:
// all_reduce_sum and all_gather from 1 element to 4 MiB against a float64 reference and the
// f32 sum in rank order (bit for bit), every rank with the same bits; and a rank that dies or
// stops mid-run is named by the others.
#include <catch2/catch.hpp>

#include "collectives_harness.hpp"

using namespace troupe::test;

namespace {

// 4 B to 4 MiB: both all_reduce paths (one-shot and reduce-scatter), 16-64 KiB included.
const std::string kSizes = "sizes=1,3,1000,4096,16384,65537,262144,1048576";
constexpr size_t kResults = 8 * 2 * 2;  // sizes x ops x passes

void run_ok(const std::string& impl, int size, std::vector<std::string> extra = {}) {
  const std::string prefix = shm_prefix();
  std::vector<std::string> args{fmt::format("impl={}", impl), kSizes,
                                fmt::format("prefix={}", prefix), "timeout_ms=20000"};
  args.insert(args.end(), extra.begin(), extra.end());
  check_collectives(run_ranks("collectives", size, args, 60, prefix), kResults);
  CHECK(remove_shm(prefix) == 0);  // connect() unlinked every segment
}

}  // namespace

TEST_CASE("shm collectives: 2 ranks, every size, exact and identical on every rank") {
  run_ok("shm", 2);
}
TEST_CASE("shm collectives: 3 ranks, 1 MiB slots (tensors in pieces)") {
  run_ok("shm", 3, {"slot_bytes=1048576"});
}
TEST_CASE("shm collectives: 4 ranks") {
  run_ok("shm", 4);
}
TEST_CASE("ucx collectives over tcp: 2 ranks") {
  run_ok("ucx", 2, {"tls=tcp"});
}
TEST_CASE("ucx collectives over tcp: 3 ranks") {
  run_ok("ucx", 3, {"tls=tcp"});
}
TEST_CASE("ucx collectives over tcp: 4 ranks") {
  run_ok("ucx", 4, {"tls=tcp"});
}
