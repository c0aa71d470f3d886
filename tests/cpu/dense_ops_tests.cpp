// Row-wise ops of the CPU backend against float64 references computed here.
#include <catch2/catch.hpp>

#include <fmt/format.h>

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

TEST_CASE("embedding copies table rows and rejects ids outside the table", "[cpu][ops]") {
  OpHarness h;
  std::mt19937_64 rng(1);
  const int64_t vocab = 37, hidden = 19;
  const auto table_host = random_floats(rng, size_t(vocab * hidden));
  const std::vector<int32_t> ids_host{0, 36, 5, 5, 17, 1, 36, 2, 9, 0, 30};
  const int64_t t = int64_t(ids_host.size());
  const Tensor table = h.f32({vocab, hidden}, table_host);
  const Tensor ids = h.i32({t}, ids_host);
  const Tensor out = h.f32_nan({t, hidden});
  h.backend().embedding(ids, table, out);
  std::vector<double> want;
  for (int32_t id : ids_host)
    for (int64_t j = 0; j < hidden; ++j) want.push_back(table_host[size_t(id * hidden + j)]);
  CHECK(max_rel_error(h.read(out), want) == 0.0);

  SECTION("errors") {
    CHECK_THROWS_AS(h.backend().embedding(h.i32({2}, {0, 37}), table, h.f32_nan({2, hidden})),
                    Error);
    CHECK_THROWS_AS(h.backend().embedding(h.i32({1}, {-1}), table, h.f32_nan({1, hidden})), Error);
    CHECK_THROWS_WITH(h.backend().embedding(ids, table, h.f32_nan({t, hidden + 1})),
                      Catch::Contains("embedding: out") && Catch::Contains("[11, 20]"));
    CHECK_THROWS_AS(h.backend().embedding(ids, h.of(DType::bf16, {vocab, hidden}), out), Error);
  }
}

namespace {
std::vector<double> rms_norm_ref(const std::vector<double>& x, const std::vector<float>& w,
                                 int64_t rows, int64_t hidden, double eps) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < hidden; ++i)
      ss += x[size_t(r * hidden + i)] * x[size_t(r * hidden + i)];
    const double inv = 1.0 / std::sqrt(ss / double(hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i)
      out[size_t(r * hidden + i)] = x[size_t(r * hidden + i)] * inv * w[size_t(i)];
  }
  return out;
}
}  // namespace

TEST_CASE("rms_norm and add_rms_norm match float64", "[cpu][ops]") {
  OpHarness h;
  std::mt19937_64 rng(2);
  for (auto [rows, hidden] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {16, 4096}, {3, 896}}) {
    for (float eps : {1e-6f, 1e-5f}) {
      const auto x_host = random_floats(rng, size_t(rows * hidden), -3.0f, 3.0f);
      const auto w_host = random_floats(rng, size_t(hidden), 0.5f, 1.5f);
      const auto r_host = random_floats(rng, size_t(rows * hidden), -3.0f, 3.0f);
      const Tensor x = h.f32({rows, hidden}, x_host);
      const Tensor w = h.f32({hidden}, w_host);
      const Tensor out = h.f32_nan({rows, hidden});
      h.backend().rms_norm(x, w, eps, out);
      const std::vector<double> xd(x_host.begin(), x_host.end());
      report(fmt::format("rms_norm [{}, {}] eps {}", rows, hidden, eps),
             max_rel_error(h.read(out), rms_norm_ref(xd, w_host, rows, hidden, eps)));

      const Tensor residual = h.f32({rows, hidden}, r_host);
      h.backend().add_rms_norm(residual, x, w, eps, out);
      std::vector<double> sum(xd.size());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = double(r_host[i]) + xd[i];
      report(fmt::format("add_rms_norm residual [{}, {}]", rows, hidden),
             max_rel_error(h.read(residual), sum));
      report(fmt::format("add_rms_norm out [{}, {}] eps {}", rows, hidden, eps),
             max_rel_error(h.read(out), rms_norm_ref(sum, w_host, rows, hidden, eps)));
    }
  }
  SECTION("errors") {
    const Tensor x = h.f32({2, 8}, std::vector<float>(16, 1.0f));
    const Tensor w = h.f32({8}, std::vector<float>(8, 1.0f));
    CHECK_THROWS_WITH(
        h.backend().rms_norm(x, h.f32({7}, std::vector<float>(7)), 1e-6f, h.f32_nan({2, 8})),
        Catch::Contains("rms_norm: weight [7]"));
    CHECK_THROWS_AS(h.backend().rms_norm(x, w, 1e-6f, h.f32_nan({2, 9})), Error);
    CHECK_THROWS_AS(h.backend().rms_norm(x, w, -1.0f, h.f32_nan({2, 8})), Error);
    CHECK_THROWS_AS(h.backend().add_rms_norm(h.f32_nan({3, 8}), x, w, 1e-6f, h.f32_nan({2, 8})),
                    Error);
    CHECK_THROWS_AS(h.backend().rms_norm(x.view({16}), w, 1e-6f, h.f32_nan({2, 8})), Error);
  }
}

