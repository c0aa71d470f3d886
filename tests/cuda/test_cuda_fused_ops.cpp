// The fused ops (linear_add, rms_norm_linear, rms_norm_linear_act_mul,
// rms_norm_linear_rope_qkv_to_cache) and add on CUDA: each
// fused op equals the same op sequence run on the same CUDA backend bit for bit (the contract
// of backend.hpp's fused ops), whether the skinny GEMM fuses it (T = 1: its scratch is left
// untouched) or the backend runs the sequence (T > 1, or pointers the fused kernel does not
// take: the scratch is written); and against the CPU reference within the usual tolerance.
#include <cstring>

#include "cuda/kernels.hpp"
#include "tests/cuda/cuda_harness.hpp"

namespace troupe::test {
namespace {

std::vector<uint8_t> bits(Pair& p, const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  p.gpu().download(out.data(), t, out.size());
  return out;
}

/// Whether a GPU tensor still holds only NaN (the fused kernel did not write it).
bool all_nan(Pair& p, const Tensor& t) {
  for (float v : p.read(t))
    if (!std::isnan(v)) return false;
  return true;
}

/// Reports whether `got` equals `want` bit for bit (counting the differing elements).
void check_same_bits(Pair& p, const std::string& what, const Tensor& got, const Tensor& want) {
  const auto a = bits(p, got), b = bits(p, want);
  REQUIRE(a.size() == b.size());
  const size_t es = dtype_size(got.dtype);
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); i += es)
    if (std::memcmp(a.data() + i, b.data() + i, es) != 0) ++differ;
  std::printf("%-72s %zu of %zu elements differ\n", what.c_str(), differ, a.size() / es);
  INFO(what << ": " << differ << " elements differ from the op sequence");
  CHECK(differ == 0);
}

/// Rounds a CPU (f32) tensor's values to dt in place.
void round_cpu(Pair& p, const Tensor& t, DType dt) {
  const auto v = rounded(p.read(t), dt);
  p.cpu().upload(t, v.data(), t.nbytes());
}

struct Shape {
  int64_t k, n;
};

// K: one vectorised rms_norm block of 4096 / 8 = 512 threads (two of the norm's warps per GEMV
// warp), 1024 (fewer norm warps than GEMV warps), 4104 (17 norm warps), 72 (one warp, most
// lanes idle) and 16384 (1024 threads, two vectors each).
// N: Llama-sized rows, and odd counts that leave warps of the last CTA without rows.
const Shape kShapes[] = {{4096, 1024}, {1024, 33}, {4104, 300}, {72, 9}, {16384, 64}, {4096, 1}};
const int64_t kRows[] = {1, 2, 3, 8, 12};  // past kGemvMaxRows (1) the op sequence runs

// Whether the fused kernel takes T rows of K (the scratch then stays untouched).
bool fused(int64_t t, int64_t k, bool norm) {
  return t <= (norm ? cuda::kGemvMaxNormRows : cuda::kGemvMaxFusedRows) && k % 8 == 0 &&
         (!norm || t * k * 2 <= cuda::kGemvMaxStagedBytes);
}

TEST_CASE("cuda linear_add equals linear then add, and the CPU", "[cuda][ops][fused]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(21);
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const Shape& s : kShapes) {
      for (int64_t t : kRows) {
        for (bool with_bias : {false, true}) {
          const std::string what = fmt::format("linear_add {} T={} K={} N={}{}", dname(dt), t, s.k,
                                               s.n, with_bias ? " +bias" : "");
          const float scale = 1.0f / std::sqrt(float(s.k));
          const auto x = rounded(random_floats(rng, size_t(t * s.k)), dt);
          const auto w = rounded(random_floats(rng, size_t(s.n * s.k), -scale, scale), dt);
          const auto b = rounded(random_floats(rng, size_t(s.n)), dt);
          const auto r = rounded(random_floats(rng, size_t(t * s.n), -2.0f, 2.0f), dt);
          const Tensor gx = p.gpu_floats(dt, {t, s.k}, x), gw = p.gpu_floats(dt, {s.n, s.k}, w);
          const Tensor gb = p.gpu_floats(dt, {s.n}, b);
          const Tensor* bias = with_bias ? &gb : nullptr;

          const Tensor fused_r = p.gpu_floats(dt, {t, s.n}, r);
          const Tensor scratch = p.gpu_nan(dt, {t, s.n});
          p.gpu().linear_add(gx, gw, bias, fused_r, scratch);
          const Tensor seq_r = p.gpu_floats(dt, {t, s.n}, r);
          const Tensor seq_out = p.gpu_nan(dt, {t, s.n});
          p.gpu().linear(gx, gw, bias, seq_out);
          p.gpu().add(seq_r, seq_out);
          check_same_bits(p, what, fused_r, seq_r);
          CHECK(all_nan(p, scratch) == fused(t, s.k, false));

          const Tensor cr = p.cpu_f32({t, s.n}, r), cb = p.cpu_f32({s.n}, b);
          p.cpu().linear_add(p.cpu_f32({t, s.k}, x), p.cpu_f32({s.n, s.k}, w),
                             with_bias ? &cb : nullptr, cr, p.cpu_nan({t, s.n}));
          report(what + " vs cpu", norm_error(p.read(fused_r), p.read(cr)), tolerance(dt));
        }
      }
    }
  }
}

