// Tensor-parallel slicing of weights (rows, columns, KV-head replication), dummy weights that
// are the same model under every TP layout, and the RoPE tables against the formulas.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>

#include "runtime/error.hpp"
#include "runtime/checkpoint/model_config.hpp"
#include "runtime/models/rope.hpp"
#include "runtime/models/weights.hpp"

using namespace troupe;
using Catch::Matchers::Contains;

namespace {

// A row-major [rows, cols] f32 tensor whose element (r, c) is 100 r + c ([rows] when cols is 0).
struct Grid {
  std::vector<float> v;
  TensorInfo info;
  Grid(int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
      if (cols == 0) v.push_back(float(r));  // 1-D: element r is r
      for (int64_t c = 0; c < cols; ++c) v.push_back(float(100 * r + c));
    }
    info.dtype = DType::f32;
    info.shape = cols > 0 ? std::vector<int64_t>{rows, cols} : std::vector<int64_t>{rows};
    info.data = v.data();
    info.nbytes = v.size() * 4;
  }
};

ParallelRank tp(int32_t rank, int32_t size) {
  ParallelRank r;
  r.tp_rank = rank;
  r.tp_size = size;
  return r;
}

std::vector<float> slice(const Grid& g, const WeightSpec& spec, const ParallelRank& r) {
  int64_t n = 1;
  for (int64_t d : local_shape(spec, r)) n *= d;
  std::vector<float> out(static_cast<size_t>(n));
  copy_shard(g.info, spec, r, out.data(), DType::f32);
  return out;
}

}  // namespace

TEST_CASE("weights: rows split for column-parallel layers", "[models][weights]") {
  const Grid g(8, 3);
  const WeightSpec spec{"q_proj.weight", {8, 3}, Shard::rows};
  CHECK(local_shape(spec, tp(1, 2)) == std::vector<int64_t>{4, 3});
  const auto s = slice(g, spec, tp(1, 2));
  REQUIRE(s.size() == 12);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 3; ++c) CHECK(s[size_t(r * 3 + c)] == float(100 * (r + 4) + c));
  const auto whole = slice(g, spec, tp(0, 1));
  CHECK(whole == g.v);
}

TEST_CASE("weights: cols split for row-parallel layers", "[models][weights]") {
  const Grid g(3, 8);
  const WeightSpec spec{"o_proj.weight", {3, 8}, Shard::cols};
  CHECK(local_shape(spec, tp(1, 2)) == std::vector<int64_t>{3, 4});
  const auto s = slice(g, spec, tp(1, 2));
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 4; ++c) CHECK(s[size_t(r * 4 + c)] == float(100 * r + c + 4));
  const auto s0 = slice(g, spec, tp(0, 2));
  CHECK(s0[5] == float(100 * 1 + 1));
}

TEST_CASE("weights: KV heads replicate when fewer than ranks", "[models][weights]") {
  // 2 KV heads of head_dim 2: rows [0, 2) are head 0, [2, 4) head 1. Over 4 ranks, ranks 0-1
  // hold head 0 and ranks 2-3 head 1 (vLLM's layout).
  const Grid g(4, 2);
  const WeightSpec spec{"k_proj.weight", {4, 2}, Shard::rows, 2};
  for (int32_t r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(local_shape(spec, tp(r, 4)) == std::vector<int64_t>{2, 2});
    const auto s = slice(g, spec, tp(r, 4));
    const int64_t head = r / 2;
    CHECK(s[0] == float(100 * (2 * head)));
    CHECK(s[2] == float(100 * (2 * head + 1)));
  }
  // With as many ranks as heads it is a plain split.
  CHECK(slice(g, spec, tp(1, 2))[0] == 200.0f);
}

TEST_CASE("weights: 1-D and replicated weights, and bad splits", "[models][weights]") {
  const Grid bias(6, 0);
  CHECK(slice(bias, WeightSpec{"b", {6}, Shard::rows}, tp(2, 3)) == std::vector<float>{4, 5});
  CHECK(slice(bias, WeightSpec{"n", {6}, Shard::replicated}, tp(2, 3)) == bias.v);
  CHECK_THROWS_WITH(local_shape(WeightSpec{"w", {6, 2}, Shard::rows}, tp(0, 4)),
                    Contains("'w'") && Contains("cannot be split into 4 parts"));
  CHECK_THROWS_WITH(local_shape(WeightSpec{"b", {6}, Shard::cols}, tp(0, 2)),
                    Contains("'b'") && Contains("no dimension 1"));
  CHECK_THROWS_WITH(local_shape(WeightSpec{"w", {6, 2}, Shard::rows}, tp(2, 2)),
                    Contains("tp_rank 2"));
  const Grid g(2, 3);
  CHECK_THROWS_WITH(slice(g, WeightSpec{"w", {3, 2}, Shard::rows}, tp(0, 1)),
                    Contains("'w'") && Contains("[2, 3]") && Contains("[3, 2]"));
  TensorInfo ints = g.info;
  ints.dtype = DType::i32;
  CHECK_THROWS_WITH(check_weight(ints, WeightSpec{"w", {2, 3}, Shard::rows}),
                    Contains("'w'") && Contains("int32"));
}

