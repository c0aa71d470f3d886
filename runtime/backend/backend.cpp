#include "runtime/backend/backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "runtime/error.hpp"

namespace troupe {

const char* gated_activation_name(GatedActivation act) {
  switch (act) {
    case GatedActivation::silu:
      return "silu";
    case GatedActivation::gelu:
      return "gelu";
    case GatedActivation::gelu_tanh:
      return "gelu_tanh";
  }
  return "?";
}

// A default rather than a pure virtual: backends written against the older op set (test
// doubles that never run a model) keep compiling; running a model on one is the error.
void Backend::rope_qkv_to_cache(const Tensor& /*qkv*/, const Tensor& /*positions*/,
                                const Tensor& /*cos_sin*/, int32_t /*head_dim*/,
                                int32_t /*rotary_dim*/, RopeStyle /*style*/,
                                int32_t /*num_heads*/, int32_t /*num_kv_heads*/,
                                const Tensor& /*k_cache*/, const Tensor& /*v_cache*/,
                                const Tensor& /*slot_mapping*/, const Tensor& /*q_out*/) {
  fail("rope_qkv_to_cache: the {} backend does not implement this op", name());
}

void Backend::rms_norm_heads(const Tensor& /*x*/, const Tensor& /*weight*/, float /*eps*/,
                             int32_t /*head_begin*/, int32_t /*num_heads*/, int32_t /*head_dim*/) {
  fail("rms_norm_heads: the {} backend does not implement this op", name());
}

void Backend::set_batch_invariant(bool on) {
  if (on)
    fail("batch_invariant: the {} backend has no batch-invariant mode yet; allowed: the cpu "
         "backend (--device cpu)",
         name());
}

void Backend::all_reduce(const Tensor& x) {
  if (collectives_ && collectives_->size() > 1) collectives_->all_reduce_sum(x);
}

void Backend::gather_columns(const Tensor& local, const Tensor& gathered, const Tensor& out) {
  if (!collectives_ || collectives_->size() == 1) {
    copy(out, local);
    return;
  }
  collectives_->all_gather(local, gathered);
  interleave_shards(gathered, out);
}

void Backend::interleave_shards(const Tensor& /*shards*/, const Tensor& /*out*/) {
  fail("interleave_shards: the {} backend does not implement this op", name());
}

void Backend::embedding_shard(const Tensor& /*ids*/, const Tensor& /*table*/,
                              int64_t /*vocab_start*/, int64_t /*vocab_size*/,
                              const Tensor& /*out*/) {
  fail("embedding_shard: the {} backend does not implement this op", name());
}

// A default rather than a pure virtual for the same reason as rope_qkv_to_cache's.
void Backend::add(const Tensor& /*residual*/, const Tensor& /*x*/) {
  fail("add: the {} backend does not implement this op", name());
}

void Backend::linear_add(const Tensor& x, const Tensor& w, const Tensor* bias,
                         const Tensor& residual, const Tensor& scratch) {
  linear(x, w, bias, scratch);
  add(residual, scratch);
}

void Backend::rms_norm_linear(const Tensor& x, const Tensor& norm_weight, float eps,
                              const Tensor& h, const Tensor& w, const Tensor* bias,
                              const Tensor& out) {
  rms_norm(x, norm_weight, eps, h);
  linear(h, w, bias, out);
}

void Backend::rms_norm_linear_act_mul(const Tensor& x, const Tensor& norm_weight, float eps,
                                      const Tensor& h, const Tensor& w, const Tensor* bias,
                                      GatedActivation act, const Tensor& gate_up,
                                      const Tensor& out) {
  rms_norm(x, norm_weight, eps, h);
  linear(h, w, bias, gate_up);
  act_mul(act, gate_up, out);
}

void Backend::rms_norm_linear_rope_qkv_to_cache(
    const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& h, const Tensor& w,
    const Tensor* bias, const Tensor& qkv, const Tensor& positions, const Tensor& cos_sin,
    int32_t head_dim, int32_t rotary_dim, RopeStyle style, int32_t num_heads, int32_t num_kv_heads,
    const Tensor& k_cache, const Tensor& v_cache, const Tensor& slot_mapping, const Tensor& q_out) {
  rms_norm_linear(x, norm_weight, eps, h, w, bias, qkv);
  rope_qkv_to_cache(qkv, positions, cos_sin, head_dim, rotary_dim, style, num_heads, num_kv_heads,
                    k_cache, v_cache, slot_mapping, q_out);
}

Buffer Backend::allocate_host(size_t bytes) {
  constexpr size_t kAlignment = 64;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) fail("allocate_host: no host memory left for {} bytes", bytes);
  return Buffer(p, bytes, Device{DeviceKind::cpu, 0}, [](void* q) { std::free(q); });
}

