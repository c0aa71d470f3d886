#include "runtime/backend/op_checks.hpp"

#include <climits>
#include <cmath>
#include <cstdint>
#include <utility>

namespace troupe {

void OpCheck::tensor(std::string_view name, const Tensor& t, int ndim) const {
  if (t.device != device_) fail("{} {} must be on {}", name, describe(t), to_string(device_));
  if (t.ndim != ndim)
    fail("{} {} must have {} dimension(s), has {}", name, describe(t), ndim, t.ndim);
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[size_t(i)] < 0) fail("{} {} has a negative dimension", name, describe(t));
  if (t.numel() > 0 && t.data == nullptr)
    fail("{} {} has no memory (null data)", name, describe(t));
}

void OpCheck::tensor(std::string_view name, const Tensor& t, DType dtype, int ndim) const {
  tensor(name, t, ndim);
  if (t.dtype != dtype)
    fail("{} {} must be {}, not {}", name, describe(t), dtype_name(dtype), dtype_name(t.dtype));
}

void OpCheck::dim(std::string_view name, const Tensor& t, int i, int64_t expected,
                  std::string_view why) const {
  if (t.dim(i) != expected)
    fail("{} {}: dim {} is {}, expected {} ({})", name, describe(t), i, t.dim(i), expected, why);
}

void OpCheck::same_shape(std::string_view name, const Tensor& t, std::string_view ref_name,
                         const Tensor& ref) const {
  bool same = t.dtype == ref.dtype && t.ndim == ref.ndim;
  for (int i = 0; same && i < t.ndim; ++i) same = t.shape[size_t(i)] == ref.shape[size_t(i)];
  if (!same)
    fail("{} {} must have the shape and dtype of {} {}", name, describe(t), ref_name,
         describe(ref));
}

void OpCheck::disjoint(std::string_view name, const Tensor& t, std::string_view other_name,
                       const Tensor& other) const {
  if (t.numel() == 0 || other.numel() == 0) return;
  const auto a = reinterpret_cast<uintptr_t>(t.data), b = reinterpret_cast<uintptr_t>(other.data);
  if (a < b + other.nbytes() && b < a + t.nbytes())
    fail("{} {} overlaps {} {}", name, describe(t), other_name, describe(other));
}

void OpCheck::positive(std::string_view name, int64_t value) const {
  if (value <= 0) fail("{} = {} must be > 0", name, value);
}

void OpCheck::fits_int(std::string_view name, int64_t value) const {
  if (value < 0 || value > INT_MAX) fail("{} = {} exceeds the limit of 2^31 - 1", name, value);
}

void OpCheck::aligned(std::string_view name, const Tensor& t, size_t bytes) const {
  if (reinterpret_cast<uintptr_t>(t.data) % bytes != 0)
    fail("{} {} must start on a {}-byte boundary (pass a view at a multiple of {} bytes)", name,
         describe(t), bytes, bytes);
}

void check_transfer(const OpCheck& check, std::string_view name, const Tensor& t, const void* host,
                    size_t bytes) {
  if (t.device != check.device())
    check.fail("{} {} must be on {}", name, describe(t), to_string(check.device()));
  if (bytes > t.nbytes())
    check.fail("{} bytes do not fit in {} {} ({} bytes)", bytes, name, describe(t), t.nbytes());
  if (bytes > 0 && (host == nullptr || t.data == nullptr))
    check.fail("{} bytes with a null pointer ({} {})", bytes, name, describe(t));
}

void check_copy(const OpCheck& check, const Tensor& dst, const Tensor& src) {
  check.tensor("src", src, src.ndim);
  check.tensor("dst", dst, dst.ndim);
  if (dst.dtype != src.dtype)
    check.fail("dst {} and src {} differ in dtype (copy does not convert)", describe(dst),
               describe(src));
  if (dst.numel() != src.numel())
    check.fail("dst {} and src {} hold different element counts", describe(dst), describe(src));
}

void check_embedding(const OpCheck& check, const Tensor& ids, const Tensor& table,
                     const Tensor& out) {
  check.tensor("ids", ids, DType::i32, 1);
  check.tensor("table", table, 2);
  check.tensor("out", out, table.dtype, 2);
  check.dim("out", out, 0, ids.dim(0), "one row per id");
  check.dim("out", out, 1, table.dim(1), "hidden size of table");
}

void check_embedding_shard(const OpCheck& check, const Tensor& ids, const Tensor& table,
                           int64_t vocab_start, int64_t vocab_size, const Tensor& out) {
  check_embedding(check, ids, table, out);
  check.disjoint("out", out, "table", table);
  if (vocab_start < 0 || vocab_start + table.dim(0) > vocab_size)
    check.fail("the table's rows [{}, {}) are outside the vocabulary [0, {})", vocab_start,
               vocab_start + table.dim(0), vocab_size);
}

