// add and the fused ops' default compositions (linear_add, rms_norm_linear,
// rms_norm_linear_act_mul) on the CPU backend: each equals its op sequence bit for bit, and a
// decoder layer written with them equals the add_rms_norm program the model ran before them.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cstring>
#include <random>

#include "op_harness.hpp"
#include "runtime/error.hpp"

using namespace troupe;
using troupe::test::OpHarness;
using troupe::test::random_floats;

namespace {

// Bitwise equality of two f32 tensors' contents (NaN-safe, -0 != +0).
bool same_bits(OpHarness& h, const Tensor& a, const Tensor& b) {
  const auto va = h.read(a), vb = h.read(b);
  return va.size() == vb.size() &&
         std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("add adds in place and checks its arguments", "[cpu][ops]") {
  OpHarness h;
  std::mt19937_64 rng(11);
  const auto r_host = random_floats(rng, 3 * 40), x_host = random_floats(rng, 3 * 40);
  const Tensor r = h.f32({3, 40}, r_host), x = h.f32({3, 40}, x_host);
  h.backend().add(r, x);
  const auto got = h.read(r);
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == r_host[i] + x_host[i]);
  CHECK_THROWS_WITH(h.backend().add(h.f32_nan({3, 41}), x), Catch::Contains("add: residual"));
  CHECK_THROWS_AS(h.backend().add(r, r), Error);
  CHECK_THROWS_AS(h.backend().add(h.of(DType::bf16, {3, 40}), x), Error);
}

TEST_CASE("fused ops equal their op sequences bit for bit", "[cpu][ops]") {
  OpHarness h;
  Backend& b = h.backend();
  std::mt19937_64 rng(12);
  const float eps = 1e-5f;
  for (auto [t, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 48}, {5, 33, 17}}) {
    for (bool with_bias : {false, true}) {
      const std::string what = fmt::format("T={} K={} N={}{}", t, k, n, with_bias ? " +bias" : "");
      INFO(what);
      const Tensor x = h.f32({t, k}, random_floats(rng, size_t(t * k), -2.0f, 2.0f));
      const Tensor nw = h.f32({k}, random_floats(rng, size_t(k), 0.5f, 1.5f));
      const Tensor w = h.f32({n, k}, random_floats(rng, size_t(n * k)));
      const Tensor w2 = h.f32({2 * n, k}, random_floats(rng, size_t(2 * n * k)));
      const Tensor bias = h.f32({n}, random_floats(rng, size_t(n)));
      const Tensor bias2 = h.f32({2 * n}, random_floats(rng, size_t(2 * n)));
      const Tensor* bp = with_bias ? &bias : nullptr;
      const Tensor* bp2 = with_bias ? &bias2 : nullptr;
      const auto r_host = random_floats(rng, size_t(t * n), -2.0f, 2.0f);

      // linear_add == linear, add
      const Tensor r1 = h.f32({t, n}, r_host), r2 = h.f32({t, n}, r_host);
      b.linear_add(x, w, bp, r1, h.f32_nan({t, n}));
      const Tensor s = h.f32_nan({t, n});
      b.linear(x, w, bp, s);
      b.add(r2, s);
      CHECK(same_bits(h, r1, r2));

      // rms_norm_linear == rms_norm, linear
      const Tensor o1 = h.f32_nan({t, n}), o2 = h.f32_nan({t, n}), hs = h.f32_nan({t, k});
      b.rms_norm_linear(x, nw, eps, h.f32_nan({t, k}), w, bp, o1);
      b.rms_norm(x, nw, eps, hs);
      b.linear(hs, w, bp, o2);
      CHECK(same_bits(h, o1, o2));

      // rms_norm_linear_act_mul == rms_norm, linear, act_mul
      for (GatedActivation act : {GatedActivation::silu, GatedActivation::gelu_tanh}) {
        const Tensor a1 = h.f32_nan({t, n}), a2 = h.f32_nan({t, n}), gu = h.f32_nan({t, 2 * n});
        b.rms_norm_linear_act_mul(x, nw, eps, h.f32_nan({t, k}), w2, bp2, act,
                                  h.f32_nan({t, 2 * n}), a1);
        b.rms_norm(x, nw, eps, hs);
        b.linear(hs, w2, bp2, gu);
        b.act_mul(act, gu, a2);
        CHECK(same_bits(h, a1, a2));
      }
    }
  }
}

