// CUDA graphs (capture a layer's ops, replay with new input values) and every error path of
// the CUDA backend: bad shapes on the host, bad index values found on the device (reported at
// the next synchronisation, the backend staying usable), unsupported kernel shapes, devices
// that do not exist, allocations that cannot be met, and what capture forbids.
#include <cstdlib>
#include <numeric>

#include "runtime/error.hpp"
#include "tests/cuda/cuda_harness.hpp"

namespace troupe::test {
namespace {

using Catch::Matchers::Contains;

// One small decoder layer on fixed buffers, so it can be captured and replayed.
struct Layer {
  static constexpr int64_t kTokens = 24, kVocab = 500, kHidden = 256, kHeads = 4, kKvHeads = 2,
                           kDim = 64, kBlockSize = 16, kBlocks = 32, kSeqs = 3, kMaxBlocks = 8;
  Tensor table, norm_w, wq, wk, wv, wo, cos_sin;
  Tensor ids, positions, slots, qsl, seq_lens, block_tables, last_rows;
  Tensor h, hn, q, k, v, attn, o, last, k_cache, v_cache;
  AttentionBatch batch;
  AttentionShape shape{int32_t(kHeads), int32_t(kKvHeads), int32_t(kDim), int32_t(kBlockSize),
                       0.125f};

  Layer(Pair& p, std::mt19937_64& rng) {
    const DType dt = DType::bf16;
    table = p.gpu_floats(dt, {kVocab, kHidden}, random_floats(rng, size_t(kVocab * kHidden)));
    norm_w = p.gpu_floats(dt, {kHidden}, random_floats(rng, size_t(kHidden), 0.5f, 1.5f));
    const float s = 1.0f / 16.0f;
    wq = p.gpu_floats(dt, {kHeads * kDim, kHidden},
                      random_floats(rng, size_t(kHeads * kDim * kHidden), -s, s));
    wk = p.gpu_floats(dt, {kKvHeads * kDim, kHidden},
                      random_floats(rng, size_t(kKvHeads * kDim * kHidden), -s, s));
    wv = p.gpu_floats(dt, {kKvHeads * kDim, kHidden},
                      random_floats(rng, size_t(kKvHeads * kDim * kHidden), -s, s));
    wo = p.gpu_floats(dt, {kHidden, kHeads * kDim},
                      random_floats(rng, size_t(kHidden * kHeads * kDim), -s, s));
    std::vector<float> cs(size_t(4096 * kDim));
    for (int64_t pos = 0; pos < 4096; ++pos)
      for (int64_t i = 0; i < kDim / 2; ++i) {
        const double f = std::pow(10000.0, -2.0 * double(i) / kDim);
        cs[size_t(pos * kDim + i)] = float(std::cos(double(pos) * f));
        cs[size_t(pos * kDim + kDim / 2 + i)] = float(std::sin(double(pos) * f));
      }
    cos_sin = p.gpu_floats(DType::f32, {4096, kDim}, cs);
    ids = p.gpu_i32({kTokens}, std::vector<int32_t>(size_t(kTokens), 0));
    positions = p.gpu_i32({kTokens}, std::vector<int32_t>(size_t(kTokens), 0));
    slots = p.gpu_i32({kTokens}, std::vector<int32_t>(size_t(kTokens), -1));
    qsl = p.gpu_i32({kSeqs + 1}, std::vector<int32_t>(size_t(kSeqs + 1), 0));
    seq_lens = p.gpu_i32({kSeqs}, std::vector<int32_t>(size_t(kSeqs), 0));
    block_tables =
        p.gpu_i32({kSeqs, kMaxBlocks}, std::vector<int32_t>(size_t(kSeqs * kMaxBlocks), 0));
    last_rows = p.gpu_i32({kSeqs}, std::vector<int32_t>(size_t(kSeqs), 0));
    h = p.gpu_nan(dt, {kTokens, kHidden});
    hn = p.gpu_nan(dt, {kTokens, kHidden});
    q = p.gpu_nan(dt, {kTokens, kHeads * kDim});
    k = p.gpu_nan(dt, {kTokens, kKvHeads * kDim});
    v = p.gpu_nan(dt, {kTokens, kKvHeads * kDim});
    attn = p.gpu_nan(dt, {kTokens, kHeads * kDim});
    o = p.gpu_nan(dt, {kTokens, kHidden});
    last = p.gpu_nan(DType::f32, {kSeqs, kHidden});
    k_cache = p.alloc(p.gpu(), dt, {kBlocks, kBlockSize, kKvHeads, kDim});
    v_cache = p.alloc(p.gpu(), dt, {kBlocks, kBlockSize, kKvHeads, kDim});
    batch.query_start_loc = qsl;
    batch.seq_lens = seq_lens;
    batch.block_tables = block_tables;
    batch.num_seqs = int32_t(kSeqs);
    batch.max_query_len = int32_t(kTokens);
    batch.max_seq_len = int32_t(kMaxBlocks * kBlockSize);
  }

