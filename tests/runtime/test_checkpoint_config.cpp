// config.json and generation_config.json parsing, and the architecture registry.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/generation_config.hpp"
#include "runtime/checkpoint/model_config.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/memory_fit.hpp"
#include "runtime/models/model.hpp"
#include "tests/runtime/test_checkpoint_writer.hpp"

using namespace troupe;
using namespace troupe::testing;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// A Llama-3-8B-like config.json (values from the published file), edited per test.
json llama_json() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
    "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 500000.0,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0",
    "use_cache": true, "vocab_size": 128256})");
}

ModelConfig parse(const json& j) {
  return parse_model_config(j.dump(), "/models/x");
}

void expect_error(const json& j, std::vector<std::string> fragments) {
  try {
    (void)parse(j);
    FAIL("no error; wanted one mentioning " << fragments.front());
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK_THAT(msg, Contains("/models/x/config.json"));
    for (const auto& f : fragments) CHECK_THAT(msg, Contains(f));
  }
}

}  // namespace

TEST_CASE("config.json: a Llama-3 config reads field by field", "[checkpoint][config]") {
  const ModelConfig c = parse(llama_json());
  CHECK(c.dir == "/models/x");
  CHECK(c.architecture == "LlamaForCausalLM");
  CHECK(c.model_type == "llama");
  CHECK(c.vocab_size == 128256);
  CHECK(c.hidden_size == 4096);
  CHECK(c.intermediate_size == 14336);
  CHECK(c.num_hidden_layers == 32);
  CHECK(c.num_attention_heads == 32);
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.head_dim == 128);
  CHECK(c.max_position_embeddings == 8192);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.rope_scaling.type.empty());
  CHECK(c.hidden_act == "silu");
  CHECK_FALSE(c.tie_word_embeddings);
  CHECK(c.bos_token_id == 128000);
  CHECK(c.eos_token_ids == std::vector<int64_t>{128001});
  CHECK(c.dtype == DType::bf16);
}

TEST_CASE("config.json: both dtype spellings, and dtype wins", "[checkpoint][config]") {
  json j = llama_json();
  CHECK(parse(j).dtype == DType::bf16);  // torch_dtype
  j.erase("torch_dtype");
  j["dtype"] = "float16";
  CHECK(parse(j).dtype == DType::f16);
  j["torch_dtype"] = "float32";
  CHECK(parse(j).dtype == DType::f16);
  j.erase("dtype");
  j.erase("torch_dtype");
  CHECK(parse(j).dtype == DType::f32);  // neither: float32
  j["dtype"] = "int8";
  expect_error(j, {"'dtype'", "int8", "float32, float16, bfloat16"});
  j["dtype"] = "complex";
  expect_error(j, {"'dtype'", "complex"});
}

TEST_CASE("config.json: eos_token_id as int, list or null", "[checkpoint][config]") {
  json j = llama_json();
  j["eos_token_id"] = json::array({128001, 128008, 128009});
  CHECK(parse(j).eos_token_ids == std::vector<int64_t>{128001, 128008, 128009});
  j["eos_token_id"] = nullptr;
  CHECK(parse(j).eos_token_ids.empty());
  j.erase("eos_token_id");
  CHECK(parse(j).eos_token_ids.empty());
  j["eos_token_id"] = "2";
  expect_error(j, {"'eos_token_id'", "an integer or a list of integers"});
  j["eos_token_id"] = json::array({1, "x"});
  expect_error(j, {"'eos_token_id'"});
}

TEST_CASE("config.json: defaults for head_dim, KV heads and optional fields",
          "[checkpoint][config]") {
  json j = llama_json();
  j.erase("num_key_value_heads");
  j.erase("rms_norm_eps");
  j.erase("rope_theta");
  j.erase("hidden_act");
  j.erase("bos_token_id");
  j["head_dim"] = nullptr;
  const ModelConfig c = parse(j);
  CHECK(c.num_key_value_heads == 32);
  CHECK(c.head_dim == 128);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.hidden_act == "silu");
  CHECK_FALSE(c.bos_token_id.has_value());
  j["head_dim"] = 96;  // an explicit head_dim need not be hidden / heads
  CHECK(parse(j).head_dim == 96);
}

