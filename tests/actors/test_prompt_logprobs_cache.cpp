// Prompt logprobs from the prefix cache, through the whole engine on the CPU backend: requests
// with `prompt_logprobs` take prefix-cache hits (num_cached_tokens > 0) and return the prompt
// logprobs of an engine with prefix caching disabled (the same token ids, ranks and top-k
// lists; logprobs within the engine's own batch variance: OpenBLAS computes a row differently
// depending on the other rows of its GEMM, so a cache-less run's numbers already change in the
// last bits with what shares its steps, as the first case shows; bit for bit in batch-invariant
// mode, --batch-invariant), for hits ending at several block boundaries, with and without
// chunked prefill, for top-0 and top-k, and for a later request asking a larger k than the
// blocks were stored with.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "actors/llm.hpp"
#include "tests/actors/engine_fixtures.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(TROUPE_FIXTURES_DIR) / "models";

/// The llama_gqa fixture (no tokenizer: prompts are token ids) in float32, blocks of 16.
EngineArgs fixture_args(bool caching, int32_t max_num_batched_tokens, bool invariant = false) {
  EngineArgs a = engine_fixtures::fixture_args("llama_gqa");
  a.block_size = 16;
  a.enable_prefix_caching = caching;
  a.max_num_batched_tokens = max_num_batched_tokens;
  a.max_num_seqs = 8;
  a.batch_invariant = invariant;
  return a;
}

SamplingParams with_k(int32_t k) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 2;
  p.detokenize = false;
  p.prompt_logprobs = k;
  return p;
}

/// The largest difference of two logprobs seen by check_same.
float g_max_diff = 0.0f;

/// Every position's map equal: the same token ids and ranks, logprobs within `tolerance` (0: the
/// same float).
void check_same(const RequestOutput& got, const RequestOutput& want, float tolerance = 1e-4f) {
  REQUIRE(got.prompt_logprobs);
  REQUIRE(want.prompt_logprobs);
  REQUIRE(got.prompt_logprobs->size() == want.prompt_logprobs->size());
  for (size_t t = 1; t < got.prompt_logprobs->size(); ++t) {
    const PositionLogprobMap& g = (*got.prompt_logprobs)[t];
    const PositionLogprobMap& w = (*want.prompt_logprobs)[t];
    INFO("prompt position " << t);
    REQUIRE(g.size() == w.size());
    for (const auto& [id, lp] : w) {
      INFO("token " << id);
      REQUIRE(g.contains(id));
      if (tolerance == 0.0f)
        CHECK(g.at(id).logprob == lp.logprob);
      else
        CHECK(g.at(id).logprob == Approx(lp.logprob).margin(tolerance));
      CHECK(g.at(id).rank == lp.rank);
      g_max_diff = std::max(g_max_diff, std::abs(g.at(id).logprob - lp.logprob));
    }
  }
  CHECK(got.outputs[0].token_ids == want.outputs[0].token_ids);
}

std::vector<int32_t> test_prompt(size_t len) {
  std::vector<int32_t> p(len);
  for (size_t i = 0; i < p.size(); ++i) p[i] = int32_t(5 + (i * 7) % 200);
  return p;
}

}  // namespace

TEST_CASE("the CPU backend's prompt logprobs depend on what shares the step, without any cache",
          "[engine][prompt_logprobs]") {
  // Why the case below compares within a tolerance: the same prompt alone and behind another
  // one in the same step, prefix caching off, gives logprobs that differ in the last bits.
  LLM llm(fixture_args(false, 2048));
  const auto prompt = test_prompt(90);
  std::vector<int32_t> other(40, 17);
  // `other` decodes long enough that `prompt` shares a step with it however the two requests
  // reach the scheduler (with max_tokens 2 it could finish first under load, 2026-12-06, and
  // `prompt` then ran alone: no difference).
  SamplingParams longer = with_k(0);
  longer.max_tokens = 64;
  const std::vector<SamplingParams> both = {longer, with_k(0)};
  const auto alone = llm.generate({Prompt(prompt)}, with_k(0), {.use_tqdm = false});
  const auto shared = llm.generate({Prompt(other), Prompt(prompt)}, both, {.use_tqdm = false});
  g_max_diff = 0.0f;
  check_same(shared[1], alone[0]);
  WARN("largest difference of a prompt logprob batched vs alone: " << g_max_diff);
  CHECK(g_max_diff > 0.0f);  // once this fails the backend is batch-invariant: compare with ==
  CHECK(g_max_diff < 1e-4f);

  // Batch-invariant mode removes exactly this difference.
  LLM invariant(fixture_args(false, 2048, true));
  const auto alone2 = invariant.generate({Prompt(prompt)}, with_k(0), {.use_tqdm = false});
  const auto shared2 =
      invariant.generate({Prompt(other), Prompt(prompt)}, both, {.use_tqdm = false});
  check_same(shared2[1], alone2[0], 0.0f);
}