// Two decoder layers (random weights) in the model's old form, with add_rms_norm carrying each
// branch's output into the next norm, and in its fused form (llama.cpp's forward): the residual
// stream and the final norm agree bit for bit.
TEST_CASE("a decoder layer with the fused ops equals the add_rms_norm program", "[cpu][ops]") {
  OpHarness h;
  Backend& b = h.backend();
  std::mt19937_64 rng(13);
  const int64_t t = 3, hidden = 64, qkv_n = 96, attn_n = 32, inter = 80;
  const float eps = 1e-6f;
  struct Layer {
    Tensor in_norm, qkv_w, o_w, post_norm, gu_w, down_w;
  };
  std::vector<Layer> layers;
  for (int i = 0; i < 2; ++i)
    layers.push_back({h.f32({hidden}, random_floats(rng, size_t(hidden), 0.5f, 1.5f)),
                      h.f32({qkv_n, hidden}, random_floats(rng, size_t(qkv_n * hidden))),
                      h.f32({hidden, attn_n}, random_floats(rng, size_t(hidden * attn_n))),
                      h.f32({hidden}, random_floats(rng, size_t(hidden), 0.5f, 1.5f)),
                      h.f32({2 * inter, hidden}, random_floats(rng, size_t(2 * inter * hidden))),
                      h.f32({hidden, inter}, random_floats(rng, size_t(hidden * inter)))});
  const Tensor final_norm = h.f32({hidden}, random_floats(rng, size_t(hidden), 0.5f, 1.5f));
  const auto embedded = random_floats(rng, size_t(t * hidden), -1.0f, 1.0f);
  // Attention stands in as the first attn_n columns of qkv (a copy), which is all the residual
  // stream needs to see.
  const auto attention = [&](const Tensor& qkv, const Tensor& attn) {
    auto v = h.read(qkv);
    std::vector<float> a;
    for (int64_t r = 0; r < t; ++r)
      a.insert(a.end(), v.begin() + r * qkv_n, v.begin() + r * qkv_n + attn_n);
    b.upload(attn, a.data(), a.size() * sizeof(float));
  };
  const Tensor qkv = h.f32_nan({t, qkv_n}), attn = h.f32_nan({t, attn_n});
  const Tensor gate_up = h.f32_nan({t, 2 * inter}), act = h.f32_nan({t, inter});

  // Before: the add_rms_norm program.
  const Tensor r_old = h.f32({t, hidden}, embedded), x = h.f32_nan({t, hidden});
  const Tensor h_old = h.f32_nan({t, hidden});
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& L = layers[li];
    if (li == 0)
      b.rms_norm(r_old, L.in_norm, eps, h_old);
    else
      b.add_rms_norm(r_old, x, L.in_norm, eps, h_old);
    b.linear(h_old, L.qkv_w, nullptr, qkv);
    attention(qkv, attn);
    b.linear(attn, L.o_w, nullptr, x);
    b.add_rms_norm(r_old, x, L.post_norm, eps, h_old);
    b.linear(h_old, L.gu_w, nullptr, gate_up);
    b.act_mul(GatedActivation::silu, gate_up, act);
    b.linear(act, L.down_w, nullptr, x);
  }
  b.add_rms_norm(r_old, x, final_norm, eps, h_old);

  // After: the fused program.
  const Tensor r_new = h.f32({t, hidden}, embedded), h_new = h.f32_nan({t, hidden});
  const Tensor scratch_h = h.f32_nan({t, hidden});
  for (const Layer& L : layers) {
    b.rms_norm_linear(r_new, L.in_norm, eps, scratch_h, L.qkv_w, nullptr, qkv);
    attention(qkv, attn);
    b.linear_add(attn, L.o_w, nullptr, r_new, x);
    b.rms_norm_linear_act_mul(r_new, L.post_norm, eps, scratch_h, L.gu_w, nullptr,
                              GatedActivation::silu, gate_up, act);
    b.linear_add(act, L.down_w, nullptr, r_new, x);
  }
  b.rms_norm(r_new, final_norm, eps, h_new);

  CHECK(same_bits(h, r_new, r_old));
  CHECK(same_bits(h, h_new, h_old));
}
