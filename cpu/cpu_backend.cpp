#include "cpu/cpu_backend.hpp"

#include <cblas.h>

#include <sys/mman.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "cpu/paged_attention.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/vector_math.hpp"
#include "runtime/backend/op_checks.hpp"
#include "runtime/sampling/sampler.hpp"

namespace troupe {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t(2) << 20;  // x86-64's transparent huge page
constexpr size_t kHugeFrom = size_t(8) << 20;  // rounding up to kHugePage wastes < 25% here
constexpr Device kCpu{DeviceKind::cpu, 0};

// Rows per chunk so that each chunk of a row-parallel op touches ~64 KiB of floats: below
// that, waking the pool costs more than it saves.
int64_t grain_for(int64_t row_elems) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(row_elems, 1));
}

// The CPU computes in float32 only: an op's leading tensor must be float32, and the shared
// checks hold the others to its dtype.
void check_f32(const OpCheck& check, std::string_view name, const Tensor& t) {
  if (t.dtype != DType::f32)
    check.fail("{} {} must be float32 (the CPU backend computes in float32)", name, describe(t));
}

void rms_norm_row(const float* x, const float* w, float eps, float* out, int64_t h) {
  const float mean_sq = cpu::dot(x, x, h) / float(h);
  const float inv = 1.0f / std::sqrt(mean_sq + eps);
  // The normalised value is an f32 before the weight multiplies it (transformers' order).
  for (int64_t i = 0; i < h; ++i) out[i] = (x[i] * inv) * w[i];
}

