// CUDA paged attention against the CPU reference: every supported head dim and block size,
// every compute dtype, GQA/MHA/MQA, batches that mix prefills, chunked prefills and decodes,
// long decodes (split-KV with a reduction), shuffled block tables, padding rows past the last
// sequence (which both backends zero).
#include <algorithm>
#include <numeric>

#include "cuda/kernels.hpp"
#include "tests/cuda/cuda_harness.hpp"

namespace troupe::test {
namespace {

struct SeqSpec {
  int32_t q_len;
  int32_t kv_len;
};

struct HostBatch {
  std::vector<int32_t> qsl, seq_lens, tables;
  int32_t num_seqs = 0, max_query_len = 0, max_seq_len = 0, max_blocks = 0, num_blocks = 0;
  int64_t tokens = 0;  // rows of q, padding included
};

// Physical blocks are a shuffled permutation with spares; unused table entries are -1, so a
// kernel that reads past a sequence's blocks fails loudly.
HostBatch make_batch(const std::vector<SeqSpec>& seqs, int block_size, int padding_rows,
                     std::mt19937_64& rng) {
  HostBatch b;
  b.num_seqs = int32_t(seqs.size());
  b.qsl.push_back(0);
  int32_t total_blocks = 0;
  for (const SeqSpec& s : seqs) {
    b.qsl.push_back(b.qsl.back() + s.q_len);
    b.seq_lens.push_back(s.kv_len);
    b.max_query_len = std::max(b.max_query_len, s.q_len);
    b.max_seq_len = std::max(b.max_seq_len, s.kv_len);
    const int32_t used = (s.kv_len + block_size - 1) / block_size;
    b.max_blocks = std::max(b.max_blocks, used);
    total_blocks += used;
  }
  b.max_blocks += 1;
  b.num_blocks = total_blocks + 5;
  std::vector<int32_t> phys(size_t(b.num_blocks));
  std::iota(phys.begin(), phys.end(), 0);
  std::shuffle(phys.begin(), phys.end(), rng);
  b.tables.assign(size_t(b.num_seqs) * size_t(b.max_blocks), -1);
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int32_t used = (seqs[s].kv_len + block_size - 1) / block_size;
    for (int32_t j = 0; j < used; ++j)
      b.tables[s * size_t(b.max_blocks) + size_t(j)] = phys[next++];
  }
  b.tokens = b.qsl.back() + padding_rows;
  return b;
}

struct AttnCase {
  int num_heads, num_kv_heads, head_dim, block_size;
  std::vector<SeqSpec> seqs;
  int padding_rows;
  std::string label;
  int32_t num_prefill_seqs = -1;  // AttentionBatch's hint (the CPU checks that it is exact)
};

/// The batch's metadata on the GPU (gpu) or the CPU.
AttentionBatch batch_on(Pair& p, bool gpu, const HostBatch& b) {
  const auto ints = [&](std::initializer_list<int64_t> dims, const std::vector<int32_t>& v) {
    return gpu ? p.gpu_i32(dims, v) : p.cpu_i32(dims, v);
  };
  AttentionBatch ab;
  ab.query_start_loc = ints({b.num_seqs + 1}, b.qsl);
  ab.seq_lens = ints({b.num_seqs}, b.seq_lens);
  ab.block_tables = ints({b.num_seqs, b.max_blocks}, b.tables);
  ab.num_seqs = b.num_seqs;
  ab.max_query_len = b.max_query_len;
  ab.max_seq_len = b.max_seq_len;
  return ab;
}

/// Runs the case on both backends, reports the error and returns the GPU's output.
std::vector<float> run_case(Pair& p, DType dt, const AttnCase& c, std::mt19937_64& rng) {
  const HostBatch b = make_batch(c.seqs, c.block_size, c.padding_rows, rng);
  const int64_t q_row = int64_t(c.num_heads) * c.head_dim;
  const auto q = rounded(random_floats(rng, size_t(b.tokens * q_row), -2.0f, 2.0f), dt);
  const size_t cache_elems =
      size_t(b.num_blocks) * size_t(c.block_size) * size_t(c.num_kv_heads) * size_t(c.head_dim);
  const auto kc = rounded(random_floats(rng, cache_elems), dt);
  const auto vc = rounded(random_floats(rng, cache_elems), dt);
  const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, c.block_size,
                             1.0f / std::sqrt(float(c.head_dim))};
  const std::initializer_list<int64_t> cache_dims = {b.num_blocks, c.block_size, c.num_kv_heads,
                                                     c.head_dim};