  // A step: sequences with (cached, new) tokens; fills every metadata tensor on the device.
  void load_step(Pair& p, const std::vector<std::pair<int32_t, int32_t>>& seqs,
                 std::mt19937_64& rng) {
    std::vector<int32_t> id, pos, slot, starts{0}, lens, tables(size_t(kSeqs * kMaxBlocks)),
        last_idx;
    std::vector<int32_t> phys(static_cast<size_t>(kBlocks));
    std::iota(phys.begin(), phys.end(), 0);
    std::shuffle(phys.begin(), phys.end(), rng);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(kVocab - 1));
    for (size_t s = 0; s < seqs.size(); ++s) {
      const auto [cached, fresh] = seqs[s];
      for (int64_t b = 0; b < kMaxBlocks; ++b)
        tables[size_t(int64_t(s) * kMaxBlocks + b)] =
            phys[size_t(int64_t(s) * kMaxBlocks + b) % phys.size()];
      for (int32_t i = 0; i < fresh; ++i) {
        const int32_t ps = cached + i;
        id.push_back(tok(rng));
        pos.push_back(ps);
        slot.push_back(tables[size_t(int64_t(s) * kMaxBlocks + ps / kBlockSize)] *
                           int32_t(kBlockSize) +
                       ps % int32_t(kBlockSize));
      }
      starts.push_back(starts.back() + fresh);
      lens.push_back(cached + fresh);
      last_idx.push_back(starts.back() - 1);
    }
    while (int64_t(id.size()) < kTokens) {  // padding rows: no KV write
      id.push_back(0);
      pos.push_back(0);
      slot.push_back(-1);
    }
    p.gpu().upload(ids, id.data(), ids.nbytes());
    p.gpu().upload(positions, pos.data(), positions.nbytes());
    p.gpu().upload(slots, slot.data(), slots.nbytes());
    p.gpu().upload(qsl, starts.data(), qsl.nbytes());
    p.gpu().upload(seq_lens, lens.data(), seq_lens.nbytes());
    p.gpu().upload(block_tables, tables.data(), block_tables.nbytes());
    p.gpu().upload(last_rows, last_idx.data(), last_rows.nbytes());
  }

  void reset_cache(Pair& p, const std::vector<float>& cache0) {
    std::vector<uint16_t> bf(cache0.size());
    convert_floats(cache0.data(), DType::f32, bf.data(), DType::bf16, bf.size());
    p.gpu().upload(k_cache, bf.data(), k_cache.nbytes());
    p.gpu().upload(v_cache, bf.data(), v_cache.nbytes());
  }