TEST_CASE("config.json: a sliding window is kept only where some layer uses it",
          "[checkpoint][config]") {
  json j = llama_json();
  CHECK_FALSE(parse(j).sliding_window);
  j["sliding_window"] = 4096;  // Mistral v0.1: set means used
  CHECK(parse(j).sliding_window == 4096);
  j["sliding_window"] = nullptr;  // Mistral v0.2
  CHECK_FALSE(parse(j).sliding_window);
  // Qwen2 / Qwen3: only with use_sliding_window, from layer max_window_layers on.
  j["sliding_window"] = 131072;
  j["use_sliding_window"] = false;
  j["max_window_layers"] = 28;
  CHECK_FALSE(parse(j).sliding_window);  // Qwen2.5-7B's config
  j["use_sliding_window"] = true;
  CHECK(parse(j).sliding_window == 131072);  // layers 28..31 slide
  j["max_window_layers"] = 32;
  CHECK_FALSE(parse(j).sliding_window);  // no layer does
  // transformers 5's layer_types decide when present.
  j["layer_types"] = json::array({"full_attention", "sliding_attention"});
  CHECK(parse(j).sliding_window == 131072);
  j["layer_types"] = json::array({"full_attention", "full_attention"});
  j["use_sliding_window"] = true;
  j["max_window_layers"] = 0;
  CHECK_FALSE(parse(j).sliding_window);
  // Read only where it matters, then checked.
  j["layer_types"] = json::array({"sliding_attention"});
  j["sliding_window"] = "wide";
  expect_error(j, {"sliding_window", "\"wide\""});
}

