#include "runtime/exec/memory_fit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <string>

#include "runtime/error.hpp"
#include "runtime/models/model.hpp"
#include "runtime/models/rope.hpp"

namespace troupe {

namespace {

std::string gib(int64_t bytes) {
  return fmt::format("{:.2f} GiB", double(bytes) / double(1 << 30));
}

/// Layers on pipeline stage `rank.pp_rank`: vLLM's split, as llama.cpp makes it (the extra
/// layers go to the stages before the last).
int64_t layers_on_stage(int64_t num_layers, const ParallelRank& rank) {
  const int64_t pp = std::max<int64_t>(rank.pp_size, 1);
  int64_t n = num_layers / pp;
  const int64_t extra = num_layers % pp;
  // Stages pp-2, pp-3, ... get one more each.
  const int64_t from_end = pp - 1 - rank.pp_rank;  // 0 for the last stage
  if (from_end >= 1 && from_end <= extra) n += 1;
  return n;
}

/// Products and sums of config.json's sizes, checked: sizes whose counts do not fit in int64
/// describe no model that can load, and are refused naming the file instead of wrapping
/// (signed overflow is undefined; a config with hidden_size 2^62 reached it).
class SizeMath {
 public:
  explicit SizeMath(const ModelConfig& c) : c_(c) {}

  [[nodiscard]] int64_t mul(std::initializer_list<int64_t> factors) const {
    int64_t r = 1;
    for (const int64_t f : factors)
      if (__builtin_mul_overflow(r, f, &r)) too_large();
    return r;
  }
  [[nodiscard]] int64_t add(std::initializer_list<int64_t> terms) const {
    int64_t r = 0;
    for (const int64_t t : terms)
      if (__builtin_add_overflow(r, t, &r)) too_large();
    return r;
  }

 private:
  [[noreturn]] void too_large() const {
    fail(
        "{}: vocab_size {}, hidden_size {}, intermediate_size {}, num_hidden_layers {}, "
        "{} heads of head_dim {} and max_position_embeddings {} make more than 2^63 parameters "
        "or bytes: not a model that can be loaded",
        (c_.dir / "config.json").string(), c_.vocab_size, c_.hidden_size, c_.intermediate_size,
        c_.num_hidden_layers, c_.num_attention_heads, c_.head_dim, c_.max_position_embeddings);
  }

