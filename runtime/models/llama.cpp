// The Llama family: LlamaForCausalLM, MistralForCausalLM (the same program),
// Qwen2ForCausalLM (q/k/v biases, no o_proj bias) and Qwen3ForCausalLM (no biases unless
// attention_bias; an RMSNorm over each q and k head, q_norm and k_norm, before RoPE).
//
// Layer program, per step of T tokens (H hidden, d head_dim, nh/nkv heads on this rank, I the
// intermediate size on this rank, V the vocabulary, P the tensor-parallel size):
//   first stage:  residual = embed(ids)                          [T, H]  (vocab-parallel: each
//                 rank's [V/P, H] shard, summed over the group)
//   later stages: residual = the previous stage's hidden states  [T, H]
//   per layer:    qkv = rms_norm(residual) @ W_qkv^T (+ b)       [T, (nh + 2 nkv) d]
//                 (Qwen3: each q head and each k head of qkv rms_norm'ed in place, by
//                 q_norm [d] and k_norm [d]; the fused norm-GEMM-rope path is not taken)
//                 q = rope(qkv.q); cache <- rope(qkv.k), qkv.v   [T, nh d] (one op)
//                 a = attention(q)                               [T, nh d]
//                 residual += a @ W_o^T                          [T, H]  (row-parallel)
//                 act = act(gate) * up, gate|up = rms_norm(residual) @ W_gu^T  [T, 2I] -> [T, I]
//                 residual += act @ W_down^T                     [T, H]  (row-parallel)
//   last stage:   h = rms_norm(residual); logits = h[logits_indices] @ W_lm^T  [L, V] f32
//                 (vocab-parallel: [L, V/P] per rank, gathered side by side)
//   other stages: hand residual [T, H] on.
// One program for every backend, batch size and parallel layout: the ResidualStream
// (layers.hpp) decides where each add, norm and all-reduce runs (fused into the skinny GEMMs
// of CUDA's one-row steps, inside add_rms_norm elsewhere), with the same bits either way.
//
// Sharding (vLLM's): q/k/v and gate/up are column-parallel (rows of the weight split), o_proj
// and down_proj row-parallel (columns split, then an all-reduce), the embedding and lm_head
// vocab-parallel; KV heads are split across ranks, or replicated when there are fewer KV
// heads than ranks. q/k/v weights are concatenated at load (vLLM's fused qkv) into one
// [(nh + 2 nkv) d, H] buffer, so the projection is one GEMM; rope_qkv_to_cache then rotates q
// and k out of its rows, writes q to its own buffer and k, v into the paged cache (vLLM's
// rotary embedding + reshape_and_cache, one launch). gate/up likewise: act_mul reads
// [gate | up] directly.
//
// Not supported here: sliding-window attention (Mistral v0.1's 4096-token window, Qwen2's
// use_sliding_window: ModelConfig::sliding_window; the engine refuses a max_model_len longer
// than the window, within which full attention is the same), activations other than silu and
// gelu (refused at construction).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/models/layers.hpp"
#include "runtime/models/model.hpp"
#include "runtime/models/rope.hpp"
#include "runtime/models/weights.hpp"

namespace troupe {

namespace {

// How dummy weights of a parameter are drawn.
enum class Init : uint8_t { matrix, norm, bias };

class LlamaFamily final : public CausalLM {
 public:
  LlamaFamily(const ModelConfig& config, Backend& backend, const ParallelRank& rank);

  [[nodiscard]] const ModelConfig& config() const override { return config_; }
  [[nodiscard]] KVCacheShape kv_cache_shape() const override {
    return {int32_t(layers_.size()), int32_t(nkv_), int32_t(d_), cdt_};
  }
  void load_weights(const CheckpointReader& checkpoint) override;
  void init_dummy_weights(uint64_t seed) override;
  void reserve(int32_t max_tokens, int32_t max_logits) override;
  [[nodiscard]] bool is_first_stage() const override { return has_embed_; }
  [[nodiscard]] bool is_last_stage() const override { return has_head_; }
  Tensor stage_input(int32_t num_tokens) override;
  Tensor forward(const ForwardInputs& in, const KVCacheView& kv) override;

