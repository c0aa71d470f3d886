// Small random Llama-family checkpoints written by the tests themselves (config.json plus
// model.safetensors), so the model program is checked against the float64 reference even
// where no transformers fixtures exist.
#pragma once

#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <vector>

#include "runtime/backend/dtype.hpp"
#include "tests/runtime/test_checkpoint_writer.hpp"

namespace troupe::testing {

inline nlohmann::json small_config(const std::string& arch) {
  return {{"architectures", {arch}},
          {"model_type", arch == "Qwen2ForCausalLM" ? "qwen2" : "llama"},
          {"vocab_size", 48},
          {"hidden_size", 32},
          {"intermediate_size", 40},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 12},  // heads * head_dim (48) != hidden (32): o_proj is not square
          {"max_position_embeddings", 64},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"tie_word_embeddings", false},
          {"hidden_act", "silu"},
          {"dtype", "float32"}};
}

struct SynthTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool norm = false;
};

/// Every tensor the config implies, with HF names. `skip` drops one; `reshape` changes one's shape.
inline std::vector<SynthTensor> synthetic_tensors(const nlohmann::json& c) {
  const int64_t H = c["hidden_size"], I = c["intermediate_size"], V = c["vocab_size"],
                nh = c["num_attention_heads"], nkv = c["num_key_value_heads"], d = c["head_dim"],
                layers = c["num_hidden_layers"];
  const bool qwen2 = c["architectures"][0] == "Qwen2ForCausalLM";
  const bool attn_bias = c.value("attention_bias", false), mlp_bias = c.value("mlp_bias", false);
  std::vector<SynthTensor> t;
  t.push_back({"model.embed_tokens.weight", {V, H}});
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {H}, true});
    t.push_back({p + "post_attention_layernorm.weight", {H}, true});
    t.push_back({p + "self_attn.q_proj.weight", {nh * d, H}});
    t.push_back({p + "self_attn.k_proj.weight", {nkv * d, H}});
    t.push_back({p + "self_attn.v_proj.weight", {nkv * d, H}});
    t.push_back({p + "self_attn.o_proj.weight", {H, nh * d}});
    if (qwen2 || attn_bias) {
      t.push_back({p + "self_attn.q_proj.bias", {nh * d}});
      t.push_back({p + "self_attn.k_proj.bias", {nkv * d}});
      t.push_back({p + "self_attn.v_proj.bias", {nkv * d}});
    }
    if (!qwen2 && attn_bias) t.push_back({p + "self_attn.o_proj.bias", {H}});
    t.push_back({p + "mlp.gate_proj.weight", {I, H}});
    t.push_back({p + "mlp.up_proj.weight", {I, H}});
    t.push_back({p + "mlp.down_proj.weight", {H, I}});
    if (!qwen2 && mlp_bias) {
      t.push_back({p + "mlp.gate_proj.bias", {I}});
      t.push_back({p + "mlp.up_proj.bias", {I}});
      t.push_back({p + "mlp.down_proj.bias", {H}});
    }
  }
  t.push_back({"model.norm.weight", {H}, true});
  if (!c.value("tie_word_embeddings", false)) t.push_back({"lm_head.weight", {V, H}});
  return t;
}

/// Writes config.json and model.safetensors (st_dtype "F32", "F16" or "BF16") into `dir`.
inline void write_synthetic(const std::filesystem::path& dir, const nlohmann::json& config,
                            uint64_t seed, const std::string& st_dtype,
                            const std::string& skip = "", const std::string& reshape = "") {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<StTensor> out;
  for (auto t : synthetic_tensors(config)) {
    if (t.name == skip) continue;
    if (t.name == reshape) t.shape.back() += 1;
    int64_t n = 1;
    for (int64_t s : t.shape) n *= s;
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = t.norm ? 1.0f + 0.2f * normal(rng) : 0.3f * normal(rng);
    std::string bytes;
    if (st_dtype == "F32") {
      bytes = as_bytes(v);
    } else {
      std::vector<uint16_t> h(v.size());
      convert_floats(v.data(), DType::f32, h.data(), st_dtype == "F16" ? DType::f16 : DType::bf16,
                     v.size());
      bytes = as_bytes(h);
    }
    out.push_back({t.name, st_dtype, t.shape, bytes});
  }
  write_text(dir / "config.json", config.dump(2));
  write_bytes(dir / "model.safetensors", make_safetensors(out, {{"format", "pt"}}));
}

}  // namespace troupe::testing
