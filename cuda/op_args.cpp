#include "cuda/op_args.hpp"

#include <cmath>

#include "cuda/kernels.hpp"
#include "runtime/backend/op_shapes.hpp"

namespace troupe::cuda {

void check_norm(const OpCheck& check, const Tensor& x, const Tensor& weight, float eps,
                const Tensor& out) {
  check.tensor("x", x, 2);
  check.float_dtype("x", x);
  check.tensor("weight", weight, x.dtype, 1);
  check.dim("weight", weight, 0, x.dim(1), fmt::format("hidden size of x {}", describe(x)));
  check.tensor("out", out, x.ndim);
  check.same_shape("out", out, "x", x);
  if (!(eps >= 0.0f) || !std::isfinite(eps)) check.fail("eps = {} must be finite and >= 0", eps);
  check.fits_int("rows of x", x.dim(0));
}

void check_linear(const OpCheck& check, const Tensor& x, const Tensor& w, const Tensor* bias,
                  const Tensor& out) {
  check.tensor("x", x, 2);
  check.float_dtype("x", x);
  check.tensor("w", w, x.dtype, 2);
  check.tensor("out", out, 2);
  const bool f32_logits = out.dtype == DType::f32 && x.dtype != DType::f32;
  if (out.dtype != x.dtype && !f32_logits)
    check.fail("out {} must be {} like x {}, or float32 (logits)", describe(out),
               dtype_name(x.dtype), describe(x));
  const int64_t t = x.dim(0), k = x.dim(1), n = w.dim(0);
  check.dim("w", w, 1, k, fmt::format("K of x {}", describe(x)));
  check.dim("out", out, 0, t, fmt::format("T of x {}", describe(x)));
  check.dim("out", out, 1, n, fmt::format("N of w {}", describe(w)));
  if (bias != nullptr) {
    check.tensor("bias", *bias, 1);
    if (bias->dtype != x.dtype && bias->dtype != out.dtype)
      check.fail("bias {} must be {} (like x) or {} (like out)", describe(*bias),
                 dtype_name(x.dtype), dtype_name(out.dtype));
    check.dim("bias", *bias, 0, n, fmt::format("N of w {}", describe(w)));
  }
  check.disjoint("out", out, "x", x);
  check.disjoint("out", out, "w", w);
  check.fits_int("T", t);
  check.fits_int("N", n);
  check.fits_int("K", k);
}

void check_norm_linear(const OpCheck& check, const Tensor& x, const Tensor& norm_weight,
                       float eps, const Tensor& h, const Tensor& w, const Tensor* bias,
                       const Tensor& out, const char* out_name) {
  check_norm(check, x, norm_weight, eps, h);
  check.disjoint("h", h, "x", x);
  check_linear(check, h, w, bias, out);
  check.disjoint(out_name, out, "x", x);
}

void check_act_mul(const OpCheck& check, const Tensor& gate_up, const Tensor& out) {
  check.tensor("gate_up", gate_up, 2);
  check.float_dtype("gate_up", gate_up);
  check.tensor("out", out, gate_up.dtype, 2);
  check_gate_up_halves(check, gate_up, out);
  check.disjoint("out", out, "gate_up", gate_up);
}

void check_rope_qkv(const OpCheck& check, const Tensor& qkv, const Tensor& positions,
                    const Tensor& cos_sin, int32_t head_dim, int32_t rotary_dim, RopeStyle style,
                    int32_t num_heads, int32_t num_kv_heads, const Tensor& k_cache,
                    const Tensor& v_cache, const Tensor& slot_mapping, const Tensor& q_out) {
  if (head_dim <= 0 || num_heads <= 0 || num_kv_heads <= 0)
    check.fail("head_dim = {}, num_heads = {} and num_kv_heads = {} must be > 0", head_dim,
               num_heads, num_kv_heads);
  if (rotary_dim <= 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
    check.fail("rotary_dim = {} must be even and in [2, head_dim = {}]", rotary_dim, head_dim);
  if (style != RopeStyle::neox && style != RopeStyle::gptj)
    check.fail("style = {} is neither neox nor gptj", int(style));
  check.tensor("positions", positions, DType::i32, 1);
  const int64_t tokens = positions.dim(0);
  const int64_t q_row = int64_t(num_heads) * head_dim, kv_row = int64_t(num_kv_heads) * head_dim;
  check.tensor("qkv", qkv, 2);
  check.float_dtype("qkv", qkv);
  check.dim("qkv", qkv, 0, tokens, "one row per position");
  check.dim("qkv", qkv, 1, q_row + 2 * kv_row, "(num_heads + 2 num_kv_heads) * head_dim");
  check.tensor("q_out", q_out, qkv.dtype, 2);
  check.dim("q_out", q_out, 0, tokens, "one row per position");
  check.dim("q_out", q_out, 1, q_row, "num_heads * head_dim");
  check.tensor("k_cache", k_cache, qkv.dtype, 4);
  check.tensor("v_cache", v_cache, qkv.dtype, 4);
  check.same_shape("v_cache", v_cache, "k_cache", k_cache);
  check.dim("k_cache", k_cache, 2, num_kv_heads, "num_kv_heads");
  check.dim("k_cache", k_cache, 3, head_dim, "head_dim");
  check.tensor("cos_sin", cos_sin, DType::f32, 2);
  check.dim("cos_sin", cos_sin, 1, rotary_dim, "rotary_dim");
  check.tensor("slot_mapping", slot_mapping, DType::i32, 1);
  check.dim("slot_mapping", slot_mapping, 0, tokens, "one slot per position");
  check.disjoint("q_out", q_out, "qkv", qkv);
  check.disjoint("k_cache", k_cache, "qkv", qkv);
  check.disjoint("v_cache", v_cache, "qkv", qkv);
  check.disjoint("q_out", q_out, "k_cache", k_cache);
  check.disjoint("q_out", q_out, "v_cache", v_cache);
  check.disjoint("k_cache", k_cache, "v_cache", v_cache);
  check.fits_int("(num_heads + 2 num_kv_heads) * head_dim", q_row + 2 * kv_row);
}

void check_attention(const OpCheck& check, const Tensor& q, const Tensor& k_cache,
                     const Tensor& v_cache, const AttentionBatch& batch,
                     const AttentionShape& shape, const Tensor& out) {
  if (!attention_head_dim_supported(shape.head_dim))
    check.fail("head_dim = {} has no CUDA kernel (supported: 16, 32, 64, 80, 96, 128, 256)",
               shape.head_dim);
  if (!attention_block_size_supported(shape.block_size))
    check.fail("block_size = {} has no CUDA kernel (supported: 8, 16, 32)", shape.block_size);
  if (shape.num_heads <= 0 || shape.num_kv_heads <= 0)
    check.fail("num_heads = {} and num_kv_heads = {} must be > 0", shape.num_heads,
               shape.num_kv_heads);
  if (shape.num_heads % shape.num_kv_heads != 0)
    check.fail("num_heads = {} is not a multiple of num_kv_heads = {}", shape.num_heads,
               shape.num_kv_heads);
  if (shape.num_heads > 65535) check.fail("num_heads = {} exceeds 65535", shape.num_heads);
  if (!std::isfinite(shape.scale)) check.fail("scale = {} must be finite", shape.scale);

  check.tensor("q", q, 2);
  check.float_dtype("q", q);
  check.dim("q", q, 1, int64_t(shape.num_heads) * shape.head_dim, "num_heads * head_dim");
  check.tensor("out", out, q.ndim);
  check.same_shape("out", out, "q", q);
  check.disjoint("out", out, "q", q);
  check.tensor("k_cache", k_cache, q.dtype, 4);
  check.dim("k_cache", k_cache, 1, shape.block_size, "block_size");
  check.dim("k_cache", k_cache, 2, shape.num_kv_heads, "num_kv_heads");
  check.dim("k_cache", k_cache, 3, shape.head_dim, "head_dim");
  check.tensor("v_cache", v_cache, 4);
  check.same_shape("v_cache", v_cache, "k_cache", k_cache);
  check.disjoint("out", out, "k_cache", k_cache);
  check.disjoint("out", out, "v_cache", v_cache);
  if (q.dtype != DType::f32) {  // the f16/bf16 kernels read rows with 16-byte vectors
    check.aligned("q", q, 16);
    check.aligned("out", out, 16);
    check.aligned("k_cache", k_cache, 16);
    check.aligned("v_cache", v_cache, 16);
  }
  check.fits_int("T", q.dim(0));
  check.fits_int("num_blocks", k_cache.dim(0));

  if (batch.num_seqs < 0 || batch.num_seqs > 65535)
    check.fail("num_seqs = {} must be in [0, 65535]", batch.num_seqs);
  if (batch.max_query_len < 0) check.fail("max_query_len = {} must be >= 0", batch.max_query_len);
  if (batch.num_prefill_seqs < -1 || batch.num_prefill_seqs > batch.num_seqs)
    check.fail("num_prefill_seqs = {} must be -1 (unknown) or in [0, num_seqs = {}]",
               batch.num_prefill_seqs, batch.num_seqs);
  if (batch.max_seq_len < 0) check.fail("max_seq_len = {} must be >= 0", batch.max_seq_len);
  const int64_t s = batch.num_seqs;
  check.tensor("query_start_loc", batch.query_start_loc, DType::i32, 1);
  check.dim("query_start_loc", batch.query_start_loc, 0, s + 1, "num_seqs + 1");
  check.tensor("seq_lens", batch.seq_lens, DType::i32, 1);
  check.dim("seq_lens", batch.seq_lens, 0, s, "num_seqs");
  check.tensor("block_tables", batch.block_tables, DType::i32, 2);
  check.dim("block_tables", batch.block_tables, 0, s, "num_seqs");
  check.fits_int("max_blocks_per_seq * block_size",
                 batch.block_tables.dim(1) * int64_t(shape.block_size));
  if (int64_t(batch.max_seq_len) > batch.block_tables.dim(1) * shape.block_size)
    check.fail(
        "max_seq_len = {} needs more than the {} blocks of {} per sequence in "
        "block_tables {}",
        batch.max_seq_len, batch.block_tables.dim(1), shape.block_size,
        describe(batch.block_tables));
}

}  // namespace troupe::cuda
