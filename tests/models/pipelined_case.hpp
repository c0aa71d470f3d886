// The pipelined-steps case (ModelRunner::launch / finish / start_sampling, what the executor
// actor runs) shared by the CPU runner test and the CUDA one: step N+1's forward is launched
// while step N's tokens are still being sampled, its input tokens fed from N's sampling on the
// device, and its plan made the way the async scheduler makes it (N's tokens not yet known to
// it, confirmed one plan later). Every result must be bit for bit the sequential runner's:
// greedy with logprobs, seeded sampling with penalties, top-k, min-p and logit bias (whose rows
// need N's token on the host), a sequence joining with prompt logprobs, and one leaving while
// its last token is still in flight.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <vector>

#include "runtime/exec/model_runner.hpp"
#include "tests/models/plan_driver.hpp"

namespace troupe::testing {

inline void check_same(const StepResult& got, const StepResult& want) {
  INFO("step " << want.step_id);
  CHECK(got.step_id == want.step_id);
  REQUIRE(got.outputs.size() == want.outputs.size());
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    const SeqStepOutput &g = got.outputs[i], &w = want.outputs[i];
    INFO("sequence " << w.seq_id);
    CHECK(g.seq_id == w.seq_id);
    CHECK(g.sampled == w.sampled);
    CHECK(g.token == w.token);
    CHECK(g.logprobs.chosen.token == w.logprobs.chosen.token);
    CHECK(g.logprobs.chosen.logprob == w.logprobs.chosen.logprob);
    CHECK(g.logprobs.chosen.rank == w.logprobs.chosen.rank);
    REQUIRE(g.logprobs.top.size() == w.logprobs.top.size());
    for (size_t j = 0; j < w.logprobs.top.size(); ++j) {
      CHECK(g.logprobs.top[j].token == w.logprobs.top[j].token);
      CHECK(g.logprobs.top[j].logprob == w.logprobs.top[j].logprob);
    }
    REQUIRE(g.prompt_logprobs.size() == w.prompt_logprobs.size());
    for (size_t j = 0; j < w.prompt_logprobs.size(); ++j)
      CHECK(g.prompt_logprobs[j].chosen.logprob == w.prompt_logprobs[j].chosen.logprob);
  }
}

// The sequential runs' plans as the async scheduler sends them to a pipelined executor: a
// token sampled by the step just before a plan is not known yet (the executor holds it), so
// it is confirmed by the sequence's next plan instead.
class AheadPlans {
 public:
  StepPlan convert(StepPlan plan, const std::map<uint64_t, bool>& sampled_last_step) {
    for (CachedSeq& c : plan.cached_seqs) {
      std::vector<int32_t> full = withheld_[c.seq_id];
      full.insert(full.end(), c.appended_token_ids.begin(), c.appended_token_ids.end());
      withheld_[c.seq_id].clear();
      const auto it = sampled_last_step.find(c.seq_id);
      if (it != sampled_last_step.end() && it->second && !full.empty()) {
        withheld_[c.seq_id].push_back(full.back());
        full.pop_back();
      }
      c.appended_token_ids = full;
    }
    return plan;
  }

 private:
  std::map<uint64_t, std::vector<int32_t>> withheld_;
};

/// Feeds `ref` sequential plans and `pipe` the same steps pipelined (launch N+1, finish N,
/// start N+1's sampling) with the plans the async scheduler would send; every result must be
/// the same bit for bit. Both runners: the same init (block_size, at least 64 blocks).
inline void pipelined_matches_sequential(ModelRunner& ref, ModelRunner& pipe, int32_t block_size) {
  const int32_t vocab = int32_t(ref.model_config().vocab_size);
  PlanDriver driver(block_size, ref.info().num_blocks, 11);
  const auto prompts = random_prompts({5, 9, 3, 7, 6}, vocab, 21);

  SeqSampling greedy = PlanDriver::greedy();
  greedy.num_logprobs = 2;
  SeqSampling penalised;
  penalised.temperature = 0.9f;
  penalised.seed = 7;
  penalised.top_k = 20;
  penalised.frequency_penalty = 0.5f;
  penalised.repetition_penalty = 1.2f;
  penalised.num_logprobs = 1;
  SeqSampling biased;
  biased.seed = 3;
  biased.min_p = 0.05f;
  biased.presence_penalty = 0.3f;
  biased.logit_bias = {{1, 2.0f}, {5, -1.5f}};
  SeqSampling prompt_lp = PlanDriver::greedy();
  prompt_lp.num_prompt_logprobs = 2;

  const uint64_t a = driver.add(prompts[0], greedy);
  const uint64_t b = driver.add(prompts[1], penalised);
  const uint64_t c = driver.add(prompts[2], biased);
  const uint64_t e = driver.add(prompts[4], penalised);
  uint64_t d = 0;

  // The sequential reference: each plan made after the previous step's tokens are known.
  std::vector<StepPlan> plans;
  std::vector<StepResult> want;
  std::vector<uint64_t> batch{a, b, c, e};
  for (int k = 0; k < 12; ++k) {
    if (k == 4) {  // a prompt with prompt logprobs joins the decodes
      d = driver.add(prompts[3], prompt_lp);
      batch.push_back(d);
    }
    StepPlan plan = driver.plan(batch);
    if (k == 6) {  // e leaves; its last token (step 6's) is still in flight when step 7 comes
      batch.erase(std::find(batch.begin(), batch.end(), e));
    }
    if (k == 7) plan.finished_seq_ids.push_back(e);
    want.push_back(ref.execute(plan));
    driver.apply(want.back());
    plans.push_back(std::move(plan));
  }

  // Pipelined: launch N+1, then finish N, then start N+1's sampling.
  AheadPlans ahead;
  std::map<uint64_t, bool> sampled_last;
  std::vector<StepResult> got;
  for (size_t k = 0; k < plans.size(); ++k) {
    const StepPlan plan = ahead.convert(plans[k], sampled_last);
    if (pipe.sampling_in_flight() && pipe.must_finish_before(plan)) {
      CHECK(k == 7);  // the plan that forgets e, whose token step 6 is drawing
      CHECK_THROWS_WITH(pipe.launch(plan), Catch::Contains("finish that step first"));
      got.push_back(pipe.finish());
    }
    pipe.launch(plan);
    if (pipe.sampling_in_flight()) got.push_back(pipe.finish());
    pipe.start_sampling();
    sampled_last.clear();
    for (const SeqStepOutput& o : want[k].outputs) sampled_last[o.seq_id] = o.sampled;
  }
  got.push_back(pipe.finish());
  CHECK_FALSE(pipe.sampling_in_flight());

  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < want.size(); ++k) check_same(got[k], want[k]);
  // The prompt-logprob step really had them, and the sampled rows really sampled.
  CHECK_FALSE(want[4].outputs.empty());
  bool had_prompt_logprobs = false;
  for (const SeqStepOutput& o : want[4].outputs)
    had_prompt_logprobs = had_prompt_logprobs || !o.prompt_logprobs.empty();
  CHECK(had_prompt_logprobs);
  CHECK(pipe.stats().steps == ref.stats().steps);
  CHECK(pipe.stats().padded_steps == ref.stats().padded_steps);
}

}  // namespace troupe::testing
