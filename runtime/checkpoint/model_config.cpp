// Reading a Hugging Face config.json into ModelConfig.
//
// What transformers accepts, we accept: `dtype` or the older `torch_dtype`; eos_token_id as an
// int, a list or null; RoPE settings either flat (`rope_theta` + `rope_scaling` with `type` or
// `rope_type`) or in transformers 5's `rope_parameters` dict (possibly nested per layer type,
// where we read "full_attention"). Defaults follow transformers' own class defaults where one
// exists (rms_norm_eps 1e-6, rope_theta 10000, silu, untied); the structural sizes have no
// sensible default and are required.
#include "runtime/checkpoint/model_config.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "runtime/checkpoint/json_object.hpp"
#include "runtime/error.hpp"

namespace troupe {

namespace {

using nlohmann::json;

// Reads fields of one JSON object, each error naming the file and the field.
class Fields {
 public:
  Fields(const json& obj, std::string path, std::string prefix = "")
      : obj_(obj), path_(std::move(path)), prefix_(std::move(prefix)) {}

  [[nodiscard]] bool has(const char* key) const {
    auto it = obj_.find(key);
    return it != obj_.end() && !it->is_null();
  }

  [[nodiscard]] const json* find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }

  [[nodiscard]] std::string name(const char* key) const { return prefix_ + key; }

  [[noreturn]] void bad(const char* key, const json& v, const char* allowed) const {
    fail("{}: field '{}' is {}; it must be {}", path_, name(key), v.dump(), allowed);
  }

  [[nodiscard]] int64_t integer(const char* key, std::optional<int64_t> def = std::nullopt,
                                int64_t min = 1,
                                int64_t max = std::numeric_limits<int64_t>::max()) const {
    const json* v = find(key);
    if (!v) {
      if (def) return *def;
      fail("{}: required field '{}' is missing (an integer >= {})", path_, name(key), min);
    }
    std::optional<int64_t> out;
    if (v->is_number_integer()) {
      out = v->get<int64_t>();
    } else if (v->is_number_float()) {  // 4096.0 is an integer too
      // Converted only inside int64's range: casting 1e58 is undefined (found by fuzzing).
      const double d = v->get<double>();
      if (d >= -0x1p63 && d < 0x1p63 && d == std::trunc(d)) out = int64_t(d);
    }
    if (!out || *out < min || *out > max) {
      std::string allowed = max == std::numeric_limits<int64_t>::max()
                                ? fmt::format("an integer >= {}", min)
                                : fmt::format("an integer in {}..{}", min, max);
      bad(key, *v, allowed.c_str());
    }
    return *out;
  }

  [[nodiscard]] std::optional<int64_t> opt_integer(const char* key, int64_t min = 0) const {
    if (!has(key)) return std::nullopt;
    return integer(key, std::nullopt, min);
  }

  [[nodiscard]] double number(const char* key, double def, bool positive = true) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_number() || (positive && v->get<double>() <= 0.0))
      bad(key, *v, positive ? "a number > 0" : "a number");
    return v->get<double>();
  }

  [[nodiscard]] bool boolean(const char* key, bool def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_boolean()) bad(key, *v, "true or false");
    return v->get<bool>();
  }

  [[nodiscard]] std::string string(const char* key, std::string def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_string()) bad(key, *v, "a string");
    return v->get<std::string>();
  }

  /// An int, a list of ints, or absent/null (empty).
  [[nodiscard]] std::vector<int64_t> int_list(const char* key) const {
    const json* v = find(key);
    std::vector<int64_t> out;
    if (!v) return out;
    if (v->is_number_integer()) {
      out.push_back(v->get<int64_t>());
      return out;
    }
    if (!v->is_array()) bad(key, *v, "an integer or a list of integers");
    for (const auto& e : *v) {
      if (!e.is_number_integer()) bad(key, *v, "an integer or a list of integers");
      out.push_back(e.get<int64_t>());
    }
    return out;
  }

  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  const json& obj_;
  std::string path_;
  std::string prefix_;
};

// Fills rope_theta and rope_scaling from one flat dict: config.json's top level with its
// `rope_scaling` dict, or transformers 5's `rope_parameters`.
void read_rope_dict(const Fields& f, ModelConfig& c) {
  if (f.has("rope_theta")) c.rope_theta = f.number("rope_theta", c.rope_theta);
  std::string type = f.has("rope_type") ? f.string("rope_type", "") : f.string("type", "");
  if (type == "default") type.clear();
  // "su"/"mrope" and the like are kept as given; the architecture decides what it supports.
  c.rope_scaling.type = type;
  if (type.empty()) return;
  c.rope_scaling.factor = f.number("factor", 1.0);
  c.rope_scaling.low_freq_factor = f.number("low_freq_factor", c.rope_scaling.low_freq_factor);
  c.rope_scaling.high_freq_factor = f.number("high_freq_factor", c.rope_scaling.high_freq_factor);
  c.rope_scaling.original_max_position_embeddings =
      f.integer("original_max_position_embeddings", int64_t(0), 0);
  if (type == "llama3") {
    if (c.rope_scaling.original_max_position_embeddings <= 0)
      fail("{}: field '{}' is required for rope type \"llama3\" (a positive integer)", f.path(),
           f.name("original_max_position_embeddings"));
    if (c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor)
      fail("{}: '{}' ({}) must be greater than '{}' ({}) for rope type \"llama3\"", f.path(),
           f.name("high_freq_factor"), c.rope_scaling.high_freq_factor, f.name("low_freq_factor"),
           c.rope_scaling.low_freq_factor);
  }
}