  void run(Backend& b) {
    b.embedding(ids, table, h);
    b.rms_norm(h, norm_w, 1e-5f, hn);
    b.linear(hn, wq, nullptr, q);
    b.linear(hn, wk, nullptr, k);
    b.linear(hn, wv, nullptr, v);
    b.rope(q, k, positions, cos_sin, int32_t(kDim), int32_t(kDim), RopeStyle::neox);
    b.write_kv(k, v, k_cache, v_cache, slots);
    b.attention(q, k_cache, v_cache, batch, shape, attn);
    b.linear(attn, wo, nullptr, o);
    b.add_rms_norm(h, o, norm_w, 1e-5f, hn);
    // The last row of each sequence, then a logits-style f32 projection.
    b.gather_rows(hn, last_rows, o.rows(0, kSeqs));
    b.linear(o.rows(0, kSeqs), wo, nullptr, last);
  }
};

TEST_CASE("cuda graphs: a captured layer replays like direct execution", "[cuda][graphs]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(31);
  Layer layer(p, rng);
  const auto cache0 = random_floats(rng, size_t(layer.k_cache.numel()));
  const std::vector<std::pair<int32_t, int32_t>> step_a = {{0, 12}, {30, 1}, {50, 5}};
  const std::vector<std::pair<int32_t, int32_t>> step_b = {{3, 7}, {100, 1}, {0, 1}};

  // Direct run of step A (also warms up modules and cuBLASLt plans before capture).
  layer.reset_cache(p, cache0);
  layer.load_step(p, step_a, rng);
  layer.run(p.gpu());
  const auto direct_a = p.read(layer.last);

  CudaBackend& cuda = p.cuda();
  cuda.begin_capture();
  CHECK_THROWS_AS(cuda.begin_capture(), Error);  // one capture at a time
  CHECK_THROWS_AS(p.gpu().synchronize(), Error);
  CHECK_THROWS_AS(p.gpu().sample(layer.last, std::vector<SamplingRow>(Layer::kSeqs)), Error);
  CHECK_THROWS_AS((void)p.gpu().allocate(16), Error);
  layer.run(p.gpu());
  CudaGraph graph = cuda.end_capture();
  REQUIRE(graph.valid());
  CHECK_THROWS_AS((void)cuda.end_capture(), Error);

  // Replay with step A's values: the same result.
  layer.reset_cache(p, cache0);
  layer.load_step(p, step_a, rng);  // new random ids, so run direct again for the reference
  layer.run(p.gpu());
  const auto direct_a2 = p.read(layer.last);
  layer.reset_cache(p, cache0);
  graph.replay();
  const auto replay_a2 = p.read(layer.last);
  report("graph replay == direct, step A", norm_error(replay_a2, direct_a2), 1e-6);
  CHECK(direct_a.size() == direct_a2.size());

  // New values in the same buffers (other lengths, tokens, block tables): still the same.
  layer.reset_cache(p, cache0);
  layer.load_step(p, step_b, rng);
  graph.replay();
  const auto replay_b = p.read(layer.last);
  layer.reset_cache(p, cache0);
  layer.run(p.gpu());
  const auto direct_b = p.read(layer.last);
  report("graph replay == direct, step B (new metadata values)", norm_error(replay_b, direct_b),
         1e-6);

  CudaGraph moved = std::move(graph);
  CHECK_FALSE(graph.valid());
  CHECK(moved.valid());
  CHECK_THROWS_AS(graph.replay(), Error);
}

TEST_CASE("cuda backend refuses devices that do not exist and impossible allocations",
          "[cuda][errors]") {
  TROUPE_REQUIRE_GPU();
  CHECK_THROWS_WITH(make_cuda_backend(-1), Contains("device_index = -1"));
  CHECK_THROWS_WITH(make_cuda_backend(cuda_device_count()), Contains("outside"));
  Pair p;
  CHECK_THROWS_WITH((void)p.gpu().allocate(size_t(1) << 60), Contains("1152921504606846976 bytes"));
  // Still usable.
  const Tensor t = p.gpu_floats(DType::f32, {4}, {1, 2, 3, 4});
  CHECK(p.read(t) == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("cuda ops reject bad shapes, dtypes and devices on the host", "[cuda][errors]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  const DType bf = DType::bf16;
  const Tensor x = p.gpu_nan(bf, {4, 64}), w = p.gpu_nan(bf, {32, 65}),
               out = p.gpu_nan(bf, {4, 32});
  CHECK_THROWS_WITH(p.gpu().linear(x, w, nullptr, out), Contains("linear") && Contains("K of x"));
  const Tensor w_ok = p.gpu_nan(bf, {32, 64});
  CHECK_THROWS_WITH(p.gpu().linear(x, w_ok, nullptr, p.gpu_nan(DType::f16, {4, 32})),
                    Contains("float32 (logits)"));
  const Tensor cpu_x = p.cpu_nan({4, 64});
  CHECK_THROWS_WITH(p.gpu().linear(cpu_x, w_ok, nullptr, out), Contains("must be on cuda:0"));
  CHECK_THROWS_WITH(p.gpu().rms_norm(x, p.gpu_nan(bf, {63}), 1e-5f, p.gpu_nan(bf, {4, 64})),
                    Contains("rms_norm") && Contains("weight"));
  CHECK_THROWS_WITH(p.gpu().rms_norm(x, p.gpu_nan(bf, {64}), -1.0f, p.gpu_nan(bf, {4, 64})),
                    Contains("eps"));
  const Tensor q = p.gpu_nan(bf, {4, 128}), k = p.gpu_nan(bf, {4, 64});
  const Tensor pos = p.gpu_i32({4}, {0, 1, 2, 3});
  CHECK_THROWS_WITH(
      p.gpu().rope(q, k, pos, p.gpu_nan(DType::f32, {16, 63}), 64, 63, RopeStyle::neox),
      Contains("rotary_dim = 63"));
  const Tensor cache = p.gpu_nan(bf, {4, 16, 1, 64});
  CHECK_THROWS_WITH(
      p.gpu().write_kv(k, k, cache, p.gpu_nan(bf, {4, 16, 1, 64}), p.gpu_i32({3}, {0, 1, 2})),
      Contains("slot_mapping"));
  CHECK_THROWS_WITH(p.gpu().silu_mul(p.gpu_nan(bf, {2, 7}), p.gpu_nan(bf, {2, 3})),
                    Contains("two equal halves"));
  CHECK_THROWS_WITH(p.gpu().copy(p.gpu_nan(bf, {3}), p.gpu_nan(bf, {4})),
                    Contains("element counts"));
  std::vector<float> big(100);
  CHECK_THROWS_WITH(p.gpu().upload(p.gpu_nan(DType::f32, {4}), big.data(), 400),
                    Contains("do not fit"));
}

// A valid attention call to mutate: one sequence of 3 query tokens over 20 keys.
struct AttnCall {
  Tensor q, kc, vc, out;
  AttentionBatch batch;
  AttentionShape shape{4, 2, 64, 16, 0.125f};
  AttnCall(Pair& p, int head_dim = 64, int block_size = 16) {
    shape.head_dim = head_dim;
    shape.block_size = block_size;
    q = p.gpu_floats(DType::bf16, {3, 4 * int64_t(head_dim)},
                     std::vector<float>(size_t(3 * 4 * head_dim), 0.5f));
    kc = p.gpu_floats(DType::bf16, {4, block_size, 2, head_dim},
                      std::vector<float>(size_t(4 * block_size * 2 * head_dim), 0.25f));
    vc = p.gpu_floats(DType::bf16, {4, block_size, 2, head_dim},
                      std::vector<float>(size_t(4 * block_size * 2 * head_dim), 0.25f));
    out = p.gpu_nan(DType::bf16, {3, 4 * int64_t(head_dim)});
    batch.query_start_loc = p.gpu_i32({2}, {0, 3});
    batch.seq_lens = p.gpu_i32({1}, {20});
    batch.block_tables = p.gpu_i32({1, 3}, {2, 0, 1});
    batch.num_seqs = 1;
    batch.max_query_len = 3;
    batch.max_seq_len = 20;
  }
};

TEST_CASE("cuda attention refuses unsupported head dims and block sizes", "[cuda][errors]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  {
    AttnCall c(p, 72, 16);
    CHECK_THROWS_WITH(p.gpu().attention(c.q, c.kc, c.vc, c.batch, c.shape, c.out),
                      Contains("head_dim = 72"));
  }
  {
    AttnCall c(p, 64, 64);
    CHECK_THROWS_WITH(p.gpu().attention(c.q, c.kc, c.vc, c.batch, c.shape, c.out),
                      Contains("block_size = 64"));
  }
  {
    AttnCall c(p, 64, 12);
    CHECK_THROWS_WITH(p.gpu().attention(c.q, c.kc, c.vc, c.batch, c.shape, c.out),
                      Contains("block_size = 12"));
  }
  AttnCall c(p);
  AttentionShape odd = c.shape;
  odd.num_kv_heads = 3;
  CHECK_THROWS_WITH(p.gpu().attention(c.q, c.kc, c.vc, c.batch, odd, c.out),
                    Contains("not a multiple"));
  AttentionBatch short_tables = c.batch;
  short_tables.max_seq_len = 100;  // 3 blocks of 16 cannot hold it
  CHECK_THROWS_WITH(p.gpu().attention(c.q, c.kc, c.vc, short_tables, c.shape, c.out),
                    Contains("max_seq_len = 100"));
  // A q view that is not 16-byte aligned (2 bytes in).
  const Tensor wide = p.gpu_nan(DType::bf16, {3 * 256 + 1});
  const Tensor misaligned(static_cast<char*>(wide.data) + 2, DType::bf16, wide.device, {3, 256});
  CHECK_THROWS_WITH(p.gpu().attention(misaligned, c.kc, c.vc, c.batch, c.shape, c.out),
                    Contains("16-byte"));
  // The valid call works.
  p.gpu().attention(c.q, c.kc, c.vc, c.batch, c.shape, c.out);
  for (float v : p.read(c.out)) CHECK(std::abs(v - 0.25f) < 1e-3f);
}

TEST_CASE("cuda kernels report bad index values at the next synchronisation", "[cuda][errors]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  const DType bf = DType::bf16;
  const Tensor table = p.gpu_floats(bf, {10, 16}, std::vector<float>(160, 1.0f));
  const Tensor out = p.gpu_nan(bf, {3, 16});
  p.gpu().embedding(p.gpu_i32({3}, {1, 10, 2}), table, out);
  CHECK_THROWS_WITH(p.gpu().synchronize(), Contains("embedding") && Contains("token id"));
  // The error was reported once; the backend works on.
  p.gpu().embedding(p.gpu_i32({3}, {1, 9, 2}), table, out);
  CHECK(p.read(out) == std::vector<float>(48, 1.0f));

  p.gpu().gather_rows(table, p.gpu_i32({2}, {-1, 0}), p.gpu_nan(bf, {2, 16}));
  CHECK_THROWS_WITH(p.gpu().synchronize(), Contains("gather_rows"));

  const Tensor q = p.gpu_nan(bf, {2, 64}), k = p.gpu_nan(bf, {2, 64});
  p.gpu().rope(q, k, p.gpu_i32({2}, {0, 16}), p.gpu_nan(DType::f32, {16, 64}), 64, 64,
               RopeStyle::neox);
  CHECK_THROWS_WITH(p.gpu().synchronize(), Contains("rope"));

  const Tensor kc = p.gpu_nan(bf, {4, 16, 1, 64}), vc = p.gpu_nan(bf, {4, 16, 1, 64});
  p.gpu().write_kv(k, k, kc, vc, p.gpu_i32({2}, {5, 64}));
  std::vector<float> host(4);
  CHECK_THROWS_WITH(p.gpu().download(host.data(), p.gpu_nan(DType::f32, {4}), 16),
                    Contains("write_kv"));

  {
    AttnCall c(p);
    c.batch.block_tables = p.gpu_i32({1, 3}, {2, 4, 1});  // 4 is past the 4 blocks
    p.gpu().attention(c.q, c.kc, c.vc, c.batch, c.shape, c.out);
    CHECK_THROWS_WITH(p.gpu().synchronize(), Contains("block_tables"));
  }
  {
    // Three decodes (one query token each): the decode kernel's table lookups report it too.
    AttnCall c(p);
    c.batch.query_start_loc = p.gpu_i32({4}, {0, 1, 2, 3});
    c.batch.seq_lens = p.gpu_i32({3}, {20, 20, 20});
    c.batch.block_tables = p.gpu_i32({3, 3}, {2, 0, 1, 3, 4, 1, 0, 1, 2});  // seq 1: block 4
    c.batch.num_seqs = 3;
    c.batch.max_query_len = 1;
    p.gpu().attention(c.q, c.kc, c.vc, c.batch, c.shape, c.out);
    CHECK_THROWS_WITH(p.gpu().synchronize(), Contains("block_tables"));
  }
  {
    AttnCall c(p);
    c.batch.seq_lens = p.gpu_i32({1}, {2});  // fewer keys than its 3 query tokens
    p.gpu().attention(c.q, c.kc, c.vc, c.batch, c.shape, c.out);
    CHECK_THROWS_WITH(p.gpu().synchronize(), Contains("seq_lens"));
  }
  {
    AttnCall c(p);
    c.batch.query_start_loc = p.gpu_i32({2}, {0, 9});  // past T = 3
    p.gpu().attention(c.q, c.kc, c.vc, c.batch, c.shape, c.out);
    CHECK_THROWS_WITH(p.gpu().synchronize(), Contains("query_start_loc"));
  }
  p.gpu().synchronize();  // nothing pending any more
}

TEST_CASE("TROUPE_CUDA_SYNC_CHECK=1 reports a bad index from the op itself", "[cuda][errors]") {
  TROUPE_REQUIRE_GPU();
  setenv("TROUPE_CUDA_SYNC_CHECK", "1", 1);
  Pair p;
  unsetenv("TROUPE_CUDA_SYNC_CHECK");
  const Tensor table = p.gpu_floats(DType::f32, {10, 4}, std::vector<float>(40, 1.0f));
  CHECK_THROWS_WITH(p.gpu().embedding(p.gpu_i32({1}, {11}), table, p.gpu_nan(DType::f32, {1, 4})),
                    Contains("embedding"));
}

}  // namespace
}  // namespace troupe::test