TEST_CASE("rms_norm_heads normalises the chosen heads of each row in place, as float64",
          "[cpu][ops]") {
  // Qwen3's q_norm / k_norm on a fused qkv row: 3 q heads, 2 k heads, 2 v heads of d each.
  OpHarness h;
  std::mt19937_64 rng(21);
  for (int64_t d : {1, 8, 128}) {
    const int64_t rows = 5, nh = 3, nkv = 2, width = (nh + 2 * nkv) * d;
    const auto x_host = random_floats(rng, size_t(rows * width), -3.0f, 3.0f);
    const auto wq = random_floats(rng, size_t(d), 0.5f, 1.5f);
    const auto wk = random_floats(rng, size_t(d), 0.5f, 1.5f);
    const Tensor x = h.f32({rows, width}, x_host);
    h.backend().rms_norm_heads(x, h.f32({d}, wq), 1e-6f, 0, int32_t(nh), int32_t(d));
    h.backend().rms_norm_heads(x, h.f32({d}, wk), 1e-6f, int32_t(nh), int32_t(nkv), int32_t(d));
    // Every head is one "row" of d for the reference; v heads stay as they were.
    std::vector<double> want(x_host.begin(), x_host.end());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < nh + nkv; ++j) {
        const size_t at = size_t(r * width + j * d);
        const std::vector<double> head(want.begin() + long(at), want.begin() + long(at) + d);
        const auto normed = rms_norm_ref(head, j < nh ? wq : wk, 1, d, 1e-6);
        std::copy(normed.begin(), normed.end(), want.begin() + long(at));
      }
    report(fmt::format("rms_norm_heads d {}", d), max_rel_error(h.read(x), want));
  }
  SECTION("errors") {
    const Tensor x = h.f32({2, 16}, std::vector<float>(32, 1.0f));
    const Tensor w = h.f32({8}, std::vector<float>(8, 1.0f));
    CHECK_THROWS_WITH(h.backend().rms_norm_heads(x, w, 1e-6f, 1, 2, 8),
                      Catch::Contains("rms_norm_heads") && Catch::Contains("heads [1, 3)") &&
                          Catch::Contains("[2, 16]"));
    CHECK_THROWS_WITH(h.backend().rms_norm_heads(x, w, 1e-6f, 0, 2, 4),
                      Catch::Contains("rms_norm_heads: weight [8]"));
    CHECK_THROWS_AS(h.backend().rms_norm_heads(x, w, -1.0f, 0, 2, 8), Error);
    CHECK_THROWS_AS(h.backend().rms_norm_heads(x, w, 1e-6f, -1, 1, 8), Error);
  }
}