TEST_CASE("config.json: rope scaling in every spelling", "[checkpoint][config]") {
  json j = llama_json();
  SECTION("rope_scaling with rope_type (Llama 3.1)") {
    j["rope_scaling"] = {{"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192},
                         {"rope_type", "llama3"}};
    const ModelConfig c = parse(j);
    CHECK(c.rope_scaling.type == "llama3");
    CHECK(c.rope_scaling.factor == 8.0);
    CHECK(c.rope_scaling.low_freq_factor == 1.0);
    CHECK(c.rope_scaling.high_freq_factor == 4.0);
    CHECK(c.rope_scaling.original_max_position_embeddings == 8192);
    CHECK(c.rope_theta == 500000.0);
  }
  SECTION("rope_scaling with the old `type` key") {
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    const ModelConfig c = parse(j);
    CHECK(c.rope_scaling.type == "linear");
    CHECK(c.rope_scaling.factor == 2.0);
  }
  SECTION("transformers 5 rope_parameters, flat") {
    j.erase("rope_theta");
    j.erase("rope_scaling");
    j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 250000.0},
                            {"factor", 32.0},          {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
    const ModelConfig c = parse(j);
    CHECK(c.rope_theta == 250000.0);
    CHECK(c.rope_scaling.type == "llama3");
    CHECK(c.rope_scaling.factor == 32.0);
  }
  SECTION("transformers 5 rope_parameters, default type") {
    j.erase("rope_theta");
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
    const ModelConfig c = parse(j);
    CHECK(c.rope_theta == 1000000.0);
    CHECK(c.rope_scaling.type.empty());
  }
  SECTION("transformers 5 rope_parameters, per layer type") {
    j["rope_parameters"] = {
        {"full_attention", {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 7.0}}},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
    const ModelConfig c = parse(j);
    CHECK(c.rope_scaling.type == "linear");
    CHECK(c.rope_scaling.factor == 4.0);
    CHECK(c.rope_theta == 7.0);
  }
  SECTION("llama3 without original_max_position_embeddings") {
    j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
    expect_error(j, {"rope_scaling.original_max_position_embeddings", "llama3"});
  }
  SECTION("a bad factor names the nested field") {
    j["rope_scaling"] = {{"type", "linear"}, {"factor", "two"}};
    expect_error(j, {"'rope_scaling.factor'", "a number > 0"});
  }
  SECTION("rope_scaling of the wrong type") {
    j["rope_scaling"] = 3;
    expect_error(j, {"'rope_scaling'", "null or an object"});
  }
}

TEST_CASE("config.json: missing and mistyped fields name the path and field",
          "[checkpoint][config]") {
  json j = llama_json();
  SECTION("missing hidden_size") {
    j.erase("hidden_size");
    expect_error(j, {"'hidden_size'", "missing"});
  }
  SECTION("string where an integer belongs") {
    j["num_hidden_layers"] = "32";
    expect_error(j, {"'num_hidden_layers'", "\"32\"", "integer"});
  }
  SECTION("an integral float beyond int64") {
    // 4096.0 counts as an integer; 1.28e58 used to be cast to int64 (undefined behaviour,
    // found by the model_config fuzz target).
    j["hidden_size"] = 1.28e58;
    expect_error(j, {"'hidden_size'", "1.28e+58", "an integer >= 1"});
    j["hidden_size"] = -9.3e18;
    expect_error(j, {"'hidden_size'", "an integer >= 1"});
    j["hidden_size"] = 4096.0;
    CHECK(parse(j).hidden_size == 4096);
  }
  SECTION("a vocabulary or context beyond 32 bits") {
    // The engine keeps both in int32: 2^32 + 256 would have been read as 256.
    j["vocab_size"] = 4294967552LL;
    expect_error(j, {"'vocab_size'", "4294967552", "an integer in 1..2147483647"});
    j["vocab_size"] = 2147483647;
    CHECK(parse(j).vocab_size == 2147483647);
    j["max_position_embeddings"] = 4294967808LL;
    expect_error(j, {"'max_position_embeddings'", "4294967808", "1..2147483647"});
  }
  SECTION("zero heads") {
    j["num_attention_heads"] = 0;
    expect_error(j, {"'num_attention_heads'", "0"});
  }
  SECTION("heads not a multiple of KV heads") {
    j["num_key_value_heads"] = 5;
    expect_error(j, {"num_attention_heads (32)", "num_key_value_heads (5)"});
  }
  SECTION("hidden not a multiple of heads without head_dim") {
    j["hidden_size"] = 4095;
    expect_error(j, {"hidden_size (4095)", "head_dim"});
  }
  SECTION("tie_word_embeddings not a bool") {
    j["tie_word_embeddings"] = 1;
    expect_error(j, {"'tie_word_embeddings'", "true or false"});
  }
  SECTION("architectures empty") {
    j["architectures"] = json::array();
    expect_error(j, {"'architectures'"});
  }
  SECTION("no architectures and an unknown model_type") {
    j.erase("architectures");
    j["model_type"] = "gpt2";
    expect_error(j, {"'architectures'", "gpt2"});
  }
  SECTION("not JSON") {
    try {
      (void)parse_model_config("{\"vocab_size\": ", "/models/x");
      FAIL("no error");
    } catch (const Error& e) {
      CHECK_THAT(std::string(e.what()),
                 Contains("/models/x/config.json") && Contains("not valid JSON"));
    }
  }
  SECTION("a number beyond a double") {
    // nlohmann throws out_of_range, not parse_error, for it (found by the model_config fuzz
    // target: it escaped as a non-troupe exception).
    CHECK_THROWS_WITH(parse_model_config("{\"rope_theta\": 1e400}", "/models/x"),
                      Contains("/models/x/config.json") && Contains("not valid JSON") &&
                          Contains("number overflow"));
  }
}

TEST_CASE("config.json: architectures may be implied by model_type", "[checkpoint][config]") {
  json j = llama_json();
  j.erase("architectures");
  j["model_type"] = "qwen2";
  CHECK(parse(j).architecture == "Qwen2ForCausalLM");
  j["model_type"] = "qwen3";
  CHECK(parse(j).architecture == "Qwen3ForCausalLM");
}

TEST_CASE("config.json: load_model_config reads the directory's file", "[checkpoint][config]") {
  TempDir dir("cfg");
  CHECK_THROWS_WITH(load_model_config(dir.path() / "missing"),
                    Contains((dir.path() / "missing").string()) && Contains("does not exist"));
  CHECK_THROWS_WITH(load_model_config(dir.path()),
                    Contains("config.json") && Contains("not found"));
  write_text(dir.path() / "config.json", llama_json().dump());
  const ModelConfig c = load_model_config(dir.path());
  CHECK(c.dir == dir.path());
  CHECK(c.num_key_value_heads == 8);
}

TEST_CASE("config presets: the shipped Llama-3-8B, Qwen2.5-7B and Qwen3-8B configs",
          "[checkpoint][config]") {
  const std::filesystem::path root = TROUPE_SOURCE_DIR;
  const ModelConfig l = load_model_config(root / "configs/models/llama-3-8b");
  CHECK(l.architecture == "LlamaForCausalLM");
  CHECK(l.vocab_size == 128256);
  CHECK(l.hidden_size == 4096);
  CHECK(l.intermediate_size == 14336);
  CHECK(l.num_hidden_layers == 32);
  CHECK(l.num_attention_heads == 32);
  CHECK(l.num_key_value_heads == 8);
  CHECK(l.rope_theta == 500000.0);
  CHECK(l.max_position_embeddings == 8192);
  CHECK(l.dtype == DType::bf16);
  const ModelConfig q = load_model_config(root / "configs/models/qwen2.5-7b");
  CHECK(q.architecture == "Qwen2ForCausalLM");
  CHECK(q.vocab_size == 152064);
  CHECK(q.hidden_size == 3584);
  CHECK(q.intermediate_size == 18944);
  CHECK(q.num_hidden_layers == 28);
  CHECK(q.num_attention_heads == 28);
  CHECK(q.num_key_value_heads == 4);
  CHECK(q.head_dim == 128);
  CHECK(q.rope_theta == 1000000.0);
  CHECK(q.max_position_embeddings == 32768);
  CHECK_FALSE(q.tie_word_embeddings);
  CHECK(q.dtype == DType::bf16);
  // Qwen3-8B: 8.19 B parameters (the model card's 8.2 B), head_dim 128 over hidden 4096 / 32.
  const ModelConfig q3 = load_model_config(root / "configs/models/qwen3-8b");
  CHECK(q3.architecture == "Qwen3ForCausalLM");
  CHECK(q3.head_dim == 128);
  CHECK(q3.num_key_value_heads == 8);
  CHECK_FALSE(q3.sliding_window);
  CHECK(q3.eos_token_ids == std::vector<int64_t>{151645});
  CHECK(model_parameter_count(q3, ParallelRank{}) == 8190735360);
  CHECK(llama_layer_extras(q3).qk_norm);
}

TEST_CASE("generation_config.json: optional, typed", "[checkpoint][config]") {
  TempDir dir("gen");
  const GenerationConfig none = load_generation_config(dir.path());
  CHECK(none.eos_token_ids.empty());
  CHECK_FALSE(none.temperature.has_value());

  write_text(dir.path() / "generation_config.json",
             R"({"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128009],
                 "temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.05,
                 "max_new_tokens": 512, "pad_token_id": null, "transformers_version": "4.40"})");
  const GenerationConfig g = load_generation_config(dir.path());
  CHECK(g.eos_token_ids == std::vector<int64_t>{128001, 128009});
  CHECK(g.bos_token_id == 128000);
  CHECK_FALSE(g.pad_token_id.has_value());
  CHECK(g.do_sample == true);
  CHECK(g.temperature == 0.6);
  CHECK(g.top_p == 0.9);
  CHECK(g.top_k == 20);
  CHECK(g.repetition_penalty == 1.05);
  CHECK(g.max_new_tokens == 512);

  CHECK(parse_generation_config(R"({"eos_token_id": 2})", "g.json").eos_token_ids ==
        std::vector<int64_t>{2});
  CHECK_THROWS_WITH(parse_generation_config(R"({"temperature": "hot"})", "g.json"),
                    Contains("g.json") && Contains("'temperature'"));
  CHECK_THROWS_WITH(parse_generation_config(R"({"do_sample": 1})", "g.json"),
                    Contains("'do_sample'"));
  CHECK_THROWS_WITH(parse_generation_config(R"({"top_k": -1})", "g.json"), Contains("'top_k'"));
  CHECK_THROWS_WITH(parse_generation_config(R"({"top_p": 1.5})", "g.json"), Contains("'top_p'"));
  CHECK_THROWS_WITH(parse_generation_config(R"({"eos_token_id": [1, null]})", "g.json"),
                    Contains("'eos_token_id'"));
  CHECK_THROWS_WITH(parse_generation_config("[", "g.json"), Contains("not valid JSON"));
  CHECK_THROWS_WITH(parse_generation_config(R"({"temperature": -1e999})", "g.json"),
                    Contains("g.json") && Contains("not valid JSON"));
  write_text(dir.path() / "generation_config.json", "{oops");
  CHECK_THROWS_WITH(load_generation_config(dir.path()),
                    Contains((dir.path() / "generation_config.json").string()));
}

