// Beam search through the whole engine (use_beam_search, LLM::beam_search) against two
// references that share no code with the engine's beam search (runtime/sched/beam_search.cpp):
//   - transformers' own generate(num_beams=...) outputs in the fixtures' reference.json "beam"
//     section (tools/make_fixtures.py --beam-only);
//   - a transcription, written here, of transformers' vectorised _beam_search over the whole
//     vocabulary in float64, driven by the model's per-step logprobs, each computed from
//     scratch by a plain greedy request for the beam's full sequence (no forks, no shared
//     blocks, no copy-on-write).
// The engine must pick the same tokens (float32 forward both ways) and agree on the scores,
// however its cache is cut: small blocks (copy-on-write on most steps), prefix caching off,
// a cache so small that beam groups are preempted and recomputed, several requests at once.
#include <catch2/catch.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <span>
#include <string>

#include "actors/executor_actor.hpp"
#include "actors/llm.hpp"
#include "runtime/error.hpp"
#include "tests/actors/beam_reference.hpp"
#include "tests/actors/engine_fixtures.hpp"

using namespace troupe;
using namespace troupe::beam_reference;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(TROUPE_FIXTURES_DIR) / "models";

/// The fixture on `device` ("cpu", or "cuda" where a GPU is: float32 there too).
EngineArgs beam_args(const std::string& name, const std::string& device = "cpu") {
  EngineArgs a = engine_fixtures::fixture_args(name);
  a.max_logprobs = -1;  // the reference reads whole-vocabulary logprobs
  a.device = device;
  if (device == "cuda") a.num_gpu_blocks_override = 1024;  // not 90% of the GPU per engine
  return a;
}

/// The CUDA backend's attention takes blocks of 8 tokens at least (the CPU's 4 copy more).
int64_t small_block(const std::string& device) {
  return device == "cuda" ? 8 : 4;
}

bool have_cuda() {
  if (cuda_device_count() > 0) return true;
  WARN("no CUDA device: the CUDA beam search cases are skipped");
  return false;
}

std::vector<std::vector<int32_t>> fixture_prompts(const std::string& name) {
  std::ifstream in(kFixtures / name / "reference.json");
  REQUIRE(in.good());
  const auto j = nlohmann::json::parse(in);
  std::vector<std::vector<int32_t>> out;
  for (const auto& p : j["prompts"]) out.push_back(p["token_ids"].get<std::vector<int32_t>>());
  return out;
}

std::vector<Case> cases_for(const std::vector<std::vector<int32_t>>& prompts) {
  // Prompts of 2 and 7 tokens (prefixes of the fixture's); the eos is a token the model likes
  // early on, so that finished hypotheses matter.
  std::vector<int32_t> longest = prompts.front();
  for (const auto& p : prompts)
    if (p.size() > longest.size()) longest = p;
  REQUIRE(longest.size() >= 7);
  const std::vector<int32_t> p2(longest.begin(), longest.begin() + 2);
  const std::vector<int32_t> p7(longest.begin(), longest.begin() + 7);
  std::vector<Case> cs;
  cs.push_back(Case{p2, 2, 1, 1.0, "false", std::nullopt});
  cs.push_back(Case{p7, 4, 4, 1.0, "false", std::nullopt});
  cs.push_back(Case{p7, 4, 2, 0.5, "true", std::nullopt});
  cs.push_back(Case{p2, 3, 3, 2.0, "never", std::nullopt});
  return cs;
}

/// Adds eos cases: the eos is the second token the reference's best beam picks for `base`.
void add_eos_cases(LLM& llm, int32_t vocab, std::vector<Case>& cs) {
  const size_t plain = cs.size();
  for (size_t i = 0; i < plain; ++i) {
    Case e = cs[i];
    const auto free_run = reference_beam_search(llm, e, vocab);
    REQUIRE(free_run.front().tokens.size() >= 2);
    e.eos = free_run.front().tokens[1];
    cs.push_back(e);
    Case never = e;
    never.early_stopping = "never";
    never.num_return = never.num_beams;
    cs.push_back(never);
  }
}

