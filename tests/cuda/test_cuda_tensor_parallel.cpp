// The ops a tensor-parallel model program adds (Backend::embedding_shard, interleave_shards),
// on the GPU against the CPU backend: exact copies, so the same bits are required.
#include "tests/cuda/cuda_harness.hpp"

using namespace troupe;
using namespace troupe::test;

TEST_CASE("cuda embedding_shard and interleave_shards match the CPU bit for bit",
          "[cuda][ops][parallel]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(7);
  for (DType dt : kFloatTypes) {
    for (int64_t h : {64, 4096}) {
      const int64_t vocab = 1000, shards = 4, rows = vocab / shards;
      std::vector<int32_t> ids = {0, 249, 250, 499, 500, 999, 3, 751, 600};
      for (int64_t shard = 0; shard < shards; ++shard) {
        const auto table = rounded(random_floats(rng, size_t(rows * h)), dt);
        const auto t = int64_t(ids.size());
        const Tensor g_out = p.gpu_nan(dt, {t, h});
        p.gpu().embedding_shard(p.gpu_i32({t}, ids), p.gpu_floats(dt, {rows, h}, table),
                                shard * rows, vocab, g_out);
        const Tensor c_out = p.cpu_nan({t, h});
        p.cpu().embedding_shard(p.cpu_i32({t}, ids), p.cpu_f32({rows, h}, table), shard * rows,
                                vocab, c_out);
        CHECK(p.read(g_out) == p.read(c_out));
      }
    }
    // An id outside the vocabulary is the device error word's, named at the next read.
    const Tensor table = p.gpu_floats(dt, {10, 8}, std::vector<float>(80, 1.0f));
    const Tensor out = p.gpu_nan(dt, {1, 8});
    p.gpu().embedding_shard(p.gpu_i32({1}, {20}), table, 0, 20, out);
    CHECK_THROWS_WITH(p.read(out), Catch::Contains("embedding"));
  }
  for (int64_t w : {3, 64, 1000}) {
    for (int64_t l : {1, 5}) {
      const int64_t shards = 2;
      const auto data = random_floats(rng, size_t(shards * l * w));
      const Tensor g_out = p.gpu_nan(DType::f32, {l, shards * w});
      p.gpu().interleave_shards(p.gpu_floats(DType::f32, {shards, l, w}, data), g_out);
      const Tensor c_out = p.cpu_nan({l, shards * w});
      p.cpu().interleave_shards(p.cpu_f32({shards, l, w}, data), c_out);
      CHECK(p.read(g_out) == p.read(c_out));
    }
  }
}
