// troupe_cuda_opbench: per-op timings of the CUDA backend on Llama-3-8B-shaped ops (bf16),
// printed as time per call, achieved GB/s (bytes each call must move at least) and TFLOP/s.
// Not a test: run it on the GPU machine (tools/device/bench.sh opbench does).
//
// Each op is run 3 times to warm up, then `iters` times between two CUDA events on the
// backend's stream, so the time includes launch gaps but no host synchronisation. The sampler
// synchronises, so its lines give the host time per call (and the GPU time inside it).
// Usage: troupe_cuda_opbench [iters = 20] [dense: only the dense ops and the fused GEMVs]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/bench/stream.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/kernels.hpp"
#include "runtime/backend/dtype.hpp"
#include "runtime/error.hpp"

namespace {

using namespace troupe;

class Bench {
 public:
  explicit Bench(int iters) : backend_(make_cuda_backend(0)), iters_(iters) {
    cuda_ = cuda_backend_of(*backend_);
    std::mt19937_64 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    pattern_.resize(size_t(1) << 20);
    for (float& x : pattern_) x = dist(rng);
    cudaEventCreate(&start_);
    cudaEventCreate(&stop_);
  }
  ~Bench() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }

  Backend& b() { return *backend_; }

  /// A tensor of `dt` filled with a tiled random pattern scaled by `scale`.
  Tensor floats(DType dt, std::initializer_list<int64_t> dims, float scale = 1.0f) {
    Tensor t = alloc(dt, dims);
    std::vector<float> host(size_t(t.numel()));
    for (size_t i = 0; i < host.size(); ++i) host[i] = pattern_[i % pattern_.size()] * scale;
    std::vector<uint8_t> bytes(t.nbytes());
    convert_floats(host.data(), DType::f32, bytes.data(), dt, host.size());
    backend_->upload(t, bytes.data(), bytes.size());
    return t;
  }
  Tensor ints(std::initializer_list<int64_t> dims, const std::vector<int32_t>& host) {
    Tensor t = alloc(DType::i32, dims);
    backend_->upload(t, host.data(), t.nbytes());
    return t;
  }
  Tensor alloc(DType dt, std::initializer_list<int64_t> dims) {
    Tensor shape(nullptr, dt, backend_->device(), dims);
    buffers_.push_back(backend_->allocate(shape.nbytes()));
    return buffers_.back().tensor(dt, dims);
  }
  void release() {
    backend_->synchronize();
    buffers_.clear();
  }

  /// GPU time around host-synchronised calls: record_start(), the call, elapsed_since_start().
  void record_start() { cudaEventRecord(start_, static_cast<cudaStream_t>(cuda_->stream())); }
  double elapsed_since_start() {
    cudaEventRecord(stop_, static_cast<cudaStream_t>(cuda_->stream()));
    cudaEventSynchronize(stop_);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start_, stop_);
    return double(ms) / 1e3;
  }

  /// Times `op`; prints one line.
  void time(const std::string& name, double bytes, double flops, const std::function<void()>& op) {
    for (int i = 0; i < 3; ++i) op();
    backend_->synchronize();
    auto* stream = static_cast<cudaStream_t>(cuda_->stream());
    cudaEventRecord(start_, stream);
    for (int i = 0; i < iters_; ++i) op();
    cudaEventRecord(stop_, stream);
    backend_->synchronize();
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start_, stop_);
    const double sec = double(ms) / 1e3 / iters_;
    std::printf("%-58s %10.1f us %9.1f GB/s %9.2f TFLOP/s\n", name.c_str(), sec * 1e6,
                bytes / sec / 1e9, flops / sec / 1e12);
    std::fflush(stdout);
  }

 private:
  std::unique_ptr<Backend> backend_;
  CudaBackend* cuda_ = nullptr;
  int iters_;
  std::vector<float> pattern_;
  std::vector<Buffer> buffers_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