  const Tensor gq = p.gpu_floats(dt, {b.tokens, q_row}, q);
  const Tensor gk = p.gpu_floats(dt, cache_dims, kc), gv = p.gpu_floats(dt, cache_dims, vc);
  const Tensor g_out = p.gpu_nan(dt, {b.tokens, q_row});
  AttentionBatch gb = batch_on(p, true, b);
  gb.num_prefill_seqs = c.num_prefill_seqs;
  p.gpu().attention(gq, gk, gv, gb, shape, g_out);

  const Tensor cq = p.cpu_f32({b.tokens, q_row}, q);
  const Tensor ck = p.cpu_f32(cache_dims, kc), cv = p.cpu_f32(cache_dims, vc);
  const Tensor c_out = p.cpu_nan({b.tokens, q_row});
  AttentionBatch cb = batch_on(p, false, b);
  cb.num_prefill_seqs = c.num_prefill_seqs;
  p.cpu().attention(cq, ck, cv, cb, shape, c_out);

  std::vector<float> g = p.read(g_out);
  report(fmt::format("attention {} {} heads {}/{} d={} bs={}", dname(dt), c.label, c.num_heads,
                     c.num_kv_heads, c.head_dim, c.block_size),
         norm_error(g, p.read(c_out)), tolerance(dt));
  return g;
}

// Prefill (two query tiles), chunked prefill, decodes (one with a single key), and padding.
const std::vector<SeqSpec> kMixed = {{37, 37}, {20, 90}, {1, 130}, {1, 1}, {70, 200}, {1, 33}};

TEST_CASE("cuda attention matches the CPU for every head dim and block size", "[cuda][attention]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(11);
  for (DType dt : kFloatTypes)
    for (int d : {16, 32, 64, 80, 96, 128, 256})
      for (int bs : {8, 16, 32}) run_case(p, dt, {8, 2, d, bs, kMixed, 3, "mixed GQA"}, rng);
}

std::vector<AttnCase> shape_cases() {
  std::vector<SeqSpec> many_decodes;
  for (int s = 0; s < 64; ++s) many_decodes.push_back({1, 1 + (s * 37) % 300});
  return {
      {4, 4, 128, 16, kMixed, 0, "mixed MHA"},
      {16, 1, 128, 16, kMixed, 2, "mixed MQA (16 heads per KV head)"},
      {12, 1, 64, 32, kMixed, 0, "mixed MQA (12 heads per KV head)"},
      {28, 4, 128, 16, kMixed, 0, "mixed GQA, 7 heads per KV head (Qwen2.5-7B)"},
      {24, 1, 64, 16, kMixed, 1, "mixed MQA, 24 heads per KV head (two passes of 16)"},
      {8, 2, 128, 16, {{1, 2000}, {1, 3001}}, 0, "long decodes (split KV)"},
      {16, 1, 64, 16, {{1, 5000}}, 0, "one long MQA decode (79 splits: combined by a kernel)"},
      {32, 8, 128, 16, {{1, 1025}}, 1, "one long decode, Llama-3 heads"},
      {8, 2, 64, 16, many_decodes, 0, "64 decodes"},
      {8, 8, 128, 32, {{300, 300}}, 0, "long prefill"},
      {8, 2, 96, 8, {{2, 2}, {3, 500}, {65, 65}, {64, 128}}, 0, "short chunks and tile edges"},
  };
}

TEST_CASE("cuda attention: MHA, MQA, long decodes, big batches, long prefills",
          "[cuda][attention]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(12);
  for (DType dt : kFloatTypes)
    for (const AttnCase& c : shape_cases()) run_case(p, dt, c, rng);
}

// The model runner's order (prompts and chunks first) with AttentionBatch::num_prefill_seqs
// set: the prefill grid spans the first sequences only, the decode kernel the rest.
TEST_CASE("cuda attention: prompts-first batches with the prefill-count hint", "[cuda][attention]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(16);
  const std::vector<SeqSpec> ordered = {{37, 37}, {20, 90}, {70, 200}, {1, 130}, {1, 1}, {1, 33}};
  for (DType dt : kFloatTypes) {
    for (int d : {64, 128, 256})
      run_case(p, dt, {8, 2, d, 16, ordered, 3, "prompts first, hint 3", 3}, rng);
    run_case(p, dt, {32, 8, 128, 16, {{300, 300}}, 0, "one prompt, hint 1", 1}, rng);
    run_case(p, dt, {8, 2, 128, 16, {{1, 50}, {1, 7}}, 0, "decodes only, hint 0", 0}, rng);
  }
  CHECK_THROWS_WITH(run_case(p, DType::bf16, {8, 2, 64, 16, {{1, 50}}, 0, "bad hint", 2}, rng),
                    Catch::Contains("num_prefill_seqs = 2"));
}

