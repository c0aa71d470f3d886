// troupe_cpu_opbench: the CPU backend's op perf mode. Not a test (speed is never asserted).
//
//   troupe_cpu_opbench [num_threads]      (0 or absent: all cores)
//
// Prints GFLOP/s of linear (2*T*K*N flops per call) and, for attention, GB/s (the K and V
// bytes each call must read at least once: what bounds decode) and GFLOP/s (what bounds
// prefill) for a few model-like sizes.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <random>
#include <vector>

#include "cpu/cpu_backend.hpp"

namespace {

using namespace troupe;
using Clock = std::chrono::steady_clock;

// Seconds per call: repeats `fn` until ~0.5 s have passed (at least 3 calls, one warm-up).
template <class Fn>
double time_per_call(Fn&& fn) {
  fn();
  int calls = 0;
  const auto start = Clock::now();
  double elapsed = 0.0;
  while (calls < 3 || elapsed < 0.5) {
    fn();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return elapsed / calls;
}

Tensor random_tensor(Backend& be, std::vector<Buffer>& keep, std::initializer_list<int64_t> dims,
                     std::mt19937& rng) {
  keep.push_back(be.allocate(Tensor(nullptr, DType::f32, Device{}, dims).nbytes()));
  Tensor t = keep.back().tensor(DType::f32, dims);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> host(size_t(t.numel()));
  for (float& x : host) x = dist(rng);
  be.upload(t, host.data(), t.nbytes());
  return t;
}

Tensor int_tensor(Backend& be, std::vector<Buffer>& keep, const std::vector<int32_t>& host) {
  keep.push_back(be.allocate(host.size() * sizeof(int32_t)));
  Tensor t = keep.back().tensor(DType::i32, {int64_t(host.size())});
  be.upload(t, host.data(), t.nbytes());
  return t;
}

void bench_linear(Backend& be, int64_t t, int64_t k, int64_t n) {
  std::mt19937 rng(1);
  std::vector<Buffer> keep;
  const Tensor x = random_tensor(be, keep, {t, k}, rng);
  const Tensor w = random_tensor(be, keep, {n, k}, rng);
  const Tensor out = random_tensor(be, keep, {t, n}, rng);
  const double s = time_per_call([&] { be.linear(x, w, nullptr, out); });
  fmt::print("linear     T={:<5} K={:<5} N={:<6} {:9.3f} ms  {:8.1f} GFLOP/s\n", t, k, n, s * 1e3,
             2.0 * double(t * k * n) / s * 1e-9);
}

// S sequences of `context` cached tokens, each adding `q_len` tokens.
void bench_attention(Backend& be, int32_t seqs, int32_t context, int32_t q_len, int32_t heads,
                     int32_t kv_heads, int32_t d, int32_t bs) {
  std::mt19937 rng(2);
  std::vector<Buffer> keep;
  const int32_t len = context + q_len;
  const int32_t per_seq = (len + bs - 1) / bs;
  const int32_t blocks = seqs * per_seq;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int32_t> qsl(size_t(seqs) + 1), lens(size_t(seqs), len);
  for (int32_t s = 0; s <= seqs; ++s) qsl[size_t(s)] = s * q_len;
  AttentionBatch batch;
  batch.query_start_loc = int_tensor(be, keep, qsl);
  batch.seq_lens = int_tensor(be, keep, lens);
  batch.block_tables = int_tensor(be, keep, table).view({seqs, per_seq});
  batch.num_seqs = seqs;
  batch.max_query_len = q_len;
  batch.max_seq_len = len;
  const AttentionShape shape{heads, kv_heads, d, bs, 1.0f / std::sqrt(float(d))};
  const Tensor kc = random_tensor(be, keep, {blocks, bs, kv_heads, d}, rng);
  const Tensor vc = random_tensor(be, keep, {blocks, bs, kv_heads, d}, rng);
  const Tensor q = random_tensor(be, keep, {int64_t(seqs) * q_len, int64_t(heads) * d}, rng);
  const Tensor out = random_tensor(be, keep, {int64_t(seqs) * q_len, int64_t(heads) * d}, rng);
  const double s = time_per_call([&] { be.attention(q, kc, vc, batch, shape, out); });
  const double kv_bytes = 2.0 * double(seqs) * len * kv_heads * d * sizeof(float);
  double keys = 0.0;  // (query row, visible key) pairs
  for (int32_t r = 0; r < q_len; ++r) keys += double(context + r + 1) * seqs;
  const double flops = 4.0 * keys * heads * d;  // q.k and w*v, a multiply and an add each
  fmt::print(
      "attention  S={:<3} ctx={:<5} q={:<4} heads {}/{} d={} block={}  {:9.3f} ms  "
      "{:7.1f} GB/s  {:6.1f} GFLOP/s\n",
      seqs, context, q_len, heads, kv_heads, d, bs, s * 1e3, kv_bytes / s * 1e-9, flops / s * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
    auto be = make_cpu_backend(threads);
    fmt::print("troupe CPU op bench, {} thread(s) (0 = all cores)\n", threads);
    bench_linear(*be, 1, 4096, 4096);
    bench_linear(*be, 16, 4096, 4096);
    bench_linear(*be, 128, 4096, 11008);
    bench_linear(*be, 512, 2048, 2048);
    bench_attention(*be, 16, 1023, 1, 32, 8, 128, 16);  // decode
    bench_attention(*be, 64, 255, 1, 32, 32, 128, 16);  // decode, no GQA
    bench_attention(*be, 1, 0, 512, 32, 8, 128, 16);    // prefill
    bench_attention(*be, 4, 512, 64, 14, 2, 64, 32);    // chunked prefill
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "troupe_cpu_opbench: {}\n", e.what());
    return 1;
  }
}