TEST_CASE("linear matches float64, with and without bias", "[cpu][ops]") {
  // The pool splits a large GEMM by rows (T >= N) or by columns (T < N), in pieces whose
  // edges fall inside the matrices here (N not a multiple of 16, T not of the piece size); the
  // NaN-filled output shows any element no piece wrote.
  const int threads = GENERATE(1, 2, 3);
  OpHarness h(threads);
  std::mt19937_64 rng(3);
  struct Case {
    int64_t t, k, n;
  };
  for (const Case c : {Case{1, 1, 1}, Case{3, 17, 5}, Case{33, 129, 65}, Case{128, 512, 384},
                       Case{1, 896, 4864}, Case{5, 4096, 7}, Case{300, 256, 200},
                       Case{257, 64, 70}, Case{64, 256, 1000}, Case{17, 512, 130}}) {
    for (bool with_bias : {false, true}) {
      const auto x_host = random_floats(rng, size_t(c.t * c.k));
      const auto w_host = random_floats(rng, size_t(c.n * c.k));
      const auto b_host = random_floats(rng, size_t(c.n));
      const Tensor x = h.f32({c.t, c.k}, x_host);
      const Tensor w = h.f32({c.n, c.k}, w_host);
      const Tensor b = h.f32({c.n}, b_host);
      const Tensor out = h.f32_nan({c.t, c.n});
      h.backend().linear(x, w, with_bias ? &b : nullptr, out);
      std::vector<double> want(size_t(c.t * c.n));
      for (int64_t i = 0; i < c.t; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double s = with_bias ? double(b_host[size_t(j)]) : 0.0;
          for (int64_t l = 0; l < c.k; ++l)
            s += double(x_host[size_t(i * c.k + l)]) * double(w_host[size_t(j * c.k + l)]);
          want[size_t(i * c.n + j)] = s;
        }
      report(fmt::format("linear T={} K={} N={} bias={} threads={}", c.t, c.k, c.n, with_bias,
                         threads),
             max_rel_error(h.read(out), want));
    }
  }
  SECTION("K = 0 gives the bias, T = 0 does nothing") {
    const Tensor b = h.f32({3}, {1.0f, 2.0f, 3.0f});
    const Tensor out = h.f32_nan({2, 3});
    h.backend().linear(h.of(DType::f32, {2, 0}), h.of(DType::f32, {3, 0}), &b, out);
    CHECK(h.read(out) == std::vector<float>{1, 2, 3, 1, 2, 3});
    h.backend().linear(h.of(DType::f32, {0, 4}), h.of(DType::f32, {3, 4}), &b,
                       h.of(DType::f32, {0, 3}));
  }
  SECTION("errors") {
    const Tensor x = h.f32({4, 64}, std::vector<float>(256));
    const Tensor w = h.f32({32, 64}, std::vector<float>(2048));
    const Tensor out = h.f32_nan({4, 32});
    CHECK_THROWS_WITH(
        h.backend().linear(x, h.f32({32, 65}, std::vector<float>(32 * 65)), nullptr, out),
        Catch::Contains("linear: w [32, 65]") && Catch::Contains("expected 64"));
    const Tensor bad_bias = h.f32({31}, std::vector<float>(31));
    CHECK_THROWS_WITH(h.backend().linear(x, w, &bad_bias, out), Catch::Contains("bias [31]"));
    CHECK_THROWS_AS(h.backend().linear(x, w, nullptr, h.f32_nan({4, 33})), Error);
    CHECK_THROWS_AS(h.backend().linear(x, w, nullptr, h.f32_nan({5, 32})), Error);
    const Tensor square = h.f32({64, 64}, std::vector<float>(64 * 64));
    CHECK_THROWS_WITH(h.backend().linear(x, square, nullptr, x.view({4, 64})),
                      Catch::Contains("overlaps"));
    CHECK_THROWS_AS(h.backend().linear(x, h.of(DType::f16, {32, 64}), nullptr, out), Error);
  }
}