 private:
  struct Layer {
    Tensor input_norm;  // [H]
    Tensor qkv_w;       // [(nh + 2 nkv) d, H]: q rows, then k rows, then v rows
    Tensor qkv_b;       // [(nh + 2 nkv) d], empty without q/k/v biases
    Tensor o_w;         // [H, nh d]
    Tensor o_b;         // [H], empty without an o_proj bias
    Tensor post_norm;   // [H]
    Tensor gate_up_w;   // [2 I, H]: gate rows, then up rows
    Tensor gate_up_b;   // [2 I], empty without MLP biases
    Tensor down_w;      // [H, I]
    Tensor down_b;      // [H], empty without MLP biases
    Tensor q_norm;      // [d], Qwen3 only: every q head's RMSNorm weight
    Tensor k_norm;      // [d], Qwen3 only: every k head's
  };

  // One checkpoint tensor and where its slice lands: rows [dst_row, dst_row + local rows) of
  // *dst (fused weights take several params).
  struct Param {
    WeightSpec spec;
    Tensor* dst = nullptr;
    int64_t dst_row = 0;
    Init init = Init::matrix;
  };

  // Allocates into `owner` (weights_ or activations_).
  Tensor alloc(DType t, std::initializer_list<int64_t> dims, std::vector<Buffer>* owner = nullptr);
  void declare_weights();
  void add(std::string name, std::vector<int64_t> shape, Shard shard, Tensor* dst, int64_t dst_row,
           Init init, int64_t parts = 0);
  void upload_param(const Param& p, const std::vector<unsigned char>& host);

  ModelConfig config_;
  Backend& backend_;
  ParallelRank rank_;
  DType cdt_;  // compute dtype of weights and activations
  GatedActivation mlp_act_ = GatedActivation::silu;  // from hidden_act

  // Sizes on this rank.
  int64_t H_ = 0, d_ = 0, nh_ = 0, nkv_ = 0, I_ = 0, V_ = 0, V_local_ = 0;
  bool qkv_bias_ = false, o_bias_ = false, mlp_bias_ = false, qk_norm_ = false;
  int64_t first_layer_ = 0;  // global index of layers_[0]
  bool has_embed_ = false, has_head_ = false;

  std::vector<Buffer> weights_;      // owns every weight and the RoPE table
  std::vector<Buffer> activations_;  // owns the reserve() buffers, replaced by a new reserve()
  Tensor embed_;                     // [V_local, H]
  std::vector<Layer> layers_;
  Tensor final_norm_;  // [H]
  Tensor lm_head_;     // [V_local, H]; the embedding itself when tied on one stage
  Tensor cos_sin_;     // [max_positions, d] f32
  std::vector<Param> params_;