void check_interleave_shards(const OpCheck& check, const Tensor& shards, const Tensor& out) {
  check.tensor("shards", shards, 3);
  check.tensor("out", out, shards.dtype, 2);
  check.dim("out", out, 0, shards.dim(1), "L of shards [P, L, W]");
  check.dim("out", out, 1, shards.dim(0) * shards.dim(2), "P * W of shards [P, L, W]");
  check.disjoint("out", out, "shards", shards);
}

void check_norm(const OpCheck& check, const Tensor& x, const Tensor& weight, float eps,
                const Tensor& out) {
  check.tensor("x", x, 2);
  check.tensor("weight", weight, x.dtype, 1);
  check.dim("weight", weight, 0, x.dim(1), fmt::format("hidden size of x {}", describe(x)));
  check.tensor("out", out, x.ndim);
  check.same_shape("out", out, "x", x);
  if (!(eps >= 0.0f) || !std::isfinite(eps)) check.fail("eps = {} must be finite and >= 0", eps);
}

void check_norm_heads(const OpCheck& check, const Tensor& x, const Tensor& weight, float eps,
                      int32_t head_begin, int32_t num_heads, int32_t head_dim) {
  check.tensor("x", x, 2);
  check.tensor("weight", weight, x.dtype, 1);
  if (head_dim < 1) check.fail("head_dim = {}: must be >= 1", head_dim);
  check.dim("weight", weight, 0, head_dim, fmt::format("head_dim {}", head_dim));
  if (head_begin < 0 || num_heads < 0 ||
      (int64_t(head_begin) + num_heads) * int64_t(head_dim) > x.dim(1))
    check.fail("heads [{}, {}) of {} features do not fit in the rows of x {}", head_begin,
               int64_t(head_begin) + num_heads, head_dim, describe(x));
  if (!(eps >= 0.0f) || !std::isfinite(eps)) check.fail("eps = {} must be finite and >= 0", eps);
}

void check_add_norm(const OpCheck& check, const Tensor& residual, const Tensor& x,
                    const Tensor& weight, float eps, const Tensor& out) {
  check_norm(check, x, weight, eps, out);
  check.tensor("residual", residual, x.ndim);
  check.same_shape("residual", residual, "x", x);
}

void check_add(const OpCheck& check, const Tensor& residual, const Tensor& x) {
  check.tensor("x", x, 2);
  check.tensor("residual", residual, x.dtype, 2);
  check.same_shape("residual", residual, "x", x);
  check.disjoint("residual", residual, "x", x);
}

