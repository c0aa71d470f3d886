// rope_qkv_to_cache (rope + write_kv from one fused qkv buffer) against the two ops it
// replaces, run on the same values: the results must be identical, not just close.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>

#include "op_harness.hpp"
#include "runtime/error.hpp"

using namespace troupe;
using troupe::test::OpHarness;
using troupe::test::random_floats;

namespace {

std::vector<float> cos_sin_table(int64_t max_pos, int64_t rotary_dim) {
  std::vector<float> cs(size_t(max_pos * rotary_dim));
  const int64_t half = rotary_dim / 2;
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double freq = std::pow(10000.0, -2.0 * double(i) / double(rotary_dim));
      cs[size_t(p * rotary_dim + i)] = float(std::cos(double(p) * freq));
      cs[size_t(p * rotary_dim + half + i)] = float(std::sin(double(p) * freq));
    }
  return cs;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Columns [begin, begin + width) of every row of x [rows, row_len].
std::vector<float> columns(const std::vector<float>& x, int64_t row_len, int64_t begin,
                           int64_t width) {
  const int64_t rows = int64_t(x.size()) / row_len;
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r)
    out.insert(out.end(), x.begin() + r * row_len + begin, x.begin() + r * row_len + begin + width);
  return out;
}

}  // namespace

TEST_CASE("rope_qkv_to_cache equals rope then write_kv, bit for bit", "[cpu][ops]") {
  OpHarness h;
  std::mt19937_64 rng(11);
  const int64_t blocks = 6, block_size = 4, max_pos = 512;
  // Slots: out of order, two padding tokens (-1) whose q must still be written.
  const std::vector<int32_t> slot_host{13, 0, -1, 7, 22, 5, -1, 19, 23};
  const int64_t tokens = int64_t(slot_host.size());
  std::vector<int32_t> pos_host(static_cast<size_t>(tokens));
  std::uniform_int_distribution<int32_t> pos_dist(0, int32_t(max_pos - 1));
  for (auto& p : pos_host) p = pos_dist(rng);
  const Tensor positions = h.i32({tokens}, pos_host);
  const Tensor slots = h.i32({tokens}, slot_host);
  for (auto [nh, nkv] : {std::pair<int64_t, int64_t>{8, 2}, {4, 4}, {6, 1}}) {
    for (int64_t d : {16, 12, 64}) {
      for (int64_t rotary : {d, d / 2}) {
        if (rotary % 2 != 0) continue;
        for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj}) {
          const int64_t q_row = nh * d, kv_row = nkv * d, row = q_row + 2 * kv_row;
          const auto qkv_host = random_floats(rng, size_t(tokens * row));
          const auto cs = h.f32({max_pos, rotary}, cos_sin_table(max_pos, rotary));
          const std::vector<float> sentinel(size_t(blocks * block_size * kv_row), 42.0f);
          const std::string what = fmt::format("{} heads {}/{} d={} rotary={}",
                                               style == RopeStyle::neox ? "neox" : "gptj", nh,
                                               nkv, d, rotary);
          INFO(what);

          // The composition the model ran before: separate q, k, v; rope; write_kv.
          const Tensor q = h.f32({tokens, q_row}, columns(qkv_host, row, 0, q_row));
          const Tensor k = h.f32({tokens, kv_row}, columns(qkv_host, row, q_row, kv_row));
          const Tensor v = h.f32({tokens, kv_row}, columns(qkv_host, row, q_row + kv_row, kv_row));
          const Tensor kc_ref = h.f32({blocks, block_size, nkv, d}, sentinel);
          const Tensor vc_ref = h.f32({blocks, block_size, nkv, d}, sentinel);
          h.backend().rope(q, k, positions, cs, int32_t(d), int32_t(rotary), style);
          h.backend().write_kv(k, v, kc_ref, vc_ref, slots);

          const Tensor qkv = h.f32({tokens, row}, qkv_host);
          const Tensor q_out = h.f32_nan({tokens, q_row});
          const Tensor kc = h.f32({blocks, block_size, nkv, d}, sentinel);
          const Tensor vc = h.f32({blocks, block_size, nkv, d}, sentinel);
          h.backend().rope_qkv_to_cache(qkv, positions, cs, int32_t(d), int32_t(rotary), style,
                                        int32_t(nh), int32_t(nkv), kc, vc, slots, q_out);
          CHECK(same_bits(h.read(q_out), h.read(q)));
          CHECK(same_bits(h.read(kc), h.read(kc_ref)));
          CHECK(same_bits(h.read(vc), h.read(vc_ref)));
          CHECK(same_bits(h.read(qkv), qkv_host));  // read only
        }
      }
    }
  }
}

TEST_CASE("rope_qkv_to_cache rejects bad shapes, positions and slots", "[cpu][ops]") {
  OpHarness h;
  const int64_t nh = 4, nkv = 2, d = 16, tokens = 2;
  const Tensor qkv = h.f32({tokens, (nh + 2 * nkv) * d}, std::vector<float>(size_t(tokens * 128)));
  const Tensor q_out = h.f32_nan({tokens, nh * d});
  const Tensor kc = h.f32_nan({3, 4, nkv, d}), vc = h.f32_nan({3, 4, nkv, d});
  const Tensor pos = h.i32({tokens}, {0, 1});
  const Tensor slots = h.i32({tokens}, {0, 5});
  const Tensor cs = h.f32({8, d}, cos_sin_table(8, d));
  Backend& b = h.backend();
  const auto N = RopeStyle::neox;
  CHECK_NOTHROW(b.rope_qkv_to_cache(qkv, pos, cs, 16, 16, N, 4, 2, kc, vc, slots, q_out));
  CHECK_THROWS_WITH(b.rope_qkv_to_cache(qkv, pos, cs, 16, 15, N, 4, 2, kc, vc, slots, q_out),
                    Catch::Contains("rope_qkv_to_cache: rotary_dim = 15"));
  CHECK_THROWS_WITH(b.rope_qkv_to_cache(qkv, pos, cs, 16, 16, N, 2, 2, kc, vc, slots, q_out),
                    Catch::Contains("qkv") && Catch::Contains("num_kv_heads"));
  CHECK_THROWS_WITH(b.rope_qkv_to_cache(qkv, pos, cs, 16, 16, N, 4, 2, kc, vc, slots,
                                        h.f32_nan({tokens, 48})),
                    Catch::Contains("q_out"));
  CHECK_THROWS_WITH(
      b.rope_qkv_to_cache(qkv, h.i32({tokens}, {0, 8}), cs, 16, 16, N, 4, 2, kc, vc, slots, q_out),
      Catch::Contains("positions[1] = 8"));
  CHECK_THROWS_WITH(
      b.rope_qkv_to_cache(qkv, pos, cs, 16, 16, N, 4, 2, kc, vc, h.i32({tokens}, {0, 12}), q_out),
      Catch::Contains("slot_mapping[1] = 12"));
  CHECK_THROWS_AS(b.rope_qkv_to_cache(qkv, pos, cs, 16, 16, N, 4, 2, kc, h.f32_nan({3, 4, 1, 16}),
                                      slots, q_out),
                  Error);
  const Tensor inside(qkv.data, DType::f32, qkv.device, {tokens, nh * d});
  CHECK_THROWS_WITH(b.rope_qkv_to_cache(qkv, pos, cs, 16, 16, N, 4, 2, kc, vc, slots, inside),
                    Catch::Contains("overlaps"));
}
