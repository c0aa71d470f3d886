// The argument checks every backend makes before an op runs, written once: each failure
// throws one troupe::Error line naming the op, the argument, its shape and what is allowed
// ("linear: w [32, 65] float32 on cpu: dim 1 is 65, expected 64 (K of x [4, 64] float32 on
// cpu)"). The check_* functions hold each op's shape rules; the tensors' dtypes must agree
// with the leading one (x, q, gate_up, ...), whose dtype each backend checks itself (the CPU
// computes in float32, CUDA in float32, float16 or bfloat16), as it checks its own limits
// (32-bit indexing, alignment, head dims with a kernel) and, on the CPU, the index values it
// can read for free.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/backend/backend.hpp"
#include "runtime/backend/tensor.hpp"
#include "runtime/error.hpp"

namespace troupe {

/// One op call's checks on a backend of `device`.
class OpCheck {
 public:
  OpCheck(std::string_view op, Device device) : op_(op), device_(device) {}

  /// Throws "<op>: <message>".
  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    troupe::fail("{}: {}", op_, fmt::format(f, std::forward<Args>(args)...));
  }

  [[nodiscard]] const Device& device() const { return device_; }

  /// `t` lives on the backend's device, has `ndim` dimensions, none negative, and memory
  /// unless it is empty.
  void tensor(std::string_view name, const Tensor& t, int ndim) const;
  /// As tensor(), and its dtype is `dtype`.
  void tensor(std::string_view name, const Tensor& t, DType dtype, int ndim) const;
  /// t.dim(i) == expected; `why` says where the expectation comes from.
  void dim(std::string_view name, const Tensor& t, int i, int64_t expected,
           std::string_view why) const;
  /// Same dtype and shape as `ref`.
  void same_shape(std::string_view name, const Tensor& t, std::string_view ref_name,
                  const Tensor& ref) const;
  /// The tensor's memory does not overlap `other`'s.
  void disjoint(std::string_view name, const Tensor& t, std::string_view other_name,
                const Tensor& other) const;
  /// `value` > 0.
  void positive(std::string_view name, int64_t value) const;
  /// `value` fits 32-bit indexing (BLAS's int dimensions, the CUDA kernels' indices).
  void fits_int(std::string_view name, int64_t value) const;
  /// The data pointer is aligned to `bytes`.
  void aligned(std::string_view name, const Tensor& t, size_t bytes) const;

 private:
  std::string_view op_;
  Device device_;
};

/// upload / download: `t` on the backend's device, `bytes` fit in it, no null pointer.
void check_transfer(const OpCheck& check, std::string_view name, const Tensor& t, const void* host,
                    size_t bytes);
/// copy: the same dtype and element count (copy does not convert).
void check_copy(const OpCheck& check, const Tensor& dst, const Tensor& src);
/// embedding: ids [T] i32, table [V, H], out [T, H] like table.
void check_embedding(const OpCheck& check, const Tensor& ids, const Tensor& table,
                     const Tensor& out);
/// embedding_shard: embedding's, table's rows [vocab_start, vocab_start + V / P) inside
/// [0, vocab_size).
void check_embedding_shard(const OpCheck& check, const Tensor& ids, const Tensor& table,
                           int64_t vocab_start, int64_t vocab_size, const Tensor& out);
/// interleave_shards: shards [P, L, W], out [L, P * W] like shards and apart from them.
void check_interleave_shards(const OpCheck& check, const Tensor& shards, const Tensor& out);
/// rms_norm: x [T, H], weight [H] like x, out like x, eps finite and >= 0.
void check_norm(const OpCheck& check, const Tensor& x, const Tensor& weight, float eps,
                const Tensor& out);
/// add_rms_norm: rms_norm's, and residual like x.
void check_norm_heads(const OpCheck& check, const Tensor& x, const Tensor& weight, float eps,
                      int32_t head_begin, int32_t num_heads, int32_t head_dim);
void check_add_norm(const OpCheck& check, const Tensor& residual, const Tensor& x,
                    const Tensor& weight, float eps, const Tensor& out);
/// add: x [T, H], residual like x and apart from it.
void check_add(const OpCheck& check, const Tensor& residual, const Tensor& x);
/// linear: x [T, K], w [N, K] like x, out [T, N] like x or float32 (logits), bias [N] like x
/// or out; out apart from x and w; T, N and K within 32-bit indexing.
void check_linear(const OpCheck& check, const Tensor& x, const Tensor& w, const Tensor* bias,
                  const Tensor& out);
/// The fused rms_norm then linear ops: rms_norm(x) into h, then linear(h) into out (named
/// out_name in messages), h and out apart from x.
void check_norm_linear(const OpCheck& check, const Tensor& x, const Tensor& norm_weight, float eps,
                       const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& out,
                       const char* out_name);
/// act_mul: gate_up [T, 2 I] is [gate | up] per row, out [T, I] like it and apart from it.
/// Returns I.
int64_t check_act_mul(const OpCheck& check, const Tensor& gate_up, const Tensor& out);
/// rope: q [T, q_heads d] and k [T, k_heads d] alike and apart, positions [T] i32, cos_sin
/// [max_positions, rotary_dim] f32, rotary_dim even in [2, head_dim], a known style.
void check_rope(const OpCheck& check, const Tensor& q, const Tensor& k, const Tensor& positions,
                const Tensor& cos_sin, int32_t head_dim, int32_t rotary_dim, RopeStyle style);
/// write_kv: k and v [T, num_kv_heads d] like the caches [num_blocks, block_size,
/// num_kv_heads, d], slot_mapping [T] i32, the caches apart.
void check_write_kv(const OpCheck& check, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                    const Tensor& v_cache, const Tensor& slot_mapping);
/// rope_qkv_to_cache (and its fusion into the qkv GEMV): qkv [T, (nh + 2 nkv) d], q_out
/// [T, nh d] and the caches like qkv and apart from it and each other.
void check_rope_qkv(const OpCheck& check, const Tensor& qkv, const Tensor& positions,
                    const Tensor& cos_sin, int32_t head_dim, int32_t rotary_dim, RopeStyle style,
                    int32_t num_heads, int32_t num_kv_heads, const Tensor& k_cache,
                    const Tensor& v_cache, const Tensor& slot_mapping, const Tensor& q_out);
/// gather_rows: x [R, H], indices [S] i32, out [S, H] like x and apart from it.
void check_gather_rows(const OpCheck& check, const Tensor& x, const Tensor& indices,
                       const Tensor& out);
/// attention: the shape's heads, q [T, nh d] and out like it, the caches [num_blocks,
/// block_size, nkv, d] like q, apart from out, and the batch metadata's shapes.
void check_attention(const OpCheck& check, const Tensor& q, const Tensor& k_cache,
                     const Tensor& v_cache, const AttentionBatch& batch,
                     const AttentionShape& shape, const Tensor& out);
/// sample: logits [rows, V] float32, one sampling row per logits row.
void check_sample(const OpCheck& check, const Tensor& logits, size_t rows);

}  // namespace troupe