// When config.json has no `architectures` list (hand-written configs), the model_type says it.
std::string architecture_for(const std::string& model_type) {
  if (model_type == "llama") return "LlamaForCausalLM";
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  if (model_type == "qwen3") return "Qwen3ForCausalLM";
  if (model_type == "mistral") return "MistralForCausalLM";
  return "";
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::filesystem::path& dir) {
  const std::string path = (dir / "config.json").string();
  const json j = parse_json_object(json_text, path);
  const Fields f(j, path);

  ModelConfig c;
  c.dir = dir;
  c.model_type = f.string("model_type", "");
  if (const json* a = f.find("architectures")) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string())
      f.bad("architectures", *a, "a non-empty list of strings, e.g. [\"LlamaForCausalLM\"]");
    c.architecture = (*a)[0].get<std::string>();
  } else {
    c.architecture = architecture_for(c.model_type);
    if (c.architecture.empty())
      fail(
          "{}: required field 'architectures' is missing (e.g. [\"LlamaForCausalLM\"]) and "
          "model_type '{}' does not imply one",
          path, c.model_type);
  }

  // Token ids and positions are 32-bit in the engine: a larger vocab_size or context would be
  // cut short there, not used.
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  c.vocab_size = f.integer("vocab_size", std::nullopt, 1, kInt32Max);
  c.hidden_size = f.integer("hidden_size");
  c.intermediate_size = f.integer("intermediate_size");
  c.num_hidden_layers = f.integer("num_hidden_layers");
  c.num_attention_heads = f.integer("num_attention_heads");
  c.num_key_value_heads = f.integer("num_key_value_heads", c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", path,
         c.num_attention_heads, c.num_key_value_heads);
  if (!f.has("head_dim") && c.hidden_size % c.num_attention_heads != 0)
    fail(
        "{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and no head_dim is "
        "given",
        path, c.hidden_size, c.num_attention_heads);
  c.head_dim = f.integer("head_dim", c.hidden_size / c.num_attention_heads);
  if (c.head_dim % 2 != 0)
    fail("{}: head_dim ({}) must be even for rotary embeddings", path, c.head_dim);
  c.max_position_embeddings = f.integer("max_position_embeddings", std::nullopt, 1, kInt32Max);
  c.rms_norm_eps = f.number("rms_norm_eps", c.rms_norm_eps);
  c.hidden_act = f.string("hidden_act", c.hidden_act);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", c.tie_word_embeddings);
  c.attention_bias = f.boolean("attention_bias", c.attention_bias);
  c.mlp_bias = f.boolean("mlp_bias", c.mlp_bias);
  bool windowed = false;
  if (const json* types = f.find("layer_types"); types && types->is_array()) {
    for (const json& t : *types) windowed = windowed || t == "sliding_attention";
  } else if (f.has("use_sliding_window")) {
    windowed = f.boolean("use_sliding_window", false) &&
               f.integer("max_window_layers", int64_t(0), 0) < c.num_hidden_layers;
  } else {
    windowed = f.has("sliding_window");
  }
  if (windowed) c.sliding_window = f.opt_integer("sliding_window", 1);
  c.bos_token_id = f.opt_integer("bos_token_id");
  c.eos_token_ids = f.int_list("eos_token_id");

  // RoPE, as transformers 5 resolves it: a non-null `rope_scaling` replaces `rope_parameters`
  // (rope_theta from inside it, else the top level); otherwise `rope_parameters` when present.
  c.rope_theta = f.number("rope_theta", c.rope_theta);
  const json* rs = f.find("rope_scaling");
  const json* rp = f.find("rope_parameters");
  if (rs) {
    if (!rs->is_object()) f.bad("rope_scaling", *rs, "null or an object");
    read_rope_dict(Fields(*rs, path, "rope_scaling."), c);
  } else if (rp) {
    if (!rp->is_object()) f.bad("rope_parameters", *rp, "null or an object");
    // Per-layer-type form: {"full_attention": {...}, "sliding_attention": {...}}.
    auto full = rp->find("full_attention");
    if (full != rp->end() && full->is_object()) {
      read_rope_dict(Fields(*full, path, "rope_parameters.full_attention."), c);
    } else {
      read_rope_dict(Fields(*rp, path, "rope_parameters."), c);
    }
  }

  // `dtype` (transformers >= 4.56) wins over `torch_dtype`; both name a torch dtype.
  const char* dtype_key = f.has("dtype") ? "dtype" : f.has("torch_dtype") ? "torch_dtype" : nullptr;
  if (dtype_key) {
    std::string s = f.string(dtype_key, "");
    auto d = parse_dtype(s);
    if (!d || !is_float(*d))
      fail("{}: field '{}' is \"{}\"; it must be one of float32, float16, bfloat16", path,
           dtype_key, s);
    c.dtype = *d;
  }
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    fail("model directory '{}' does not exist or is not a directory", dir.string());
  const auto path = dir / "config.json";
  if (!std::filesystem::is_regular_file(path, ec))
    fail("'{}' not found: a model directory needs a Hugging Face config.json", path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("'{}' cannot be opened for reading", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse_model_config(text.str(), dir);
}

}  // namespace troupe
