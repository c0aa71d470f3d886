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
#include "tests/models/recording_backend.hpp"

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

namespace {

// Fails the next finish_sample once armed, as a CUDA sampling whose row or kernel failed does.
class FailingFinish : public RecordingBackend {
 public:
  using RecordingBackend::RecordingBackend;
  bool fail_next = false;
  std::vector<SampledToken> finish_sample() override {
    std::vector<SampledToken> out = Backend::finish_sample();
    if (fail_next) {
      fail_next = false;
      fail("sample: injected failure");
    }
    return out;
  }
};

}  // namespace

TEST_CASE("a step whose sampling fails after the next one launched leaves a usable runner",
          "[exec][pipelined]") {
  // Step 1 samples; step 2 is launched on step 1's token (fed on the device); then step 1's
  // sampling fails. The executor actor fails both steps and resets the batch: afterwards
  // nothing is in flight and a new sequence runs normally.
  auto owned = std::make_unique<FailingFinish>(make_cpu_backend(1));
  FailingFinish& backend = *owned;
  ModelRunner r(std::move(owned), small_cpu_init());
  const int32_t vocab = int32_t(r.model_config().vocab_size);
  PlanDriver driver(4, 256, 8);
  const uint64_t a = driver.add(random_prompts({3}, vocab, 2)[0]);
  r.launch(driver.plan({a}));
  r.start_sampling();
  StepPlan ahead;  // a's fourth token, sampled by step 1, still in flight (block 0 holds it)
  ahead.step_id = 2;
  CachedSeq c;
  c.seq_id = a;
  c.num_computed_tokens = 3;
  c.num_new_tokens = 1;
  ahead.cached_seqs.push_back(c);
  CHECK_FALSE(r.must_finish_before(ahead));
  r.launch(ahead);
  backend.fail_next = true;
  CHECK_THROWS_WITH(r.finish(), Catch::Contains("injected failure"));
  r.reset_batch();
  CHECK_FALSE(r.launched());
  CHECK_FALSE(r.sampling_in_flight());
  CHECK(r.num_live_sequences() == 0);
  PlanDriver fresh(4, 256, 9);
  const uint64_t b = fresh.add(random_prompts({5}, vocab, 3)[0]);
  const StepResult res = r.execute(fresh.plan({b}));
  REQUIRE(res.outputs.size() == 1);
  CHECK(res.outputs[0].sampled);
}
