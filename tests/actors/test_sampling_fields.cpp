// allowed_token_ids, bad_words and logits processors through the whole engine on the CPU
// backend: an allow-list against transformers' logits (the fixture's reference); bad words and
// processors against the unconstrained greedy run's own ranking on the default model (which has
// a tokenizer), and the example plug-in against transformers' no_repeat_ngram rule.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <span>

#include "actors/executor_actor.hpp"
#include "actors/llm.hpp"
#include "tests/actors/engine_fixtures.hpp"
#include "tests/actors/worker_process.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

using engine_fixtures::default_model_args;
using engine_fixtures::kFixtures;

/// The llama_gqa fixture (no tokenizer: prompts are token ids), in float32 like its reference.
EngineArgs fixture_args() {
  EngineArgs a;
  a.model = (kFixtures / "llama_gqa").string();
  a.skip_tokenizer_init = true;
  a.disable_log_stats = true;
  a.max_model_len = 256;
  a.dtype = "float32";
  return a;
}

/// vLLM's rule, written out here as the test's own reference: the tokens banned at the next
/// position after `out`.
std::set<int32_t> bad_word_bans(const std::vector<std::vector<int32_t>>& words,
                                const std::vector<int32_t>& out) {
  std::set<int32_t> bans;
  for (const auto& w : words) {
    if (w.size() > out.size() + 1) continue;
    bool match = true;
    for (size_t i = 0; i + 1 < w.size(); ++i)
      match = match && out[out.size() - (w.size() - 1) + i] == w[i];
    if (match) bans.insert(w.back());
  }
  return bans;
}

}  // namespace

TEST_CASE("allowed_token_ids: greedy is transformers' argmax over the allowed tokens",
          "[engine][masks]") {
  std::ifstream in(kFixtures / "llama_gqa" / "reference.json");
  REQUIRE(in.good());
  const auto ref = nlohmann::json::parse(in);
  const int idx = ref["full_logits_prompt_index"].get<int>();
  const auto prompt = ref["prompts"][size_t(idx)]["token_ids"].get<std::vector<int32_t>>();
  const auto last = ref["full_logits"].back().get<std::vector<double>>();  // predicts output 0
  LLM llm(fixture_args());
  // The allow-list leaves out transformers' own first choice, so the mask decides.
  const auto best = int32_t(std::max_element(last.begin(), last.end()) - last.begin());
  std::vector<int32_t> allowed;
  for (int32_t t = 3; t < int32_t(last.size()); t += 7)
    if (t != best) allowed.push_back(t);
  int32_t want = allowed[0];
  for (int32_t t : allowed)
    if (last[size_t(t)] > last[size_t(want)]) want = t;

  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.detokenize = false;
  p.allowed_token_ids = allowed;
  const auto greedy = llm.generate({Prompt(prompt)}, p, {.use_tqdm = false});
  const auto& g = greedy[0].outputs[0].token_ids;
  REQUIRE(g.size() == 12);
  CHECK(g[0] == want);
  const std::set<int32_t> allowed_set(allowed.begin(), allowed.end());
  for (int32_t t : g) CHECK(allowed_set.contains(t));
  // Sampled: never outside the list either; without it the same seeds leave it.
  p.temperature = 1.0;
  p.seed = 17;
  p.n = 4;
  const auto sampled = llm.generate({Prompt(prompt)}, p, {.use_tqdm = false});
  for (const auto& o : sampled[0].outputs)
    for (int32_t t : o.token_ids) CHECK(allowed_set.contains(t));
  p.allowed_token_ids.clear();
  const auto free_run = llm.generate({Prompt(prompt)}, p, {.use_tqdm = false});
  size_t outside = 0;
  for (const auto& o : free_run[0].outputs)
    for (int32_t t : o.token_ids) outside += allowed_set.contains(t) ? 0 : 1;
  CHECK(outside > 0);
}

