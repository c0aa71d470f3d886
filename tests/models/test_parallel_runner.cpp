// Tensor and pipeline parallelism at the runner level: the transformers fixtures run split
// over 2 TP ranks, 2 pipeline stages and 2 x 2, each rank a ModelRunner on its own CPU backend
// and thread (tests/models/local_group.hpp joins them), against one unsplit runner fed the
// same plans: the same greedy tokens and logprobs within 1e-5 (float32; only the order of the
// sums over split dimensions differs).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/model_runner.hpp"
#include "tests/models/local_group.hpp"
#include "tests/models/pipelined_case.hpp"
#include "tests/models/plan_driver.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

ExecutorInit fixture_init(const std::string& fixture) {
  ExecutorInit init = small_cpu_init();
  init.model_dir = std::string(TROUPE_FIXTURES_DIR) + "/models/" + fixture;
  return init;
}

// Every rank of a tp x pp layout, rank (t, p) at index p * tp + t.
struct Layout {
  int32_t tp = 1, pp = 1;
  std::vector<std::unique_ptr<LocalGroup>> groups;  // one TP group per stage
  std::vector<std::unique_ptr<ModelRunner>> runners;

  Layout(const std::string& fixture, int32_t tp_size, int32_t pp_size, RunnerOptions options)
      : tp(tp_size), pp(pp_size) {
    // pipes[p][t]: stage p -> p + 1 for TP index t
    std::vector<std::vector<std::shared_ptr<LocalPipe>>> pipes(static_cast<size_t>(pp));
    for (auto& row : pipes)
      for (int32_t t = 0; t < tp; ++t) row.push_back(std::make_shared<LocalPipe>());
    for (int32_t p = 0; p < pp; ++p) groups.push_back(std::make_unique<LocalGroup>(tp));
    runners.resize(size_t(tp * pp));
    // Ranks of one stage load together: their backends' groups meet inside load-time ops only
    // if a model calls collectives there (it does not), so plain sequential construction works.
    for (int32_t p = 0; p < pp; ++p) {
      for (int32_t t = 0; t < tp; ++t) {
        ExecutorInit init = fixture_init(fixture);
        init.tp_rank = t;
        init.tp_size = tp;
        init.pp_rank = p;
        init.pp_size = pp;
        auto backend = make_cpu_backend(1);
        if (tp > 1) backend->set_collectives(groups[size_t(p)]->rank(t));
        std::shared_ptr<StageLink> link;
        if (pp > 1)
          link = std::make_shared<LocalStageLink>(p > 0 ? pipes[size_t(p - 1)][size_t(t)] : nullptr,
                                                  p + 1 < pp ? pipes[size_t(p)][size_t(t)] : nullptr);
        runners[size_t(p * tp + t)] =
            std::make_unique<ModelRunner>(std::move(backend), init, options, link);
      }
    }
  }

