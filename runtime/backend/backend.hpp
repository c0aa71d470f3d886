// The backend interface: the op set every model program in runtime/models/ is written
// against, implemented by cpu/ (the reference) and cuda/.
//
// Conventions, for every op:
// - Tensors are contiguous row-major views on the backend's device. "T" is the number of
//   tokens in the step (all sequences' new tokens, concatenated), "S" the number of
//   sequences, "H" the hidden size, "d" the head dimension.
// - Float activations and weights share one dtype per model (the backend's compute dtype:
//   f32 on the CPU, bf16/f16/f32 on CUDA); reductions (norms, softmax, dot products) are
//   accumulated in f32. Integer metadata is i32.
// - Ops are enqueued in call order on the backend's single stream; `download` and
//   `synchronize` wait for everything before them. Outputs may not alias inputs unless the
//   op says "in place".
// - Ops never allocate: outputs are passed in, sized by the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend/collectives.hpp"
#include "runtime/backend/tensor.hpp"
#include "runtime/sampling/sampling_row.hpp"

namespace troupe {

/// Rotary embedding layout: neox rotates (x[i], x[i + d/2]); gptj rotates (x[2i], x[2i+1]).
enum class RopeStyle : uint8_t { neox, gptj };

/// Everything paged attention needs about one step's batch. The tensors live on the device;
/// the scalars are host-side and let a backend choose its kernel without reading the device.
struct AttentionBatch {
  Tensor query_start_loc;  // [S + 1] i32: sequence s owns query rows [qsl[s], qsl[s+1])
  Tensor seq_lens;         // [S] i32: tokens in the KV cache for s after this step's writes
  Tensor block_tables;     // [S, max_blocks_per_seq] i32: physical block of each logical block
  int32_t num_seqs = 0;
  int32_t max_query_len = 0;
  int32_t max_seq_len = 0;
  // When >= 0: sequences [0, num_prefill_seqs) are exactly those with two or more query rows
  // (the model runner orders a step's prompts and chunks first), so a backend may size its
  // prefill grid to them alone. -1: not known. Backends refuse values outside [-1, num_seqs].
  int32_t num_prefill_seqs = -1;
};

/// Shapes of one attention layer. The KV caches are [num_blocks, block_size, num_kv_heads, d].
struct AttentionShape {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  float scale = 1.0f;  // usually 1/sqrt(head_dim)
};

/// The activation of a gated MLP (SwiGLU, GeGLU), as Hugging Face's hidden_act names them.
enum class GatedActivation {
  silu,       // x * sigmoid(x): "silu", "swish"
  gelu,       // x * Phi(x), exact (erf): "gelu"
  gelu_tanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): "gelu_pytorch_tanh",
              // "gelu_new", "gelu_fast"
};
[[nodiscard]] const char* gated_activation_name(GatedActivation act);

/// One block copy of a swap: block `src` of the source cache to block `dst` of the destination.
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

struct MemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

/// A recorded op sequence (a CUDA graph), made by Backend::capture. replay() enqueues every
/// recorded op again, on the same buffers with the same shapes and host-side arguments; only
/// the values inside those buffers may change between replays. Destroy it before its backend.
class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
  /// Asynchronous like an op: ordered after earlier ops, before later ones.
  virtual void replay() = 0;
};

/// The checks every swap_blocks implementation makes (shapes, dtypes, devices, block ids):
/// throws troupe::Error naming what is wrong. Returns the bytes of one block.
size_t check_swap_blocks(const Tensor& dst_cache, const Tensor& src_cache,
                         std::span<const BlockCopy> pairs, const Device& device);

/// One input token fed from the sampling in flight (Backend::feed_sampled_tokens): the token
/// that sampling row `row` draws goes to element `index` of the destination.
struct TokenFeed {
  int32_t row = 0;
  int64_t index = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual Device device() const = 0;
  /// The float type this backend computes in for a model stored as `requested`.
  [[nodiscard]] virtual DType compute_dtype(DType requested) const = 0;

  // ---- memory ----
  [[nodiscard]] virtual Buffer allocate(size_t bytes) = 0;
  /// Host -> device, ordered after earlier ops; `host` may be reused when this returns.
  virtual void upload(const Tensor& dst, const void* host, size_t bytes) = 0;
  /// Device -> host; waits for earlier ops and for the copy.
  virtual void download(void* host, const Tensor& src, size_t bytes) = 0;
  /// Device -> device copy of `src` into `dst` (same dtype and element count).
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  virtual void synchronize() = 0;
  [[nodiscard]] virtual MemoryInfo memory_info() const = 0;