TEST_CASE("decode split counts fill one wave of CTAs without spilling into a second",
          "[cuda][attention]") {
  // A host function: runs without a GPU too. 132 SMs (the H200), two CTAs resident per SM.
  const auto plan = [](int32_t seqs, int32_t kv_heads, int32_t max_seq_len) {
    cuda::AttentionArgs a{};
    a.num_seqs = seqs;
    a.num_kv_heads = kv_heads;
    a.num_heads = 4 * kv_heads;
    a.head_dim = 128;
    a.max_seq_len = max_seq_len;
    return cuda::plan_decode(a, 132, cuda::DecodeWorkspace{nullptr, size_t(64) << 20});
  };
  // Below a wave: splits of at least 256 keys (a batch-1 context of up to 256 keys in one).
  CHECK(plan(1, 8, 200).splits == 1);
  CHECK(plan(1, 8, 200).split_keys == 256);
  CHECK(plan(1, 8, 1000).splits == 4);      // bound by the length: 4 splits of >= 256 keys
  CHECK(plan(1, 8, 100000).splits == 33);   // 264 CTAs
  CHECK(plan(1, 8, 4096).splits == 16);     // a CUDA graph's bound at batch 1
  CHECK(plan(4, 8, 32768).splits == 8);     // 256 CTAs, not 9 x 32 = 288 (a second wave of 24)
  CHECK(plan(200, 1, 4096).splits == 1);    // 200 <= 264: one split each, no partials
  CHECK(plan(1, 8, 0).splits == 1);
  // A batch that fills a wave by itself: one split per sequence.
  CHECK(plan(64, 8, 4096).splits == 1);  // 512 CTAs already
  CHECK(plan(300, 1, 2000).splits == 1);
}

TEST_CASE("cuda attention with max_seq_len and max_query_len above the batch's",
          "[cuda][attention]") {
  // What a CUDA-graph capture does: host maxima are upper bounds; kernels read real lengths.
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(13);
  for (DType dt : {DType::bf16, DType::f16}) {
    const HostBatch b = make_batch(kMixed, 16, 0, rng);
    const int d = 128, heads = 8, kv_heads = 2, bs = 16;
    const int64_t q_row = int64_t(heads) * d;
    const auto q = rounded(random_floats(rng, size_t(b.tokens * q_row)), dt);
    const size_t cache_elems = size_t(b.num_blocks) * bs * kv_heads * d;
    const auto kc = rounded(random_floats(rng, cache_elems), dt);
    const auto vc = rounded(random_floats(rng, cache_elems), dt);
    const AttentionShape shape{heads, kv_heads, d, bs, 1.0f / std::sqrt(float(d))};
    // Block tables wide enough for the inflated max_seq_len.
    const int32_t wide = b.max_blocks + 40;
    std::vector<int32_t> tables(size_t(b.num_seqs) * size_t(wide), -1);
    for (int32_t s = 0; s < b.num_seqs; ++s)
      for (int32_t j = 0; j < b.max_blocks; ++j)
        tables[size_t(s * wide + j)] = b.tables[size_t(s * b.max_blocks + j)];

    const Tensor gq = p.gpu_floats(dt, {b.tokens, q_row}, q);
    const Tensor gk = p.gpu_floats(dt, {b.num_blocks, bs, kv_heads, d}, kc);
    const Tensor gv = p.gpu_floats(dt, {b.num_blocks, bs, kv_heads, d}, vc);
    const Tensor g_out = p.gpu_nan(dt, {b.tokens, q_row});
    AttentionBatch gb;
    gb.query_start_loc = p.gpu_i32({b.num_seqs + 1}, b.qsl);
    gb.seq_lens = p.gpu_i32({b.num_seqs}, b.seq_lens);
    gb.block_tables = p.gpu_i32({b.num_seqs, wide}, tables);
    gb.num_seqs = b.num_seqs;
    gb.max_query_len = b.max_query_len + 100;
    gb.max_seq_len = b.max_seq_len + 600;
    p.gpu().attention(gq, gk, gv, gb, shape, g_out);

    const Tensor cq = p.cpu_f32({b.tokens, q_row}, q);
    const Tensor ck = p.cpu_f32({b.num_blocks, bs, kv_heads, d}, kc);
    const Tensor cv = p.cpu_f32({b.num_blocks, bs, kv_heads, d}, vc);
    const Tensor c_out = p.cpu_nan({b.tokens, q_row});
    AttentionBatch cb;
    cb.query_start_loc = p.cpu_i32({b.num_seqs + 1}, b.qsl);
    cb.seq_lens = p.cpu_i32({b.num_seqs}, b.seq_lens);
    cb.block_tables = p.cpu_i32({b.num_seqs, b.max_blocks}, b.tables);
    cb.num_seqs = b.num_seqs;
    cb.max_query_len = b.max_query_len;
    cb.max_seq_len = b.max_seq_len;
    p.cpu().attention(cq, ck, cv, cb, shape, c_out);
    report(fmt::format("attention {} inflated host maxima", dname(dt)),
           norm_error(p.read(g_out), p.read(c_out)), tolerance(dt));
  }
}