TEST_CASE("cuda rms_norm_linear equals rms_norm then linear, and the CPU", "[cuda][ops][fused]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(22);
  const float eps = 1e-5f;
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const Shape& s : kShapes) {
      for (int64_t t : kRows) {
        for (bool with_bias : {false, true}) {
          const std::string what = fmt::format("rms_norm_linear {} T={} K={} N={}{}", dname(dt), t,
                                               s.k, s.n, with_bias ? " +bias" : "");
          const float scale = 1.0f / std::sqrt(float(s.k));
          const auto x = rounded(random_floats(rng, size_t(t * s.k), -2.0f, 2.0f), dt);
          const auto nw = rounded(random_floats(rng, size_t(s.k), 0.5f, 1.5f), dt);
          const auto w = rounded(random_floats(rng, size_t(s.n * s.k), -scale, scale), dt);
          const auto b = rounded(random_floats(rng, size_t(s.n)), dt);
          const Tensor gx = p.gpu_floats(dt, {t, s.k}, x), gnw = p.gpu_floats(dt, {s.k}, nw);
          const Tensor gw = p.gpu_floats(dt, {s.n, s.k}, w), gb = p.gpu_floats(dt, {s.n}, b);
          const Tensor* bias = with_bias ? &gb : nullptr;

          const Tensor h = p.gpu_nan(dt, {t, s.k}), out = p.gpu_nan(dt, {t, s.n});
          p.gpu().rms_norm_linear(gx, gnw, eps, h, gw, bias, out);
          const Tensor seq_h = p.gpu_nan(dt, {t, s.k}), seq_out = p.gpu_nan(dt, {t, s.n});
          p.gpu().rms_norm(gx, gnw, eps, seq_h);
          p.gpu().linear(seq_h, gw, bias, seq_out);
          check_same_bits(p, what, out, seq_out);
          CHECK(all_nan(p, h) == fused(t, s.k, true));

          const Tensor cb = p.cpu_f32({s.n}, b), c_out = p.cpu_nan({t, s.n});
          p.cpu().rms_norm_linear(p.cpu_f32({t, s.k}, x), p.cpu_f32({s.k}, nw), eps,
                                  p.cpu_nan({t, s.k}), p.cpu_f32({s.n, s.k}, w),
                                  with_bias ? &cb : nullptr, c_out);
          report(what + " vs cpu", norm_error(p.read(out), p.read(c_out)), tolerance(dt));
        }
      }
    }
  }
}