TEST_CASE("act_mul (silu, gelu, gelu tanh) matches float64", "[cpu][ops]") {
  OpHarness h;
  std::mt19937_64 rng(4);
  const auto act64 = [](GatedActivation act, double g) {
    switch (act) {
      case GatedActivation::silu:
        return g / (1.0 + std::exp(-g));
      case GatedActivation::gelu:
        return 0.5 * g * std::erfc(-g / std::sqrt(2.0));
      case GatedActivation::gelu_tanh:
        return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
    }
    return 0.0;
  };
  for (GatedActivation act :
       {GatedActivation::silu, GatedActivation::gelu, GatedActivation::gelu_tanh}) {
    for (auto [rows, inter] : {std::pair<int64_t, int64_t>{1, 1}, {9, 37}, {64, 4864}}) {
      const auto gu_host = random_floats(rng, size_t(rows * 2 * inter), -8.0f, 8.0f);
      const Tensor gu = h.f32({rows, 2 * inter}, gu_host);
      const Tensor out = h.f32_nan({rows, inter});
      h.backend().act_mul(act, gu, out);
      std::vector<double> want;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < inter; ++i) {
          const double g = gu_host[size_t(r * 2 * inter + i)];
          const double u = gu_host[size_t(r * 2 * inter + inter + i)];
          want.push_back(act64(act, g) * u);
        }
      report(fmt::format("act_mul {} [{}, {}]", gated_activation_name(act), rows, inter),
             max_rel_error(h.read(out), want));
    }
  }
  SECTION("errors") {
    CHECK_THROWS_WITH(
        h.backend().silu_mul(h.f32({2, 7}, std::vector<float>(14)), h.f32_nan({2, 3})),
        Catch::Contains("act_mul: gate_up [2, 7]"));
    CHECK_THROWS_AS(h.backend().silu_mul(h.f32({2, 8}, std::vector<float>(16)), h.f32_nan({2, 8})),
                    Error);
  }
}

TEST_CASE("the shared op checks refuse outputs that overlap their inputs", "[cpu][ops]") {
  // runtime/backend/op_checks.cpp holds the rules both backends share; the CPU backend did not
  // check these three before it used them.
  OpHarness h;
  const Tensor gate_up = h.f32({2, 8}, std::vector<float>(16, 1.0f));
  const Tensor in_gate_up(gate_up.data, DType::f32, gate_up.device, {2, 4});
  CHECK_THROWS_WITH(h.backend().act_mul(GatedActivation::silu, gate_up, in_gate_up),
                    Catch::Contains("act_mul: out [2, 4]") && Catch::Contains("overlaps gate_up"));
  const Tensor x = h.f32({4, 3}, std::vector<float>(12, 1.0f));
  const Tensor in_x(x.data, DType::f32, x.device, {2, 3});
  CHECK_THROWS_WITH(h.backend().gather_rows(x, h.i32({2}, {0, 1}), in_x),
                    Catch::Contains("gather_rows: out [2, 3]") && Catch::Contains("overlaps x"));
  const Tensor cache = h.f32_nan({2, 4, 1, 8});
  const Tensor k = h.f32({1, 8}, std::vector<float>(8, 1.0f));
  CHECK_THROWS_WITH(h.backend().write_kv(k, k, cache, cache, h.i32({1}, {0})),
                    Catch::Contains("write_kv: k_cache") && Catch::Contains("overlaps v_cache"));
}

TEST_CASE("gather_rows picks rows and rejects bad indices", "[cpu][ops]") {
  OpHarness h;
  std::mt19937_64 rng(5);
  const auto x_host = random_floats(rng, 13 * 11);
  const Tensor x = h.f32({13, 11}, x_host);
  const std::vector<int32_t> idx{12, 0, 3, 3};
  const Tensor out = h.f32_nan({4, 11});
  h.backend().gather_rows(x, h.i32({4}, idx), out);
  std::vector<double> want;
  for (int32_t i : idx)
    for (int64_t j = 0; j < 11; ++j) want.push_back(x_host[size_t(i * 11 + j)]);
  CHECK(max_rel_error(h.read(out), want) == 0.0);
  CHECK_THROWS_WITH(h.backend().gather_rows(x, h.i32({1}, {13}), h.f32_nan({1, 11})),
                    Catch::Contains("indices[0] = 13"));
  CHECK_THROWS_AS(h.backend().gather_rows(x, h.i32({1}, {-1}), h.f32_nan({1, 11})), Error);
  CHECK_THROWS_AS(h.backend().gather_rows(x, h.i32({2}, {0, 1}), h.f32_nan({1, 11})), Error);
}