constexpr int64_t kHidden = 4096, kInter = 14336, kHeads = 32, kKvHeads = 8, kDim = 128,
                  kVocab = 128256;
constexpr double kBf = 2.0;  // bytes per bf16

void bench_dense(Bench& bench) {
  const DType bf = DType::bf16;
  struct Lin {
    int64_t k, n;
    const char* what;
  };
  for (const Lin& l : {Lin{kHidden, kHidden, "o_proj"}, Lin{kHidden, kInter, "up"},
                       Lin{kInter, kHidden, "down"}, Lin{kHidden, 6144, "qkv"}}) {
    const Tensor w = bench.floats(bf, {l.n, l.k}, 0.02f);
    for (int64_t t : {1, 2, 16, 256, 512, 4096}) {
      const Tensor x = bench.floats(bf, {t, l.k});
      const Tensor out = bench.alloc(bf, {t, l.n});
      bench.time("linear " + std::string(l.what) + " " + std::to_string(l.k) + "x" +
                     std::to_string(l.n) + " T=" + std::to_string(t),
                 kBf * double(t * l.k + l.n * l.k + t * l.n), 2.0 * double(t * l.n * l.k),
                 [&] { bench.b().linear(x, w, nullptr, out); });
    }
    bench.release();
  }
  {
    const Tensor w = bench.floats(bf, {kVocab, kHidden}, 0.02f);
    for (int64_t t : {1, 64, 256}) {
      const Tensor x = bench.floats(bf, {t, kHidden});
      const Tensor out = bench.alloc(DType::f32, {t, kVocab});
      bench.time("linear lm_head 4096x128256 -> f32 T=" + std::to_string(t),
                 kBf * double(t * kHidden + kVocab * kHidden) + 4.0 * double(t * kVocab),
                 2.0 * double(t * kVocab * kHidden), [&] { bench.b().linear(x, w, nullptr, out); });
    }
    bench.release();
  }
  for (int64_t t : {1, 256, 4096}) {
    const Tensor x = bench.floats(bf, {t, kHidden}), r = bench.floats(bf, {t, kHidden});
    const Tensor w = bench.floats(bf, {kHidden}), out = bench.alloc(bf, {t, kHidden});
    const std::string ts = " T=" + std::to_string(t);
    bench.time("rms_norm H=4096" + ts, kBf * double(2 * t * kHidden + kHidden), 0,
               [&] { bench.b().rms_norm(x, w, 1e-5f, out); });
    bench.time("add_rms_norm H=4096" + ts, kBf * double(4 * t * kHidden + kHidden), 0,
               [&] { bench.b().add_rms_norm(r, x, w, 1e-5f, out); });
    const Tensor gu = bench.floats(bf, {t, 2 * kInter}), act = bench.alloc(bf, {t, kInter});
    bench.time("silu_mul I=14336" + ts, kBf * double(3 * t * kInter), 0,
               [&] { bench.b().silu_mul(gu, act); });
    const Tensor q = bench.floats(bf, {t, kHeads * kDim}),
                 k = bench.floats(bf, {t, kKvHeads * kDim});
    const Tensor cs = bench.floats(DType::f32, {8192, kDim});
    std::vector<int32_t> pos(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) pos[size_t(i)] = int32_t(i % 8192);
    const Tensor positions = bench.ints({t}, pos);
    bench.time("rope 32/8 heads d=128" + ts, kBf * 2.0 * double(t * (kHeads + kKvHeads) * kDim), 0,
               [&] { bench.b().rope(q, k, positions, cs, kDim, kDim, RopeStyle::neox); });
    // 32000 rows: the time depends on the rows read, not on the table's size.
    const int64_t table_rows = 32000;
    const Tensor table = bench.floats(bf, {table_rows, kHidden});
    std::vector<int32_t> id(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) id[size_t(i)] = int32_t((i * 7919) % table_rows);
    const Tensor ids = bench.ints({t}, id);
    bench.time("embedding H=4096" + ts, kBf * 2.0 * double(t * kHidden), 0,
               [&] { bench.b().embedding(ids, table, out); });
    const int64_t blocks = (t + 15) / 16 + 1;
    const Tensor kc = bench.alloc(bf, {blocks, 16, kKvHeads, kDim});
    const Tensor vc = bench.alloc(bf, {blocks, 16, kKvHeads, kDim});
    std::vector<int32_t> slot(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) slot[size_t(i)] = int32_t(i);
    const Tensor slots = bench.ints({t}, slot);
    bench.time("write_kv 8 heads d=128" + ts, kBf * 4.0 * double(t * kKvHeads * kDim), 0,
               [&] { bench.b().write_kv(k, k, kc, vc, slots); });
    // The fused op that replaces rope + write_kv in the model: reads q|k|v once, writes q and
    // the two cache rows.
    const Tensor qkv = bench.floats(bf, {t, (kHeads + 2 * kKvHeads) * kDim});
    const Tensor q_out = bench.alloc(bf, {t, kHeads * kDim});
    bench.time("rope_qkv_to_cache 32/8 heads d=128" + ts,
               kBf * 2.0 * double(t * (kHeads + 2 * kKvHeads) * kDim), 0, [&] {
                 bench.b().rope_qkv_to_cache(qkv, positions, cs, kDim, kDim, RopeStyle::neox,
                                             kHeads, kKvHeads, kc, vc, slots, q_out);
               });
    bench.release();
  }
}