void Backend::swap_blocks(const Tensor& /*dst_cache*/, const Tensor& /*src_cache*/,
                          std::span<const BlockCopy> /*pairs*/) {
  fail("swap_blocks: the {} backend does not implement this op (run with swap_space = 0)", name());
}

size_t check_swap_blocks(const Tensor& dst, const Tensor& src, std::span<const BlockCopy> pairs,
                         const Device& device) {
  auto bad = [&](std::string_view what) {
    fail("swap_blocks: dst {}, src {}: {}", describe(dst), describe(src), what);
  };
  if (dst.ndim != 4 || src.ndim != 4) bad("expected [blocks, block_size, num_kv_heads, d] caches");
  if (dst.dtype != src.dtype) bad("dtypes differ");
  for (int i = 1; i < 4; ++i)
    if (dst.shape[size_t(i)] != src.shape[size_t(i)]) bad("block shapes differ");
  const bool dst_dev = dst.device == device, src_dev = src.device == device;
  const bool dst_host = dst.device.kind == DeviceKind::cpu;
  const bool src_host = src.device.kind == DeviceKind::cpu;
  if (!((dst_dev && src_host) || (dst_host && src_dev)))
    bad(fmt::format("one cache must be on {} and the other on the host", to_string(device)));
  if (!pairs.empty() && (dst.data == nullptr || src.data == nullptr)) bad("a cache has no memory");
  for (const BlockCopy& c : pairs) {
    if (c.src < 0 || c.src >= src.shape[0])
      bad(fmt::format("source block {} out of range [0, {})", c.src, src.shape[0]));
    if (c.dst < 0 || c.dst >= dst.shape[0])
      bad(fmt::format("destination block {} out of range [0, {})", c.dst, dst.shape[0]));
  }
  return size_t(src.row_elems()) * dtype_size(src.dtype);
}

void Backend::start_sample(const Tensor& logits, std::span<const SamplingRow> rows) {
  if (kept_samples_) fail("start_sample: a sampling is already in flight");
  kept_samples_ = sample(logits, rows);
}

std::vector<SampledToken> Backend::finish_sample() {
  if (!kept_samples_) fail("finish_sample: no sampling is in flight");
  std::vector<SampledToken> out = std::move(*kept_samples_);
  kept_samples_.reset();
  return out;
}

void Backend::check_token_feeds(const Tensor& dst, std::span<const TokenFeed> feeds,
                                size_t rows_in_flight) const {
  if (dst.dtype != DType::i32 || !(dst.device == device()))
    fail("feed_sampled_tokens: dst must be i32 on {}, got {}", to_string(device()), describe(dst));
  for (size_t i = 0; i < feeds.size(); ++i) {
    const TokenFeed& f = feeds[i];
    if (f.row < 0 || size_t(f.row) >= rows_in_flight)
      fail("feed_sampled_tokens: feeds[{}].row = {}: the sampling in flight has {} rows", i, f.row,
           rows_in_flight);
    if (f.index < 0 || f.index >= dst.numel())
      fail("feed_sampled_tokens: feeds[{}].index = {}: dst {} has {} elements", i, f.index,
           describe(dst), dst.numel());
  }
}

void Backend::feed_sampled_tokens(const Tensor& dst, std::span<const TokenFeed> feeds) {
  if (!kept_samples_) fail("feed_sampled_tokens: no sampling is in flight");
  check_token_feeds(dst, feeds, kept_samples_->size());
  for (const TokenFeed& f : feeds) {
    const int32_t token = (*kept_samples_)[size_t(f.row)].token;
    upload(dst.view({dst.numel()}).rows(f.index, f.index + 1), &token, sizeof(token));
  }
}

}  // namespace troupe