TEST_CASE("cuda write_kv then attention equals the CPU doing the same", "[cuda][attention]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(14);
  for (DType dt : kFloatTypes) {
    const int heads = 8, kv_heads = 2, d = 64, bs = 16;
    // Two sequences: one prefill of 21 tokens, one decode at position 40 (its first 40 keys
    // already cached).
    const std::vector<SeqSpec> seqs = {{21, 21}, {1, 41}};
    const HostBatch b = make_batch(seqs, bs, 0, rng);
    const int64_t kv_row = int64_t(kv_heads) * d, q_row = int64_t(heads) * d;
    std::vector<int32_t> slots;
    for (int32_t s = 0; s < b.num_seqs; ++s)
      for (int32_t i = 0; i < seqs[size_t(s)].q_len; ++i) {
        const int32_t pos = seqs[size_t(s)].kv_len - seqs[size_t(s)].q_len + i;
        slots.push_back(b.tables[size_t(s * b.max_blocks + pos / bs)] * bs + pos % bs);
      }
    const size_t cache_elems = size_t(b.num_blocks) * bs * size_t(kv_row);
    const auto cache0 = rounded(random_floats(rng, cache_elems), dt);
    const auto k = rounded(random_floats(rng, size_t(b.tokens * kv_row)), dt);
    const auto v = rounded(random_floats(rng, size_t(b.tokens * kv_row)), dt);
    const auto q = rounded(random_floats(rng, size_t(b.tokens * q_row)), dt);
    const AttentionShape shape{heads, kv_heads, d, bs, 0.125f};
    const std::initializer_list<int64_t> cdims = {b.num_blocks, bs, kv_heads, d};

    const Tensor gkc = p.gpu_floats(dt, cdims, cache0), gvc = p.gpu_floats(dt, cdims, cache0);
    p.gpu().write_kv(p.gpu_floats(dt, {b.tokens, kv_row}, k),
                     p.gpu_floats(dt, {b.tokens, kv_row}, v), gkc, gvc,
                     p.gpu_i32({b.tokens}, slots));
    const AttentionBatch gb = batch_on(p, true, b);
    const Tensor g_out = p.gpu_nan(dt, {b.tokens, q_row});
    p.gpu().attention(p.gpu_floats(dt, {b.tokens, q_row}, q), gkc, gvc, gb, shape, g_out);

    const Tensor ckc = p.cpu_f32(cdims, cache0), cvc = p.cpu_f32(cdims, cache0);
    p.cpu().write_kv(p.cpu_f32({b.tokens, kv_row}, k), p.cpu_f32({b.tokens, kv_row}, v), ckc, cvc,
                     p.cpu_i32({b.tokens}, slots));
    const AttentionBatch cb = batch_on(p, false, b);
    const Tensor c_out = p.cpu_nan({b.tokens, q_row});
    p.cpu().attention(p.cpu_f32({b.tokens, q_row}, q), ckc, cvc, cb, shape, c_out);
    report(fmt::format("write_kv + attention {}", dname(dt)),
           norm_error(p.read(g_out), p.read(c_out)), tolerance(dt));
  }
}

}  // namespace
}  // namespace troupe::test