// The model's GEMMs at the 1000 x 1000 run's row counts (decode batches of 232-256 rows,
// prompt steps of ~7,800-8,192) through cuBLASLt. With many iterations (e.g. 400: ~1 s per
// prompt-sized line) the rates are sustained ones, which the GPU's power limit lowers.
void bench_gemm(Bench& bench) {
  const DType bf = DType::bf16;
  struct Lin {
    int64_t k, n;
    const char* what;
    DType out;
  };
  for (const Lin& l : {Lin{kHidden, 6144, "qkv", bf}, Lin{kHidden, kHidden, "o_proj", bf},
                       Lin{kHidden, 2 * kInter, "gate_up", bf}, Lin{kInter, kHidden, "down", bf},
                       Lin{kHidden, kVocab, "lm_head", DType::f32}}) {
    const Tensor w = bench.floats(bf, {l.n, l.k}, 0.02f);
    for (int64_t t : {232, 248, 256, 7778, 8192}) {
      if (l.out == DType::f32 && t > 256) continue;  // prompt steps sample a few rows only
      const Tensor x = bench.floats(bf, {t, l.k});
      const Tensor out = bench.alloc(l.out, {t, l.n});
      bench.time("gemm " + std::string(l.what) + " T=" + std::to_string(t),
                 kBf * double(t * l.k + l.n * l.k) + double(dtype_size(l.out) * t * l.n),
                 2.0 * double(t * l.n * l.k), [&] { bench.b().linear(x, w, nullptr, out); });
    }
    bench.release();
  }
}