/// The cases against the transcription of transformers' algorithm, on `device`.
void own_logprob_cases(const std::string& device) {
  if (!fs::exists(kFixtures / "llama_gqa")) {
    WARN("fixture llama_gqa missing: run tools/make_fixtures.py");
    return;
  }
  INFO("device " << device);
  const auto prompts = fixture_prompts("llama_gqa");
  LLM llm(beam_args("llama_gqa", device));
  const int32_t vocab = 256;
  std::vector<Case> cases = cases_for(prompts);
  add_eos_cases(llm, vocab, cases);
  std::vector<std::vector<Hyp>> want;
  for (const Case& c : cases) want.push_back(reference_beam_search(llm, c, vocab));
  bool some_eos_hypothesis = false;
  for (size_t i = 0; i < cases.size(); ++i)
    for (const Hyp& h : want[i])
      some_eos_hypothesis |= cases[i].eos && h.tokens.size() < size_t(cases[i].max_new);
  CHECK(some_eos_hypothesis);  // the eos cases do end hypotheses early

  SECTION("one request at a time, on the default cache") {
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto out =
          llm.generate({Prompt(cases[i].prompt)}, beam_params(cases[i]), {.use_tqdm = false});
      check_same(out[0], cases[i], want[i]);
    }
    const KVStats kv = llm.kv_stats();
    CHECK(kv.forks > 0);
    CHECK(kv.num_free_blocks == kv.num_blocks);  // nothing leaked
  }
  SECTION("all at once, with plain requests, in small blocks, with and without prefix caching") {
    for (bool prefix : {true, false}) {
      EngineArgs a = beam_args("llama_gqa", device);
      a.block_size = small_block(device);  // most forks copy a partly filled last block
      a.enable_prefix_caching = prefix;
      LLM small(a);
      std::vector<Prompt> ps;
      std::vector<SamplingParams> params;
      for (const Case& c : cases) {
        ps.emplace_back(c.prompt);
        params.push_back(beam_params(c));
      }
      SamplingParams greedy;
      greedy.temperature = 0.0;
      greedy.max_tokens = 10;
      greedy.ignore_eos = true;
      greedy.detokenize = false;
      ps.emplace_back(prompts[0]);
      params.push_back(greedy);
      const auto outs = small.generate(ps, params, {.use_tqdm = false});
      for (size_t i = 0; i < cases.size(); ++i) {
        INFO("prefix caching " << prefix);
        check_same(outs[i], cases[i], want[i]);
      }
      const KVStats kv = small.kv_stats();
      CHECK(kv.blocks_copied > 0);
      CHECK(kv.num_free_blocks == kv.num_blocks);
    }
  }
  SECTION("a cache too small for every group at once: groups are preempted and recomputed") {
    EngineArgs a = beam_args("llama_gqa", device);
    a.block_size = small_block(device);
    // 96 tokens: one 4-beam group of 7 + 12 tokens needs ~80 (~20 blocks of 4)
    a.num_gpu_blocks_override = 96 / a.block_size;
    a.max_model_len = 64;
    a.max_num_batched_tokens = 16;  // and prompts are chunked
    a.max_num_seqs = 16;
    LLM tight(a);
    std::vector<Prompt> ps;
    std::vector<SamplingParams> params;
    for (const Case& c : cases) {
      ps.emplace_back(c.prompt);
      params.push_back(beam_params(c));
    }
    const auto outs = tight.generate(ps, params, {.use_tqdm = false});
    for (size_t i = 0; i < cases.size(); ++i) check_same(outs[i], cases[i], want[i]);
    CHECK(tight.scheduler_stats().num_preemptions > 0);
    const KVStats kv = tight.kv_stats();
    CHECK(kv.num_free_blocks == kv.num_blocks);
  }
  SECTION("asynchronous scheduling") {
    EngineArgs a = beam_args("llama_gqa", device);
    a.async_scheduling = true;
    LLM async(a);
    for (size_t i = 0; i < cases.size(); i += 3) {
      const auto out =
          async.generate({Prompt(cases[i].prompt)}, beam_params(cases[i]), {.use_tqdm = false});
      check_same(out[0], cases[i], want[i]);
    }
  }
  SECTION("LLM::beam_search: vLLM's entry point, beam_width best, early_stopping never") {
    BeamSearchParams bp;
    bp.beam_width = 3;
    bp.max_tokens = 12;
    bp.ignore_eos = true;
    bp.length_penalty = 1.0;
    Case c{cases[0].prompt, 3, 3, 1.0, "never", std::nullopt};
    const auto ref = reference_beam_search(llm, c, vocab);
    const auto got = llm.beam_search({Prompt(c.prompt)}, bp);
    REQUIRE(got.size() == 1);
    REQUIRE(got[0].sequences.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      std::vector<int32_t> full = c.prompt;
      full.insert(full.end(), ref[i].tokens.begin(), ref[i].tokens.end());
      CHECK(got[0].sequences[i].tokens == full);
      CHECK(got[0].sequences[i].cum_logprob / 12.0 == Approx(ref[i].score).epsilon(1e-4));
      CHECK(got[0].sequences[i].logprobs.size() == 12);
    }
  }
}

/// transformers' generate outputs in each fixture's beam section, on `device`.
void fixture_beam_cases(const std::string& device) {
  for (const std::string name : {"llama_gqa", "llama_gelu", "qwen2", "llama3_tied", "qwen3"}) {
    if (!fs::exists(kFixtures / name)) continue;
    std::ifstream in(kFixtures / name / "reference.json");
    const auto j = nlohmann::json::parse(in);
    // Written by `python3 tools/make_fixtures.py tests/fixtures/models --beam-only` where torch
    // and transformers are installed (transformers 5.17 on an H100, 2026-12-05).
    INFO("fixture " << name << " on " << device);
    REQUIRE(j.contains("beam"));
    LLM llm(beam_args(name, device));
    for (const Case& c : json_cases(j)) {
      const auto out = llm.generate({Prompt(c.prompt)}, beam_params(c), {.use_tqdm = false});
      check_same(out[0], c, c.want);
    }
  }
}

}  // namespace

