// Pipelined steps on the CPU runner (tests/models/pipelined_case.hpp says what is checked),
// with exact-size and padded decode steps, and the order of the calls enforced.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/model_runner.hpp"
#include "tests/models/pipelined_case.hpp"
#include "tests/models/plan_driver.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

void run_case(RunnerOptions::PadDecode pad) {
  RunnerOptions o;
  o.pad_decode = pad;
  ModelRunner ref(make_cpu_backend(2), small_cpu_init(), o);
  ModelRunner pipe(make_cpu_backend(2), small_cpu_init(), o);
  pipelined_matches_sequential(ref, pipe, 4);
}

}  // namespace

TEST_CASE("pipelined steps give the sequential runner's tokens and logprobs bit for bit",
          "[exec][pipelined]") {
  SECTION("exact-size steps") { run_case(RunnerOptions::PadDecode::never); }
  SECTION("padded decode steps (the CUDA graph inputs)") {
    run_case(RunnerOptions::PadDecode::always);
  }
}

TEST_CASE("pipelined steps refuse calls out of order by name", "[exec][pipelined]") {
  ModelRunner r(make_cpu_backend(1), small_cpu_init());
  PlanDriver driver(4, 256, 3);
  const uint64_t id = driver.add(random_prompts({4}, int32_t(r.model_config().vocab_size), 1)[0]);
  CHECK_THROWS_WITH(r.start_sampling(), Catch::Contains("no step is launched"));
  CHECK_THROWS_WITH(r.finish(), Catch::Contains("no step is in flight"));
  const StepPlan first = driver.plan({id});
  r.launch(first);
  CHECK_THROWS_WITH(r.launch(first), Catch::Contains("is launched and not sampling yet"));
  CHECK_THROWS_WITH(r.execute(first), Catch::Contains("still in flight"));
  r.start_sampling();
  CHECK(r.pending_done());  // the CPU samples at once
  const StepResult res = r.finish();
  REQUIRE(res.outputs.size() == 1);
  CHECK(res.outputs[0].sampled);
  // A backend with no sampling in flight refuses feeds and finishes by name.
  auto b = make_cpu_backend(1);
  CHECK_THROWS_WITH(b->finish_sample(), Catch::Contains("no sampling is in flight"));
}