// The fused ops of a decode layer (gemv.cu) next to the op sequences they replace, Llama-3-8B
// shapes: qkv with its input norm, o_proj and down adding into the residual, gate_up with its
// norm and the act_mul after it. Bytes are those of the sequence's GEMV (the weights dominate).
void bench_fused(Bench& bench, int64_t max_t = 8) {
  const DType bf = DType::bf16;
  const int64_t qkv_n = (kHeads + 2 * kKvHeads) * kDim;
  const Tensor norm_w = bench.floats(bf, {kHidden});
  const Tensor qkv_w = bench.floats(bf, {qkv_n, kHidden}, 0.02f);
  const Tensor o_w = bench.floats(bf, {kHidden, kHeads * kDim}, 0.02f);
  const Tensor gu_w = bench.floats(bf, {2 * kInter, kHidden}, 0.02f);
  const Tensor down_w = bench.floats(bf, {kHidden, kInter}, 0.02f);
  for (int64_t t : {1, 2, 4, 8}) {
    if (t > max_t) break;
    const std::string ts = " T=" + std::to_string(t);
    const Tensor residual = bench.floats(bf, {t, kHidden}), x = bench.alloc(bf, {t, kHidden});
    const Tensor h = bench.alloc(bf, {t, kHidden}), qkv = bench.alloc(bf, {t, qkv_n});
    const Tensor attn = bench.floats(bf, {t, kHeads * kDim});
    const Tensor gate_up = bench.alloc(bf, {t, 2 * kInter}), act = bench.floats(bf, {t, kInter});
    const auto gemv_bytes = [&](int64_t k, int64_t n) { return kBf * double(n * k + t * (k + n)); };
    const double qkv_b = gemv_bytes(kHidden, qkv_n), o_b = gemv_bytes(kHidden, kHidden);
    const double gu_b = gemv_bytes(kHidden, 2 * kInter), down_b = gemv_bytes(kInter, kHidden);
    bench.time("rms_norm + linear qkv 4096x6144" + ts, qkv_b, 0, [&] {
      bench.b().rms_norm(residual, norm_w, 1e-5f, h);
      bench.b().linear(h, qkv_w, nullptr, qkv);
    });
    bench.time("rms_norm_linear qkv 4096x6144 (fused)" + ts, qkv_b, 0,
               [&] { bench.b().rms_norm_linear(residual, norm_w, 1e-5f, h, qkv_w, nullptr, qkv); });
    // The rope inputs and KV cache of the qkv lines with rope and of the whole-layer line.
    const Tensor cs = bench.floats(DType::f32, {4096, kDim});
    std::vector<int32_t> pos(static_cast<size_t>(t)), slot(static_cast<size_t>(t));
    for (int64_t i = 0; i < t; ++i) pos[size_t(i)] = slot[size_t(i)] = int32_t(100 + i);
    const Tensor positions = bench.ints({t}, pos), slots = bench.ints({t}, slot);
    const Tensor kc = bench.alloc(bf, {64, 16, kKvHeads, kDim});
    const Tensor vc = bench.alloc(bf, {64, 16, kKvHeads, kDim});
    {
      // The batch-1 layer's first two kernels, and the one that replaces them at T = 1.
      const Tensor q = bench.alloc(bf, {t, kHeads * kDim});
      bench.time("rms_norm_linear + rope_qkv_to_cache qkv" + ts, qkv_b, 0, [&] {
        bench.b().rms_norm_linear(residual, norm_w, 1e-5f, h, qkv_w, nullptr, qkv);
        bench.b().rope_qkv_to_cache(qkv, positions, cs, kDim, kDim, RopeStyle::neox, kHeads,
                                    kKvHeads, kc, vc, slots, q);
      });
      bench.time("rms_norm_linear_rope_qkv_to_cache qkv (fused)" + ts, qkv_b, 0, [&] {
        bench.b().rms_norm_linear_rope_qkv_to_cache(residual, norm_w, 1e-5f, h, qkv_w, nullptr,
                                                    qkv, positions, cs, kDim, kDim,
                                                    RopeStyle::neox, kHeads, kKvHeads, kc, vc,
                                                    slots, q);
      });
    }
    bench.time("linear + add o_proj 4096x4096" + ts, o_b, 0, [&] {
      bench.b().linear(attn, o_w, nullptr, x);
      bench.b().add(residual, x);
    });
    bench.time("linear_add o_proj 4096x4096 (fused)" + ts, o_b, 0,
               [&] { bench.b().linear_add(attn, o_w, nullptr, residual, x); });
    bench.time("rms_norm + linear + silu_mul gate_up 4096x28672" + ts, gu_b, 0, [&] {
      bench.b().rms_norm(residual, norm_w, 1e-5f, h);
      bench.b().linear(h, gu_w, nullptr, gate_up);
      bench.b().silu_mul(gate_up, act);
    });
    bench.time("rms_norm_linear_act_mul gate_up 4096x28672 (fused)" + ts, gu_b, 0, [&] {
      bench.b().rms_norm_linear_act_mul(residual, norm_w, 1e-5f, h, gu_w, nullptr,
                                        GatedActivation::silu, gate_up, act);
    });
    bench.time("linear + add down 14336x4096" + ts, down_b, 0, [&] {
      bench.b().linear(act, down_w, nullptr, x);
      bench.b().add(residual, x);
    });
    bench.time("linear_add down 14336x4096 (fused)" + ts, down_b, 0,
               [&] { bench.b().linear_add(act, down_w, nullptr, residual, x); });
    if (t == 1) {
      // A decode layer's four GEMVs back to back (attention left out), as the step runs
      // them: each launch overlaps its predecessor's tail (programmatic dependent launch).
      bench.time("decode layer's 4 GEMVs back to back (fused)" + ts, qkv_b + o_b + gu_b + down_b,
                 0, [&] {
                   bench.b().rms_norm_linear_rope_qkv_to_cache(
                       residual, norm_w, 1e-5f, h, qkv_w, nullptr, qkv, positions, cs, kDim, kDim,
                       RopeStyle::neox, kHeads, kKvHeads, kc, vc, slots, attn);
                   bench.b().linear_add(attn, o_w, nullptr, residual, x);
                   bench.b().rms_norm_linear_act_mul(residual, norm_w, 1e-5f, h, gu_w, nullptr,
                                                     GatedActivation::silu, gate_up, act);
                   bench.b().linear_add(act, down_w, nullptr, residual, x);
                 });
    }
  }
  bench.release();
}