  const ModelConfig& c_;
};

}  // namespace

int64_t model_parameter_count(const ModelConfig& c, const ParallelRank& rank) {
  const SizeMath k(c);
  const int64_t tp = std::max<int64_t>(rank.tp_size, 1);
  const int64_t H = c.hidden_size, d = c.head_dim, I = c.intermediate_size / tp;
  const int64_t nh = c.num_attention_heads / tp;
  const int64_t nkv = c.num_key_value_heads >= tp ? c.num_key_value_heads / tp : 1;
  const int64_t V = c.vocab_size / tp;
  const LlamaLayerExtras extras = llama_layer_extras(c);

  const int64_t qkv_rows = k.mul({k.add({nh, k.mul({2, nkv})}), d});
  int64_t layer = k.add({k.mul({2, H}),         // input and post-attention norms
                         k.mul({qkv_rows, H}),  // q, k, v
                         k.mul({H, nh, d}),     // o_proj
                         k.mul({3, I, H})});    // gate, up, down
  if (extras.qkv_bias) layer = k.add({layer, qkv_rows});
  if (extras.o_bias) layer = k.add({layer, H});
  if (extras.mlp_bias) layer = k.add({layer, k.mul({2, I}), H});
  if (extras.qk_norm) layer = k.add({layer, k.mul({2, d})});

  const bool first = rank.pp_rank == 0, last = rank.pp_rank == std::max(rank.pp_size, 1) - 1;
  int64_t n = k.mul({layers_on_stage(c.num_hidden_layers, rank), layer});
  if (first) n = k.add({n, k.mul({V, H})});  // the embedding
  // The last stage: the final norm, and lm_head unless it is the (tied) embedding.
  if (last) n = k.add({n, H, c.tie_word_embeddings && first ? 0 : k.mul({V, H})});
  return n;
}

ModelMemory model_memory(const ModelConfig& c, DType dtype, int64_t max_model_len,
                         const ParallelRank& rank) {
  const SizeMath k(c);
  const auto element = int64_t(dtype_size(dtype));
  ModelMemory m;
  m.parameters = model_parameter_count(c, rank);
  m.dtype = dtype;
  m.max_model_len = max_model_len;
  const int64_t rope_table = k.mul({rope_max_positions(c), c.head_dim, int64_t(sizeof(float))});
  m.weight_bytes = k.add({k.mul({m.parameters, element}), rope_table});
  const int64_t tp = std::max<int64_t>(rank.tp_size, 1);
  const int64_t nkv = c.num_key_value_heads >= tp ? c.num_key_value_heads / tp : 1;
  m.kv_bytes_per_token =
      k.mul({2, layers_on_stage(c.num_hidden_layers, rank), nkv, c.head_dim, element});
  (void)k.add({m.weight_bytes, k.mul({m.kv_bytes_per_token, max_model_len})});  // fits too
  return m;
}

int64_t memory_margin_bytes(int64_t available_bytes) {
  return std::max<int64_t>(int64_t(512) << 20, available_bytes / 20);
}

void check_model_fits(const ModelMemory& need, int64_t available_bytes, const Device& device,
                      DType checkpoint_dtype) {
  const int64_t margin = memory_margin_bytes(available_bytes);
  const int64_t usable = available_bytes - margin;
  if (need.one_sequence_bytes() <= usable) return;

  const bool host = device.kind == DeviceKind::cpu;
  const std::string where =
      host ? fmt::format("{} of host memory available (MemAvailable {} less a {} margin)",
                         gib(std::max<int64_t>(usable, 0)), gib(available_bytes), gib(margin))
           : fmt::format("{} free on cuda:{} ({} free less a {} margin)",
                         gib(std::max<int64_t>(usable, 0)), device.index, gib(available_bytes),
                         gib(margin));
  const std::string weights = fmt::format("{:.2f} B parameters in {}",
                                          double(need.parameters) / 1e9, dtype_name(need.dtype));

  if (need.weight_bytes <= usable) {
    // The weights fit; one full-length sequence's KV cache does not.
    const int64_t fits =
        need.kv_bytes_per_token > 0 ? (usable - need.weight_bytes) / need.kv_bytes_per_token : 0;
    fail(
        "the model does not fit: its weights ({}: {}) and the KV cache of one max_model_len = "
        "{} sequence ({}) need {}, but there is {}; lower --max-model-len (at most {} fits), "
        "or use {}",
        weights, gib(need.weight_bytes), need.max_model_len,
        gib(need.kv_bytes_per_token * need.max_model_len), gib(need.one_sequence_bytes()), where,
        fits, host ? "a machine with more memory" : "another device (CUDA_VISIBLE_DEVICES)");
  }
  std::string help;
  if (host) {
    const int64_t half = (need.weight_bytes - need.weight_bytes / 2);
    help = fmt::format(
        "the CPU backend computes in float32, so --dtype cannot shrink them; run on a GPU "
        "(--device cuda, about {} in bfloat16), or use a smaller model",
        gib(half));
  } else if (need.dtype == DType::f32) {
    help = fmt::format(
        "--dtype bfloat16 (or float16) halves them (the checkpoint is {}), or use another device "
        "with more free memory (CUDA_VISIBLE_DEVICES)",
        dtype_name(checkpoint_dtype));
  } else {
    help = "use another device with more free memory (CUDA_VISIBLE_DEVICES), or a smaller model";
  }
  fail("the model does not fit: its weights ({}) need {}, but there is {}; {}", weights,
       gib(need.weight_bytes), where, help);
}

}  // namespace troupe