TEST_CASE("bad_words: the output never spells a bad word, and only its last token is moved",
          "[engine][masks]") {
  LLM llm(default_model_args());
  const auto tok = llm.get_tokenizer();
  REQUIRE(tok);
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.logprobs = 5;
  const Prompt prompt("Once upon a time");
  const auto free_run = llm.generate({prompt}, p, {.use_tqdm = false})[0].outputs[0];
  const auto& g = free_run.token_ids;
  // The bad word: a generated word-token that its own text encodes back to.
  std::string word;
  for (size_t k = 1; k < g.size() && word.empty(); ++k) {
    const std::string text = tok->decode(std::vector<int32_t>{g[k]}, false);
    if (text.size() > 2 && text[0] == ' ' && std::isalpha(static_cast<unsigned char>(text[1])) &&
        tok->encode(text, false) == std::vector<int32_t>{g[k]})
      word = text.substr(1);
  }
  REQUIRE_FALSE(word.empty());
  INFO("bad word '" << word << "' in '" << free_run.text << "'");
  std::vector<std::vector<int32_t>> words = {tok->encode(word, false)};
  const auto spaced = tok->encode(" " + word, false);
  if (spaced.size() == words[0].size() && spaced[0] != words[0][0]) words.push_back(spaced);

  p.bad_words = {word};
  const auto out = llm.generate({prompt}, p, {.use_tqdm = false})[0].outputs[0];
  // Until the first ban the runs agree; there the best-ranked token not banned wins.
  size_t j = 0;
  std::set<int32_t> bans;
  for (; j < g.size(); ++j) {
    bans = bad_word_bans(words, std::vector<int32_t>(g.begin(), g.begin() + long(j)));
    if (bans.contains(g[j])) break;
  }
  REQUIRE(j < g.size());
  REQUIRE(out.token_ids.size() == g.size());
  CHECK(std::equal(g.begin(), g.begin() + long(j), out.token_ids.begin()));
  int32_t next = -1, rank = 1 << 30;
  for (const auto& [t, lp] : (*free_run.logprobs)[j])
    if (!bans.contains(t) && lp.rank < rank) {
      next = t;
      rank = lp.rank;
    }
  CHECK(out.token_ids[j] == next);
  // And nowhere in the constrained output is a bad word completed.
  for (size_t i = 0; i < out.token_ids.size(); ++i)
    CHECK_FALSE(bad_word_bans(words, std::vector<int32_t>(out.token_ids.begin(),
                                                          out.token_ids.begin() + long(i)))
                    .contains(out.token_ids[i]));
}

namespace {

/// Whether any n-gram of `ids` occurs twice.
bool repeats_ngram(const std::vector<int32_t>& ids, size_t n) {
  std::set<std::vector<int32_t>> seen;
  for (size_t s = 0; s + n <= ids.size(); ++s)
    if (!seen.insert(std::vector<int32_t>(ids.begin() + long(s), ids.begin() + long(s + n))).second)
      return true;
  return false;
}

}  // namespace

namespace {

/// The embedded model on `device` ("cpu", or "cuda" where a GPU is), float32.
EngineArgs model_on(const std::string& device) {
  EngineArgs a = default_model_args();
  a.device = device;
  if (device == "cuda") a.num_gpu_blocks_override = 512;
  return a;
}

void callable_processor_case(const std::string& device) {
  INFO("device " << device);
  LLM llm(model_on(device));
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 6;
  p.ignore_eos = true;
  p.logprobs = 5;
  const Prompt prompt("Once upon a time");
  const auto free_run = llm.generate({prompt}, p, {.use_tqdm = false})[0];
  const auto& g = free_run.outputs[0].token_ids;
  // The processor bans the free run's first token; it records what it saw.
  std::mutex mu;
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> seen;
  const int32_t ban = g[0];
  p.logits_processor_fns.push_back([&](std::span<const int32_t> prompt_ids,
                                       std::span<const int32_t> output_ids,
                                       std::span<float> logits) {
    std::lock_guard lock(mu);
    seen.emplace_back(std::vector<int32_t>(prompt_ids.begin(), prompt_ids.end()),
                      std::vector<int32_t>(output_ids.begin(), output_ids.end()));
    logits[size_t(ban)] = -INFINITY;
  });
  const auto out = llm.generate({prompt}, p, {.use_tqdm = false})[0].outputs[0];
  REQUIRE(out.token_ids.size() == 6);
  // The best-ranked token of the free run other than the banned one.
  int32_t second = -1, rank = 1 << 30;
  for (const auto& [t, lp] : (*free_run.outputs[0].logprobs)[0])
    if (t != ban && lp.rank < rank) {
      second = t;
      rank = lp.rank;
    }
  CHECK(out.token_ids[0] == second);
  for (int32_t t : out.token_ids) CHECK(t != ban);
  // The logprob returned is the raw model's (vLLM V1), not the processed row's.
  CHECK(out.logprobs->at(0).at(second).logprob ==
        Approx((*free_run.outputs[0].logprobs)[0].at(second).logprob).margin(1e-6));
  CHECK(out.logprobs->at(0).at(second).rank == rank);
  REQUIRE(seen.size() == 6);
  for (size_t k = 0; k < seen.size(); ++k) {
    CHECK(seen[k].first == free_run.prompt_token_ids);
    CHECK(seen[k].second ==
          std::vector<int32_t>(out.token_ids.begin(), out.token_ids.begin() + long(k)));
  }
  // A request without processors in the same engine is untouched.
  p.logits_processor_fns.clear();
  CHECK(llm.generate({prompt}, p, {.use_tqdm = false})[0].outputs[0].token_ids == g);
}

void plugin_processor_case(const std::string& device) {
  INFO("device " << device);
  EngineArgs a = model_on(device);
  a.logits_processor_plugin = {TROUPE_NO_REPEAT_NGRAM_PLUGIN};
  LLM llm(a);
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 48;
  p.ignore_eos = true;
  const Prompt prompt("Once upon a time");
  const auto free_run = llm.generate({prompt}, p, {.use_tqdm = false})[0];
  std::vector<int32_t> all = free_run.prompt_token_ids;
  all.insert(all.end(), free_run.outputs[0].token_ids.begin(), free_run.outputs[0].token_ids.end());
  REQUIRE(repeats_ngram(all, 2));  // a small greedy model repeats itself: the test has teeth
  p.logits_processors = {"no_repeat_ngram:2"};
  const auto out = llm.generate({prompt}, p, {.use_tqdm = false})[0];
  all = out.prompt_token_ids;
  all.insert(all.end(), out.outputs[0].token_ids.begin(), out.outputs[0].token_ids.end());
  CHECK(out.outputs[0].token_ids.size() == 48);
  CHECK_FALSE(repeats_ngram(all, 2));
  // Unknown names and bad arguments are refused at once, naming the field.
  p.logits_processors = {"no_repeat_ngram:x"};
  CHECK_THROWS_WITH(llm.generate({prompt}, p, {.use_tqdm = false}),
                    Catch::Contains("logits_processors: \"no_repeat_ngram:x\""));
  p.logits_processors = {"typo"};
  CHECK_THROWS_WITH(llm.generate({prompt}, p, {.use_tqdm = false}),
                    Catch::Contains("allowed: no_repeat_ngram"));
}

}  // namespace