  // ---- swap space ----
  /// Host memory for swapped-out KV blocks, as a Buffer whose device is the CPU: page-locked
  /// on CUDA (so swaps are DMA copies, asynchronous to the host). The default is plain
  /// 64-byte aligned host memory. Never touched by the host while swaps are in flight.
  [[nodiscard]] virtual Buffer allocate_host(size_t bytes);
  /// Copies whole blocks between a device KV cache and a host one, for each pair block
  /// `src` of `src_cache` to block `dst` of `dst_cache`. One side is a device cache
  /// [num_blocks, block_size, num_kv_heads, d] from allocate(), the other a host tensor of the
  /// same block shape and dtype (any number of blocks) cut from allocate_host(); which one
  /// says the direction (swap out: device -> host, swap in: host -> device). Asynchronous like
  /// an op: ordered after earlier ops and before later ones on the backend's stream, so a
  /// swap out, a swap in into the blocks it vacated and a forward writing them may be issued
  /// back to back. Not capturable. Block ids are checked (troupe::Error when out of range).
  /// The default throws (a backend without swap space runs with swap_space = 0).
  virtual void swap_blocks(const Tensor& dst_cache, const Tensor& src_cache,
                           std::span<const BlockCopy> pairs);

  // ---- ops ----
  /// out[t, :] = table[ids[t], :]. ids [T] i32, table [V, H], out [T, H].
  virtual void embedding(const Tensor& ids, const Tensor& table, const Tensor& out) = 0;

  /// out = x / sqrt(mean(x^2) + eps) * weight, per row. x, out [T, H]; weight [H].
  /// As in transformers, the normalised row is rounded to the compute dtype before the
  /// multiply by weight.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) = 0;

  /// Per-head RMSNorm in place (Qwen3's q_norm and k_norm): for every row t of x [T, W] and
  /// every head j in [head_begin, head_begin + num_heads), x[t, j d .. (j + 1) d) becomes
  /// rms_norm of that slice times weight [d] (d = head_dim), rounded as rms_norm rounds.
  /// The default throws: a backend without the op cannot run architectures that need it.
  virtual void rms_norm_heads(const Tensor& x, const Tensor& weight, float eps, int32_t head_begin,
                              int32_t num_heads, int32_t head_dim);