namespace troupe::test {
namespace {

TEST_CASE("TROUPE_OP_PROFILE times each op outside graphs, fused ops with their parts",
          "[cuda][graphs]") {
  TROUPE_REQUIRE_GPU();
  Pair plain;
  CHECK(plain.cuda().op_profile_report().empty());
  setenv("TROUPE_OP_PROFILE", "1", 1);
  Pair p;
  unsetenv("TROUPE_OP_PROFILE");
  std::mt19937_64 rng(9);
  const DType bf = DType::bf16;
  const Tensor w = p.gpu_floats(bf, {512, 256}, random_floats(rng, size_t(512) * 256, -0.1f, 0.1f));
  const Tensor x1 = p.gpu_floats(bf, {1, 256}, random_floats(rng, 256));
  const Tensor x100 = p.gpu_floats(bf, {100, 256}, random_floats(rng, size_t(100) * 256));
  p.gpu().linear(x1, w, nullptr, p.gpu_nan(bf, {1, 512}));
  p.gpu().linear(x1, w, nullptr, p.gpu_nan(bf, {1, 512}));
  // At 100 rows linear_add runs its sequence: linear, then add, each under the parent.
  p.gpu().linear_add(x100, w, nullptr, p.gpu_floats(bf, {100, 512}, random_floats(rng, 51200)),
                     p.gpu_nan(bf, {100, 512}));
  // Captured ops are not timed.
  CudaBackend& cuda = p.cuda();
  const Tensor out100 = p.gpu_nan(bf, {100, 512});  // capture allows no allocation
  cuda.begin_capture();
  p.gpu().linear(x100, w, nullptr, out100);
  CudaGraph graph = cuda.end_capture();
  graph.replay();
  p.gpu().synchronize();
  const std::string report = cuda.op_profile_report();
  INFO(report);
  CHECK_THAT(report, Contains("GPU time per op"));
  CHECK_THAT(report, Contains("host us"));
  const auto line_of = [&](const std::string& label) {
    const size_t at = report.find("\n" + label + " ");  // a whole label starts a line
    if (at == std::string::npos) return std::string();
    return report.substr(at + 1, report.find('\n', at + 1) - at - 1);
  };
  // label, then its call count as the first number after it
  const auto calls = [&](const std::string& label) {
    const std::string line = line_of(label);
    if (line.empty()) return -1L;
    return std::strtol(line.c_str() + label.size(), nullptr, 10);
  };
  CHECK(calls("linear 512x256 [T 1]") == 2);
  CHECK(calls("linear_add 512x256 [T 65-512]") == 1);
  CHECK(calls("linear_add 512x256 [T 65-512] > linear 512x256 [T 65-512]") == 1);
  CHECK(calls("linear_add 512x256 [T 65-512] > add [T 65-512]") == 1);
  CHECK(calls("linear 512x256 [T 65-512]") == -1);  // only inside the graph
}

}  // namespace
}  // namespace troupe::test