TEST_CASE("weights: dummy weights are one model under every TP layout", "[models][weights]") {
  for (Shard shard : {Shard::rows, Shard::cols}) {
    const WeightSpec spec{"model.layers.0.mlp.down_proj.weight", {6, 8}, shard};
    std::vector<float> full(48);
    fill_dummy_shard(42, spec, tp(0, 1), 0.0, 0.02, full.data(), DType::f32);
    for (int32_t r = 0; r < 2; ++r) {
      std::vector<float> part(24);
      fill_dummy_shard(42, spec, tp(r, 2), 0.0, 0.02, part.data(), DType::f32);
      for (int64_t i = 0; i < 24; ++i) {
        const int64_t row = shard == Shard::rows ? r * 3 + i / 8 : i / 4;
        const int64_t col = shard == Shard::rows ? i % 8 : r * 4 + i % 4;
        CHECK(part[size_t(i)] == full[size_t(row * 8 + col)]);
      }
    }
  }
  // Mean/std of a large draw, and different names or seeds give different values.
  const WeightSpec big{"w", {1000, 1000}, Shard::replicated};
  std::vector<float> v(1000000);
  fill_dummy_shard(1, big, tp(0, 1), 0.5, 2.0, v.data(), DType::f32);
  double s = 0, ss = 0;
  for (float x : v) {
    s += x;
    ss += double(x) * x;
  }
  const double mean = s / 1e6, var = ss / 1e6 - mean * mean;
  CHECK(mean == Approx(0.5).margin(0.01));
  CHECK(std::sqrt(var) == Approx(2.0).epsilon(0.01));
  std::vector<float> a(8), b(8), c(8);
  fill_dummy_shard(1, WeightSpec{"x", {8}, Shard::replicated}, tp(0, 1), 0, 1, a.data(),
                   DType::f32);
  fill_dummy_shard(1, WeightSpec{"y", {8}, Shard::replicated}, tp(0, 1), 0, 1, b.data(),
                   DType::f32);
  fill_dummy_shard(2, WeightSpec{"x", {8}, Shard::replicated}, tp(0, 1), 0, 1, c.data(),
                   DType::f32);
  CHECK(a != b);
  CHECK(a != c);
  // Norm weights: mean 1, std 0 -> exactly 1, in bf16 too.
  std::vector<uint16_t> ones(4);
  fill_dummy_shard(1, WeightSpec{"n", {4}, Shard::replicated}, tp(0, 1), 1.0, 0.0, ones.data(),
                   DType::bf16);
  for (auto o : ones) CHECK(o == 0x3F80);
}

namespace {

ModelConfig rope_config(double theta, int64_t head_dim, int64_t max_pos) {
  ModelConfig c;
  c.rope_theta = theta;
  c.head_dim = head_dim;
  c.max_position_embeddings = max_pos;
  return c;
}

}  // namespace

TEST_CASE("rope: default inverse frequencies and the cos|sin table", "[models][rope]") {
  const ModelConfig c = rope_config(10000.0, 16, 40);
  const auto inv = rope_inv_freq(c, 16);
  REQUIRE(inv.size() == 8);
  for (size_t i = 0; i < 8; ++i)
    CHECK(double(inv[i]) == Approx(std::pow(10000.0, -double(2 * i) / 16.0)).epsilon(1e-7));
  CHECK(inv[0] == 1.0f);
  const auto table = rope_cos_sin_table(c, 16, rope_max_positions(c));
  REQUIRE(table.size() == 40 * 16);
  for (int64_t p : {0, 1, 7, 39})
    for (size_t i = 0; i < 8; ++i) {
      const double angle = double(p) * double(inv[i]);
      CHECK(double(table[size_t(p) * 16 + i]) == Approx(std::cos(angle)).margin(1e-7));
      CHECK(double(table[size_t(p) * 16 + 8 + i]) == Approx(std::sin(angle)).margin(1e-7));
    }
}

TEST_CASE("rope: llama3 scaling keeps, blends and divides the right bands", "[models][rope]") {
  ModelConfig c = rope_config(10000.0, 32, 256);
  const auto plain = rope_inv_freq(c, 32);
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 32;
  const auto scaled = rope_inv_freq(c, 32);
  int kept = 0, blended = 0, divided = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const double f = plain[i], wavelen = 2 * std::numbers::pi / f;
    double want;
    if (wavelen < 32.0 / 4.0) {
      want = f;
      ++kept;
    } else if (wavelen > 32.0 / 1.0) {
      want = f / 8.0;
      ++divided;
    } else {
      const double s = (32.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - s) * f / 8.0 + s * f;
      ++blended;
    }
    INFO("i = " << i << ", wavelength " << wavelen);
    CHECK(double(scaled[i]) == Approx(want).epsilon(1e-6));
  }
  CHECK(kept == 1);     // wavelength 6.3
  CHECK(blended == 2);  // 11.2 and 19.9
  CHECK(divided == 13);
}

TEST_CASE("rope: linear scaling, table length, unsupported types", "[models][rope]") {
  ModelConfig c = rope_config(500000.0, 8, 100);
  const auto plain = rope_inv_freq(c, 8);
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 4.0;
  const auto scaled = rope_inv_freq(c, 8);
  for (size_t i = 0; i < 4; ++i)
    CHECK(double(scaled[i]) == Approx(double(plain[i]) / 4.0).epsilon(1e-7));
  CHECK(rope_max_positions(c) == 400);
  c.rope_scaling.type = "dynamic";
  CHECK_THROWS_WITH(rope_inv_freq(c, 8), Contains("\"dynamic\"") && Contains("not supported"));
  c.rope_scaling.type.clear();
  CHECK_THROWS_WITH(rope_inv_freq(c, 7), Contains("rotary_dim 7"));
}