// `seqs` sequences of (query length, context) with Llama-3 heads, block size 16.
// One attention launch over sequences of (new query rows, keys in the cache after the step),
// with AttentionBatch::num_prefill_seqs = hint.
void bench_attention_batch(Bench& bench, const std::string& name,
                           const std::vector<std::pair<int32_t, int32_t>>& seqs,
                           int32_t hint = -1) {
  const DType bf = DType::bf16;
  const int32_t bs = 16;
  const auto num_seqs = int32_t(seqs.size());
  int32_t max_q = 0, max_ctx = 0;
  for (const auto& [q_len, ctx] : seqs) {
    max_q = std::max(max_q, q_len);
    max_ctx = std::max(max_ctx, ctx);
  }
  const int32_t blocks_per_seq = (max_ctx + bs - 1) / bs;
  std::vector<int32_t> qsl{0}, lens, tables;
  double pairs = 0, kv_rows = 0;  // causal (query, key) pairs; cached rows read
  for (int32_t s = 0; s < num_seqs; ++s) {
    const auto [q_len, ctx] = seqs[size_t(s)];
    qsl.push_back(qsl.back() + q_len);
    lens.push_back(ctx);
    for (int32_t b = 0; b < blocks_per_seq; ++b) tables.push_back(s * blocks_per_seq + b);
    // Each query row i (of q_len) sees ctx - q_len + i + 1 keys.
    for (int32_t i = 0; i < q_len; ++i) pairs += double(ctx - q_len + i + 1);
    kv_rows += ctx;
  }
  const int64_t tokens = qsl.back();
  const Tensor q = bench.floats(bf, {tokens, kHeads * kDim});
  const Tensor out = bench.alloc(bf, {tokens, kHeads * kDim});
  const int64_t blocks = int64_t(num_seqs) * blocks_per_seq;
  const Tensor kc = bench.floats(bf, {blocks, bs, kKvHeads, kDim});
  const Tensor vc = bench.floats(bf, {blocks, bs, kKvHeads, kDim});
  AttentionBatch batch;
  batch.query_start_loc = bench.ints({num_seqs + 1}, qsl);
  batch.seq_lens = bench.ints({num_seqs}, lens);
  batch.block_tables = bench.ints({num_seqs, blocks_per_seq}, tables);
  batch.num_seqs = num_seqs;
  batch.max_query_len = max_q;
  batch.max_seq_len = max_ctx;
  batch.num_prefill_seqs = hint;
  const AttentionShape shape{int32_t(kHeads), int32_t(kKvHeads), int32_t(kDim), bs,
                             1.0f / std::sqrt(float(kDim))};
  const double flops = 4.0 * pairs * kHeads * kDim;
  const double bytes = kBf * (2.0 * kv_rows * kKvHeads * kDim + 2.0 * double(tokens) * kHeads * kDim);
  bench.time(name, bytes, flops, [&] { bench.b().attention(q, kc, vc, batch, shape, out); });
  bench.release();
}

