// A Hugging Face config.json, read into the fields troupe's architectures use.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backend/dtype.hpp"

namespace troupe {

struct RopeScaling {
  std::string type;  // "" (none), "llama3", "linear", "dynamic", ...
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
};

struct ModelConfig {
  std::filesystem::path dir;   // the checkpoint directory
  std::string architecture;    // architectures[0], e.g. "LlamaForCausalLM"
  std::string model_type;      // "llama", "qwen2", ...
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  std::string hidden_act = "silu";
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and o) biases; Qwen2 always has q/k/v biases
  bool mlp_bias = false;
  /// Sliding-window attention's window, when some layer uses one: transformers 5's
  /// layer_types naming a "sliding_attention" layer; else Qwen2/Qwen3's use_sliding_window
  /// (from layer max_window_layers on); else Mistral's sliding_window whenever it is set.
  /// troupe computes full attention, which is the same while sequences fit the window: the
  /// engine refuses a longer max_model_len.
  std::optional<int64_t> sliding_window;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // config.json's eos_token_id, int or list
  /// `dtype` (transformers >= 4.56) or the older `torch_dtype`; f32 when neither is given.
  DType dtype = DType::f32;
};

/// Reads `dir`/config.json. Throws troupe::Error naming the path and the field when the
/// file is missing, is not JSON, or lacks / mistypes a required field.
ModelConfig load_model_config(const std::filesystem::path& dir);

/// Same, from JSON text (for tests); `dir` is recorded as given.
ModelConfig parse_model_config(const std::string& json_text, const std::filesystem::path& dir);

}  // namespace troupe
