// Test harness for model programs: a paged KV cache with shuffled block ids, a step runner
// that builds ForwardInputs for a batch of sequences the way the executor will, and a float64
// reference forward of the Llama family written from the transformers definitions (plain
// loops, unpaged, RoPE angles in double) to check the model against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend/backend.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/models/model.hpp"

namespace troupe::testing {

/// ||a - b|| / ||b||
inline double rel_error(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = double(a.at(i)) - b[i];
    num += d * d;
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

inline size_t argmax(const std::vector<float>& v) {
  return size_t(std::max_element(v.begin(), v.end()) - v.begin());
}

/// One sequence's cache state: its physical blocks and how many tokens are cached.
struct PagedSeq {
  std::vector<int32_t> blocks;
  int32_t len = 0;
};

/// A paged KV cache for one model on one backend, with block ids handed out in a shuffled
/// order so that logical and physical block order never agree.
class PagedRunner {
 public:
  PagedRunner(Backend& be, CausalLM& model, int32_t block_size, int32_t num_blocks, uint64_t seed)
      : be_(be), model_(model) {
    const KVCacheShape s = model.kv_cache_shape();
    view_.block_size = block_size;
    view_.num_blocks = num_blocks;
    for (int32_t l = 0; l < s.num_layers; ++l) {
      for (auto* side : {&view_.k, &view_.v}) {
        bufs_.push_back(be.allocate(size_t(num_blocks) * size_t(block_size) *
                                    size_t(s.num_kv_heads) * size_t(s.head_dim) *
                                    dtype_size(s.dtype)));
        side->push_back(
            bufs_.back().tensor(s.dtype, {num_blocks, block_size, s.num_kv_heads, s.head_dim}));
      }
    }
    free_.resize(size_t(num_blocks));
    std::iota(free_.begin(), free_.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(free_.begin(), free_.end(), rng);
  }

  /// Runs one forward over `new_tokens[i]` appended to `*seqs[i]`. Returns the logits rows
  /// requested: every new token's row when `all_rows`, else each sequence's last row.
  std::vector<std::vector<float>> step(const std::vector<PagedSeq*>& seqs,
                                       const std::vector<std::vector<int32_t>>& new_tokens,
                                       bool all_rows) {
    const int32_t bs = view_.block_size;
    std::vector<int32_t> ids, pos, slots, qsl{0}, seq_lens, logits_idx;
    int32_t max_q = 0, max_len = 0;
    size_t max_blocks = 1;
    for (size_t s = 0; s < seqs.size(); ++s) {
      PagedSeq& q = *seqs[s];
      const auto& toks = new_tokens[s];
      for (size_t i = 0; i < toks.size(); ++i) {
        const int32_t p = q.len + int32_t(i);
        if (size_t(p / bs) >= q.blocks.size()) {
          if (free_.empty()) throw std::runtime_error("test KV cache out of blocks");
          q.blocks.push_back(free_.back());
          free_.pop_back();
        }
        ids.push_back(toks[i]);
        pos.push_back(p);
        slots.push_back(q.blocks[size_t(p / bs)] * bs + p % bs);
        if (all_rows) logits_idx.push_back(int32_t(ids.size()) - 1);
      }
      if (!all_rows) logits_idx.push_back(int32_t(ids.size()) - 1);
      q.len += int32_t(toks.size());
      qsl.push_back(int32_t(ids.size()));
      seq_lens.push_back(q.len);
      max_q = std::max(max_q, int32_t(toks.size()));
      max_len = std::max(max_len, q.len);
      max_blocks = std::max(max_blocks, q.blocks.size());
    }
    // Unused table entries point at block 0, which is valid but never read.
    std::vector<int32_t> table(seqs.size() * max_blocks, 0);
    for (size_t s = 0; s < seqs.size(); ++s)
      std::copy(seqs[s]->blocks.begin(), seqs[s]->blocks.end(),
                table.begin() + long(s * max_blocks));

    std::vector<Buffer> keep;
    auto dev = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> dims) {
      keep.push_back(be_.allocate(std::max<size_t>(v.size(), 1) * 4));
      Tensor t = keep.back().tensor(DType::i32, dims);
      be_.upload(t, v.data(), v.size() * 4);
      return t;
    };
    ForwardInputs in;
    const auto T = int64_t(ids.size()), S = int64_t(seqs.size());
    in.token_ids = dev(ids, {T});
    in.positions = dev(pos, {T});
    in.slot_mapping = dev(slots, {T});
    in.logits_indices = dev(logits_idx, {int64_t(logits_idx.size())});
    in.attention.query_start_loc = dev(qsl, {S + 1});
    in.attention.seq_lens = dev(seq_lens, {S});
    in.attention.block_tables = dev(table, {S, int64_t(max_blocks)});
    in.attention.num_seqs = int32_t(S);
    in.attention.max_query_len = max_q;
    in.attention.max_seq_len = max_len;
    in.num_tokens = int32_t(T);

    const Tensor logits = model_.forward(in, view_);  // [L, V] f32
    const auto L = size_t(logits.dim(0)), V = size_t(logits.dim(1));
    std::vector<float> flat(L * V);
    be_.download(flat.data(), logits, flat.size() * 4);
    std::vector<std::vector<float>> rows(L);
    for (size_t r = 0; r < L; ++r)
      rows[r].assign(flat.begin() + long(r * V), flat.begin() + long((r + 1) * V));
    return rows;
  }

  [[nodiscard]] const KVCacheView& view() const { return view_; }

 private:
  Backend& be_;
  CausalLM& model_;
  KVCacheView view_;
  std::vector<Buffer> bufs_;
  std::vector<int32_t> free_;
};

// ---------------------------------------------------------------------------------------
// float64 reference

/// A checkpoint tensor as doubles (f16/bf16/f32 are all exact in double).
inline std::vector<double> tensor_f64(const CheckpointReader& ck, const std::string& name) {
  const TensorInfo t = ck.get(name);
  std::vector<float> f(static_cast<size_t>(t.numel()));
  std::vector<unsigned char> aligned(t.nbytes);
  if (t.nbytes) std::memcpy(aligned.data(), t.data, t.nbytes);
  convert_floats(aligned.data(), t.dtype, f.data(), DType::f32, f.size());
  return {f.begin(), f.end()};
}

/// RoPE inverse frequencies in double, from the published formulas (no float32 steps).
inline std::vector<double> reference_inv_freq(const ModelConfig& c) {
  const int64_t d = c.head_dim;
  std::vector<double> inv(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i)
    inv[size_t(i)] = std::pow(c.rope_theta, -double(2 * i) / double(d));
  const auto& s = c.rope_scaling;
  if (s.type == "linear") {
    for (auto& f : inv) f /= s.factor;
  } else if (s.type == "llama3") {
    const double old_len = double(s.original_max_position_embeddings);
    for (auto& f : inv) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen < old_len / s.high_freq_factor) continue;  // high frequency: unchanged
      if (wavelen > old_len / s.low_freq_factor) {           // low frequency: scaled
        f /= s.factor;
        continue;
      }
      const double smooth =
          (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

/// Logits [T][V] of every position of `ids`, in float64. `qwen2` selects Qwen2's biases.
inline std::vector<std::vector<double>> reference_logits(const ModelConfig& c,
                                                         const CheckpointReader& ck,
                                                         const std::vector<int32_t>& ids,
                                                         bool qwen2) {
  const auto T = int64_t(ids.size()), H = c.hidden_size, d = c.head_dim, nh = c.num_attention_heads,
             nkv = c.num_key_value_heads, I = c.intermediate_size, V = c.vocab_size;
  using Mat = std::vector<std::vector<double>>;
  auto linear = [](const Mat& x, const std::vector<double>& w, const std::vector<double>* b,
                   int64_t n) {
    const auto k = int64_t(x[0].size());
    Mat out(x.size(), std::vector<double>(size_t(n)));
    for (size_t t = 0; t < x.size(); ++t)
      for (int64_t j = 0; j < n; ++j) {
        double acc = b ? (*b)[size_t(j)] : 0.0;
        for (int64_t i = 0; i < k; ++i) acc += x[t][size_t(i)] * w[size_t(j * k + i)];
        out[t][size_t(j)] = acc;
      }
    return out;
  };
  auto norm = [&](const Mat& x, const std::vector<double>& w) {
    Mat out = x;
    for (auto& row : out) {
      double ss = 0;
      for (double v : row) ss += v * v;
      const double r = 1.0 / std::sqrt(ss / double(H) + c.rms_norm_eps);
      for (size_t i = 0; i < row.size(); ++i) row[i] *= r * w[i];
    }
    return out;
  };
  auto opt = [&](const std::string& name, bool present) {
    return present ? tensor_f64(ck, name) : std::vector<double>{};
  };
  const std::vector<double> inv = reference_inv_freq(c);
  auto rope = [&](Mat& x, int64_t heads) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < d / 2; ++i) {
          const double a = double(t) * inv[size_t(i)];
          double& x1 = x[size_t(t)][size_t(h * d + i)];
          double& x2 = x[size_t(t)][size_t(h * d + i + d / 2)];
          const double y1 = x1 * std::cos(a) - x2 * std::sin(a),
                       y2 = x2 * std::cos(a) + x1 * std::sin(a);
          x1 = y1;
          x2 = y2;
        }
  };

  const std::vector<double> embed = tensor_f64(ck, "model.embed_tokens.weight");
  Mat x(static_cast<size_t>(T), std::vector<double>(size_t(H)));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) x[size_t(t)][size_t(i)] = embed[size_t(ids[size_t(t)] * H + i)];

  const bool qkv_b = qwen2 || c.attention_bias, o_b = !qwen2 && c.attention_bias,
             mlp_b = !qwen2 && c.mlp_bias;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const Mat h = norm(x, tensor_f64(ck, p + "input_layernorm.weight"));
    auto bq = opt(p + "self_attn.q_proj.bias", qkv_b), bk = opt(p + "self_attn.k_proj.bias", qkv_b),
         bv = opt(p + "self_attn.v_proj.bias", qkv_b);
    Mat q = linear(h, tensor_f64(ck, p + "self_attn.q_proj.weight"), qkv_b ? &bq : nullptr, nh * d);
    Mat k =
        linear(h, tensor_f64(ck, p + "self_attn.k_proj.weight"), qkv_b ? &bk : nullptr, nkv * d);
    Mat v =
        linear(h, tensor_f64(ck, p + "self_attn.v_proj.weight"), qkv_b ? &bv : nullptr, nkv * d);
    rope(q, nh);
    rope(k, nkv);
    Mat a(static_cast<size_t>(T), std::vector<double>(size_t(nh * d), 0.0));
    const double scale = 1.0 / std::sqrt(double(d));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hd = 0; hd < nh; ++hd) {
        const int64_t kh = hd / (nh / nkv);
        std::vector<double> s(static_cast<size_t>(t + 1));
        double mx = -1e300;
        for (int64_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (int64_t i = 0; i < d; ++i)
            dot += q[size_t(t)][size_t(hd * d + i)] * k[size_t(u)][size_t(kh * d + i)];
          s[size_t(u)] = dot * scale;
          mx = std::max(mx, s[size_t(u)]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t i = 0; i < d; ++i)
            a[size_t(t)][size_t(hd * d + i)] += s[size_t(u)] / z * v[size_t(u)][size_t(kh * d + i)];
      }
    auto bo = opt(p + "self_attn.o_proj.bias", o_b);
    const Mat o = linear(a, tensor_f64(ck, p + "self_attn.o_proj.weight"), o_b ? &bo : nullptr, H);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H; ++i) x[size_t(t)][size_t(i)] += o[size_t(t)][size_t(i)];
    const Mat h2 = norm(x, tensor_f64(ck, p + "post_attention_layernorm.weight"));
    auto bg = opt(p + "mlp.gate_proj.bias", mlp_b), bu = opt(p + "mlp.up_proj.bias", mlp_b),
         bd = opt(p + "mlp.down_proj.bias", mlp_b);
    const Mat g = linear(h2, tensor_f64(ck, p + "mlp.gate_proj.weight"), mlp_b ? &bg : nullptr, I);
    const Mat up = linear(h2, tensor_f64(ck, p + "mlp.up_proj.weight"), mlp_b ? &bu : nullptr, I);
    Mat act(static_cast<size_t>(T), std::vector<double>(size_t(I)));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < I; ++i) {
        const double gv = g[size_t(t)][size_t(i)];
        act[size_t(t)][size_t(i)] = gv / (1.0 + std::exp(-gv)) * up[size_t(t)][size_t(i)];
      }
    const Mat down =
        linear(act, tensor_f64(ck, p + "mlp.down_proj.weight"), mlp_b ? &bd : nullptr, H);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H; ++i) x[size_t(t)][size_t(i)] += down[size_t(t)][size_t(i)];
  }
  const Mat hf = norm(x, tensor_f64(ck, "model.norm.weight"));
  const std::vector<double> head = c.tie_word_embeddings ? embed : tensor_f64(ck, "lm_head.weight");
  return linear(hf, head, nullptr, V);
}

}  // namespace troupe::testing
