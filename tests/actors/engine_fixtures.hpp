// What the engine tests share: the transformers fixtures (tests/fixtures/models/*/reference.json)
// and engine settings around them (inline: several test files include it).
#pragma once

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/llm.hpp"

namespace troupe::engine_fixtures {

namespace fs = std::filesystem;

inline const fs::path kFixtures = fs::path(TROUPE_FIXTURES_DIR) / "models";
/// The embedded default model (troupe-fortunes), which has a tokenizer.
inline const fs::path kDefaultModel = fs::path(TROUPE_SOURCE_DIR) / "models" / "troupe-fortunes";

struct Reference {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> greedy;
  std::vector<double> min_margin;
};

inline Reference load_reference(const std::string& name) {
  std::ifstream in(kFixtures / name / "reference.json");
  REQUIRE(in.good());
  const auto j = nlohmann::json::parse(in);
  Reference r;
  for (const auto& p : j["prompts"]) {
    r.prompts.push_back(p["token_ids"].get<std::vector<int32_t>>());
    r.greedy.push_back(p["greedy_tokens"].get<std::vector<int32_t>>());
    r.min_margin.push_back(p["greedy_min_margin"].get<double>());
  }
  return r;
}

inline EngineArgs fixture_args(const std::string& name) {
  EngineArgs a;
  a.model = (kFixtures / name).string();
  a.skip_tokenizer_init = true;  // the fixtures have no tokenizer: prompts are token ids
  a.disable_log_stats = true;
  a.max_model_len = 256;
  a.dtype = "float32";  // the references are float32 (on CUDA the fixtures would run in bf16/f16)
  return a;
}

/// The embedded default model (it has a tokenizer: eos <|eos|> = id 1), in float32.
inline EngineArgs default_model_args() {
  EngineArgs a;
  a.model = kDefaultModel.string();
  a.disable_log_stats = true;
  a.dtype = "float32";
  return a;
}

inline SamplingParams greedy_params(int64_t n_tokens) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = n_tokens;
  p.ignore_eos = true;
  p.detokenize = false;
  return p;
}

inline std::vector<Prompt> prompts_of(const Reference& ref) {
  std::vector<Prompt> out;
  for (const auto& ids : ref.prompts) out.emplace_back(ids);
  return out;
}

inline void check_greedy(const Reference& ref, const std::vector<RequestOutput>& outs) {
  REQUIRE(outs.size() == ref.prompts.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    INFO("prompt " << i << " of " << ref.prompts[i].size() << " tokens, reference min margin "
                   << ref.min_margin[i]);
    CHECK(outs[i].prompt_token_ids == ref.prompts[i]);
    REQUIRE(outs[i].outputs.size() == 1);
    CHECK(outs[i].outputs[0].token_ids == ref.greedy[i]);
    CHECK(outs[i].outputs[0].finish_reason == "length");
    CHECK(!outs[i].outputs[0].cumulative_logprob);  // vLLM V1: None without logprobs
  }
}

/// A cache that forces preemption: 16 blocks of 8 = 128 tokens (max_model_len, the least
/// allowed), while the first four prompts (1, 2, 7, 33 tokens, + 24 outputs each) run together
/// and need 20 blocks. (20 blocks turn out to be just enough for them.)
inline EngineArgs tiny_cache_args(const std::string& name) {
  EngineArgs a = fixture_args(name);
  a.block_size = 8;
  a.max_num_batched_tokens = 16;
  a.max_num_seqs = 4;
  a.num_gpu_blocks_override = 16;
  a.max_model_len = 128;
  return a;
}

}  // namespace troupe::engine_fixtures