TEST_CASE("cuda rms_norm_linear_act_mul equals rms_norm, linear, act_mul, and the CPU",
          "[cuda][ops][fused]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(23);
  const float eps = 1e-6f;
  for (GatedActivation act :
       {GatedActivation::silu, GatedActivation::gelu_tanh, GatedActivation::gelu}) {
    for (DType dt : {DType::bf16, DType::f16}) {
      for (const Shape& s : kShapes) {
        for (int64_t t : kRows) {
          for (bool with_bias : {false, true}) {
            // gelu (erf) only at one shape: it shares every code path but the function.
            if (act == GatedActivation::gelu && (s.k != 4096 || s.n != 1024)) continue;
            const std::string what = fmt::format("rms_norm_linear_act_mul {} {} T={} K={} I={}{}",
                                                 gated_activation_name(act), dname(dt), t, s.k, s.n,
                                                 with_bias ? " +bias" : "");
            const int64_t n2 = 2 * s.n;
            // Gate and up of a few units each, so the activation sees its whole range.
            const float scale = 3.0f / std::sqrt(float(s.k));
            const auto x = rounded(random_floats(rng, size_t(t * s.k), -2.0f, 2.0f), dt);
            const auto nw = rounded(random_floats(rng, size_t(s.k), 0.5f, 1.5f), dt);
            const auto w = rounded(random_floats(rng, size_t(n2 * s.k), -scale, scale), dt);
            const auto b = rounded(random_floats(rng, size_t(n2)), dt);
            const Tensor gx = p.gpu_floats(dt, {t, s.k}, x), gnw = p.gpu_floats(dt, {s.k}, nw);
            const Tensor gw = p.gpu_floats(dt, {n2, s.k}, w), gb = p.gpu_floats(dt, {n2}, b);
            const Tensor* bias = with_bias ? &gb : nullptr;

            const Tensor h = p.gpu_nan(dt, {t, s.k}), gu = p.gpu_nan(dt, {t, n2});
            const Tensor out = p.gpu_nan(dt, {t, s.n});
            p.gpu().rms_norm_linear_act_mul(gx, gnw, eps, h, gw, bias, act, gu, out);
            const Tensor seq_h = p.gpu_nan(dt, {t, s.k}), seq_gu = p.gpu_nan(dt, {t, n2});
            const Tensor seq_out = p.gpu_nan(dt, {t, s.n});
            p.gpu().rms_norm(gx, gnw, eps, seq_h);
            p.gpu().linear(seq_h, gw, bias, seq_gu);
            p.gpu().act_mul(act, seq_gu, seq_out);
            check_same_bits(p, what, out, seq_out);
            CHECK(all_nan(p, h) == fused(t, s.k, true));
            CHECK(all_nan(p, gu) == fused(t, s.k, true));

            // The CPU reference rounds h and gate_up to dt as the GPU's tensors hold them: with
            // a few outputs, a gate that nearly cancels against its bias would otherwise turn
            // the rounding of gate_up into a large relative error of the whole output.
            const Tensor cb = p.cpu_f32({n2}, b), c_h = p.cpu_nan({t, s.k});
            const Tensor c_gu = p.cpu_nan({t, n2}), c_out = p.cpu_nan({t, s.n});
            p.cpu().rms_norm(p.cpu_f32({t, s.k}, x), p.cpu_f32({s.k}, nw), eps, c_h);
            round_cpu(p, c_h, dt);
            p.cpu().linear(c_h, p.cpu_f32({n2, s.k}, w), with_bias ? &cb : nullptr, c_gu);
            round_cpu(p, c_gu, dt);
            p.cpu().act_mul(act, c_gu, c_out);
            // With under 64 outputs one element can carry the whole norm: three bf16 roundings
            // (gate_up, act, product) flip at different sums on the two backends, and a flipped
            // gate near zero measured up to 48% apart (I = 1). The bits are checked above.
            if (t * s.n >= 64)
              report(what + " vs cpu", norm_error(p.read(out), p.read(c_out)), tolerance(dt));
          }
        }
      }
    }
  }
}

TEST_CASE("cuda fused ops run the op sequence where the fused kernel declines",
          "[cuda][ops][fused]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(24);
  const DType dt = DType::bf16;
  const int64_t t = 2, k = 256, n = 40;
  const auto x = rounded(random_floats(rng, size_t(t * k), -2.0f, 2.0f), dt);
  const auto nw = rounded(random_floats(rng, size_t(k), 0.5f, 1.5f), dt);
  const auto w = rounded(random_floats(rng, size_t(2 * n * k), -0.1f, 0.1f), dt);
  const Tensor gx = p.gpu_floats(dt, {t, k}, x), gnw = p.gpu_floats(dt, {k}, nw);
  const Tensor gw = p.gpu_floats(dt, {2 * n, k}, w);
  // h one element into its buffer: rms_norm takes its scalar path for it, so the fused kernel
  // (which replays the vectorised one) must not run.
  const Tensor h = p.gpu_nan(dt, {t * k + 1}).rows(1, t * k + 1).view({t, k});
  const Tensor out = p.gpu_nan(dt, {t, n}), gu = p.gpu_nan(dt, {t, 2 * n});
  p.gpu().rms_norm_linear_act_mul(gx, gnw, 1e-5f, h, gw, nullptr, GatedActivation::silu, gu, out);
  const Tensor seq_h = p.gpu_nan(dt, {t * k + 1}).rows(1, t * k + 1).view({t, k});
  const Tensor seq_gu = p.gpu_nan(dt, {t, 2 * n}), seq_out = p.gpu_nan(dt, {t, n});
  p.gpu().rms_norm(gx, gnw, 1e-5f, seq_h);
  p.gpu().linear(seq_h, gw, nullptr, seq_gu);
  p.gpu().act_mul(GatedActivation::silu, seq_gu, seq_out);
  check_same_bits(p, "rms_norm_linear_act_mul bf16, h misaligned", out, seq_out);
  CHECK_FALSE(all_nan(p, h));

  // An f32 out (logits) is not fused either. (Aligned h this time: the scalar norm adds its
  // squares in another order than the vectorised one, so the two h differ in their last bits.)
  const Tensor logits = p.gpu_nan(DType::f32, {t, 2 * n});
  const Tensor seq_logits = p.gpu_nan(DType::f32, {t, 2 * n});
  const Tensor h2 = p.gpu_nan(dt, {t, k}), seq_h2 = p.gpu_nan(dt, {t, k});
  p.gpu().rms_norm_linear(gx, gnw, 1e-5f, h2, gw, nullptr, logits);
  p.gpu().rms_norm(gx, gnw, 1e-5f, seq_h2);
  p.gpu().linear(seq_h2, gw, nullptr, seq_logits);
  check_same_bits(p, "rms_norm_linear bf16 -> f32 logits", logits, seq_logits);
}

