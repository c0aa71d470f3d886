// Launchers of the CUDA kernels: plain C++ declarations shared by the g++-compiled host code
// (cuda_backend.cpp validates shapes and picks a launcher) and the nvcc-compiled .cu files that
// define them. Launchers only enqueue work on `stream`; the caller checks cudaGetLastError().
//
// Pointers are device pointers; shapes were validated on the host. Index values that only the
// device can read (token ids, slots, block tables, sequence lengths) are checked by the kernels,
// which skip the bad element and OR a DeviceError bit into `err` (one int in device memory);
// the backend reads it back at the next synchronisation and throws troupe::Error.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/backend/dtype.hpp"

namespace troupe::cuda {

/// Bits of the device error word. One bit per kind of bad index, so one word says all that
/// went wrong since the last check.
enum DeviceError : int {
  kErrEmbeddingId = 1 << 0,   // embedding: ids[t] outside [0, V)
  kErrGatherIndex = 1 << 1,   // gather_rows: indices[s] outside the rows of x
  kErrRopePosition = 1 << 2,  // rope: positions[t] outside the cos_sin rows
  kErrKvSlot = 1 << 3,        // write_kv: slot_mapping[t] >= num_blocks * block_size
  kErrBlockTable = 1 << 4,    // attention: a block id outside [0, num_blocks)
  kErrSeqLayout = 1 << 5,     // attention: query_start_loc / seq_lens inconsistent
};

// ---- gather / scatter of whole rows (dtype-agnostic: rows are byte strings) ----

/// out[t] = src[idx[t]] for t < n_out; rows of `row_bytes`. Indices outside [0, n_src)
/// zero the row and set `err_bit`.
/// dst[feeds[2i + 1]] = results[feeds[2i]] for i < n, a negative value written as 0: a step's
/// input tokens fed from the sampler's results on the device (Backend::feed_sampled_tokens).
void launch_feed_tokens(const int32_t* results, const int64_t* feeds, int n, int32_t* dst,
                        cudaStream_t stream);

void launch_gather_rows(const void* src, int64_t n_src, const int32_t* idx, void* out,
                        int64_t n_out, int64_t row_bytes, int err_bit, int* err,
                        cudaStream_t stream);

/// The vocab-parallel embedding (Backend::embedding_shard): out[t] = table[ids[t] - vocab_start]
/// for ids inside this shard's `rows`, zeros elsewhere; ids outside [0, vocab_size) set
/// kErrEmbeddingId. row_bytes must be a multiple of 4 (every hidden size in f32/bf16/f16 of an
/// even width is).
void launch_embedding_shard(const void* table, int64_t rows, int64_t vocab_start,
                            int64_t vocab_size, const int32_t* ids, void* out, int64_t n_tokens,
                            int64_t row_bytes, int* err, cudaStream_t stream);

/// dst[slot[t]] = src[t] for both (k, v) pairs; negative slots skip, slots >= n_slots set
/// kErrKvSlot.
void launch_write_kv(const void* k, const void* v, void* k_cache, void* v_cache,
                     const int32_t* slots, int64_t n_tokens, int64_t n_slots, int64_t row_bytes,
                     int* err, cudaStream_t stream);

// ---- elementwise ----

/// How the rms_norm kernel lays out one row: `threads` threads in one block, each taking
/// 16-byte vectors (`vectorised`) or single elements. The order of its sum of squares follows
/// from this (rms_norm.cuh), so the skinny GEMM's rms_norm prologue asks for the same plan.
struct RmsNormPlan {
  bool vectorised;
  int threads;
};
/// The plan launch_rms_norm takes for these pointers and row length (residual may be null).
RmsNormPlan plan_rms_norm(DType dt, const void* residual, const void* x, const void* weight,
                          const void* out, int64_t h);

/// rms_norm over rows of x [rows, h] (and residual += x first when `residual` is non-null).
void launch_rms_norm(DType dt, void* residual, const void* x, const void* weight, float eps,
                     void* out, int64_t rows, int64_t h, cudaStream_t stream);

/// Per-head rms_norm in place: for each of `rows` rows of x (row_width elements apart), heads
/// [head_begin, head_begin + num_heads) of head_dim elements each, times weight [head_dim].
void launch_rms_norm_heads(DType dt, void* x, const void* weight, float eps, int64_t rows,
                           int64_t row_width, int32_t head_begin, int32_t num_heads,
                           int32_t head_dim, cudaStream_t stream);

/// residual[i] = residual[i] + x[i] for n elements, the sum in f32 rounded once to dt (the
/// residual add of add_rms_norm, alone).
void launch_add(DType dt, void* residual, const void* x, int64_t n, cudaStream_t stream);

/// out[t, i] = act(gate_up[t, i]) * gate_up[t, inter + i], act(gate) rounded to dt first.
/// act: 0 silu, 1 gelu (erf), 2 gelu (tanh approximation), as troupe::GatedActivation.
void launch_act_mul(int act, DType dt, const void* gate_up, void* out, int64_t rows, int64_t inter,
                    cudaStream_t stream);

/// Rows up to which linear runs the skinny-GEMM kernel (gemv.cu) instead of cuBLASLt: one. On
/// the H200 (op bench, Llama-3-8B shapes, 2026-12-03) it matches or beats cuBLASLt at one row,
/// but already at two its per-chunk x loads and FMAs slow it down: with their fusions, qkv
/// took 20.8 us, o_proj 15.2, gate_up 74.5 and down 48.5 at T = 2, where cuBLASLt and the
/// separate ops take 18.3, 14.5, 66.3 and 34.0 at T = 4 (at T = 8, 46.8 us for qkv).
inline constexpr int64_t kGemvMaxRows = 1;

/// What the skinny GEMM does besides out = x w^T (+ bias); the default is nothing. Each option
/// reproduces the separate ops it replaces bit for bit (same roundings, same sum orders).
struct GemvFusion {
  /// Prologue (when norm_weight is set): x is first normalised as rms_norm(x, norm_weight
  /// [k], eps) would write it, with the sum of squares added up in norm_plan's order (which
  /// must be vectorised). The normalised rows are staged in shared memory, so t * k * 2
  /// bytes must not exceed kGemvMaxStagedBytes.
  const void* norm_weight = nullptr;
  float eps = 0.0f;
  RmsNormPlan norm_plan{false, 0};
  /// Epilogue: out += round(x w^T + b) in place (out is the residual, like x's dtype):
  /// linear into a scratch and add, with the same two roundings.
  bool add_to_out = false;
  /// Epilogue (when act >= 0; as launch_act_mul numbers it): w holds 2n rows [gate | up] (and
  /// bias 2n values), and out[t, j] = act(gate) * up of the rounded products j and n + j:
  /// linear into gate_up and act_mul, with the same roundings.
  int act = -1;
  /// Epilogue (when rope.q_out is set; with the rms_norm prologue only): the products are a
  /// fused qkv projection's row, rounded as linear into qkv would store them, then rotated and
  /// moved as launch_rope_qkv_to_cache would (q to q_out, k and v into the caches); `out` is
  /// not written. Each warp takes whole rotation pairs (two weight rows) so that both elements
  /// of a pair meet in one lane.
  struct Rope {
    const int32_t* positions = nullptr;  // [t]
    const float* cos_sin = nullptr;      // [max_positions, rotary_dim]
    int64_t max_positions = 0;
    const int32_t* slots = nullptr;  // [t]; negative: padding (k and v not written)
    int64_t n_slots = 0;
    void* q_out = nullptr;  // [t, num_heads * head_dim]
    void* k_cache = nullptr;
    void* v_cache = nullptr;
    int num_heads = 0, num_kv_heads = 0, head_dim = 0, rotary_dim = 0;
    bool neox = true;
    int* err = nullptr;
  } rope;
};

/// Rows up to which launch_gemv takes a fused variant (GemvFusion other than the default), and
/// those with the rms_norm prologue: as kGemvMaxRows (past it cuBLASLt runs the linear).
inline constexpr int64_t kGemvMaxFusedRows = kGemvMaxRows;
inline constexpr int64_t kGemvMaxNormRows = kGemvMaxRows;

/// Bytes of x rows the rms_norm prologue may stage per CTA (t * k * 2: K up to 32768 at
/// kGemvMaxNormRows = 1 row).
inline constexpr int64_t kGemvMaxStagedBytes = int64_t(64) << 10;

/// Raises the dynamic shared-memory limit of the rms_norm-prologue kernels to
/// kGemvMaxStagedBytes (once per device, before their first launch).
cudaError_t gemv_init();

/// out[t, n] = x[t, k] w[n, k]^T (+ bias[n]) for t <= kGemvMaxRows rows, f16/bf16 x and w,
/// out like x or f32, bias like x or f32 (or nullptr), with `fusion`'s extras (fused variants
/// write out like x). Returns false, launching nothing, for shapes, dtypes, alignments or
/// fusions it does not take (the caller then runs the separate ops, or cuBLASLt). The variants
/// without the rms_norm prologue (plain, add) first copy x into shared memory, as the norm
/// prologue stages its rows, where it fits kGemvMaxStagedBytes (else every warp reads it
/// through L1): same values, 3% less time per batch-1 token (H200).
bool launch_gemv(DType in_dtype, const void* x, const void* w, DType bias_dtype, const void* bias,
                 DType out_dtype, void* out, int64_t t, int64_t n, int64_t k, cudaStream_t stream,
                 const GemvFusion& fusion = {});

/// Rotary embedding in place on q [T, q_heads * d] and k [T, k_heads * d].
void launch_rope(DType dt, void* q, void* k, const int32_t* positions, const float* cos_sin,
                 int64_t tokens, int q_heads, int k_heads, int head_dim, int rotary_dim,
                 int64_t max_positions, bool neox, int* err, cudaStream_t stream);

/// rope + write_kv in one launch from a fused qkv [T, (nh + 2 nkv) d]: rotated q to
/// q_out [T, nh d], rotated k and v to cache row slots[t] (negative skips, >= n_slots sets
/// kErrKvSlot). Positions outside [0, max_positions) set kErrRopePosition and skip the token.
void launch_rope_qkv_to_cache(DType dt, const void* qkv, const int32_t* positions,
                              const float* cos_sin, int64_t tokens, int num_heads,
                              int num_kv_heads, int head_dim, int rotary_dim,
                              int64_t max_positions, bool neox, const int32_t* slots,
                              int64_t n_slots, void* k_cache, void* v_cache, void* q_out,
                              int* err, cudaStream_t stream);

/// Whether launch_rope_qkv_to_cache takes its 16-byte path for these shapes and pointers
/// (otherwise it moves single elements; both give the same values). Exposed for the tests.
bool rope_qkv_vectorisable(DType dt, const void* qkv, const void* q_out, const void* k_cache,
                           const void* v_cache, int head_dim, int rotary_dim, bool neox);

/// out[t, n] = (out[t, n] if accumulate else 0) + bias[n], in out's dtype, f32 arithmetic.
void launch_add_bias(DType out_dt, void* out, DType bias_dt, const void* bias, int64_t rows,
                     int64_t n, bool accumulate, cudaStream_t stream);

/// Reference GEMM for shapes cuBLASLt declines: out[T, N] = x[T, K] @ w[N, K]^T (+ bias[N]),
/// f32 accumulation. Slow and simple.
void launch_fallback_gemm(DType in_dt, const void* x, const void* w, DType bias_dt,
                          const void* bias, DType out_dt, void* out, int64_t t, int64_t n,
                          int64_t k, cudaStream_t stream);

/// Batch-invariant mode's GEMM (Backend::set_batch_invariant): out[T, N] = x[T, K] @ w[N, K]^T
/// (+ bias[N]) computing every element in one fixed order whatever T is: a tensor-core kernel
/// for f16/bf16 with K % 8 == 0 and 16-byte aligned x and w (invariant_gemm_takes), the
/// fallback GEMM otherwise. Slower than cuBLASLt (docs/benchmarks.md).
void launch_invariant_gemm(DType in_dt, const void* x, const void* w, DType bias_dt,
                           const void* bias, DType out_dt, void* out, int64_t t, int64_t n,
                           int64_t k, cudaStream_t stream);
bool invariant_gemm_takes(DType in_dt, const void* x, const void* w, int64_t k);

// ---- attention ----

struct AttentionArgs {
  const void* q;        // [T, num_heads * d]
  const void* k_cache;  // [num_blocks, block_size, num_kv_heads, d]
  const void* v_cache;
  void* out;                       // [T, num_heads * d]
  const int32_t* query_start_loc;  // [S + 1]
  const int32_t* seq_lens;         // [S]
  const int32_t* block_tables;     // [S, max_blocks]
  int64_t num_tokens;
  int32_t num_seqs;
  int32_t max_query_len;
  int32_t max_seq_len;
  int32_t max_blocks;
  int32_t num_blocks;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_size;
  int32_t log2_block_size;
  float scale;
  int* err;
  int32_t decode_split_keys;  // the shortest split of a decode sequence (launch_attention_half)
  /// AttentionBatch::num_prefill_seqs: when >= 0 the prefill grid covers only sequences
  /// [0, num_prefill_seqs); -1: all of them (each one with fewer than two rows exits at once).
  int32_t num_prefill_seqs = -1;
  /// Batch-invariant mode: the prefill kernel takes every sequence, one-row decodes too, so a
  /// row's attention is computed the same way whatever its sequence's query length this step
  /// (which chunked prefill sets by what else is scheduled); no split-KV decode kernel runs.
  bool all_rows_prefill = false;
};

/// Workspace of the split-KV decode kernel (f32, preallocated by the backend), and arrival
/// counters (zeroed once by the backend; each launch leaves them zero again) with which the
/// last CTA of a (sequence, KV head) combines the splits itself.
struct DecodeWorkspace {
  float* data = nullptr;
  size_t floats = 0;
  uint32_t* counters = nullptr;
  size_t num_counters = 0;
};

/// Head dims with compiled kernels: the common ones, plus 16 and 32 for small models (the
/// test fixtures and the embedded troupe-fortunes).
inline constexpr int kAttentionHeadDims[] = {16, 32, 64, 80, 96, 128, 256};
inline constexpr bool attention_head_dim_supported(int d) {
  return d == 16 || d == 32 || d == 64 || d == 80 || d == 96 || d == 128 || d == 256;
}
inline constexpr bool attention_block_size_supported(int bs) {
  return bs == 8 || bs == 16 || bs == 32;
}

/// A decode launch: the grid's split count and the shortest split a sequence takes.
struct DecodePlan {
  int32_t splits;
  int32_t split_keys;
};

/// Raises the dynamic shared-memory limits of the attention kernels (once per device).
cudaError_t attention_init();
/// The same for the decode kernel.
cudaError_t attention_decode_init();

/// The decode launch for this batch (exposed for tests and the bench).
DecodePlan plan_decode(const AttentionArgs& a, int num_sms, const DecodeWorkspace& ws);

/// The whole attention op for f16/bf16: tensor-core kernel for sequences with >= 2 query rows,
/// split-KV decode kernel for sequences with 1, zeros for padding rows past the last sequence
/// (attention_init and attention_decode_init must have run).
void launch_attention_half(DType dt, const AttentionArgs& a, int num_sms, const DecodeWorkspace& ws,
                           cudaStream_t stream);

/// The whole attention op for f32: a simple CUDA-core kernel, one CTA per (token, head).
void launch_attention_f32(const AttentionArgs& a, cudaStream_t stream);

// ---- sampling ----

/// One row's parameters, packed for the device (see sampling.cu for each field's use).
struct SampleRowParams {
  float temperature;
  float top_p;
  float min_p;
  float presence_penalty;
  float frequency_penalty;
  float repetition_penalty;
  int32_t top_k;         // <= 0: no limit
  int32_t greedy;        // 1: argmax of the processed logits
  int32_t num_logprobs;  // -1: none (no logprob or rank); N >= 0: the top N too
  int32_t mod_begin;     // this row's entries in the modification list
  int32_t mod_count;
  int32_t scratch_row;  // uncached plans: row of the processed-logits scratch, -1: raw logits
  int32_t out_offset;   // first int of this row's result in the result buffer
  int32_t pad_;
  uint64_t seed;
  uint64_t offset;
};

/// A token whose logit this step changes: bias and/or penalty inputs, merged on the host.
/// Its logit_bias entries stay separate (biases[bias_begin, +bias_count), in the row's order)
/// so that they are added one by one, rounding exactly as the CPU reference does.
struct SampleMod {
  int32_t token;
  int32_t output_count;  // occurrences in the output so far
  int32_t in_history;    // 1: in the prompt or the output (repetition penalty applies)
  int32_t bias_begin;
  int32_t bias_count;
};

/// Result layout per row at out_offset (ints; floats stored by bit pattern):
/// [token, logprob, rank, n_top, then n_top x (token, logprob, rank)].
/// A negative token is an error code instead (the CPU reference throws in these cases).
inline constexpr int kSampleResultHeader = 4;
inline constexpr int kSampleNoTokenLeft = -1;   // every processed logit is -inf or NaN
inline constexpr int kSampleRawAllNegInf = -2;  // every raw logit is -inf or NaN
inline constexpr int kSampleRawInf = -3;        // a raw logit is +inf
inline constexpr int kMaxTopLogprobs = 1024;
inline constexpr int64_t kMaxSampleVocab = int64_t(1) << 23;

/// How launch_sample spreads each row over a cluster of CTAs (sampling.cu explains why).
struct SamplePlan {
  int32_t cluster;     // CTAs per row, 1..16
  int32_t slice;       // logits per CTA, a multiple of 4
  int32_t cached;      // 1: slices live in shared memory and bias/penalties are applied there;
                       // 0: slices are read from global memory and rows with bias/penalties
                       // need a scratch row
  int32_t smem_bytes;  // dynamic shared memory per CTA
};

/// The plan for `num_rows` rows of `vocab` logits on the current device. The result of a row
/// does not depend on the plan; only the speed does.
cudaError_t plan_sample(int64_t vocab, int32_t num_rows, SamplePlan* plan);

/// For tests: every later plan uses `cluster` CTAs per row (1..16; 0: automatic) and, when
/// `cached` is 0, global-memory slices (-1: automatic). The device may still narrow the
/// cluster if it cannot co-schedule it.
void override_sample_plan(int32_t cluster, int32_t cached);

/// Samples every row. `scratch` holds num_scratch_rows rows of `vocab` floats (used by
/// uncached plans only). Returns the launch's error.
cudaError_t launch_sample(const SamplePlan& plan, const float* logits, int64_t vocab,
                          int32_t num_rows, const SampleRowParams* rows, const SampleMod* mods,
                          const float* biases, float* scratch, int32_t num_scratch_rows,
                          int32_t* results, cudaStream_t stream);

}  // namespace troupe::cuda