  /// residual += x (in place), then out = rms_norm(residual). All [T, H].
  virtual void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& weight,
                            float eps, const Tensor& out) = 0;

  /// out[T, N] = x[T, K] @ w[N, K]^T (+ bias[N]). `out` may be f32 while x and w are f16/bf16
  /// (the logits); otherwise all share one dtype.
  virtual void linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) = 0;

  /// residual += x in place, rounded to the compute dtype: residual = round(residual + x), the
  /// sum of the two values taken in f32 (add_rms_norm's residual update, alone). Both [T, H].
  /// The default throws, like rope_qkv_to_cache's.
  virtual void add(const Tensor& residual, const Tensor& x);

  // ---- fused ops ----
  // Each is a sequence of the ops above, and its default runs exactly that sequence. A backend
  // may override one with fewer kernels only if it gives the same bits as its own sequence
  // (same roundings, same summation orders), so a model program may call either form. The
  // scratch tensors are what the sequence writes in between; after a fused op their contents
  // are unspecified.

  /// residual += round(x @ w^T + bias): linear(x, w, bias, scratch), then add(residual,
  /// scratch). x [T, K], w [N, K], residual and scratch [T, N] of x's dtype.
  virtual void linear_add(const Tensor& x, const Tensor& w, const Tensor* bias,
                          const Tensor& residual, const Tensor& scratch);

  /// out = rms_norm(x) @ w^T (+ bias): rms_norm(x, norm_weight, eps, h), then
  /// linear(h, w, bias, out). x and h [T, K], w [N, K], out [T, N].
  virtual void rms_norm_linear(const Tensor& x, const Tensor& norm_weight, float eps,
                               const Tensor& h, const Tensor& w, const Tensor* bias,
                               const Tensor& out);

  /// A gated MLP's first half: rms_norm(x, norm_weight, eps, h), linear(h, w, bias, gate_up),
  /// then act_mul(act, gate_up, out). x and h [T, K], w [2I, K] (gate rows, then up rows),
  /// gate_up [T, 2I], out [T, I].
  virtual void rms_norm_linear_act_mul(const Tensor& x, const Tensor& norm_weight, float eps,
                                       const Tensor& h, const Tensor& w, const Tensor* bias,
                                       GatedActivation act, const Tensor& gate_up,
                                       const Tensor& out);

  /// An attention layer's input projection: rms_norm_linear(x, norm_weight, eps, h, w, bias,
  /// qkv), then rope_qkv_to_cache(qkv, positions, cos_sin, head_dim, rotary_dim, style,
  /// num_heads, num_kv_heads, k_cache, v_cache, slot_mapping, q_out). Shapes as those ops'.
  virtual void rms_norm_linear_rope_qkv_to_cache(
      const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& h, const Tensor& w,
      const Tensor* bias, const Tensor& qkv, const Tensor& positions, const Tensor& cos_sin,
      int32_t head_dim, int32_t rotary_dim, RopeStyle style, int32_t num_heads,
      int32_t num_kv_heads, const Tensor& k_cache, const Tensor& v_cache,
      const Tensor& slot_mapping, const Tensor& q_out);

  /// Whether this backend runs linear_add, rms_norm_linear and rms_norm_linear_act_mul as
  /// single kernels for `rows` rows (CUDA's skinny GEMM at decode sizes). Model programs call
  /// those fused ops where it does, and elsewhere plain linears with add_rms_norm between them
  /// (one pass over the residual where the fused ops' sequences take two); both programs give
  /// the same bits. The default: false.
  [[nodiscard]] virtual bool fuses_norm_and_add_into_linear(int64_t rows) const {
    (void)rows;
    return false;
  }

  /// Rotates q [T, num_heads * d] and k [T, num_kv_heads * d] in place by position.
  /// cos_sin [max_positions, rotary_dim] f32 holds cos in the first rotary_dim/2 columns and
  /// sin in the rest; only the first rotary_dim features of each head rotate.
  virtual void rope(const Tensor& q, const Tensor& k, const Tensor& positions,
                    const Tensor& cos_sin, int32_t head_dim, int32_t rotary_dim,
                    RopeStyle style) = 0;

  /// Writes k, v [T, num_kv_heads * d] into the caches at slot_mapping [T] i32
  /// (slot = block * block_size + offset; a negative slot is skipped).
  virtual void write_kv(const Tensor& k, const Tensor& v, const Tensor& k_cache,
                        const Tensor& v_cache, const Tensor& slot_mapping) = 0;

  /// Causal attention of q [T, num_heads * d] over the paged caches, for every sequence of
  /// the batch: query row i of sequence s sits at position seq_lens[s] - q_len(s) + i and
  /// attends to cache positions [0, that position]. GQA: head h reads KV head
  /// h / (num_heads / num_kv_heads). out [T, num_heads * d].
  virtual void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                         const AttentionBatch& batch, const AttentionShape& shape,
                         const Tensor& out) = 0;

  /// out = act(gate) * up, gate_up [T, 2I] = [gate | up], out [T, I]. As transformers does,
  /// act(gate) is computed in f32 and rounded to the compute dtype before the multiply.
  virtual void act_mul(GatedActivation act, const Tensor& gate_up, const Tensor& out) = 0;
  void silu_mul(const Tensor& gate_up, const Tensor& out) {
    act_mul(GatedActivation::silu, gate_up, out);
  }

  /// out[s, :] = x[indices[s], :]. indices [S] i32.
  virtual void gather_rows(const Tensor& x, const Tensor& indices, const Tensor& out) = 0;

  /// Samples one token per row of logits [S, V] f32, as sampling_row.hpp describes.
  /// Returns S results on the host.
  virtual std::vector<SampledToken> sample(const Tensor& logits,
                                           std::span<const SamplingRow> rows) = 0;

  // ---- sampling in flight (the executor's pipelined steps, ModelRunner::launch) ----
  // A step's sampling may stay in flight while the host enqueues the next step, whose input
  // tokens are then fed from it on the device: the GPU never waits for the host between steps.
  // One sampling in flight at a time; sample() is not called meanwhile.

  /// Starts sampling logits [S, V] f32 as sample() does; finish_sample() returns the results.
  /// Throws what sample() throws for bad rows. The default runs sample() now and keeps its
  /// results (host backends: nothing is left to overlap).
  virtual void start_sample(const Tensor& logits, std::span<const SamplingRow> rows);
  /// Whether finish_sample() would return without waiting (default: true).
  [[nodiscard]] virtual bool sample_done() { return true; }
  /// The results of the sampling in flight, waiting for them; throws as sample() would, and
  /// troupe::Error when none is in flight.
  virtual std::vector<SampledToken> finish_sample();
  /// dst[f.index] = the token that row f.row of the sampling in flight draws, for each feed,
  /// ordered after that sampling and before later ops (dst: i32 on this backend). A row that
  /// fails to sample feeds token 0 (finish_sample() then throws). Throws troupe::Error when no
  /// sampling is in flight or a row or index is out of range. The default uploads the kept
  /// tokens.
  virtual void feed_sampled_tokens(const Tensor& dst, std::span<const TokenFeed> feeds);

  /// The attention inputs of one layer in one op (vLLM's rotary embedding and
  /// reshape_and_cache together): qkv [T, (num_heads + 2 num_kv_heads) d] holds each token's
  /// q heads, then k heads, then v heads (one fused GEMM's output). Rotates q and k as `rope`
  /// does (same cos_sin, rotary_dim and style rules, bit for bit), writes q to
  /// q_out [T, num_heads d] and k, v to the caches [num_blocks, block_size, num_kv_heads, d]
  /// at slot_mapping [T] i32 like `write_kv` (a negative slot skips the token's k and v; its q
  /// is still written). qkv is read only.
  /// The default throws: a backend without the op cannot run the model programs.
  virtual void rope_qkv_to_cache(const Tensor& qkv, const Tensor& positions,
                                 const Tensor& cos_sin, int32_t head_dim, int32_t rotary_dim,
                                 RopeStyle style, int32_t num_heads, int32_t num_kv_heads,
                                 const Tensor& k_cache, const Tensor& v_cache,
                                 const Tensor& slot_mapping, const Tensor& q_out);

  // ---- tensor parallelism ----
  // A backend attached to a tensor-parallel group (set_collectives) runs its collectives as
  // ops: ordered after earlier ops, capturable where the group's implementation is (NCCL on a
  // CUDA stream). Without a group, or in a group of one, they do nothing, so a model program
  // calls them unconditionally where TP needs them.

  /// Attaches this rank's group (null: none). Its tensors must live on this backend's device.
  void set_collectives(std::shared_ptr<Collectives> group) { collectives_ = std::move(group); }
  [[nodiscard]] int32_t tp_rank() const { return collectives_ ? collectives_->rank() : 0; }
  [[nodiscard]] int32_t tp_size() const { return collectives_ ? collectives_->size() : 1; }

  /// x = the sum over the group's ranks of x, in place (row-parallel linears' outputs, the
  /// vocab-parallel embedding). Every rank gets the same bits.
  virtual void all_reduce(const Tensor& x);

  /// out [L, P * W] = the group's P shards [L, W] side by side in rank order (the
  /// vocab-parallel logits head): gathers every rank's `local` into `gathered` [P, L, W]
  /// (scratch), then interleave_shards(gathered, out). With no group, out = local.
  virtual void gather_columns(const Tensor& local, const Tensor& gathered, const Tensor& out);

  /// out[l, p * W + w] = shards[p, l, w] for shards [P, L, W] and out [L, P * W], one dtype.
  /// The default throws (a backend without the op cannot run a TP > 1 logits head).
  virtual void interleave_shards(const Tensor& shards, const Tensor& out);

  /// The vocab-parallel embedding: out[t, :] = table[ids[t] - vocab_start, :] when ids[t] is in
  /// [vocab_start, vocab_start + rows of table), else zeros; ids [T] i32 must lie in
  /// [0, vocab_size) (checked as embedding checks). table [V / P, H], out [T, H]. Summed over the
  /// group's ranks (all_reduce) it is the whole embedding. The default throws.
  virtual void embedding_shard(const Tensor& ids, const Tensor& table, int64_t vocab_start,
                               int64_t vocab_size, const Tensor& out);

  // ---- batch invariance ----

  /// Batch-invariant mode (--batch-invariant): every op computes each row with the same
  /// operations in the same order whatever else shares the batch (how many rows, which ones),
  /// so a request's tokens and logprobs are bit-identical alone and in any batch. Off by
  /// default (the fastest kernels pick their blocking by the batch's shape). Throws
  /// troupe::Error on a backend that has no such mode.
  virtual void set_batch_invariant(bool on);

  // ---- graphs (optional) ----

  /// True when capture() records graphs on this backend (CUDA); false when it returns nullptr.
  [[nodiscard]] virtual bool can_capture() const { return false; }

  /// Records the ops that `ops` calls on this backend, without running them, into a graph to
  /// replay. Returns nullptr, without calling `ops`, when the backend cannot record (the CPU,
  /// whose ops run as they are called). While recording, upload, download, synchronize,
  /// allocate and sample throw. Run the same ops once before recording them: first calls of
  /// a shape may set up kernels and plans. Host-side arguments (shapes, AttentionBatch's
  /// num_seqs / max_query_len / max_seq_len) are frozen into the graph, so record with the
  /// largest values a replay will see. Throws troupe::Error when recording fails (the backend
  /// stays usable); an exception from `ops` ends the recording and is rethrown.
  [[nodiscard]] virtual std::unique_ptr<CapturedGraph> capture(const std::function<void()>& ops) {
    (void)ops;
    return nullptr;
  }

 protected:
  /// The checks every feed_sampled_tokens makes: dst i32 on this backend, rows below
  /// `rows_in_flight`, indices inside dst. Throws troupe::Error naming the bad one.
  void check_token_feeds(const Tensor& dst, std::span<const TokenFeed> feeds,
                         size_t rows_in_flight) const;

 private:
  std::optional<std::vector<SampledToken>> kept_samples_;  // the default start_sample's
  std::shared_ptr<Collectives> collectives_;               // the TP group, if any
};

}  // namespace troupe