TEST_CASE("cuda add and the fused ops check their arguments", "[cuda][ops][fused]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  const DType bf = DType::bf16;
  const Tensor x = p.gpu_nan(bf, {2, 64}), w = p.gpu_nan(bf, {32, 64});
  const Tensor nw = p.gpu_nan(bf, {64}), r = p.gpu_nan(bf, {2, 32});
  using Catch::Contains;
  CHECK_THROWS_WITH(p.gpu().add(r, p.gpu_nan(bf, {2, 31})),
                    Contains("add") && Contains("residual"));
  CHECK_THROWS_WITH(p.gpu().add(r, p.gpu_nan(DType::f16, {2, 32})), Contains("add"));
  CHECK_THROWS_WITH(p.gpu().linear_add(x, w, nullptr, r, p.gpu_nan(bf, {2, 33})),
                    Contains("linear_add") && Contains("scratch"));
  CHECK_THROWS_WITH(p.gpu().linear_add(x, w, nullptr, p.gpu_nan(DType::f32, {2, 32}),
                                       p.gpu_nan(DType::f32, {2, 32})),
                    Contains("linear_add") && Contains("residual"));
  CHECK_THROWS_WITH(p.gpu().rms_norm_linear(x, nw, 1e-5f, p.gpu_nan(bf, {2, 63}), w, nullptr, r),
                    Contains("rms_norm_linear"));
  // The fused kernel reads x while it writes out, so they may not overlap.
  CHECK_THROWS_WITH(p.gpu().rms_norm_linear(x, nw, 1e-5f, p.gpu_nan(bf, {2, 64}),
                                            p.gpu_nan(bf, {64, 64}), nullptr, x),
                    Contains("rms_norm_linear") && Contains("overlaps"));
  CHECK_THROWS_WITH(
      p.gpu().rms_norm_linear_act_mul(x, nw, 1e-5f, p.gpu_nan(bf, {2, 64}), w, nullptr,
                                      GatedActivation::silu, r, p.gpu_nan(bf, {2, 15})),
      Contains("rms_norm_linear_act_mul") && Contains("out"));
}

}  // namespace
}  // namespace troupe::test

namespace troupe::test {
namespace {

TEST_CASE("cuda add_rms_norm equals add then rms_norm bit for bit", "[cuda][ops][fused]") {
  // The model's add_rms_norm program (batches past the skinny GEMM) and its fused-op program
  // (add inside linear_add, norm inside the next GEMM) must agree exactly.
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(26);
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const auto& [t, h] : std::vector<std::pair<int64_t, int64_t>>{{3, 64}, {256, 4096},
                                                                        {17, 3584}}) {
      const auto r = rounded(random_floats(rng, size_t(t * h), -4.0f, 4.0f), dt);
      const auto x = rounded(random_floats(rng, size_t(t * h), -1.0f, 1.0f), dt);
      const auto w = rounded(random_floats(rng, size_t(h), 0.5f, 1.5f), dt);
      const Tensor gx = p.gpu_floats(dt, {t, h}, x), gw = p.gpu_floats(dt, {h}, w);
      const Tensor fused_r = p.gpu_floats(dt, {t, h}, r), fused_h = p.gpu_nan(dt, {t, h});
      p.gpu().add_rms_norm(fused_r, gx, gw, 1e-5f, fused_h);
      const Tensor seq_r = p.gpu_floats(dt, {t, h}, r), seq_h = p.gpu_nan(dt, {t, h});
      p.gpu().add(seq_r, gx);
      p.gpu().rms_norm(seq_r, gw, 1e-5f, seq_h);
      const std::string what = fmt::format("add_rms_norm {} T={} H={}", dname(dt), t, h);
      check_same_bits(p, what + " residual", fused_r, seq_r);
      check_same_bits(p, what + " out", fused_h, seq_h);
    }
  }
}

}  // namespace