TEST_CASE("a C++ logits processor sees the ids, changes the row, and logprobs stay raw",
          "[engine][processors]") {
  callable_processor_case("cpu");
}

TEST_CASE("the no_repeat_ngram plug-in through the engine", "[engine][processors]") {
  plugin_processor_case("cpu");
}

TEST_CASE("logits processors on the CUDA backend: the callable and the plug-in",
          "[engine][processors][cuda]") {
  if (cuda_device_count() == 0) {
    WARN("no CUDA device: the CUDA logits-processor cases are skipped");
    return;
  }
  callable_processor_case("cuda");
  plugin_processor_case("cuda");
}

TEST_CASE("num_cached_tokens: the prompt tokens the prefix cache served", "[engine][prefix]") {
  for (bool caching : {true, false}) {
    EngineArgs a = fixture_args();
    a.block_size = 16;
    a.enable_prefix_caching = caching;
    LLM llm(a);
    std::vector<int32_t> prompt(37);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(5 + (i * 7) % 200);
    SamplingParams p;
    p.temperature = 0.0;
    p.max_tokens = 3;
    p.detokenize = false;
    const auto first = llm.generate({Prompt(prompt)}, p, {.use_tqdm = false})[0];
    CHECK(first.num_cached_tokens == 0);
    // The same prompt again: its two full blocks (32 tokens) are cached; the rest is computed.
    // And a prompt sharing only the first block.
    std::vector<int32_t> other = prompt;
    other[20] = 3;
    const auto again = llm.generate({Prompt(prompt), Prompt(other)}, p, {.use_tqdm = false});
    INFO("prefix caching " << caching);
    CHECK(again[0].num_cached_tokens == (caching ? 32 : 0));
    CHECK(again[1].num_cached_tokens == (caching ? 16 : 0));
    CHECK(again[0].outputs[0].token_ids == first.outputs[0].token_ids);
  }
}

TEST_CASE("with the executor in a `troupe worker`: plug-ins load there, callables are refused",
          "[engine][processors][remote]") {
  WorkerProcess worker;
  EngineArgs a = default_model_args();
  a.logits_processor_plugin = {TROUPE_NO_REPEAT_NGRAM_PLUGIN};
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 48;
  p.ignore_eos = true;
  p.logits_processors = {"no_repeat_ngram:2"};
  const Prompt prompt("Once upon a time");
  std::vector<int32_t> local;
  {
    LLM llm(a);
    local = llm.generate({prompt}, p, {.use_tqdm = false})[0].outputs[0].token_ids;
  }
  a.executor_endpoints = {worker.endpoint()};
  LLM llm(a);
  const auto remote = llm.generate({prompt}, p, {.use_tqdm = false})[0];
  CHECK(remote.outputs[0].token_ids == local);  // the worker ran the same processor
  p.logits_processor_fns.push_back(
      [](std::span<const int32_t>, std::span<const int32_t>, std::span<float>) {});
  CHECK_THROWS_WITH(llm.generate({prompt}, p, {.use_tqdm = false}),
                    Catch::Contains("logits_processor_fns: 1 C++ callables; allowed only with "
                                    "in-process executors"));
}