namespace {

// make_causal_lm must reject an unknown architecture before touching the backend.
class UnusedBackend final : public Backend {
 public:
  [[nodiscard]] std::string name() const override { return "unused"; }
  [[nodiscard]] Device device() const override { return {}; }
  [[nodiscard]] DType compute_dtype(DType) const override { return DType::f32; }
  [[nodiscard]] Buffer allocate(size_t) override { throw std::logic_error("used"); }
  void upload(const Tensor&, const void*, size_t) override { throw std::logic_error("used"); }
  void download(void*, const Tensor&, size_t) override { throw std::logic_error("used"); }
  void copy(const Tensor&, const Tensor&) override { throw std::logic_error("used"); }
  void synchronize() override {}
  [[nodiscard]] MemoryInfo memory_info() const override { return {}; }
  void embedding(const Tensor&, const Tensor&, const Tensor&) override {}
  void rms_norm(const Tensor&, const Tensor&, float, const Tensor&) override {}
  void add_rms_norm(const Tensor&, const Tensor&, const Tensor&, float, const Tensor&) override {}
  void linear(const Tensor&, const Tensor&, const Tensor*, const Tensor&) override {}
  void rope(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int32_t, int32_t,
            RopeStyle) override {}
  void write_kv(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                const Tensor&) override {}
  void attention(const Tensor&, const Tensor&, const Tensor&, const AttentionBatch&,
                 const AttentionShape&, const Tensor&) override {}
  void act_mul(GatedActivation, const Tensor&, const Tensor&) override {}
  void gather_rows(const Tensor&, const Tensor&, const Tensor&) override {}
  std::vector<SampledToken> sample(const Tensor&, std::span<const SamplingRow>) override {
    return {};
  }
};

}  // namespace

TEST_CASE("registry: unknown architectures are named with the supported ones",
          "[checkpoint][config]") {
  const auto archs = supported_architectures();
  CHECK(std::find(archs.begin(), archs.end(), "LlamaForCausalLM") != archs.end());
  CHECK(std::find(archs.begin(), archs.end(), "Qwen2ForCausalLM") != archs.end());
  CHECK(std::find(archs.begin(), archs.end(), "MistralForCausalLM") != archs.end());
  CHECK(std::find(archs.begin(), archs.end(), "Qwen3ForCausalLM") != archs.end());
  json j = llama_json();
  j["architectures"] = {"GPT2LMHeadModel"};
  const ModelConfig c = parse(j);
  UnusedBackend backend;
  CHECK_THROWS_WITH(make_causal_lm(c, backend),
                    Contains("GPT2LMHeadModel") && Contains("not supported") &&
                        Contains("LlamaForCausalLM") && Contains("Qwen2ForCausalLM") &&
                        Contains("/models/x/config.json"));
}