TEST_CASE("prompt logprobs with the prefix cache equal those without it",
          "[engine][prefix][prompt_logprobs]") {
  // A 70-token shared prefix (4 full blocks and 6 tokens), then suffixes of several lengths; and
  // prompts cut inside the prefix, so that hits end at different block boundaries.
  const std::vector<int32_t> prefix = test_prompt(70);
  g_max_diff = 0.0f;
  std::vector<Prompt> prompts;
  std::vector<int32_t> ks;
  const int32_t suffix_lens[] = {1, 3, 12, 19, 30, 47};
  for (size_t i = 0; i < std::size(suffix_lens); ++i) {
    auto p = prefix;
    for (int32_t j = 0; j < suffix_lens[i]; ++j)
      p.push_back(int32_t(210 + (i * 13 + size_t(j) * 3) % 40));
    prompts.emplace_back(p);
    ks.push_back(int32_t((i + 2) % 3));  // 2, 0, 1, ...: the first (the warm-up) stores top-2
  }
  prompts.emplace_back(std::vector<int32_t>(prefix.begin(), prefix.begin() + 33));
  ks.push_back(2);
  prompts.emplace_back(std::vector<int32_t>(prefix.begin(), prefix.begin() + 64));
  ks.push_back(0);
  // The second round asks more than the first stored for some prompts (k = 4 > 2).
  std::vector<int32_t> ks2;
  for (size_t i = 0; i < ks.size(); ++i) ks2.push_back(i % 2 == 0 ? 4 : ks[i]);
  auto params = [](const std::vector<int32_t>& k) {
    std::vector<SamplingParams> v;
    for (int32_t x : k) v.push_back(with_k(x));
    return v;
  };

  // Batch-invariant mode makes both engines compute every row alike whatever shares its step,
  // so there the stored values are the cache-less run's bit for bit.
  const bool invariant = GENERATE(false, true);
  const float tolerance = invariant ? 0.0f : 1e-4f;
  INFO("batch_invariant " << invariant);
  // The reference: no prefix caching, whole prompts in one step.
  std::vector<RequestOutput> want, want2;
  {
    LLM ref(fixture_args(false, 2048, invariant));
    want = ref.generate(prompts, params(ks), {.use_tqdm = false});
    want2 = ref.generate(prompts, params(ks2), {.use_tqdm = false});
    for (const auto& o : want) CHECK(o.num_cached_tokens == 0);
  }

  // With the cache: the first prompt alone warms it, the rest follow in one batch (chunked when
  // the token budget is small), then every prompt again with the second round's k.
  const int32_t budget = GENERATE(2048, 40);
  INFO("max_num_batched_tokens " << budget);
  LLM llm(fixture_args(true, budget, invariant));
  const auto warm = llm.generate({prompts[0]}, with_k(ks[0]), {.use_tqdm = false});
  CHECK(warm[0].num_cached_tokens == 0);
  check_same(warm[0], want[0], tolerance);
  std::vector<Prompt> rest(prompts.begin() + 1, prompts.end());
  const auto rest_params = params(std::vector<int32_t>(ks.begin() + 1, ks.end()));
  const auto got = llm.generate(rest, rest_params, {.use_tqdm = false});
  for (size_t i = 0; i < rest.size(); ++i) {
    INFO("first round, prompt " << i + 1 << " (" << rest[i].token_ids.size() << " tokens, k "
                                << ks[i + 1] << ")");
    check_same(got[i], want[i + 1], tolerance);
    // Blocks 0-3 are stored (k = 0 .. 2 serve any of these k); the hit backs off one block.
    const auto len = int32_t(rest[i].token_ids.size());
    const int32_t stored = std::min(4, (len - 1) / 16);
    CHECK(got[i].num_cached_tokens == (stored - 1) * 16);
  }
  const auto again = llm.generate(prompts, params(ks2), {.use_tqdm = false});
  int32_t served = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("second round, prompt " << i << " (k " << ks2[i] << ")");
    check_same(again[i], want2[i], tolerance);
    served += again[i].num_cached_tokens > 0 ? 1 : 0;
  }
  CHECK(served >= 4);
  CHECK(llm.kv_stats().prefix_hits > 0);
  CHECK(llm.kv_stats().prompt_logprob_blocks > 0);
  WARN("largest difference of a prompt logprob with the cache vs without: " << g_max_diff);
}