namespace {
// cos/sin table as models build it: inv_freq = base^(-2i/rotary_dim), stored as f32.
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

// Float64 rotation of every head of x [T, heads * head_dim], written as the textbook complex
// multiply (neox pairs i with i + half; gptj pairs 2i with 2i + 1).
std::vector<double> rope_ref(const std::vector<float>& x, const std::vector<int32_t>& pos,
                             const std::vector<float>& cs, int64_t head_dim, int64_t rotary_dim,
                             bool neox) {
  std::vector<double> out(x.begin(), x.end());
  const int64_t row = int64_t(x.size() / pos.size());
  const int64_t half = rotary_dim / 2;
  for (size_t t = 0; t < pos.size(); ++t)
    for (int64_t h0 = 0; h0 < row; h0 += head_dim)
      for (int64_t i = 0; i < half; ++i) {
        const double c = cs[size_t(pos[t] * rotary_dim + i)];
        const double s = cs[size_t(pos[t] * rotary_dim + half + i)];
        const int64_t a = int64_t(t) * row + h0 + (neox ? i : 2 * i);
        const int64_t b = int64_t(t) * row + h0 + (neox ? i + half : 2 * i + 1);
        const double re = x[size_t(a)], im = x[size_t(b)];
        out[size_t(a)] = re * c - im * s;
        out[size_t(b)] = re * s + im * c;
      }
  return out;
}
}  // namespace

TEST_CASE("rope rotates q and k like float64, neox and gptj, full and partial", "[cpu][ops]") {
  OpHarness h;
  std::mt19937_64 rng(6);
  const int64_t tokens = 9, max_pos = 4096;
  std::vector<int32_t> pos_host(static_cast<size_t>(tokens));
  std::uniform_int_distribution<int32_t> pos_dist(0, int32_t(max_pos - 1));
  for (auto& p : pos_host) p = pos_dist(rng);
  pos_host[0] = 0;
  const Tensor positions = h.i32({tokens}, pos_host);
  for (auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{8, 2}, {4, 4}}) {
    for (int64_t head_dim : {64, 80, 128}) {
      for (int64_t rotary_dim : {head_dim, head_dim / 2}) {
        for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj}) {
          const bool neox = style == RopeStyle::neox;
          const auto cs_host = cos_sin_table(max_pos, rotary_dim);
          const auto q_host = random_floats(rng, size_t(tokens * heads * head_dim));
          const auto k_host = random_floats(rng, size_t(tokens * kv_heads * head_dim));
          const Tensor q = h.f32({tokens, heads * head_dim}, q_host);
          const Tensor k = h.f32({tokens, kv_heads * head_dim}, k_host);
          h.backend().rope(q, k, positions, h.f32({max_pos, rotary_dim}, cs_host),
                           int32_t(head_dim), int32_t(rotary_dim), style);
          const std::string what =
              fmt::format("rope {} heads {}/{} d={} rotary={}", neox ? "neox" : "gptj", heads,
                          kv_heads, head_dim, rotary_dim);
          report(what + " q", max_rel_error(h.read(q), rope_ref(q_host, pos_host, cs_host, head_dim,
                                                                rotary_dim, neox)));
          report(what + " k", max_rel_error(h.read(k), rope_ref(k_host, pos_host, cs_host, head_dim,
                                                                rotary_dim, neox)));
        }
      }
    }
  }
  SECTION("errors") {
    const Tensor q = h.f32({2, 128}, std::vector<float>(256));
    const Tensor k = h.f32({2, 64}, std::vector<float>(128));
    const Tensor pos = h.i32({2}, {0, 1});
    const Tensor cs = h.f32({16, 64}, cos_sin_table(16, 64));
    CHECK_NOTHROW(h.backend().rope(q, k, pos, cs, 64, 64, RopeStyle::neox));
    CHECK_THROWS_WITH(h.backend().rope(q, k, pos, cs, 64, 63, RopeStyle::neox),
                      Catch::Contains("rope: rotary_dim = 63"));
    CHECK_THROWS_AS(h.backend().rope(q, k, pos, cs, 32, 64, RopeStyle::neox), Error);
    CHECK_THROWS_WITH(h.backend().rope(q, k, h.i32({2}, {0, 16}), cs, 64, 64, RopeStyle::gptj),
                      Catch::Contains("positions[1] = 16"));
    CHECK_THROWS_AS(h.backend().rope(q, k, pos, cs, 64, 32, RopeStyle::neox), Error);
    CHECK_THROWS_WITH(h.backend().rope(q, k, pos, cs, 48, 48, RopeStyle::neox),
                      Catch::Contains("whole number of heads"));
    CHECK_THROWS_AS(h.backend().rope(q, h.f32({3, 64}, std::vector<float>(192)), pos, cs, 64, 64,
                                     RopeStyle::neox),
                    Error);
  }
}