void check_linear(const OpCheck& check, const Tensor& x, const Tensor& w, const Tensor* bias,
                  const Tensor& out) {
  check.tensor("x", x, 2);
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

void check_norm_linear(const OpCheck& check, const Tensor& x, const Tensor& norm_weight, float eps,
                       const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& out,
                       const char* out_name) {
  check_norm(check, x, norm_weight, eps, h);
  check.disjoint("h", h, "x", x);
  check_linear(check, h, w, bias, out);
  check.disjoint(out_name, out, "x", x);
}

int64_t check_act_mul(const OpCheck& check, const Tensor& gate_up, const Tensor& out) {
  check.tensor("gate_up", gate_up, 2);
  check.tensor("out", out, gate_up.dtype, 2);
  if (gate_up.dim(1) % 2 != 0)
    check.fail("gate_up {}: row of {} is not [gate | up] of two equal halves", describe(gate_up),
               gate_up.dim(1));
  const int64_t inter = gate_up.dim(1) / 2;
  check.dim("out", out, 0, gate_up.dim(0), fmt::format("T of gate_up {}", describe(gate_up)));
  check.dim("out", out, 1, inter, fmt::format("half the row of gate_up {}", describe(gate_up)));
  check.disjoint("out", out, "gate_up", gate_up);
  return inter;
}

namespace {

// rope's and rope_qkv_to_cache's shared arguments.
void check_rotary(const OpCheck& check, int32_t head_dim, int32_t rotary_dim, RopeStyle style) {
  if (rotary_dim <= 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
    check.fail("rotary_dim = {} must be even and in [2, head_dim = {}]", rotary_dim, head_dim);
  if (style != RopeStyle::neox && style != RopeStyle::gptj)
    check.fail("style = {} is neither neox nor gptj", int(style));
}

}  // namespace

void check_rope(const OpCheck& check, const Tensor& q, const Tensor& k, const Tensor& positions,
                const Tensor& cos_sin, int32_t head_dim, int32_t rotary_dim, RopeStyle style) {
  check.positive("head_dim", head_dim);
  check_rotary(check, head_dim, rotary_dim, style);
  check.tensor("positions", positions, DType::i32, 1);
  const int64_t tokens = positions.dim(0);
  check.tensor("q", q, 2);
  check.tensor("k", k, q.dtype, 2);
  for (const auto& [name, t] : {std::pair{"q", &q}, std::pair{"k", &k}}) {
    check.dim(name, *t, 0, tokens, "one row per position");
    if (t->dim(1) % head_dim != 0)
      check.fail("{} {}: row of {} is not a whole number of heads of {}", name, describe(*t),
                 t->dim(1), head_dim);
  }
  check.disjoint("q", q, "k", k);
  check.tensor("cos_sin", cos_sin, DType::f32, 2);
  check.dim("cos_sin", cos_sin, 1, rotary_dim, "rotary_dim");
}

void check_write_kv(const OpCheck& check, const Tensor& k, const Tensor& v, const Tensor& k_cache,
                    const Tensor& v_cache, const Tensor& slot_mapping) {
  check.tensor("k_cache", k_cache, 4);
  check.tensor("v_cache", v_cache, k_cache.dtype, 4);
  check.same_shape("v_cache", v_cache, "k_cache", k_cache);
  check.tensor("k", k, k_cache.dtype, 2);
  check.tensor("v", v, k_cache.dtype, 2);
  check.same_shape("v", v, "k", k);
  const int64_t row = k_cache.dim(2) * k_cache.dim(3);  // num_kv_heads * d
  check.dim("k", k, 1, row,
            fmt::format("num_kv_heads * head_dim of k_cache {}", describe(k_cache)));
  check.tensor("slot_mapping", slot_mapping, DType::i32, 1);
  check.dim("slot_mapping", slot_mapping, 0, k.dim(0), "one slot per row of k");
  check.disjoint("k_cache", k_cache, "v_cache", v_cache);
}

void check_rope_qkv(const OpCheck& check, const Tensor& qkv, const Tensor& positions,
                    const Tensor& cos_sin, int32_t head_dim, int32_t rotary_dim, RopeStyle style,
                    int32_t num_heads, int32_t num_kv_heads, const Tensor& k_cache,
                    const Tensor& v_cache, const Tensor& slot_mapping, const Tensor& q_out) {
  if (head_dim <= 0 || num_heads <= 0 || num_kv_heads <= 0)
    check.fail("head_dim = {}, num_heads = {} and num_kv_heads = {} must be > 0", head_dim,
               num_heads, num_kv_heads);
  check_rotary(check, head_dim, rotary_dim, style);
  check.tensor("positions", positions, DType::i32, 1);
  const int64_t tokens = positions.dim(0);
  const int64_t q_row = int64_t(num_heads) * head_dim, kv_row = int64_t(num_kv_heads) * head_dim;
  check.tensor("qkv", qkv, 2);
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
}

void check_gather_rows(const OpCheck& check, const Tensor& x, const Tensor& indices,
                       const Tensor& out) {
  check.tensor("x", x, 2);
  check.tensor("indices", indices, DType::i32, 1);
  check.tensor("out", out, x.dtype, 2);
  check.dim("out", out, 0, indices.dim(0), "one row per index");
  check.dim("out", out, 1, x.dim(1), fmt::format("row of x {}", describe(x)));
  check.disjoint("out", out, "x", x);
}

void check_attention(const OpCheck& check, const Tensor& q, const Tensor& k_cache,
                     const Tensor& v_cache, const AttentionBatch& batch,
                     const AttentionShape& shape, const Tensor& out) {
  if (shape.num_heads <= 0 || shape.num_kv_heads <= 0)
    check.fail("num_heads = {} and num_kv_heads = {} must be > 0", shape.num_heads,
               shape.num_kv_heads);
  if (shape.num_heads % shape.num_kv_heads != 0)
    check.fail("num_heads = {} is not a multiple of num_kv_heads = {}", shape.num_heads,
               shape.num_kv_heads);
  if (!std::isfinite(shape.scale)) check.fail("scale = {} must be finite", shape.scale);

  check.tensor("q", q, 2);
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

  if (batch.num_seqs < 0) check.fail("num_seqs = {} must be >= 0", batch.num_seqs);
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
}

void check_sample(const OpCheck& check, const Tensor& logits, size_t rows) {
  check.tensor("logits", logits, DType::f32, 2);
  if (int64_t(rows) != logits.dim(0))
    check.fail("{} sampling rows for logits {} ({} rows)", rows, describe(logits), logits.dim(0));
}

}  // namespace troupe