TEST_CASE("beam search equals transformers' algorithm on the model's own logprobs",
          "[engine][beam]") {
  own_logprob_cases("cpu");
}

TEST_CASE("beam search on the CUDA backend: transformers' algorithm and generate outputs",
          "[engine][beam][cuda]") {
  if (!have_cuda()) return;
  own_logprob_cases("cuda");
  fixture_beam_cases("cuda");
}

TEST_CASE("beam search equals transformers' generate (fixture beam section)", "[engine][beam]") {
  fixture_beam_cases("cpu");
}

namespace {

/// Two beams, four tokens: a beam request every front end takes.
SamplingParams two_beams() {
  SamplingParams p;
  p.use_beam_search = true;
  p.temperature = 0.0;
  p.best_of = 2;
  p.max_tokens = 4;
  p.detokenize = false;
  return p;
}

}  // namespace

TEST_CASE("beam search under pipeline parallelism is refused by name", "[engine][beam][parallel]") {
  if (!fs::exists(kFixtures / "llama_gqa")) return;
  EngineArgs a = beam_args("llama_gqa");
  a.pipeline_parallel_size = 2;  // two `troupe worker` processes
  LLM llm(a);
  const Prompt prompt(std::vector<int32_t>{1, 2, 3});
  CHECK_THROWS_WITH(llm.generate({prompt}, two_beams(), {.use_tqdm = false}),
                    Catch::Contains("use_beam_search = true: not supported here") &&
                        Catch::Contains("pipeline_parallel_size = 2"));
  // The engine stays usable for other requests.
  const auto out = llm.generate({prompt}, engine_fixtures::greedy_params(3), {.use_tqdm = false});
  CHECK(out.at(0).outputs.at(0).token_ids.size() == 3);
}

TEST_CASE("beam search refuses what it cannot honour, naming the field", "[engine][beam]") {
  if (!fs::exists(kFixtures / "llama_gqa")) return;
  LLM llm(beam_args("llama_gqa"));
  const std::vector<int32_t> prompt{1, 2, 3};
  const auto refused = [&](SamplingParams p, const std::string& field) {
    INFO(field);
    try {
      (void)llm.generate({Prompt(prompt)}, p, {.use_tqdm = false});
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(field));
    }
  };
  const SamplingParams ok = two_beams();
  SamplingParams p = ok;
  p.temperature = 0.7;
  refused(p, "temperature = 0.7");
  p = ok;
  p.best_of = 1;
  refused(p, "best_of = 1");
  p = ok;
  p.n = 3;
  refused(p, "best_of = 2");
  p = ok;
  p.logit_bias = {{5, 2.0}};
  refused(p, "logit_bias");
  p = ok;
  p.repetition_penalty = 1.2;
  refused(p, "repetition_penalty");
  p = ok;
  p.stop = {"x"};
  refused(p, "stop");
  p = ok;
  p.best_of = 300;
  refused(p, "best_of = 300");
  p = ok;
  p.use_beam_search = false;
  p.length_penalty = 2.0;
  refused(p, "length_penalty = 2");
  p = ok;
  p.use_beam_search = false;
  p.early_stopping = EarlyStopping::never;
  refused(p, "early_stopping = never");
  // Each would be ignored by the beams if its refusal went (the message names both).
  p = ok;
  p.frequency_penalty = 0.5;
  refused(p, "frequency_penalty = 0.5");
  p = ok;
  p.presence_penalty = 0.5;
  refused(p, "presence_penalty = 0.5");
  p = ok;
  p.min_tokens = 2;
  refused(p, "min_tokens = 2");
  p = ok;
  p.allowed_token_ids = {5, 6, 7};
  refused(p, "allowed_token_ids = ");
  p = ok;
  p.bad_words = {"x"};
  refused(p, "bad_words = ");
  p = ok;
  p.logits_processors = {"no_repeat_ngram:2"};
  refused(p, "logits_processors = ");
  p = ok;
  p.logits_processor_fns.push_back(
      [](std::span<const int32_t>, std::span<const int32_t>, std::span<float>) {});
  refused(p, "logits_processor_fns = 1 callables");
  p = ok;
  p.prompt_logprobs = 1;
  refused(p, "prompt_logprobs = 1");
  BeamSearchParams bp;
  bp.beam_width = 2;
  bp.max_tokens = 4;
  bp.temperature = 0.5;
  CHECK_THROWS_WITH(llm.beam_search({Prompt(prompt)}, bp), Catch::Contains("temperature = 0.5"));
  bp.temperature = 0.0;
  bp.beam_width = 1;
  CHECK_THROWS_WITH(llm.beam_search({Prompt(prompt)}, bp), Catch::Contains("beam_width = 1"));
  // The engine still works.
  const auto out = llm.generate({Prompt(prompt)}, ok, {.use_tqdm = false});
  CHECK(out[0].outputs.size() == 1);
  CHECK(out[0].outputs[0].token_ids.size() == 4);
}
