#include "runtime/exec/memory_fit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "runtime/error.hpp"
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

}  // namespace

int64_t model_parameter_count(const ModelConfig& c, const ParallelRank& rank) {
  const int64_t tp = std::max<int64_t>(rank.tp_size, 1);
  const int64_t H = c.hidden_size, d = c.head_dim, I = c.intermediate_size / tp;
  const int64_t nh = c.num_attention_heads / tp;
  const int64_t nkv = c.num_key_value_heads >= tp ? c.num_key_value_heads / tp : 1;
  const int64_t V = c.vocab_size / tp;
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  const bool qkv_bias = qwen2 || c.attention_bias;
  const bool o_bias = !qwen2 && c.attention_bias;
  const bool mlp_bias = !qwen2 && c.mlp_bias;

  const int64_t qkv_rows = (nh + 2 * nkv) * d;
  int64_t layer = 2 * H           // input and post-attention norms
                  + qkv_rows * H  // q, k, v
                  + H * nh * d    // o_proj
                  + 3 * I * H;    // gate, up, down
  if (qkv_bias) layer += qkv_rows;
  if (o_bias) layer += H;
  if (mlp_bias) layer += 2 * I + H;

  const bool first = rank.pp_rank == 0, last = rank.pp_rank == std::max(rank.pp_size, 1) - 1;
  int64_t n = layers_on_stage(c.num_hidden_layers, rank) * layer;
  if (first) n += V * H;  // the embedding
  // The last stage: the final norm, and lm_head unless it is the (tied) embedding.
  if (last) n += H + (c.tie_word_embeddings && first ? 0 : V * H);
  return n;
}

ModelMemory model_memory(const ModelConfig& c, DType dtype, int64_t max_model_len,
                         const ParallelRank& rank) {
  ModelMemory m;
  m.parameters = model_parameter_count(c, rank);
  m.dtype = dtype;
  m.max_model_len = max_model_len;
  const int64_t rope_table = rope_max_positions(c) * c.head_dim * int64_t(sizeof(float));
  m.weight_bytes = m.parameters * int64_t(dtype_size(dtype)) + rope_table;
  const int64_t tp = std::max<int64_t>(rank.tp_size, 1);
  const int64_t nkv = c.num_key_value_heads >= tp ? c.num_key_value_heads / tp : 1;
  m.kv_bytes_per_token = 2 * layers_on_stage(c.num_hidden_layers, rank) * nkv * c.head_dim *
                         int64_t(dtype_size(dtype));
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
