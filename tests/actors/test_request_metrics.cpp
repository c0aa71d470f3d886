// RequestOutput.metrics (vLLM's RequestMetrics) and each CompletionOutput's times, through the
// whole actor pipeline on the CPU backend: every time is one a real request went through, in
// order (arrival <= first scheduled <= first token <= last token <= finished), the request's
// times are its sequences' first and last, and a request that waits for a free slot is first
// scheduled only after the one before it ended.
#include <catch2/catch.hpp>

#include <filesystem>

#include "actors/llm.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const fs::path kModel = fs::path(TROUPE_FIXTURES_DIR) / "models" / "llama_gqa";

EngineArgs args() {
  EngineArgs a;
  a.model = kModel.string();
  a.skip_tokenizer_init = true;  // the fixture has no tokenizer: prompts are token ids
  a.disable_log_stats = true;
  a.max_model_len = 128;
  a.dtype = "float32";
  return a;
}

std::vector<Prompt> prompts(size_t count, size_t len) {
  std::vector<Prompt> out;
  for (size_t i = 0; i < count; ++i) {
    std::vector<int32_t> ids;
    for (size_t k = 0; k < len + i; ++k) ids.push_back(int32_t(1 + (i * 31 + k * 7) % 200));
    out.emplace_back(ids);
  }
  return out;
}

SamplingParams params(int64_t n, int64_t max_tokens) {
  SamplingParams p;
  p.n = n;
  p.seed = 7;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.detokenize = false;
  return p;
}

/// Every time of a finished request is there, in the order the request lived through them.
void check_times(const RequestOutput& o) {
  INFO("request " << o.request_id);
  REQUIRE(o.finished);
  const RequestMetrics& m = o.metrics;
  REQUIRE(m.first_scheduled_time);
  REQUIRE(m.first_token_time);
  REQUIRE(m.last_token_time);
  REQUIRE(m.finished_time);
  REQUIRE(m.time_in_queue);
  CHECK(m.arrival_time > 1.7e9);  // the epoch clock: after 2023
  CHECK(m.arrival_time <= *m.first_scheduled_time);
  CHECK(*m.first_scheduled_time <= *m.first_token_time);
  CHECK(*m.first_token_time <= *m.last_token_time);
  CHECK(*m.last_token_time <= *m.finished_time);
  CHECK(*m.time_in_queue == *m.first_scheduled_time - m.arrival_time);
  // The request's times are its sequences' earliest and latest.
  std::optional<double> first_scheduled, first_token, last_token;
  for (const CompletionOutput& c : o.outputs) {
    INFO("sequence " << c.index);
    const SequenceTimes& t = c.times;
    REQUIRE(t.first_scheduled_time);
    REQUIRE(t.first_token_time);
    REQUIRE(t.last_token_time);
    CHECK(m.arrival_time <= *t.first_scheduled_time);
    CHECK(*t.first_scheduled_time <= *t.first_token_time);
    CHECK(*t.first_token_time <= *t.last_token_time);
    CHECK(*t.last_token_time <= *m.finished_time);
    if (c.token_ids.size() > 1) CHECK(*t.first_token_time < *t.last_token_time);
    first_scheduled = std::min(first_scheduled.value_or(1e300), *t.first_scheduled_time);
    first_token = std::min(first_token.value_or(1e300), *t.first_token_time);
    last_token = std::max(last_token.value_or(0.0), *t.last_token_time);
  }
  CHECK(m.first_scheduled_time == first_scheduled);
  CHECK(m.first_token_time == first_token);
  CHECK(m.last_token_time == last_token);
}

}  // namespace

TEST_CASE("request metrics: arrival, first scheduled, first token and finished are in order",
          "[engine][metrics]") {
  if (!fs::exists(kModel / "config.json")) {
    WARN("fixture llama_gqa missing: run tools/make_fixtures.py");
    return;
  }
  SECTION("roomy, n = 1 and n = 3") {
    LLM llm(args());
    std::vector<SamplingParams> ps = {params(1, 6), params(3, 5), params(1, 1)};
    const auto outs = llm.generate(prompts(3, 9), ps, {.use_tqdm = false});
    REQUIRE(outs.size() == 3);
    for (const auto& o : outs) check_times(o);
    CHECK(outs[1].outputs.size() == 3);
    // One token: its first token is its last.
    CHECK(outs[2].metrics.first_token_time == outs[2].metrics.last_token_time);
  }
  SECTION("a tiny KV cache: preempted and recomputed requests keep their first scheduled time") {
    EngineArgs a = args();
    a.block_size = 8;
    a.max_num_batched_tokens = 16;
    a.max_num_seqs = 4;
    a.num_gpu_blocks_override = 12;
    a.max_model_len = 64;
    LLM llm(a);
    const auto outs = llm.generate(prompts(5, 20), params(1, 20), {.use_tqdm = false});
    REQUIRE(outs.size() == 5);
    for (const auto& o : outs) check_times(o);
    CHECK(llm.scheduler_stats().num_preemptions > 0);
  }
  SECTION("one sequence at a time: each waits in the queue until the one before ends") {
    EngineArgs a = args();
    a.max_num_seqs = 1;
    LLM llm(a);
    const auto outs = llm.generate(prompts(3, 6), params(1, 4), {.use_tqdm = false});
    REQUIRE(outs.size() == 3);
    for (const auto& o : outs) check_times(o);
    for (size_t i = 1; i < outs.size(); ++i) {
      INFO("request " << i);
      CHECK(*outs[i].metrics.first_scheduled_time >= *outs[i - 1].metrics.last_token_time);
      CHECK(*outs[i].metrics.time_in_queue > 0);
    }
  }
}
