// Paged attention against a float64 reference that walks the same block tables, on mixed
// batches: prefill, chunked prefill, decode and idle sequences in one call.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "op_harness.hpp"
#include "runtime/error.hpp"

using namespace troupe;
using troupe::test::max_rel_error;
using troupe::test::OpHarness;
using troupe::test::random_floats;
using troupe::test::report;

namespace {

struct SeqSpec {
  int32_t context;  // tokens already in the cache before this step
  int32_t q_len;    // new tokens this step
};

// A batch laid out on the host, with shuffled physical blocks.
struct HostBatch {
  std::vector<int32_t> qsl, seq_lens, tables;
  int32_t max_blocks = 0, num_blocks = 0, max_q = 0, max_seq = 0, rows = 0;
};

HostBatch make_batch(const std::vector<SeqSpec>& seqs, int32_t block_size, std::mt19937_64& rng) {
  HostBatch b;
  b.qsl.push_back(0);
  int32_t total_blocks = 0;
  for (const auto& s : seqs) {
    const int32_t len = s.context + s.q_len;
    b.seq_lens.push_back(len);
    b.qsl.push_back(b.qsl.back() + s.q_len);
    const int32_t used = (len + block_size - 1) / block_size;
    b.max_blocks = std::max(b.max_blocks, used + 1);  // a spare, unused column
    total_blocks += used;
    b.max_q = std::max(b.max_q, s.q_len);
    b.max_seq = std::max(b.max_seq, len);
  }
  b.rows = b.qsl.back();
  b.num_blocks = total_blocks + 3;  // blocks no sequence owns
  std::vector<int32_t> physical(size_t(b.num_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  b.tables.assign(seqs.size() * size_t(b.max_blocks), -1);  // unused entries must not be read
  size_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int32_t used = (b.seq_lens[s] + block_size - 1) / block_size;
    for (int32_t j = 0; j < used; ++j)
      b.tables[s * size_t(b.max_blocks) + size_t(j)] = physical[next++];
  }
  return b;
}

// out [rows + padding, heads * d] in double; padding rows are zero.
std::vector<double> attention_ref(const std::vector<float>& q, const std::vector<float>& kc,
                                  const std::vector<float>& vc, const HostBatch& b,
                                  const AttentionShape& sh, int64_t total_rows) {
  const int64_t d = sh.head_dim, stride = int64_t(sh.num_heads) * d;
  const int32_t group = sh.num_heads / sh.num_kv_heads;
  std::vector<double> out(size_t(total_rows * stride), 0.0);
  for (size_t s = 0; s + 1 < b.qsl.size(); ++s) {
    const int32_t q_len = b.qsl[s + 1] - b.qsl[s];
    for (int32_t i = 0; i < q_len; ++i) {
      const int64_t row = b.qsl[s] + i;
      const int32_t pos = b.seq_lens[s] - q_len + i;
      for (int32_t h = 0; h < sh.num_heads; ++h) {
        const int32_t kvh = h / group;
        auto cache_at = [&](const std::vector<float>& c, int32_t j) {
          const int64_t block = b.tables[s * size_t(b.max_blocks) + size_t(j / sh.block_size)];
          return &c[size_t(((block * sh.block_size + j % sh.block_size) * sh.num_kv_heads + kvh) *
                           d)];
        };
        std::vector<double> score(size_t(pos + 1));
        for (int32_t j = 0; j <= pos; ++j) {
          const float* k = cache_at(kc, j);
          double dot = 0.0;
          for (int64_t x = 0; x < d; ++x) dot += double(q[size_t(row * stride + h * d + x)]) * k[x];
          score[size_t(j)] = dot * sh.scale;
        }
        const double m = *std::max_element(score.begin(), score.end());
        double z = 0.0;
        for (double& e : score) z += (e = std::exp(e - m));
        for (int32_t j = 0; j <= pos; ++j) {
          const float* v = cache_at(vc, j);
          for (int64_t x = 0; x < d; ++x)
            out[size_t(row * stride + h * d + x)] += score[size_t(j)] / z * v[x];
        }
      }
    }
  }
  return out;
}

struct DeviceBatch {
  AttentionBatch batch;
  Tensor k_cache, v_cache;
};

DeviceBatch upload_batch(OpHarness& h, const HostBatch& b, const AttentionShape& sh,
                         const std::vector<float>& kc, const std::vector<float>& vc) {
  DeviceBatch db;
  const auto s = int64_t(b.seq_lens.size());
  db.batch.query_start_loc = h.i32({s + 1}, b.qsl);
  db.batch.seq_lens = h.i32({s}, b.seq_lens);
  db.batch.block_tables = h.i32({s, b.max_blocks}, b.tables);
  db.batch.num_seqs = int32_t(s);
  db.batch.max_query_len = b.max_q;
  db.batch.max_seq_len = b.max_seq;
  db.k_cache = h.f32({b.num_blocks, sh.block_size, sh.num_kv_heads, sh.head_dim}, kc);
  db.v_cache = h.f32({b.num_blocks, sh.block_size, sh.num_kv_heads, sh.head_dim}, vc);
  return db;
}

}  // namespace

TEST_CASE("attention matches float64 on mixed prefill/decode batches", "[cpu][ops]") {
  OpHarness h(2);
  std::mt19937_64 rng(11);
  for (auto [heads, kv_heads] : {std::pair<int32_t, int32_t>{8, 2}, {4, 4}}) {
    for (int32_t d : {64, 80, 128}) {
      for (int32_t bs : {8, 16, 32}) {
        // prefill, chunked prefill, decode, first token, a block-aligned chunk, an idle seq;
        // then a lone decode row (one task's worth of rows: the kernel splits KV heads).
        const std::vector<std::vector<SeqSpec>> batches{
            {{0, 37}, {20, 13}, {50, 1}, {0, 1}, {2 * bs, bs}, {5, 0}, {bs - 1, 2}},
            {{2 * bs + 3, 1}}};
        for (const auto& seqs : batches) {
          const HostBatch b = make_batch(seqs, bs, rng);
          const AttentionShape sh{heads, kv_heads, d, bs, 1.0f / std::sqrt(float(d))};
          const int64_t rows = b.rows + 2;  // two padding rows
          const int64_t cache_elems = int64_t(b.num_blocks) * bs * kv_heads * d;
          for (float q_scale : {1.0f, 40.0f}) {  // 40: scores far beyond exp's f32 range
            const auto kc = random_floats(rng, size_t(cache_elems));
            const auto vc = random_floats(rng, size_t(cache_elems));
            const auto q_host = random_floats(rng, size_t(rows * heads * d), -q_scale, q_scale);
            DeviceBatch db = upload_batch(h, b, sh, kc, vc);
            const Tensor q = h.f32({rows, heads * d}, q_host);
            const Tensor out = h.f32_nan({rows, heads * d});
            h.backend().attention(q, db.k_cache, db.v_cache, db.batch, sh, out);
            report(fmt::format("attention heads {}/{} d={} block={} seqs {} q scale {}", heads,
                               kv_heads, d, bs, seqs.size(), q_scale),
                   max_rel_error(h.read(out), attention_ref(q_host, kc, vc, b, sh, rows)));
          }
        }
      }
    }
  }
}

TEST_CASE("write_kv then attention equals attention over a directly filled cache", "[cpu][ops]") {
  // The model's order of calls: write this step's K/V, then attend. Two decode steps.
  OpHarness h(2);
  std::mt19937_64 rng(12);
  const AttentionShape sh{4, 2, 64, 16, 0.125f};
  const int64_t row = sh.num_kv_heads * sh.head_dim;
  const HostBatch b = make_batch({{30, 3}, {0, 5}}, sh.block_size, rng);
  const int64_t cache_elems = int64_t(b.num_blocks) * sh.block_size * row;
  auto kc = random_floats(rng, size_t(cache_elems));
  auto vc = random_floats(rng, size_t(cache_elems));
  DeviceBatch db = upload_batch(h, b, sh, kc, vc);
  // New K/V rows go to the last q_len positions of each sequence.
  std::vector<int32_t> slots;
  for (size_t s = 0; s < 2; ++s)
    for (int32_t p = b.seq_lens[s] - (b.qsl[s + 1] - b.qsl[s]); p < b.seq_lens[s]; ++p)
      slots.push_back(b.tables[s * size_t(b.max_blocks) + size_t(p / sh.block_size)] *
                          sh.block_size +
                      p % sh.block_size);
  const auto k_new = random_floats(rng, size_t(b.rows * row));
  const auto v_new = random_floats(rng, size_t(b.rows * row));
  h.backend().write_kv(h.f32({b.rows, row}, k_new), h.f32({b.rows, row}, v_new), db.k_cache,
                       db.v_cache, h.i32({b.rows}, slots));
  for (size_t t = 0; t < slots.size(); ++t)
    for (int64_t j = 0; j < row; ++j) {
      kc[size_t(slots[t] * row + j)] = k_new[t * size_t(row) + size_t(j)];
      vc[size_t(slots[t] * row + j)] = v_new[t * size_t(row) + size_t(j)];
    }
  const auto q_host = random_floats(rng, size_t(b.rows * sh.num_heads * sh.head_dim));
  const Tensor out = h.f32_nan({b.rows, sh.num_heads * sh.head_dim});
  h.backend().attention(h.f32({b.rows, sh.num_heads * sh.head_dim}, q_host), db.k_cache, db.v_cache,
                        db.batch, sh, out);
  report("write_kv + attention",
         max_rel_error(h.read(out), attention_ref(q_host, kc, vc, b, sh, b.rows)));
}

TEST_CASE("attention rejects bad shapes and bad batch metadata", "[cpu][ops]") {
  OpHarness h(1);
  std::mt19937_64 rng(13);
  const AttentionShape sh{4, 2, 8, 4, 0.35f};
  const HostBatch good = make_batch({{3, 2}, {0, 4}}, sh.block_size, rng);
  const int64_t cache_elems = int64_t(good.num_blocks) * sh.block_size * sh.num_kv_heads * 8;
  const auto kc = random_floats(rng, size_t(cache_elems));
  const Tensor q = h.f32({good.rows, 32}, random_floats(rng, size_t(good.rows * 32)));
  const Tensor out = h.f32_nan({good.rows, 32});
  auto run = [&](const HostBatch& b, const AttentionShape& s, const Tensor& qq, const Tensor& oo) {
    DeviceBatch db = upload_batch(h, b, sh, kc, kc);
    h.backend().attention(qq, db.k_cache, db.v_cache, db.batch, s, oo);
  };
  CHECK_NOTHROW(run(good, sh, q, out));

  HostBatch b = good;
  b.tables[0] = good.num_blocks;
  CHECK_THROWS_WITH(run(b, sh, q, out), Catch::Contains("attention: block_tables[0, 0]"));
  b = good;
  b.seq_lens[1] = 3;  // fewer than its 4 query tokens
  CHECK_THROWS_WITH(run(b, sh, q, out), Catch::Contains("seq_lens[1] = 3"));
  b = good;
  b.qsl = {0, 3, 2};
  CHECK_THROWS_AS(run(b, sh, q, out), Error);
  b = good;
  b.qsl = {1, 3, 6};
  CHECK_THROWS_AS(run(b, sh, q, out), Error);
  b = good;
  b.qsl = {0, 2, 7};  // past the rows of q
  b.seq_lens[1] = 5;
  b.max_q = 5;
  CHECK_THROWS_WITH(run(b, sh, q, out), Catch::Contains("query_start_loc[2] = 7"));
  b = good;
  b.max_q = 3;
  CHECK_THROWS_WITH(run(b, sh, q, out), Catch::Contains("max_query_len = 3"));
  b = good;
  b.max_seq = 4;
  CHECK_THROWS_AS(run(b, sh, q, out), Error);
  b = good;
  b.seq_lens[0] = good.max_blocks * sh.block_size + 1;  // needs more blocks than the table has
  b.max_seq = b.seq_lens[0];
  CHECK_THROWS_WITH(run(b, sh, q, out), Catch::Contains("blocks of 4"));

  AttentionShape bad = sh;
  bad.num_kv_heads = 3;
  CHECK_THROWS_WITH(run(good, bad, q, out), Catch::Contains("not a multiple of num_kv_heads"));
  bad = sh;
  bad.head_dim = 16;
  CHECK_THROWS_AS(run(good, bad, q, out), Error);
  bad = sh;
  bad.block_size = 8;
  CHECK_THROWS_WITH(run(good, bad, q, out), Catch::Contains("k_cache"));
  CHECK_THROWS_AS(run(good, sh, q, h.f32_nan({good.rows, 31})), Error);
  CHECK_THROWS_AS(
      run(good, sh, h.f32({good.rows, 31}, std::vector<float>(size_t(good.rows * 31))), out),
      Error);
}

TEST_CASE("attention checks num_prefill_seqs, the prompts-first hint, exactly", "[cpu][ops]") {
  OpHarness h(1);
  std::mt19937_64 rng(14);
  const AttentionShape sh{4, 2, 8, 4, 0.35f};
  // Two prompts (5 and 2 new tokens), then two decodes and an idle sequence.
  const HostBatch b = make_batch({{3, 5}, {0, 2}, {6, 1}, {0, 1}, {4, 0}}, sh.block_size, rng);
  const int64_t cache_elems = int64_t(b.num_blocks) * sh.block_size * sh.num_kv_heads * 8;
  const auto kc = random_floats(rng, size_t(cache_elems));
  const Tensor q = h.f32({b.rows, 32}, random_floats(rng, size_t(b.rows * 32)));
  const auto run = [&](int32_t hint) {
    DeviceBatch db = upload_batch(h, b, sh, kc, kc);
    db.batch.num_prefill_seqs = hint;
    const Tensor out = h.f32_nan({b.rows, 32});
    h.backend().attention(q, db.k_cache, db.v_cache, db.batch, sh, out);
    return h.read(out);
  };
  CHECK(run(2) == run(-1));  // a hint changes no value
  CHECK_THROWS_WITH(run(1), Catch::Contains("num_prefill_seqs = 1") &&
                                Catch::Contains("sequence 1 has 2"));
  CHECK_THROWS_WITH(run(3), Catch::Contains("sequence 2 has 1"));
  CHECK_THROWS_WITH(run(6), Catch::Contains("num_prefill_seqs = 6") &&
                                Catch::Contains("[0, num_seqs = 5]"));
  CHECK_THROWS_WITH(run(-2), Catch::Contains("num_prefill_seqs = -2"));
}