namespace {

struct RopeCase {
  int64_t nh, nkv, d, rotary, k;
  RopeStyle style;
};

}  // namespace

TEST_CASE("cuda rms_norm_linear_rope_qkv_to_cache equals rms_norm_linear then rope_qkv_to_cache",
          "[cuda][ops][fused]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(25);
  const float eps = 1e-5f;
  const int64_t blocks = 6, block_size = 16, max_pos = 2048;
  const RopeCase cases[] = {
      {32, 8, 128, 128, 4096, RopeStyle::neox},  // Llama-3-8B's qkv
      {28, 4, 128, 128, 3584, RopeStyle::neox},  // Qwen2.5-7B's (with its qkv bias below)
      {8, 2, 64, 64, 1024, RopeStyle::gptj},
      {4, 4, 64, 24, 72, RopeStyle::neox},   // partial rotary: an unrotated tail per head
      {4, 2, 64, 32, 264, RopeStyle::gptj},  // partial gptj
      {4, 2, 16, 16, 72, RopeStyle::neox},   // the test fixtures' head dim
  };
  for (DType dt : {DType::bf16, DType::f16}) {
    for (const RopeCase& c : cases) {
      const int64_t q_row = c.nh * c.d, kv_row = c.nkv * c.d, n = q_row + 2 * kv_row;
      for (int64_t t : {1, 3}) {  // past one row the backend runs the op sequence
        for (bool with_bias : {false, true}) {
          for (int32_t slot0 : {37, -1}) {  // a cache slot, and a padding token
            const std::string what = fmt::format(
                "rms_norm_linear_rope_qkv_to_cache {} {} {}/{} d={} rotary={} K={} T={}{} slot {}",
                dname(dt), c.style == RopeStyle::neox ? "neox" : "gptj", c.nh, c.nkv, c.d,
                c.rotary, c.k, t, with_bias ? " +bias" : "", slot0);
            INFO(what);
            const float scale = 1.0f / std::sqrt(float(c.k));
            const auto x = rounded(random_floats(rng, size_t(t * c.k), -2.0f, 2.0f), dt);
            const auto nw = rounded(random_floats(rng, size_t(c.k), 0.5f, 1.5f), dt);
            const auto w = rounded(random_floats(rng, size_t(n * c.k), -scale, scale), dt);
            const auto b = rounded(random_floats(rng, size_t(n)), dt);
            std::vector<int32_t> pos(static_cast<size_t>(t)), slots(static_cast<size_t>(t));
            for (int64_t i = 0; i < t; ++i) {
              pos[size_t(i)] = int32_t((1531 + 97 * i) % max_pos);
              slots[size_t(i)] = i == 0 ? slot0 : int32_t(50 + i);
            }
            const Tensor gx = p.gpu_floats(dt, {t, c.k}, x), gnw = p.gpu_floats(dt, {c.k}, nw);
            const Tensor gw = p.gpu_floats(dt, {n, c.k}, w), gb = p.gpu_floats(dt, {n}, b);
            const Tensor* bias = with_bias ? &gb : nullptr;
            const Tensor gpos = p.gpu_i32({t}, pos), gslots = p.gpu_i32({t}, slots);
            const Tensor gcs = p.gpu_floats(DType::f32, {max_pos, c.rotary},
                                            rope_cos_sin(max_pos, c.rotary, 500000.0));
            const std::vector<float> sentinel(size_t(blocks * block_size * kv_row), 3.0f);
            const auto caches = [&] {
              return std::pair{p.gpu_floats(dt, {blocks, block_size, c.nkv, c.d}, sentinel),
                               p.gpu_floats(dt, {blocks, block_size, c.nkv, c.d}, sentinel)};
            };

            const auto [kc, vc] = caches();
            const Tensor h = p.gpu_nan(dt, {t, c.k}), qkv = p.gpu_nan(dt, {t, n});
            const Tensor q = p.gpu_nan(dt, {t, q_row});
            p.gpu().rms_norm_linear_rope_qkv_to_cache(
                gx, gnw, eps, h, gw, bias, qkv, gpos, gcs, int32_t(c.d), int32_t(c.rotary),
                c.style, int32_t(c.nh), int32_t(c.nkv), kc, vc, gslots, q);

            const auto [seq_kc, seq_vc] = caches();
            const Tensor seq_h = p.gpu_nan(dt, {t, c.k}), seq_qkv = p.gpu_nan(dt, {t, n});
            const Tensor seq_q = p.gpu_nan(dt, {t, q_row});
            p.gpu().rms_norm_linear(gx, gnw, eps, seq_h, gw, bias, seq_qkv);
            p.gpu().rope_qkv_to_cache(seq_qkv, gpos, gcs, int32_t(c.d), int32_t(c.rotary),
                                      c.style, int32_t(c.nh), int32_t(c.nkv), seq_kc, seq_vc,
                                      gslots, seq_q);
            check_same_bits(p, what + " q", q, seq_q);
            check_same_bits(p, what + " k cache", kc, seq_kc);
            check_same_bits(p, what + " v cache", vc, seq_vc);
            // Fused (one row): neither scratch is written.
            CHECK(all_nan(p, qkv) == (t == 1));
            CHECK(all_nan(p, h) == (t == 1));
          }
        }
      }
    }
  }
}