// Rotates the first 2 * half features of one head in place.
void rotate_head(float* x, const float* cos, const float* sin, int64_t half, RopeStyle style) {
  if (style == RopeStyle::neox) {
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = x[i], x2 = x[i + half];
      x[i] = x1 * cos[i] - x2 * sin[i];
      x[i + half] = x2 * cos[i] + x1 * sin[i];
    }
  } else {
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = x[2 * i], x2 = x[2 * i + 1];
      x[2 * i] = x1 * cos[i] - x2 * sin[i];
      x[2 * i + 1] = x2 * cos[i] + x1 * sin[i];
    }
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int num_threads) : pool_(num_threads) {
    // OpenBLAS computes single-threaded and the pool splits each GEMM (gemm_nt). OpenBLAS's
    // own threads spin on sched_yield for ~2^28 cycles after every GEMM, so between GEMMs
    // (attention, sampling, the server's work) they took a core's share from everything else:
    // 2026-12-05, troupe-fortunes 300 x 128/128 on 2 cores, 1,833 -> 2,289 output tok/s.
    openblas_set_num_threads(1);
  }

  [[nodiscard]] std::string name() const override { return "cpu"; }
  [[nodiscard]] Device device() const override { return kCpu; }
  [[nodiscard]] DType compute_dtype(DType /*requested*/) const override { return DType::f32; }

  // ---- memory ----

  [[nodiscard]] Buffer allocate(size_t bytes) override {
    if (bytes > (size_t(1) << 62)) fail("allocate: {} bytes is not a plausible size", bytes);
    // aligned_alloc needs a size that is a multiple of the alignment (and not zero).
    // Large buffers (the KV cache, weights, a big step's activations) are 2 MiB-aligned and asked
    // for transparent huge pages: where THP is "madvise" (as on this VM) they otherwise fault in
    // and sit in the TLB 4 KiB at a time. madvise failing (no THP) is harmless. 2026-12-06,
    // troupe-fortunes 300 x 128/128 on 2 cores, 8 alternating rounds: output tok/s +3.5% (7 of
    // 8 rounds faster), minor faults 163k -> 35k per run.
    const bool huge = bytes >= kHugeFrom;
    const size_t align = huge ? kHugePage : kAlignment;
    const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (p != nullptr && huge) madvise(p, rounded, MADV_HUGEPAGE);
    if (p == nullptr) fail("allocate: no host memory left for {} bytes", bytes);
    return Buffer(p, bytes, kCpu, [](void* q) { std::free(q); });
  }

  void upload(const Tensor& dst, const void* host, size_t bytes) override {
    check_transfer("upload", "dst", dst, host, bytes);
    if (bytes > 0) std::memcpy(dst.data, host, bytes);
  }

  void download(void* host, const Tensor& src, size_t bytes) override {
    check_transfer("download", "src", src, host, bytes);
    if (bytes > 0) std::memcpy(host, src.data, bytes);
  }

  void copy(const Tensor& dst, const Tensor& src) override {
    check_copy(OpCheck("copy", kCpu), dst, src);
    if (src.nbytes() > 0) std::memmove(dst.data, src.data, src.nbytes());
  }

  // Host and "device" memory are the same here: a swap is a memcpy per block.
  void swap_blocks(const Tensor& dst_cache, const Tensor& src_cache,
                   std::span<const BlockCopy> pairs) override {
    const size_t block_bytes = check_swap_blocks(dst_cache, src_cache, pairs, kCpu);
    auto* dst = static_cast<char*>(dst_cache.data);
    const auto* src = static_cast<const char*>(src_cache.data);
    for (const BlockCopy& c : pairs)
      std::memcpy(dst + size_t(c.dst) * block_bytes, src + size_t(c.src) * block_bytes,
                  block_bytes);
  }

  void synchronize() override {}  // every op has finished when it returns

  [[nodiscard]] MemoryInfo memory_info() const override {
    MemoryInfo info;
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    size_t kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit) {
      if (key == "MemTotal:") info.total_bytes = kib * 1024;
      if (key == "MemAvailable:") info.free_bytes = kib * 1024;
    }
    if (info.total_bytes == 0) {  // no /proc (a container without it): ask libc
      const long page = sysconf(_SC_PAGESIZE);
      info.total_bytes = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(page);
      info.free_bytes = size_t(sysconf(_SC_AVPHYS_PAGES)) * size_t(page);
    }
    return info;
  }

  // ---- ops ----

  void embedding(const Tensor& ids, const Tensor& table, const Tensor& out) override {
    const OpCheck check("embedding", kCpu);
    check_f32(check, "table", table);
    check_embedding(check, ids, table, out);
    const auto* id = ids.as<const int32_t>();
    const int64_t vocab = table.dim(0), h = table.dim(1);
    for (int64_t t = 0; t < ids.dim(0); ++t)
      if (id[t] < 0 || id[t] >= vocab)
        check.fail("ids[{}] = {} is outside the table's rows [0, {})", t, id[t], vocab);
    const float* src = table.as<const float>();
    float* dst = out.as<float>();
    pool_.parallel_for(ids.dim(0), grain_for(h), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        std::memcpy(dst + t * h, src + int64_t(id[t]) * h, size_t(h) * sizeof(float));
    });
  }

  void embedding_shard(const Tensor& ids, const Tensor& table, int64_t vocab_start,
                       int64_t vocab_size, const Tensor& out) override {
    const OpCheck check("embedding_shard", kCpu);
    check_f32(check, "table", table);
    check_embedding_shard(check, ids, table, vocab_start, vocab_size, out);
    const int64_t rows = table.dim(0), h = table.dim(1);
    const auto* id = ids.as<const int32_t>();
    for (int64_t t = 0; t < ids.dim(0); ++t)
      if (id[t] < 0 || id[t] >= vocab_size)
        check.fail("ids[{}] = {} is outside the vocabulary [0, {})", t, id[t], vocab_size);
    const float* src = table.as<const float>();
    float* dst = out.as<float>();
    pool_.parallel_for(ids.dim(0), grain_for(h), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t row = int64_t(id[t]) - vocab_start;
        if (row >= 0 && row < rows)
          std::memcpy(dst + t * h, src + row * h, size_t(h) * sizeof(float));
        else
          std::fill(dst + t * h, dst + (t + 1) * h, 0.0f);
      }
    });
  }

  void interleave_shards(const Tensor& shards, const Tensor& out) override {
    const OpCheck check("interleave_shards", kCpu);
    check_f32(check, "shards", shards);
    check_interleave_shards(check, shards, out);
    const int64_t p = shards.dim(0), l = shards.dim(1), w = shards.dim(2);
    const float* src = shards.as<const float>();
    float* dst = out.as<float>();
    for (int64_t r = 0; r < p; ++r)
      for (int64_t i = 0; i < l; ++i)
        std::memcpy(dst + i * p * w + r * w, src + (r * l + i) * w, size_t(w) * sizeof(float));
  }

  void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
    const OpCheck check("rms_norm", kCpu);
    check_f32(check, "x", x);
    check_norm(check, x, weight, eps, out);
    const int64_t h = x.dim(1);
    const float* xs = x.as<const float>();
    const float* w = weight.as<const float>();
    float* o = out.as<float>();
    pool_.parallel_for(x.dim(0), grain_for(h), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) rms_norm_row(xs + t * h, w, eps, o + t * h, h);
    });
  }

  void rms_norm_heads(const Tensor& x, const Tensor& weight, float eps, int32_t head_begin,
                      int32_t num_heads, int32_t head_dim) override {
    const OpCheck check("rms_norm_heads", kCpu);
    check_f32(check, "x", x);
    check_norm_heads(check, x, weight, eps, head_begin, num_heads, head_dim);
    const int64_t width = x.dim(1), d = head_dim;
    float* xs = x.as<float>();
    const float* w = weight.as<const float>();
    pool_.parallel_for(
        x.dim(0), grain_for(int64_t(num_heads) * d), [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t)
            for (int64_t j = head_begin; j < int64_t(head_begin) + num_heads; ++j) {
              float* p = xs + t * width + j * d;
              rms_norm_row(p, w, eps, p,
                           d);  // in place: the row is read whole before it is written
            }
        });
  }

  void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                    const Tensor& out) override {
    const OpCheck check("add_rms_norm", kCpu);
    check_f32(check, "x", x);
    check_add_norm(check, residual, x, weight, eps, out);
    const int64_t h = x.dim(1);
    float* r = residual.as<float>();
    const float* xs = x.as<const float>();
    const float* w = weight.as<const float>();
    float* o = out.as<float>();
    pool_.parallel_for(x.dim(0), grain_for(h), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* rt = r + t * h;
        const float* xt = xs + t * h;
        for (int64_t i = 0; i < h; ++i) rt[i] += xt[i];
        rms_norm_row(rt, w, eps, o + t * h, h);
      }
    });
  }

  void add(const Tensor& residual, const Tensor& x) override {
    const OpCheck check("add", kCpu);
    check_f32(check, "x", x);
    check_add(check, residual, x);
    const int64_t h = x.dim(1);
    float* r = residual.as<float>();
    const float* xs = x.as<const float>();
    pool_.parallel_for(x.dim(0), grain_for(h), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin * h; i < end * h; ++i) r[i] += xs[i];
    });
  }

  void linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) override {
    const OpCheck check("linear", kCpu);
    check_f32(check, "x", x);
    check_linear(check, x, w, bias, out);  // float32 x: out and bias float32 too
    const int64_t t = x.dim(0), k = x.dim(1), n = w.dim(0);
    if (t == 0 || n == 0) return;
    if (batch_invariant_) return invariant_linear(x, w, bias, out);

    float* o = out.as<float>();
    // With a bias, out starts as the bias rows and sgemm accumulates into it (beta = 1).
    if (bias != nullptr) {
      const float* b = bias->as<const float>();
      pool_.parallel_for(t, grain_for(n), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) std::memcpy(o + i * n, b, size_t(n) * sizeof(float));
      });
    } else if (k == 0) {
      std::memset(o, 0, out.nbytes());
    }
    if (k == 0) return;
    gemm_nt(t, n, k, x.as<const float>(), w.as<const float>(), bias != nullptr ? 1.0f : 0.0f, o);
  }

  void set_batch_invariant(bool on) override { batch_invariant_ = on; }

  void rope(const Tensor& q, const Tensor& k, const Tensor& positions, const Tensor& cos_sin,
            int32_t head_dim, int32_t rotary_dim, RopeStyle style) override {
    const OpCheck check("rope", kCpu);
    check_f32(check, "q", q);
    check_rope(check, q, k, positions, cos_sin, head_dim, rotary_dim, style);
    const int64_t tokens = positions.dim(0);
    const auto* pos = positions.as<const int32_t>();
    const int64_t max_pos = cos_sin.dim(0);
    for (int64_t t = 0; t < tokens; ++t)
      if (pos[t] < 0 || pos[t] >= max_pos)
        check.fail("positions[{}] = {} is outside the cos_sin cache's rows [0, {})", t, pos[t],
                   max_pos);

    const int64_t half = rotary_dim / 2;
    const float* cs = cos_sin.as<const float>();
    float* qs = q.as<float>();
    float* ks = k.as<float>();
    const int64_t q_heads = q.dim(1) / head_dim, k_heads = k.dim(1) / head_dim;
    pool_.parallel_for(tokens, grain_for(q.dim(1) + k.dim(1)), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const float* cos = cs + int64_t(pos[t]) * rotary_dim;
        const float* sin = cos + half;
        for (int64_t h = 0; h < q_heads; ++h)
          rotate_head(qs + t * q.dim(1) + h * head_dim, cos, sin, half, style);
        for (int64_t h = 0; h < k_heads; ++h)
          rotate_head(ks + t * k.dim(1) + h * head_dim, cos, sin, half, style);
      }
    });
  }

  void write_kv(const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                const Tensor& slot_mapping) override {
    const OpCheck check("write_kv", kCpu);
    check_f32(check, "k_cache", k_cache);
    check_write_kv(check, k, v, k_cache, v_cache, slot_mapping);
    const int64_t row = k_cache.dim(2) * k_cache.dim(3);  // num_kv_heads * d
    const auto* slot = slot_mapping.as<const int32_t>();
    const int64_t num_slots = k_cache.dim(0) * k_cache.dim(1);
    for (int64_t t = 0; t < k.dim(0); ++t)
      if (slot[t] >= num_slots)
        check.fail("slot_mapping[{}] = {} is outside the cache's slots [0, {}) (negative skips)", t,
                   slot[t], num_slots);
    const float* ks = k.as<const float>();
    const float* vs = v.as<const float>();
    float* kc = k_cache.as<float>();
    float* vc = v_cache.as<float>();
    // Two tokens mapped to one slot is a caller bug; which write wins is unspecified.
    pool_.parallel_for(k.dim(0), grain_for(2 * row), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        if (slot[t] < 0) continue;
        std::memcpy(kc + int64_t(slot[t]) * row, ks + t * row, size_t(row) * sizeof(float));
        std::memcpy(vc + int64_t(slot[t]) * row, vs + t * row, size_t(row) * sizeof(float));
      }
    });
  }

  void rope_qkv_to_cache(const Tensor& qkv, const Tensor& positions, const Tensor& cos_sin,
                         int32_t head_dim, int32_t rotary_dim, RopeStyle style, int32_t num_heads,
                         int32_t num_kv_heads, const Tensor& k_cache, const Tensor& v_cache,
                         const Tensor& slot_mapping, const Tensor& q_out) override {
    const OpCheck check("rope_qkv_to_cache", kCpu);
    check_f32(check, "qkv", qkv);
    check_rope_qkv(check, qkv, positions, cos_sin, head_dim, rotary_dim, style, num_heads,
                   num_kv_heads, k_cache, v_cache, slot_mapping, q_out);
    const int64_t tokens = positions.dim(0);
    const int64_t d = head_dim, q_row = int64_t(num_heads) * d, kv_row = int64_t(num_kv_heads) * d;
    const auto* pos = positions.as<const int32_t>();
    const auto* slot = slot_mapping.as<const int32_t>();
    const int64_t max_pos = cos_sin.dim(0), num_slots = k_cache.dim(0) * k_cache.dim(1);
    for (int64_t t = 0; t < tokens; ++t) {
      if (pos[t] < 0 || pos[t] >= max_pos)
        check.fail("positions[{}] = {} is outside the cos_sin cache's rows [0, {})", t, pos[t],
                   max_pos);
      if (slot[t] >= num_slots)
        check.fail("slot_mapping[{}] = {} is outside the cache's slots [0, {}) (negative skips)",
                   t, slot[t], num_slots);
    }

    // Copy each part to where it belongs, then rotate q and k there in place: the same
    // rotate_head calls as rope() followed by write_kv(), so the results are identical.
    const int64_t half = rotary_dim / 2;
    const float* cs = cos_sin.as<const float>();
    const float* src = qkv.as<const float>();
    float* qo = q_out.as<float>();
    float* kc = k_cache.as<float>();
    float* vc = v_cache.as<float>();
    pool_.parallel_for(tokens, grain_for(qkv.dim(1)), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const float* cos = cs + int64_t(pos[t]) * rotary_dim;
        const float* sin = cos + half;
        const float* row = src + t * (q_row + 2 * kv_row);
        float* q = qo + t * q_row;
        std::memcpy(q, row, size_t(q_row) * sizeof(float));
        for (int64_t h = 0; h < num_heads; ++h) rotate_head(q + h * d, cos, sin, half, style);
        if (slot[t] < 0) continue;
        float* k = kc + int64_t(slot[t]) * kv_row;
        std::memcpy(k, row + q_row, size_t(kv_row) * sizeof(float));
        for (int64_t h = 0; h < num_kv_heads; ++h) rotate_head(k + h * d, cos, sin, half, style);
        std::memcpy(vc + int64_t(slot[t]) * kv_row, row + q_row + kv_row,
                    size_t(kv_row) * sizeof(float));
      }
    });
  }

  void attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                 const AttentionBatch& batch, const AttentionShape& shape,
                 const Tensor& out) override {
    cpu::paged_attention(pool_, q, k_cache, v_cache, batch, shape, out);
  }

  void act_mul(GatedActivation act, const Tensor& gate_up, const Tensor& out) override {
    const OpCheck check("act_mul", kCpu);
    check_f32(check, "gate_up", gate_up);
    const int64_t inter = check_act_mul(check, gate_up, out);
    const float* gu = gate_up.as<const float>();
    float* o = out.as<float>();
    pool_.parallel_for(out.dim(0), grain_for(inter), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const float* g = gu + t * 2 * inter;
        const float* u = g + inter;
        float* ot = o + t * inter;
        switch (act) {
          case GatedActivation::silu:
            for (int64_t i = 0; i < inter; ++i) ot[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
            break;
          case GatedActivation::gelu:
            for (int64_t i = 0; i < inter; ++i)
              ot[i] = 0.5f * g[i] * (1.0f + std::erf(g[i] * float(M_SQRT1_2))) * u[i];
            break;
          case GatedActivation::gelu_tanh:
            for (int64_t i = 0; i < inter; ++i) {
              const float x = g[i];
              const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
              ot[i] = 0.5f * x * (1.0f + std::tanh(inner)) * u[i];
            }
            break;
        }
      }
    });
  }

  void gather_rows(const Tensor& x, const Tensor& indices, const Tensor& out) override {
    const OpCheck check("gather_rows", kCpu);
    check_f32(check, "x", x);
    check_gather_rows(check, x, indices, out);
    const auto* idx = indices.as<const int32_t>();
    for (int64_t s = 0; s < indices.dim(0); ++s)
      if (idx[s] < 0 || idx[s] >= x.dim(0))
        check.fail("indices[{}] = {} is outside the rows of x {}", s, idx[s], describe(x));
    const int64_t h = x.dim(1);
    const float* xs = x.as<const float>();
    float* o = out.as<float>();
    pool_.parallel_for(indices.dim(0), grain_for(h), [&](int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s)
        std::memcpy(o + s * h, xs + int64_t(idx[s]) * h, size_t(h) * sizeof(float));
    });
  }

  std::vector<SampledToken> sample(const Tensor& logits,
                                   std::span<const SamplingRow> rows) override {
    check_sample(OpCheck("sample", kCpu), logits, rows.size());
    const int64_t vocab = logits.dim(1);
    for (size_t s = 0; s < rows.size(); ++s) check_sampling_row(rows[s], vocab, int64_t(s));
    std::vector<SampledToken> result(rows.size());
    const float* l = logits.as<const float>();
    pool_.parallel_for(int64_t(rows.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s)
        result[size_t(s)] = sample_row(l + s * vocab, vocab, rows[size_t(s)]);
    });
    return result;
  }

 private:
  static void check_transfer(std::string_view op, std::string_view name, const Tensor& t,
                             const void* host, size_t bytes) {
    troupe::check_transfer(OpCheck(op, kCpu), name, t, host, bytes);
  }

  // out[t, n] = x[t, k] . w[n, k]^T + beta * out, split over the pool: blocks of rows when
  // there are at least as many rows as columns, else blocks of columns (multiples of 16, all
  // but the last at least 64 wide, so each piece stays a GEMM OpenBLAS packs efficiently).
  // Each output element is one OpenBLAS dot product over k either way; the pieces only choose
  // who computes it.
  void gemm_nt(int64_t t, int64_t n, int64_t k, const float* x, const float* w, float beta,
               float* o) {
    const auto piece = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(r1 - r0), int(c1 - c0), int(k),
                  1.0f, x + r0 * k, int(k), w + c0 * k, int(k), beta, o + r0 * n + c0, int(n));
    };
    // Below ~2 MFLOP waking the pool costs more than it saves.
    if (pool_.size() == 1 || t * n * k < (int64_t(1) << 20)) return piece(0, t, 0, n);
    if (t >= n) {
      pool_.parallel_for(t, std::max<int64_t>(16, 1024 / std::max<int64_t>(n, 1)),
                         [&](int64_t begin, int64_t end) { piece(begin, end, 0, n); });
      return;
    }
    constexpr int64_t kCols = 16;
    pool_.parallel_for((n + kCols - 1) / kCols, 4, [&](int64_t begin, int64_t end) {
      piece(0, t, begin * kCols, std::min(n, end * kCols));
    });
  }

  // out[i, j] = dot(x_i, w_j) (+ bias[j]) in vector_math's fixed eight-lane order, for any
  // number of rows: OpenBLAS picks its kernels and blockings by the matrix shape, so the bits
  // of its row i depend on how many rows came with it. Threads split the weight rows; a block
  // of them stays in cache while every row of x passes over it.
  void invariant_linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& out) {
    const int64_t t = x.dim(0), k = x.dim(1), n = w.dim(0);
    constexpr int64_t kBlock = 32;  // weight rows per task
    const float* xp = x.as<const float>();
    const float* wp = w.as<const float>();
    const float* b = bias != nullptr ? bias->as<const float>() : nullptr;
    float* o = out.as<float>();
    pool_.parallel_for((n + kBlock - 1) / kBlock, 1, [&](int64_t begin, int64_t end) {
      for (int64_t j0 = begin * kBlock; j0 < std::min(n, end * kBlock); j0 += kBlock) {
        const int64_t j1 = std::min(n, j0 + kBlock);
        for (int64_t i = 0; i < t; ++i)
          for (int64_t j = j0; j < j1; ++j) {
            const float d = cpu::dot(xp + i * k, wp + j * k, k);
            o[i * n + j] = b != nullptr ? b[j] + d : d;
          }
      }
    });
  }

  cpu::ThreadPool pool_;
  bool batch_invariant_ = false;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int num_threads) {
  if (num_threads < 0)
    fail("make_cpu_backend: num_threads = {} must be >= 0 (0: all cores)", num_threads);
  return std::make_unique<CpuBackend>(num_threads);
}

}  // namespace troupe