TEST_CASE("write_kv stores rows at their slots and skips negative slots", "[cpu][ops]") {
  OpHarness h;
  std::mt19937_64 rng(7);
  const int64_t blocks = 5, block_size = 8, kv_heads = 2, d = 16, row = kv_heads * d;
  const int64_t slots = blocks * block_size;
  const std::vector<int32_t> slot_host{39, 0, -1, 17, 8, 9, -1, 23};
  const int64_t t = int64_t(slot_host.size());
  const auto k_host = random_floats(rng, size_t(t * row));
  const auto v_host = random_floats(rng, size_t(t * row));
  const std::vector<float> sentinel(size_t(slots * row), 42.0f);
  const Tensor k_cache = h.f32({blocks, block_size, kv_heads, d}, sentinel);
  const Tensor v_cache = h.f32({blocks, block_size, kv_heads, d}, sentinel);
  h.backend().write_kv(h.f32({t, row}, k_host), h.f32({t, row}, v_host), k_cache, v_cache,
                       h.i32({t}, slot_host));
  std::vector<double> want_k(sentinel.begin(), sentinel.end()), want_v = want_k;
  for (int64_t i = 0; i < t; ++i) {
    if (slot_host[size_t(i)] < 0) continue;
    for (int64_t j = 0; j < row; ++j) {
      want_k[size_t(slot_host[size_t(i)] * row + j)] = k_host[size_t(i * row + j)];
      want_v[size_t(slot_host[size_t(i)] * row + j)] = v_host[size_t(i * row + j)];
    }
  }
  CHECK(max_rel_error(h.read(k_cache), want_k) == 0.0);
  CHECK(max_rel_error(h.read(v_cache), want_v) == 0.0);

  SECTION("errors") {
    const Tensor k = h.f32({1, row}, std::vector<float>(size_t(row)));
    CHECK_THROWS_WITH(h.backend().write_kv(k, k, k_cache, v_cache, h.i32({1}, {40})),
                      Catch::Contains("slot_mapping[0] = 40"));
    const Tensor k_short = h.f32({1, row - 1}, std::vector<float>(size_t(row - 1)));
    CHECK_THROWS_AS(h.backend().write_kv(k_short, k_short, k_cache, v_cache, h.i32({1}, {0})),
                    Error);
    CHECK_THROWS_AS(h.backend().write_kv(k, k, k_cache, v_cache, h.i32({2}, {0, 1})), Error);
    CHECK_THROWS_AS(h.backend().write_kv(k, k, k_cache, h.f32_nan({5, 8, 2, 8}), h.i32({1}, {0})),
                    Error);
  }
}