TEST_CASE("cuda rms_norm_linear_rope_qkv_to_cache reports a bad position or slot",
          "[cuda][errors][fused]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  const DType bf = DType::bf16;
  const int64_t nh = 4, nkv = 2, d = 64, k = 256, n = (nh + 2 * nkv) * d;
  const Tensor x = p.gpu_floats(bf, {1, k}, std::vector<float>(size_t(k), 0.5f));
  const Tensor nw = p.gpu_floats(bf, {k}, std::vector<float>(size_t(k), 1.0f));
  const Tensor w = p.gpu_floats(bf, {n, k}, std::vector<float>(size_t(n * k), 0.01f));
  const Tensor h = p.gpu_nan(bf, {1, k}), qkv = p.gpu_nan(bf, {1, n}), q = p.gpu_nan(bf, {1, nh * d});
  const Tensor kc = p.gpu_nan(bf, {4, 16, nkv, d}), vc = p.gpu_nan(bf, {4, 16, nkv, d});
  const Tensor cs = p.gpu_floats(DType::f32, {16, d}, rope_cos_sin(16, d));
  const auto run = [&](int32_t position, int32_t slot) {
    p.gpu().rms_norm_linear_rope_qkv_to_cache(x, nw, 1e-5f, h, w, nullptr, qkv,
                                              p.gpu_i32({1}, {position}), cs, int32_t(d),
                                              int32_t(d), RopeStyle::neox, int32_t(nh),
                                              int32_t(nkv), kc, vc, p.gpu_i32({1}, {slot}), q);
  };
  run(16, 0);  // cos_sin has 16 rows
  CHECK_THROWS_WITH(p.gpu().synchronize(), Catch::Contains("rope"));
  run(3, 64);  // 4 blocks of 16 slots
  CHECK_THROWS_WITH(p.gpu().synchronize(), Catch::Contains("slot_mapping"));
  run(3, 5);
  CHECK_NOTHROW(p.gpu().synchronize());
  // A decode step's only synchronisation is sample()'s, which brings the error word back with
  // the sampled tokens: a bad slot earlier in the step fails the sample call by name, and the
  // word is cleared for the next one.
  const Tensor logits = p.gpu_floats(DType::f32, {1, 64}, std::vector<float>(64, 0.0f));
  std::vector<SamplingRow> rows(1);
  rows[0].temperature = 0.0f;
  run(3, 64);
  CHECK_THROWS_WITH(p.gpu().sample(logits, rows), Catch::Contains("slot_mapping"));
  run(3, 5);
  std::vector<SampledToken> tokens;
  CHECK_NOTHROW(tokens = p.gpu().sample(logits, rows));
  REQUIRE(tokens.size() == 1);
  CHECK(tokens[0].token == 0);  // greedy over equal logits: the lowest id
}

}  // namespace troupe::test
