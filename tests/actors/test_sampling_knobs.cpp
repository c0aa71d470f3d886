// Every sampling knob (runtime/sampling/sampling_knobs.hpp) set in SamplingParams reaches the
// SamplingRow a backend samples with, through every hop a sequence takes: the engine's fan-out
// (OutputProcessor::add), the scheduler and cache manager (the StepPlan's NewSeq), the wire to
// a remote executor (CAF serialisation of the plan, as actors/messages.hpp inspects it) and the
// executor's model runner building the rows. The knobs are walked through their one list, so a
// knob added to SamplingKnobs and dropped by any hop fails here.
#include <catch2/catch.hpp>

#include <caf/all.hpp>

#include <vector>

#include "actors/messages.hpp"
#include "cpu/cpu_backend.hpp"
#include "runtime/api/output_processor.hpp"
#include "runtime/exec/model_runner.hpp"
#include "runtime/sched/scheduler.hpp"
#include "tests/models/plan_driver.hpp"
#include "tests/models/recording_backend.hpp"

using namespace troupe;

namespace {

/// The CPU backend, keeping a copy of every SamplingRow it is asked to sample.
class RowKeepingBackend : public testing::RecordingBackend {
 public:
  explicit RowKeepingBackend(std::vector<SamplingRow>* rows)
      : RecordingBackend(make_cpu_backend(1)), rows_(rows) {}
  std::vector<SampledToken> sample(const Tensor& l, std::span<const SamplingRow> r) override {
    rows_->insert(rows_->end(), r.begin(), r.end());
    return RecordingBackend::sample(l, r);
  }

 private:
  std::vector<SamplingRow>* rows_;
};

/// How many knobs of `a` differ from `b`'s.
size_t knobs_differing(const SamplingKnobs& a, const SamplingKnobs& b) {
  return with_knobs(a, [&](const auto&... x) {
    return with_knobs(b, [&](const auto&... y) { return (size_t(x != y) + ...); });
  });
}
size_t num_knobs() {
  const SamplingKnobs k;
  return with_knobs(k, [](const auto&... x) { return sizeof...(x); });
}

}  // namespace

TEST_CASE("every sampling knob set in SamplingParams reaches the backend's SamplingRow",
          "[engine][sampling]") {
  // A non-default value for every knob (each one's own field in SamplingParams).
  SamplingParams p;
  p.temperature = 0.7;
  p.top_k = 5;
  p.top_p = 0.9;
  p.min_p = 0.05;
  p.presence_penalty = 0.3;
  p.frequency_penalty = 0.2;
  p.repetition_penalty = 1.1;
  p.seed = 1234;
  p.max_tokens = 1;
  REQUIRE_NOTHROW(validate(p));
  const SamplingKnobs wanted = sampling_knobs(p, 1234);
  INFO("a knob missing here was not set from SamplingParams (sampling_knobs) or by this test");
  REQUIRE(knobs_differing(wanted, SamplingKnobs{}) == num_knobs());

  // The engine's fan-out.
  OutputProcessorConfig oc;
  oc.max_model_len = 128;
  oc.vocab_size = 256;
  OutputProcessor proc(oc, nullptr);
  OutputProcessor::Admission a = proc.add("", "", {5, 6, 7, 8, 9}, p, false);
  REQUIRE(a.seqs.size() == 1);
  CHECK(static_cast<const SamplingKnobs&>(a.seqs[0].sampling) == wanted);

  // The scheduler and cache manager make the plan that carries it to the executors.
  const ExecutorInit init = [] {
    ExecutorInit i = testing::small_cpu_init();
    i.enforce_eager = true;
    return i;
  }();
  Scheduler sched(
      SchedulerConfig{init.max_num_batched_tokens, init.max_num_seqs, init.max_model_len, true});
  KVCacheManager kv(64, init.block_size, false);
  sched.add(a.seqs[0]);
  StepPlan plan = sched.apply(kv.grant(sched.propose()));
  REQUIRE(plan.new_seqs.size() == 1);

  // The wire to a remote executor.
  std::vector<char> buf;
  caf::binary_serializer out(nullptr, buf);
  REQUIRE_FALSE(out(plan));
  StepPlan received;
  caf::binary_deserializer in(nullptr, buf);
  REQUIRE_FALSE(in(received));
  REQUIRE(received.new_seqs.size() == 1);
  CHECK(static_cast<const SamplingKnobs&>(received.new_seqs[0].sampling) == wanted);

  // The executor's runner builds the row the backend samples with.
  std::vector<SamplingRow> rows;
  ModelRunner runner(std::make_unique<RowKeepingBackend>(&rows), init);
  const StepResult r = runner.execute(received);
  REQUIRE(r.outputs.size() == 1);
  CHECK(r.outputs[0].sampled);
  REQUIRE(rows.size() == 1);
  const SamplingKnobs& got = rows[0];
  CHECK(knobs_differing(got, wanted) == 0);
  CHECK(got == wanted);
}
