// The interface between the executor's model runner and one architecture's layer program.
//
// Each architecture is one file in this folder (llama.cpp holds Llama, Mistral, Qwen2 and
// Qwen3): its hyper-parameters, how HF weight names map and shard onto its layers, and its
// forward program written against the Backend op set. A registry line in model.cpp names it.
// Adding an architecture never touches the scheduler; a kernel only when it needs an op the
// backends lack (Qwen3's per-head norm: Backend::rms_norm_heads).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend/backend.hpp"
#include "runtime/checkpoint/model_config.hpp"

namespace troupe {

class CheckpointReader;

/// Which slice of the model this executor holds. Each weight's shard rule (weights.hpp's
/// WeightSpec) cuts it by rows, by columns or not at all; the backend's collectives
/// (Backend::set_collectives) join the slices. tp_size must match the backend's group.
struct ParallelRank {
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
  int32_t pp_rank = 0;
  int32_t pp_size = 1;
};

/// How one weight is laid out across tensor-parallel ranks.
enum class Shard : uint8_t {
  replicated,  // every rank holds it whole
  rows,        // dim 0 split: column-parallel linear (q/k/v/gate/up), vocab-parallel embedding
  cols,        // dim 1 split: row-parallel linear (o_proj, down_proj); needs an all-reduce after
};

/// Layers [begin, end) of `num_layers` that pipeline stage `pp_rank` of `pp_size` holds, by
/// vLLM's split: equal shares, the remainder going to the stages before the last (which also
/// holds the final norm and the logits head).
struct LayerRange {
  int64_t begin = 0;
  int64_t end = 0;
};
LayerRange stage_layers(int64_t num_layers, int32_t pp_rank, int32_t pp_size);

/// One step's model inputs, already on the device. T tokens from S sequences.
struct ForwardInputs {
  Tensor token_ids;       // [T] i32
  Tensor positions;       // [T] i32
  Tensor slot_mapping;    // [T] i32
  Tensor logits_indices;  // [L] i32: rows of the token batch whose logits are wanted
  AttentionBatch attention;
  int32_t num_tokens = 0;
};

/// Per-layer KV cache tensors, each [num_blocks, block_size, num_kv_heads, head_dim].
struct KVCacheView {
  std::vector<Tensor> k;
  std::vector<Tensor> v;
  int32_t block_size = 0;
  int32_t num_blocks = 0;
};

/// Shape facts the executor needs to size the KV cache and activations.
struct KVCacheShape {
  int32_t num_layers = 0;     // layers this rank holds
  int32_t num_kv_heads = 0;   // on this rank
  int32_t head_dim = 0;
  DType dtype = DType::f32;
  [[nodiscard]] size_t bytes_per_block(int32_t block_size) const {
    return size_t(2) * size_t(num_layers) * size_t(block_size) * size_t(num_kv_heads) *
           size_t(head_dim) * dtype_size(dtype);
  }
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;

  [[nodiscard]] virtual const ModelConfig& config() const = 0;
  [[nodiscard]] virtual KVCacheShape kv_cache_shape() const = 0;

  /// Reads, converts (to the backend's compute dtype) and uploads this rank's weights.
  virtual void load_weights(const CheckpointReader& checkpoint) = 0;
  /// Random weights of the right shapes (--load-format dummy), reproducible from `seed`.
  virtual void init_dummy_weights(uint64_t seed) = 0;

  /// Allocates activation buffers for steps of up to `max_tokens` tokens and `max_logits`
  /// logits rows. Called once, before the first forward.
  virtual void reserve(int32_t max_tokens, int32_t max_logits) = 0;

  /// Pipeline stages: the first holds the embedding, the last the final norm and the logits
  /// head (one stage holds both).
  [[nodiscard]] virtual bool is_first_stage() const = 0;
  [[nodiscard]] virtual bool is_last_stage() const = 0;

  /// On a stage past the first: the [num_tokens, H] buffer (compute dtype) the next forward
  /// reads the previous stage's hidden states from; the caller fills it before forward().
  /// Fixed across steps (decode graphs read it). Throws on the first stage.
  [[nodiscard]] virtual Tensor stage_input(int32_t num_tokens) = 0;

  /// Runs the step over this rank's layers. The last stage returns the logits [L, vocab_size]
  /// f32 (every rank of a TP group the whole rows); other stages return the hidden states
  /// [T, H] (compute dtype) to hand to the next stage. A view of a reserved buffer, valid until
  /// the next forward.
  virtual Tensor forward(const ForwardInputs& in, const KVCacheView& kv) = 0;
};

/// Builds the layer program for `config.architecture` on `backend`. Throws troupe::Error
/// naming the architecture and the supported ones when it is unknown.
std::unique_ptr<CausalLM> make_causal_lm(const ModelConfig& config, Backend& backend,
                                         const ParallelRank& rank = {});

/// Refuses a tensor x pipeline layout the model cannot be split into, naming the config field
/// (heads, KV heads, intermediate size and vocabulary must split evenly over tp ranks, or KV
/// heads be fewer and divide tp; at least one layer per stage). The engine checks it before it
/// starts any worker; every architecture's constructor checks it again.
void check_parallel_layout(const ModelConfig& config, int64_t tp, int64_t pp);

/// The weights a Llama-family layer (llama.cpp: Llama, Mistral, Qwen2, Qwen3) holds beyond
/// Llama's plain ones, from the architecture and config: what llama.cpp declares and
/// memory_fit counts.
struct LlamaLayerExtras {
  bool qkv_bias = false;  // q/k/v biases: Qwen2 always, the others with attention_bias
  bool o_bias = false;    // o_proj bias: with attention_bias, never on Qwen2
  bool mlp_bias = false;  // gate/up/down biases: Llama and Mistral with mlp_bias
  bool qk_norm = false;   // q_norm and k_norm [head_dim]: Qwen3
};
LlamaLayerExtras llama_layer_extras(const ModelConfig& config);

/// Architectures make_causal_lm knows.
std::vector<std::string> supported_architectures();

}  // namespace troupe