  /// Runs the plan on every rank at once; returns the driver's result (last stage, TP rank 0),
  /// after checking that the other ranks of the last stage sampled the same tokens.
  StepResult execute(const StepPlan& plan) {
    std::vector<StepResult> results(runners.size());
    std::vector<std::string> errors(runners.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < runners.size(); ++i)
      threads.emplace_back([&, i] {
        try {
          results[i] = runners[i]->execute(plan);
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < errors.size(); ++i)
      if (!errors[i].empty()) FAIL("rank " << i << ": " << errors[i]);
    const size_t driver = size_t((pp - 1) * tp);
    for (int32_t t = 1; t < tp; ++t) {
      const StepResult& other = results[driver + size_t(t)];
      REQUIRE(other.outputs.size() == results[driver].outputs.size());
      for (size_t o = 0; o < other.outputs.size(); ++o) {
        CHECK(other.outputs[o].token == results[driver].outputs[o].token);
        CHECK(other.outputs[o].logprobs.chosen.logprob ==
              results[driver].outputs[o].logprobs.chosen.logprob);
      }
    }
    // Earlier stages sample nothing.
    for (size_t i = 0; i < driver; ++i)
      for (const SeqStepOutput& o : results[i].outputs) CHECK_FALSE(o.sampled);
    return results[driver];
  }
};

void check_layout(const std::string& fixture, int32_t tp, int32_t pp,
                  RunnerOptions::PadDecode pad) {
  INFO(fixture << " at tp " << tp << " x pp " << pp);
  RunnerOptions options;
  options.pad_decode = pad;
  ModelRunner ref(make_cpu_backend(1), fixture_init(fixture), options);
  Layout split(fixture, tp, pp, options);
  const auto vocab = int32_t(ref.model_config().vocab_size);
  PlanDriver driver(4, 256, 5);
  SeqSampling greedy = PlanDriver::greedy();
  greedy.num_logprobs = 3;
  SeqSampling scored = greedy;
  scored.num_prompt_logprobs = 2;
  std::vector<uint64_t> ids;
  const auto prompts = random_prompts({6, 11, 3, 9}, vocab, 17);
  for (size_t i = 0; i < prompts.size(); ++i)
    ids.push_back(driver.add(prompts[i], i == 1 ? scored : greedy));
  for (int step = 0; step < 8; ++step) {
    // Sequences join over the first steps, so prompts and decodes share steps.
    std::vector<uint64_t> batch(ids.begin(), ids.begin() + std::min<ptrdiff_t>(2 + step, 4));
    const StepPlan plan = driver.plan(batch);
    const StepResult want = ref.execute(plan);
    const StepResult got = split.execute(plan);
    REQUIRE(got.outputs.size() == want.outputs.size());
    for (size_t o = 0; o < want.outputs.size(); ++o) {
      const SeqStepOutput& w = want.outputs[o];
      const SeqStepOutput& g = got.outputs[o];
      INFO("step " << step << ", sequence " << w.seq_id);
      CHECK(g.seq_id == w.seq_id);
      CHECK(g.sampled == w.sampled);
      CHECK(g.token == w.token);
      CHECK(std::abs(g.logprobs.chosen.logprob - w.logprobs.chosen.logprob) <= 1e-5f);
      REQUIRE(g.logprobs.top.size() == w.logprobs.top.size());
      for (size_t k = 0; k < w.logprobs.top.size(); ++k) {
        CHECK(g.logprobs.top[k].token == w.logprobs.top[k].token);
        CHECK(std::abs(g.logprobs.top[k].logprob - w.logprobs.top[k].logprob) <= 1e-5f);
      }
      REQUIRE(g.prompt_logprobs.size() == w.prompt_logprobs.size());
      for (size_t k = 0; k < w.prompt_logprobs.size(); ++k)
        CHECK(std::abs(g.prompt_logprobs[k].chosen.logprob -
                       w.prompt_logprobs[k].chosen.logprob) <= 1e-5f);
    }
    driver.apply(want);
  }
}

}  // namespace

TEST_CASE("tensor and pipeline parallel runners give one rank's tokens and logprobs",
          "[exec][parallel]") {
  const auto pad = GENERATE(RunnerOptions::PadDecode::never, RunnerOptions::PadDecode::always);
  for (const char* fixture : {"llama_gqa", "qwen2", "llama3_tied", "llama_gelu", "qwen3"}) {
    check_layout(fixture, 2, 1, pad);
    check_layout(fixture, 1, 2, pad);
    check_layout(fixture, 2, 2, pad);
  }
}

TEST_CASE("a split model refuses to run without its group or its stage link", "[exec][parallel]") {
  ExecutorInit init = fixture_init("llama_gqa");
  init.pp_size = 2;
  CHECK_THROWS_WITH(ModelRunner(make_cpu_backend(1), init),
                    Catch::Contains("no stage link"));
  init.pp_size = 1;
  init.tp_size = 2;
  ModelRunner r(make_cpu_backend(1), init);  // loads its slices; the forward needs the group
  PlanDriver driver(4, 64, 1);
  const uint64_t id = driver.add({1, 2, 3});
  CHECK_THROWS_WITH(r.execute(driver.plan({id})),
                    Catch::Contains("tensor_parallel_size 2") &&
                        Catch::Contains("Backend::set_collectives"));
}