void bench_attention(Bench& bench, const std::string& name, int32_t num_seqs, int32_t q_len,
                     int32_t ctx) {
  bench_attention_batch(bench, name, std::vector<std::pair<int32_t, int32_t>>(
                                         size_t(num_seqs), std::pair{q_len, ctx}));
}

// A prompt step of the 1000 x 1000 run: eight 1,000-token prompts and `decodes` sequences
// decoding at 1,000 keys, with the prompts first and the hint set or not.
void bench_prompt_step(Bench& bench, int32_t decodes, bool hint, const char* tail = "") {
  std::vector<std::pair<int32_t, int32_t>> seqs(8, std::pair{1000, 1000});
  seqs.resize(size_t(8 + decodes), std::pair{1, 1000});
  bench_attention_batch(bench,
                        fmt::format("attention prompt step: 8 x 1000 prompts + {} decodes, {}{}",
                                    decodes, hint ? "num_prefill_seqs = 8" : "no hint", tail),
                        seqs, hint ? 8 : -1);
}

// Sampler row kinds: each line of the bench uses one kind for every row.
enum class SampleKind { greedy, plain, unit, top_k_top_p, penalties };

const char* sample_kind_name(SampleKind k) {
  switch (k) {
    case SampleKind::greedy:
      return "greedy";
    case SampleKind::plain:
      return "plain T=0.8";
    case SampleKind::unit:
      return "plain T=1 (troupe bench's)";
    case SampleKind::top_k_top_p:
      return "T=0.8 top_k=50 top_p=0.95";
    case SampleKind::penalties:
      return "T=0.8 top_p=0.9 penalties+logprobs=5";
  }
  return "?";
}