  // Activations, sized by reserve().
  int32_t max_tokens_ = 0, max_logits_ = 0;
  Tensor residual_;  // [T, H]
  Tensor h_;         // [T, H] normed
  Tensor x_;         // [T, H] attention / MLP output
  Tensor qkv_;       // [T, (nh + 2 nkv) d]
  Tensor q_;         // [T, nh d] rotated
  Tensor attn_;      // [T, nh d]
  Tensor gate_up_;   // [T, 2 I]
  Tensor act_;       // [T, I]
  Tensor h_sel_;     // [L, H]
  Tensor logits_local_;  // [L, V_local] f32 (TP > 1: this rank's vocabulary shard)
  Tensor logits_gathered_;  // [P, L, V_local] f32 (TP > 1: every rank's shard)
  Tensor logits_;    // [L, V] f32
};

LlamaFamily::LlamaFamily(const ModelConfig& config, Backend& backend, const ParallelRank& rank)
    : config_(config), backend_(backend), rank_(rank), cdt_(backend.compute_dtype(config.dtype)) {
  const auto& c = config_;
  const std::string where = (c.dir / "config.json").string();
  if (c.hidden_act == "silu" || c.hidden_act == "swish") {
    mlp_act_ = GatedActivation::silu;
  } else if (c.hidden_act == "gelu") {
    mlp_act_ = GatedActivation::gelu;
  } else if (c.hidden_act == "gelu_pytorch_tanh" || c.hidden_act == "gelu_new" ||
             c.hidden_act == "gelu_fast") {
    mlp_act_ = GatedActivation::gelu_tanh;
  } else {
    fail("{}: hidden_act \"{}\" is not supported by {}; allowed: silu, swish, gelu, "
         "gelu_pytorch_tanh, gelu_new, gelu_fast",
         where, c.hidden_act, c.architecture);
  }
  check_parallel_layout(c, rank.tp_size, rank.pp_size);
  if (rank.tp_rank < 0 || rank.tp_rank >= rank.tp_size)
    fail("tp_rank {} is outside [0, tp_size {})", rank.tp_rank, rank.tp_size);
  if (rank.pp_rank < 0 || rank.pp_rank >= rank.pp_size)
    fail("pp_rank {} is outside [0, pp_size {})", rank.pp_rank, rank.pp_size);
  const int64_t tp = rank.tp_size;
  H_ = c.hidden_size;
  d_ = c.head_dim;
  nh_ = c.num_attention_heads / tp;
  nkv_ = c.num_key_value_heads >= tp ? c.num_key_value_heads / tp : 1;  // replicated below tp
  I_ = c.intermediate_size / tp;
  V_ = c.vocab_size;
  V_local_ = c.vocab_size / tp;
  const LlamaLayerExtras extras = llama_layer_extras(c);
  qkv_bias_ = extras.qkv_bias;
  o_bias_ = extras.o_bias;
  mlp_bias_ = extras.mlp_bias;
  qk_norm_ = extras.qk_norm;

  const LayerRange range = stage_layers(c.num_hidden_layers, rank.pp_rank, rank.pp_size);
  first_layer_ = range.begin;
  layers_.resize(size_t(range.end - range.begin));
  has_embed_ = rank.pp_rank == 0;
  has_head_ = rank.pp_rank == rank.pp_size - 1;

  declare_weights();

  const int64_t max_pos = rope_max_positions(c);
  std::vector<float> table = rope_cos_sin_table(c, int32_t(d_), max_pos);
  cos_sin_ = alloc(DType::f32, {max_pos, d_});
  backend_.upload(cos_sin_, table.data(), table.size() * sizeof(float));
}

Tensor LlamaFamily::alloc(DType t, std::initializer_list<int64_t> dims,
                          std::vector<Buffer>* owner) {
  std::vector<Buffer>& buffers = owner ? *owner : weights_;
  size_t n = dtype_size(t);
  for (int64_t d : dims) n *= size_t(d);
  buffers.push_back(backend_.allocate(std::max<size_t>(n, 1)));
  return buffers.back().tensor(t, dims);
}

void LlamaFamily::add(std::string name, std::vector<int64_t> shape, Shard shard, Tensor* dst,
                      int64_t dst_row, Init init, int64_t parts) {
  Param p;
  p.spec = WeightSpec{std::move(name), std::move(shape), shard, parts};
  p.dst = dst;
  p.dst_row = dst_row;
  p.init = init;
  params_.push_back(std::move(p));
}

// The weight table: every HF tensor this rank reads, its full shape and its shard rule.
void LlamaFamily::declare_weights() {
  const auto& c = config_;
  const int64_t H = H_, d = d_, I = c.intermediate_size, V = V_;
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t qkv_rows = (nh_ + 2 * nkv_) * d;  // local

  if (has_embed_) {
    embed_ = alloc(cdt_, {V_local_, H});
    add("model.embed_tokens.weight", {V, H}, Shard::rows, &embed_, 0, Init::matrix);
  }
  for (size_t li = 0; li < layers_.size(); ++li) {
    Layer& L = layers_[li];
    const std::string pre = fmt::format("model.layers.{}.", first_layer_ + int64_t(li));
    L.input_norm = alloc(cdt_, {H});
    L.qkv_w = alloc(cdt_, {qkv_rows, H});
    L.o_w = alloc(cdt_, {H, nh_ * d});
    L.post_norm = alloc(cdt_, {H});
    L.gate_up_w = alloc(cdt_, {2 * I_, H});
    L.down_w = alloc(cdt_, {H, I_});
    add(pre + "input_layernorm.weight", {H}, Shard::replicated, &L.input_norm, 0, Init::norm);
    add(pre + "self_attn.q_proj.weight", {nh * d, H}, Shard::rows, &L.qkv_w, 0, Init::matrix);
    add(pre + "self_attn.k_proj.weight", {nkv * d, H}, Shard::rows, &L.qkv_w, nh_ * d, Init::matrix,
        nkv);
    add(pre + "self_attn.v_proj.weight", {nkv * d, H}, Shard::rows, &L.qkv_w, (nh_ + nkv_) * d,
        Init::matrix, nkv);
    if (qkv_bias_) {
      L.qkv_b = alloc(cdt_, {qkv_rows});
      add(pre + "self_attn.q_proj.bias", {nh * d}, Shard::rows, &L.qkv_b, 0, Init::bias);
      add(pre + "self_attn.k_proj.bias", {nkv * d}, Shard::rows, &L.qkv_b, nh_ * d, Init::bias,
          nkv);
      add(pre + "self_attn.v_proj.bias", {nkv * d}, Shard::rows, &L.qkv_b, (nh_ + nkv_) * d,
          Init::bias, nkv);
    }
    if (qk_norm_) {  // per head: the same on every rank
      L.q_norm = alloc(cdt_, {d});
      L.k_norm = alloc(cdt_, {d});
      add(pre + "self_attn.q_norm.weight", {d}, Shard::replicated, &L.q_norm, 0, Init::norm);
      add(pre + "self_attn.k_norm.weight", {d}, Shard::replicated, &L.k_norm, 0, Init::norm);
    }
    add(pre + "self_attn.o_proj.weight", {H, nh * d}, Shard::cols, &L.o_w, 0, Init::matrix);
    if (o_bias_) {
      // Row-parallel bias: whole on every rank, to be added once after the all-reduce.
      L.o_b = alloc(cdt_, {H});
      add(pre + "self_attn.o_proj.bias", {H}, Shard::replicated, &L.o_b, 0, Init::bias);
    }
    add(pre + "post_attention_layernorm.weight", {H}, Shard::replicated, &L.post_norm, 0,
        Init::norm);
    add(pre + "mlp.gate_proj.weight", {I, H}, Shard::rows, &L.gate_up_w, 0, Init::matrix);
    add(pre + "mlp.up_proj.weight", {I, H}, Shard::rows, &L.gate_up_w, I_, Init::matrix);
    add(pre + "mlp.down_proj.weight", {H, I}, Shard::cols, &L.down_w, 0, Init::matrix);
    if (mlp_bias_) {
      L.gate_up_b = alloc(cdt_, {2 * I_});
      L.down_b = alloc(cdt_, {H});
      add(pre + "mlp.gate_proj.bias", {I}, Shard::rows, &L.gate_up_b, 0, Init::bias);
      add(pre + "mlp.up_proj.bias", {I}, Shard::rows, &L.gate_up_b, I_, Init::bias);
      add(pre + "mlp.down_proj.bias", {H}, Shard::replicated, &L.down_b, 0, Init::bias);
    }
  }
  if (has_head_) {
    final_norm_ = alloc(cdt_, {H});
    add("model.norm.weight", {H}, Shard::replicated, &final_norm_, 0, Init::norm);
    if (c.tie_word_embeddings && has_embed_) {
      lm_head_ = embed_;  // one tensor, loaded once
    } else {
      lm_head_ = alloc(cdt_, {V_local_, H});
      // A tied model on a later stage reads the embedding matrix as its head.
      add(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", {V, H},
          Shard::rows, &lm_head_, 0, Init::matrix);
    }
  }
}

void LlamaFamily::upload_param(const Param& p, const std::vector<unsigned char>& host) {
  const std::vector<int64_t> ls = local_shape(p.spec, rank_);
  const Tensor dst = p.dst->rows(p.dst_row, p.dst_row + ls[0]);
  if (size_t(dst.nbytes()) != host.size())
    fail("internal: weight '{}' slice is {} bytes, destination {} holds {}", p.spec.name,
         host.size(), describe(dst), dst.nbytes());
  backend_.upload(dst, host.data(), host.size());
}

void LlamaFamily::load_weights(const CheckpointReader& checkpoint) {
  std::vector<unsigned char> host;
  for (const Param& p : params_) {
    if (!checkpoint.contains(p.spec.name))
      fail("checkpoint '{}' lacks weight '{}' (expected shape {}){}", checkpoint.dir().string(),
           p.spec.name, shape_string(p.spec.shape),
           p.spec.name == "lm_head.weight"
               ? "; set tie_word_embeddings if the head is the embedding"
               : "");
    const TensorInfo t = checkpoint.get(p.spec.name);
    int64_t n = 1;
    for (int64_t x : local_shape(p.spec, rank_)) n *= x;
    host.resize(size_t(n) * dtype_size(cdt_));
    copy_shard(t, p.spec, rank_, host.data(), cdt_);
    upload_param(p, host);
  }
  backend_.synchronize();
}

void LlamaFamily::init_dummy_weights(uint64_t seed) {
  std::vector<unsigned char> host;
  for (const Param& p : params_) {
    int64_t n = 1;
    for (int64_t x : local_shape(p.spec, rank_)) n *= x;
    host.resize(size_t(n) * dtype_size(cdt_));
    const double mean = p.init == Init::norm ? 1.0 : 0.0;
    const double std = p.init == Init::norm ? 0.0 : 0.02;
    fill_dummy_shard(seed, p.spec, rank_, mean, std, host.data(), cdt_);
    upload_param(p, host);
  }
  backend_.synchronize();
}

void LlamaFamily::reserve(int32_t max_tokens, int32_t max_logits) {
  if (max_tokens < 1 || max_logits < 1)
    fail("reserve: max_tokens ({}) and max_logits ({}) must be >= 1", max_tokens, max_logits);
  const int64_t T = max_tokens, L = max_logits;
  max_tokens_ = 0;  // unusable until every buffer below exists
  activations_.clear();
  std::vector<Buffer>* o = &activations_;
  residual_ = alloc(cdt_, {T, H_}, o);
  h_ = alloc(cdt_, {T, H_}, o);
  x_ = alloc(cdt_, {T, H_}, o);
  qkv_ = alloc(cdt_, {T, (nh_ + 2 * nkv_) * d_}, o);
  q_ = alloc(cdt_, {T, nh_ * d_}, o);
  attn_ = alloc(cdt_, {T, nh_ * d_}, o);
  gate_up_ = alloc(cdt_, {T, 2 * I_}, o);
  act_ = alloc(cdt_, {T, I_}, o);
  if (has_head_) {
    h_sel_ = alloc(cdt_, {L, H_}, o);
    logits_ = alloc(DType::f32, {L, V_}, o);
    if (rank_.tp_size > 1) {
      logits_local_ = alloc(DType::f32, {L, V_local_}, o);
      logits_gathered_ = alloc(DType::f32, {int64_t(rank_.tp_size), L, V_local_}, o);
    }
  }
  max_tokens_ = max_tokens;
  max_logits_ = max_logits;
}

Tensor LlamaFamily::stage_input(int32_t num_tokens) {
  if (has_embed_) fail("{}: the first pipeline stage has no stage input", config_.architecture);
  if (max_tokens_ == 0) fail("{}: stage_input called before reserve()", config_.architecture);
  if (num_tokens < 1 || num_tokens > max_tokens_)
    fail("stage_input: num_tokens {} is outside [1, {}] (the reserved maximum)", num_tokens,
         max_tokens_);
  return residual_.rows(0, num_tokens);
}

Tensor LlamaFamily::forward(const ForwardInputs& in, const KVCacheView& kv) {
  if (rank_.tp_size != backend_.tp_size())
    fail("{}: this rank is one of tensor_parallel_size {}, but its backend's tensor-parallel "
         "group has {} rank(s) (Backend::set_collectives)",
         config_.architecture, rank_.tp_size, backend_.tp_size());
  if (max_tokens_ == 0) fail("{}: forward called before reserve()", config_.architecture);
  const int64_t T = in.num_tokens;
  if (T < 1 || T > max_tokens_)
    fail("forward: num_tokens {} is outside [1, {}] (the reserved maximum)", T, max_tokens_);
  if (in.token_ids.numel() != T || in.positions.numel() != T || in.slot_mapping.numel() != T)
    fail(
        "forward: token_ids, positions and slot_mapping must hold num_tokens ({}) entries, got {}, "
        "{}, {}",
        T, in.token_ids.numel(), in.positions.numel(), in.slot_mapping.numel());
  const int64_t L = in.logits_indices.numel();
  if (has_head_ && (L < 1 || L > max_logits_))
    fail("forward: {} logits rows requested; allowed 1 to {} (the reserved maximum)", L,
         max_logits_);
  if (kv.k.size() != layers_.size() || kv.v.size() != layers_.size())
    fail("forward: KV cache has {} / {} layers, the model {}", kv.k.size(), kv.v.size(),
         layers_.size());

  const float eps = float(config_.rms_norm_eps);
  const Tensor h = h_.rows(0, T);                // [T, H] normed (scratch)
  const Tensor x = x_.rows(0, T);                // [T, H] a block's output (scratch)
  const Tensor qkv = qkv_.rows(0, T);            // [T, (nh + 2 nkv) d]
  const Tensor q = q_.rows(0, T);                // [T, nh d] rotated
  const Tensor attn = attn_.rows(0, T);          // [T, nh d]
  const Tensor gate_up = gate_up_.rows(0, T);    // [T, 2 I]
  const Tensor act = act_.rows(0, T);            // [T, I]

  AttentionShape shape;
  shape.num_heads = int32_t(nh_);
  shape.num_kv_heads = int32_t(nkv_);
  shape.head_dim = int32_t(d_);
  shape.block_size = kv.block_size;
  shape.scale = float(1.0 / std::sqrt(double(d_)));

  const auto bias_of = [](const Tensor& b) { return b.empty() ? nullptr : &b; };
  ResidualStream stream(backend_, residual_.rows(0, T));  // [T, H]
  if (has_embed_) {
    if (rank_.tp_size > 1) {  // each rank's vocabulary shard, summed over the group
      backend_.embedding_shard(in.token_ids, embed_, int64_t(rank_.tp_rank) * V_local_, V_,
                               stream.residual());
      backend_.all_reduce(stream.residual());
    } else {
      backend_.embedding(in.token_ids, embed_, stream.residual());
    }
  }
  for (size_t li = 0; li < layers_.size(); ++li) {
    const Layer& Lw = layers_[li];
    if (qk_norm_) {
      stream.norm_linear(Lw.input_norm, eps, h, Lw.qkv_w, bias_of(Lw.qkv_b), qkv);
      backend_.rms_norm_heads(qkv, Lw.q_norm, eps, 0, int32_t(nh_), int32_t(d_));
      backend_.rms_norm_heads(qkv, Lw.k_norm, eps, int32_t(nh_), int32_t(nkv_), int32_t(d_));
      backend_.rope_qkv_to_cache(qkv, in.positions, cos_sin_, int32_t(d_), int32_t(d_),
                                 RopeStyle::neox, int32_t(nh_), int32_t(nkv_), kv.k[li], kv.v[li],
                                 in.slot_mapping, q);
    } else {
      stream.norm_qkv_rope(Lw.input_norm, eps, h, Lw.qkv_w, bias_of(Lw.qkv_b), qkv, in.positions,
                           cos_sin_, int32_t(d_), int32_t(d_), RopeStyle::neox, int32_t(nh_),
                           int32_t(nkv_), kv.k[li], kv.v[li], in.slot_mapping, q);
    }
    backend_.attention(q, kv.k[li], kv.v[li], in.attention, shape, attn);  // [T, nh d]
    stream.add_linear(attn, Lw.o_w, bias_of(Lw.o_b), x);                   // += attn out
    stream.norm_linear_act(Lw.post_norm, eps, h, Lw.gate_up_w, bias_of(Lw.gate_up_b), mlp_act_,
                           gate_up, act);                                  // [T, I]
    stream.add_linear(act, Lw.down_w, bias_of(Lw.down_b), x);              // += mlp out
  }
  if (!has_head_) {
    stream.flush();
    return stream.residual();  // [T, H] for the next stage
  }
  stream.norm(final_norm_, eps, h);                          // [T, H]
  const Tensor h_sel = h_sel_.rows(0, L);                    // [L, H]
  const Tensor logits = logits_.rows(0, L);                  // [L, V] f32
  backend_.gather_rows(h, in.logits_indices, h_sel);
  if (rank_.tp_size > 1) {  // [L, V/P] per rank, side by side
    const Tensor local = logits_local_.rows(0, L);
    backend_.linear(h_sel, lm_head_, nullptr, local);
    backend_.gather_columns(local,
                            Tensor(logits_gathered_.data, DType::f32, logits_gathered_.device,
                                   {int64_t(rank_.tp_size), L, V_local_}),
                            logits);
  } else {
    backend_.linear(h_sel, lm_head_, nullptr, logits);
  }
  return logits;
}

}  // namespace

LlamaLayerExtras llama_layer_extras(const ModelConfig& c) {
  const bool qwen2 = c.architecture == "Qwen2ForCausalLM";
  const bool qwen3 = c.architecture == "Qwen3ForCausalLM";
  LlamaLayerExtras e;
  e.qkv_bias = qwen2 || c.attention_bias;
  e.o_bias = !qwen2 && c.attention_bias;
  e.mlp_bias = !qwen2 && !qwen3 && c.mlp_bias;
  e.qk_norm = qwen3;
  return e;
}

std::unique_ptr<CausalLM> make_llama(const ModelConfig& config, Backend& backend,
                                     const ParallelRank& rank) {
  return std::make_unique<LlamaFamily>(config, backend, rank);
}

}  // namespace troupe