// Host time per sample() call (what a decode step pays: upload, kernels, download, sync) and
// the GPU time between two events around it on the backend's stream.
void bench_sample(Bench& bench, int32_t rows, SampleKind kind) {
  const Tensor logits = bench.floats(DType::f32, {rows, kVocab}, 8.0f);
  std::vector<SamplingRow> params(static_cast<size_t>(rows));
  std::vector<int32_t> history(64);
  for (size_t i = 0; i < history.size(); ++i) history[i] = int32_t((i * 7919) % kVocab);
  for (int32_t r = 0; r < rows; ++r) {
    SamplingRow& p = params[size_t(r)];
    p.seed = uint64_t(r);
    switch (kind) {
      case SampleKind::greedy:
        p.temperature = 0.0f;
        break;
      case SampleKind::plain:
        p.temperature = 0.8f;
        break;
      case SampleKind::unit:
        p.temperature = 1.0f;
        break;
      case SampleKind::top_k_top_p:
        p.temperature = 0.8f;
        p.top_p = 0.95f;
        p.top_k = 50;
        p.num_logprobs = r % 4 == 0 ? 5 : -1;
        break;
      case SampleKind::penalties:
        p.temperature = 0.8f;
        p.top_p = 0.9f;
        p.repetition_penalty = 1.1f;
        p.frequency_penalty = 0.2f;
        p.output_ids = history;
        p.num_logprobs = 5;
        break;
    }
  }
  for (int i = 0; i < 3; ++i) (void)bench.b().sample(logits, params);
  const int iters = 20;
  double host = 0.0, gpu = 0.0;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    bench.record_start();
    (void)bench.b().sample(logits, params);
    gpu += bench.elapsed_since_start();
    host += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  host /= iters;
  gpu /= iters;
  cuda::SamplePlan plan{};
  const bool planned = cuda::plan_sample(kVocab, rows, &plan) == cudaSuccess;
  std::printf(
      "%-58s %10.1f us %9.1f GB/s  gpu %7.1f us  cluster %d%s\n",
      ("sample V=128256 " + std::string(sample_kind_name(kind)) + " rows=" + std::to_string(rows))
          .c_str(),
      host * 1e6, 4.0 * double(rows) * kVocab / host / 1e9, gpu * 1e6, planned ? plan.cluster : 0,
      planned && plan.cached == 0 ? " uncached" : "");
  std::fflush(stdout);
  bench.release();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (cuda_device_count() == 0) {
      std::printf("troupe_cuda_opbench: no CUDA device\n");
      return 0;
    }
    const int iters = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
    // A second argument picks one group: "dense" (dense and fused ops only), "decode" (the
    // default decode-attention cases only, e.g. under Nsight Compute: tools/device/profile.sh
    // ncu decode), "prefill" (the prefill-attention cases), "sample" (the
    // sampler at 256 rows: T = 1, T = 0.8, greedy), "gemm" (the model's GEMMs at the long
    // run's row counts), "gemv" (the batch-1 GEMVs, attention and sampler row) or
    // "b1attn" (batch-1 decode attention from 160 to 4,096 keys) or "stream"
    // (HBM read rates: the ceiling for decode attention; cuda/bench/stream.cu).
    const std::string only = argc > 2 ? std::string(argv[2]) : std::string();
    if (!only.empty() && only != "dense" && only != "decode" && only != "prefill" &&
        only != "sample" && only != "gemm" && only != "gemv" && only != "b1attn" &&
        only != "stream") {
      std::fprintf(stderr,
                   "troupe_cuda_opbench: group = %s: allowed: dense, decode, prefill, sample, "
                   "gemm, gemv, b1attn, stream\n",
                   only.c_str());
      return 2;
    }
    if (only == "gemv") {  // the batch-1 GEMVs: a decode layer's fused ones and lm_head
      Bench bench(iters);
      bench_fused(bench, 1);
      {
        const Tensor w = bench.floats(DType::bf16, {kVocab, kHidden}, 0.02f);
        const Tensor x = bench.floats(DType::bf16, {1, kHidden});
        const Tensor out = bench.alloc(DType::f32, {1, kVocab});
        bench.time("linear lm_head 4096x128256 -> f32 T=1",
                   kBf * double(kHidden + kVocab * kHidden) + 4.0 * double(kVocab), 0,
                   [&] { bench.b().linear(x, w, nullptr, out); });
        bench.release();
      }
      // The rest of a batch-1 step of `troupe bench latency` (128 in / 128 out: contexts of
      // 129-256 keys): attention, the sampler's row (temperature 1), so that 32 x (the layer's
      // GEMVs + attention) + lm_head + sampling is the step's GPU time to compare with it.
      bench_attention(bench, "attention decode 1 seq x 192 ctx (batch-1 step)", 1, 1, 192);
      bench_sample(bench, 1, SampleKind::unit);
      return 0;
    }
    if (only == "stream") {
      cuda_bench::bench_stream(iters);
      return 0;
    }
    if (only == "gemm") {
      Bench bench(iters);
      bench_gemm(bench);
      return 0;
    }
    if (only == "sample") {  // 256 rows, the decode batches of the throughput runs
      Bench bench(iters);
      for (SampleKind kind : {SampleKind::unit, SampleKind::plain, SampleKind::greedy})
        bench_sample(bench, 256, kind);
      return 0;
    }
    Bench bench(iters);
    std::printf("troupe_cuda_opbench on %s, %d iterations per op, bf16\n", bench.b().name().c_str(),
                iters);
    if (only == "b1attn") {  // batch-1 decode attention (splits of at least 256 keys)
      for (int32_t ctx : {160, 256, 512, 1024, 4096})
        bench_attention(bench, "attention decode 1 seq x " + std::to_string(ctx) + " ctx", 1, 1,
                        ctx);
      return 0;
    }
    if (only == "decode") {
      bench_attention(bench, "attention decode 1 seq x 160 ctx (batch-1 step)", 1, 1, 160);
      bench_attention(bench, "attention decode 256 seqs x 1024 ctx", 256, 1, 1024);
      bench_attention(bench, "attention decode 232 seqs x 1536 ctx", 232, 1, 1536);
      bench_attention(bench, "attention decode 4 seqs x 32768 ctx (split KV)", 4, 1, 32768);
      // The 1000 x 1000 run's decode steps hold contexts from 1,000 to 2,000 keys in one batch:
      // in a shuffled order (as the scheduler's), longest first and shortest first, to see
      // what the last wave's uneven CTAs cost against the uniform 232 x 1536 line above.
      std::vector<std::pair<int32_t, int32_t>> spread;
      for (int32_t s = 0; s < 256; ++s) spread.emplace_back(1, 1000 + (s * 1000) / 255);
      std::shuffle(spread.begin(), spread.end(), std::mt19937_64(7));
      bench_attention_batch(bench, "attention decode 256 seqs x 1000-2000 ctx, shuffled", spread);
      std::sort(spread.begin(), spread.end(),
                [](const auto& a, const auto& b) { return a.second > b.second; });
      bench_attention_batch(bench, "attention decode 256 seqs x 1000-2000 ctx, longest first",
                            spread);
      std::reverse(spread.begin(), spread.end());
      bench_attention_batch(bench, "attention decode 256 seqs x 1000-2000 ctx, shortest first",
                            spread);
      return 0;
    }
    if (only != "prefill") {
      bench_dense(bench);
      bench_fused(bench);
    }
    if (only == "dense") return 0;
    bench_attention(bench, "attention decode 64 seqs x 1024 ctx, 32/8 heads d=128", 64, 1, 1024);
    bench_attention(bench, "attention decode 256 seqs x 1024 ctx", 256, 1, 1024);
    bench_attention(bench, "attention decode 4 seqs x 32768 ctx (split KV)", 4, 1, 32768);
    bench_attention(bench, "attention prefill 4 x 1024 (causal)", 4, 1024, 1024);
    bench_attention(bench, "attention prefill 1 x 8192 (causal)", 1, 8192, 8192);
    bench_attention(bench, "attention chunked prefill 8 x 512 new over 4096 ctx", 8, 512, 4096);
    bench_attention(bench, "attention prefill 8 x 1000 (causal; a 1000 x 1000 prompt step)", 8,
                    1000, 1000);
    for (int32_t decodes : {0, 128})
      for (bool hint : {false, true}) bench_prompt_step(bench, decodes, hint);
    if (only == "prefill") return 0;
    bench_attention(bench, "attention decode 232 seqs x 1536 ctx (1000x1000 steady state)", 232, 1,
                    1536);
    bench_attention(bench, "attention decode 1 seq x 160 ctx (batch-1 step)", 1, 1, 160);
    for (SampleKind kind : {SampleKind::greedy, SampleKind::plain, SampleKind::unit,
                            SampleKind::top_k_top_p, SampleKind::penalties})
      for (int32_t rows : {1, 64, 256}) bench_sample(bench, rows, kind);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe_cuda_opbench: %s\n", e.what());
    return 1;
  }
  return 0;
}
