// CUDA ops against the CPU reference backend, on fresh random inputs, for every compute dtype
// and several shapes (odd sizes included): embedding, gather_rows, rms_norm, add_rms_norm,
// linear, rope, write_kv, silu_mul, copy. Attention, sampling, graphs and error paths have
// their own files. Inputs are rounded to the tested dtype first, so the CPU (f32) computes on
// exactly the values the GPU sees; outputs start as NaN.
#include <algorithm>
#include <numeric>

#include "tests/cuda/cuda_harness.hpp"

namespace troupe::test {
namespace {

TEST_CASE("cuda embedding and gather_rows copy the indexed rows", "[cuda][ops]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(1);
  for (DType dt : kFloatTypes) {
    for (int64_t h : {4096, 100, 33}) {  // 16-byte, 8-byte and 2-byte row access
      for (int64_t t : {1, 7, 300}) {
        const int64_t vocab = 1000;
        const auto table = rounded(random_floats(rng, size_t(vocab * h)), dt);
        std::vector<int32_t> ids(static_cast<size_t>(t));
        std::uniform_int_distribution<int32_t> pick(0, int32_t(vocab - 1));
        for (auto& id : ids) id = pick(rng);

        const Tensor g_table = p.gpu_floats(dt, {vocab, h}, table);
        const Tensor g_ids = p.gpu_i32({t}, ids);
        const Tensor g_out = p.gpu_nan(dt, {t, h});
        p.gpu().embedding(g_ids, g_table, g_out);
        const Tensor c_table = p.cpu_f32({vocab, h}, table);
        const Tensor c_ids = p.cpu_i32({t}, ids);
        const Tensor c_out = p.cpu_nan({t, h});
        p.cpu().embedding(c_ids, c_table, c_out);
        report(fmt::format("embedding {} T={} H={}", dname(dt), t, h),
               norm_error(p.read(g_out), p.read(c_out)), 1e-7);

        const Tensor g_rows = p.gpu_nan(dt, {t, h});
        p.gpu().gather_rows(g_table, g_ids, g_rows);
        const Tensor c_rows = p.cpu_nan({t, h});
        p.cpu().gather_rows(c_table, c_ids, c_rows);
        report(fmt::format("gather_rows {} S={} H={}", dname(dt), t, h),
               norm_error(p.read(g_rows), p.read(c_rows)), 1e-7);
      }
    }
  }
}

TEST_CASE("cuda rms_norm and add_rms_norm match the CPU", "[cuda][ops]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(2);
  for (DType dt : kFloatTypes) {
    for (int64_t h : {4096, 5120, 129, 8}) {
      for (int64_t t : {1, 5, 64}) {
        const float eps = 1e-5f;
        const auto x = rounded(random_floats(rng, size_t(t * h), -2.0f, 2.0f), dt);
        const auto r = rounded(random_floats(rng, size_t(t * h), -2.0f, 2.0f), dt);
        const auto w = rounded(random_floats(rng, size_t(h), 0.5f, 1.5f), dt);

        const Tensor gx = p.gpu_floats(dt, {t, h}, x), gw = p.gpu_floats(dt, {h}, w);
        const Tensor g_out = p.gpu_nan(dt, {t, h});
        p.gpu().rms_norm(gx, gw, eps, g_out);
        const Tensor cx = p.cpu_f32({t, h}, x), cw = p.cpu_f32({h}, w);
        const Tensor c_out = p.cpu_nan({t, h});
        p.cpu().rms_norm(cx, cw, eps, c_out);
        report(fmt::format("rms_norm {} T={} H={}", dname(dt), t, h),
               norm_error(p.read(g_out), p.read(c_out)), tolerance(dt));

        // The CPU keeps the residual in f32; the GPU rounds it to dt, like the tensor it is.
        // Compare the residual against the rounded CPU residual.
        const Tensor gr = p.gpu_floats(dt, {t, h}, r);
        const Tensor g_out2 = p.gpu_nan(dt, {t, h});
        p.gpu().add_rms_norm(gr, gx, gw, eps, g_out2);
        const Tensor cr = p.cpu_f32({t, h}, r);
        const Tensor c_out2 = p.cpu_nan({t, h});
        p.cpu().add_rms_norm(cr, cx, cw, eps, c_out2);
        report(fmt::format("add_rms_norm out {} T={} H={}", dname(dt), t, h),
               norm_error(p.read(g_out2), p.read(c_out2)), tolerance(dt));
        report(fmt::format("add_rms_norm residual {} T={} H={}", dname(dt), t, h),
               norm_error(p.read(gr), rounded(p.read(cr), dt)), 1e-7);
      }
    }
  }
}

TEST_CASE("cuda rms_norm_heads matches the CPU and leaves the other heads alone", "[cuda][ops]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(22);
  for (DType dt : kFloatTypes) {
    for (int64_t d : {128, 64, 8}) {
      for (int64_t t : {1, 5, 64}) {
        const int64_t nh = 4, nkv = 2, width = (nh + 2 * nkv) * d;
        const auto x = rounded(random_floats(rng, size_t(t * width), -2.0f, 2.0f), dt);
        const auto wq = rounded(random_floats(rng, size_t(d), 0.5f, 1.5f), dt);
        const auto wk = rounded(random_floats(rng, size_t(d), 0.5f, 1.5f), dt);
        const Tensor gx = p.gpu_floats(dt, {t, width}, x);
        p.gpu().rms_norm_heads(gx, p.gpu_floats(dt, {d}, wq), 1e-6f, 0, int32_t(nh), int32_t(d));
        p.gpu().rms_norm_heads(gx, p.gpu_floats(dt, {d}, wk), 1e-6f, int32_t(nh), int32_t(nkv),
                               int32_t(d));
        const Tensor cx = p.cpu_f32({t, width}, x);
        p.cpu().rms_norm_heads(cx, p.cpu_f32({d}, wq), 1e-6f, 0, int32_t(nh), int32_t(d));
        p.cpu().rms_norm_heads(cx, p.cpu_f32({d}, wk), 1e-6f, int32_t(nh), int32_t(nkv),
                               int32_t(d));
        const auto got = p.read(gx), want = p.read(cx);
        report(fmt::format("rms_norm_heads {} T={} d={}", dname(dt), t, d), norm_error(got, want),
               tolerance(dt));
        // The v heads are untouched, bit for bit.
        for (int64_t r = 0; r < t; ++r)
          for (int64_t i = (nh + nkv) * d; i < width; ++i)
            REQUIRE(got[size_t(r * width + i)] == x[size_t(r * width + i)]);
      }
    }
  }
}

TEST_CASE("cuda linear matches the CPU, with and without bias, f32 logits", "[cuda][ops]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(3);
  struct Shape {
    int64_t t, k, n;
  };
  // T <= kGemvMaxRows (1) with K % 8 == 0 runs the skinny kernel (gemv.cu): K that leave a
  // remainder after its unrolled loop (72, 4104), one N row; the other shapes (two rows too)
  // run cuBLASLt.
  const Shape shapes[] = {{1, 512, 1024},  {17, 256, 300},  {64, 1024, 512}, {5, 13, 7},
                          {128, 4096, 256}, {3, 4096, 4096}, {200, 96, 2},  {2, 4096, 1000},
                          {4, 72, 9},      {6, 4104, 33},   {8, 14336, 64}, {7, 8, 1},
                          {1, 4096, 1},    {1, 72, 9},      {2, 4104, 33},  {1, 8, 1}};
  for (DType dt : kFloatTypes) {
    for (const Shape& s : shapes) {
      for (int mode = 0; mode < 4; ++mode) {
        // 0: no bias; 1: bias; 2: f32 out, no bias; 3: f32 out with a dt bias (logits)
        const bool with_bias = mode == 1 || mode == 3;
        const DType out_dt = mode >= 2 ? DType::f32 : dt;
        if (mode >= 2 && dt == DType::f32) continue;
        const float scale = 1.0f / std::sqrt(float(s.k));
        const auto x = rounded(random_floats(rng, size_t(s.t * s.k)), dt);
        const auto w = rounded(random_floats(rng, size_t(s.n * s.k), -scale, scale), dt);
        const auto b = rounded(random_floats(rng, size_t(s.n)), dt);

        const Tensor gx = p.gpu_floats(dt, {s.t, s.k}, x), gw = p.gpu_floats(dt, {s.n, s.k}, w);
        const Tensor gb = p.gpu_floats(dt, {s.n}, b);
        const Tensor g_out = p.gpu_nan(out_dt, {s.t, s.n});
        p.gpu().linear(gx, gw, with_bias ? &gb : nullptr, g_out);
        const Tensor cx = p.cpu_f32({s.t, s.k}, x), cw = p.cpu_f32({s.n, s.k}, w);
        const Tensor cb = p.cpu_f32({s.n}, b);
        const Tensor c_out = p.cpu_nan({s.t, s.n});
        p.cpu().linear(cx, cw, with_bias ? &cb : nullptr, c_out);
        report(fmt::format("linear {}->{} T={} K={} N={}{}", dname(dt), dname(out_dt), s.t, s.k,
                           s.n, with_bias ? " +bias" : ""),
               norm_error(p.read(g_out), p.read(c_out)), tolerance(out_dt == DType::f32 ? dt : dt));
      }
    }
  }
}

TEST_CASE("cuda linear on a misaligned view falls back and stays correct", "[cuda][ops]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(33);
  for (DType dt : kFloatTypes) {
    // x starts one row into a buffer whose rows are 13 elements: a 26- or 52-byte offset.
    const int64_t t = 9, k = 13, n = 11;
    const auto x = rounded(random_floats(rng, size_t((t + 1) * k)), dt);
    const auto w = rounded(random_floats(rng, size_t(n * k)), dt);
    const Tensor gx_all = p.gpu_floats(dt, {t + 1, k}, x);
    const Tensor gw = p.gpu_floats(dt, {n, k}, w);
    const Tensor g_out = p.gpu_nan(dt, {t, n});
    p.gpu().linear(gx_all.rows(1, t + 1), gw, nullptr, g_out);
    const Tensor cx_all = p.cpu_f32({t + 1, k}, x);
    const Tensor cw = p.cpu_f32({n, k}, w);
    const Tensor c_out = p.cpu_nan({t, n});
    p.cpu().linear(cx_all.rows(1, t + 1), cw, nullptr, c_out);
    report(fmt::format("linear {} misaligned view T={} K={} N={}", dname(dt), t, k, n),
           norm_error(p.read(g_out), p.read(c_out)), tolerance(dt));
  }
}

TEST_CASE("cuda rope rotates like the CPU: neox and gptj, full and partial", "[cuda][ops]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(4);
  struct Case {
    int q_heads, k_heads, d, rotary;
    RopeStyle style;
  };
  const Case cases[] = {{32, 8, 128, 128, RopeStyle::neox}, {8, 2, 64, 64, RopeStyle::gptj},
                        {4, 4, 128, 64, RopeStyle::neox},   {6, 2, 80, 40, RopeStyle::gptj},
                        {2, 1, 256, 128, RopeStyle::neox},  {3, 3, 96, 32, RopeStyle::gptj}};
  const int64_t max_pos = 4096;
  for (DType dt : kFloatTypes) {
    for (const Case& c : cases) {
      for (int64_t t : {1, 9, 64}) {
        std::vector<float> cs(size_t(max_pos * c.rotary));
        const int half = c.rotary / 2;
        for (int64_t pos = 0; pos < max_pos; ++pos)
          for (int i = 0; i < half; ++i) {
            const double inv_freq = std::pow(10000.0, -2.0 * i / c.rotary);
            cs[size_t(pos * c.rotary + i)] = float(std::cos(double(pos) * inv_freq));
            cs[size_t(pos * c.rotary + half + i)] = float(std::sin(double(pos) * inv_freq));
          }
        std::vector<int32_t> pos(static_cast<size_t>(t));
        std::uniform_int_distribution<int32_t> pick(0, int32_t(max_pos - 1));
        for (auto& x : pos) x = pick(rng);
        const auto q = rounded(random_floats(rng, size_t(t * c.q_heads * c.d)), dt);
        const auto k = rounded(random_floats(rng, size_t(t * c.k_heads * c.d)), dt);

        const Tensor gq = p.gpu_floats(dt, {t, int64_t(c.q_heads) * c.d}, q);
        const Tensor gk = p.gpu_floats(dt, {t, int64_t(c.k_heads) * c.d}, k);
        const Tensor gcs = p.gpu_floats(DType::f32, {max_pos, c.rotary}, cs);
        const Tensor gpos = p.gpu_i32({t}, pos);
        p.gpu().rope(gq, gk, gpos, gcs, c.d, c.rotary, c.style);
        const Tensor cq = p.cpu_f32({t, int64_t(c.q_heads) * c.d}, q);
        const Tensor ck = p.cpu_f32({t, int64_t(c.k_heads) * c.d}, k);
        const Tensor ccs = p.cpu_f32({max_pos, c.rotary}, cs);
        const Tensor cpos = p.cpu_i32({t}, pos);
        p.cpu().rope(cq, ck, cpos, ccs, c.d, c.rotary, c.style);
        const std::string what = fmt::format(
            "rope {} {} heads {}/{} d={} rotary={} T={}", dname(dt),
            c.style == RopeStyle::neox ? "neox" : "gptj", c.q_heads, c.k_heads, c.d, c.rotary, t);
        report(what + " q", norm_error(p.read(gq), p.read(cq)), tolerance(dt));
        report(what + " k", norm_error(p.read(gk), p.read(ck)), tolerance(dt));
      }
    }
  }
}

TEST_CASE("cuda write_kv stores rows at their slots and skips negative slots", "[cuda][ops]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(5);
  for (DType dt : kFloatTypes) {
    for (int d : {64, 128, 80}) {
      for (int bs : {8, 16, 32}) {
        const int64_t blocks = 20, kv_heads = 4, t = 37;
        std::vector<int32_t> slots(size_t(blocks * bs));
        std::iota(slots.begin(), slots.end(), 0);
        std::shuffle(slots.begin(), slots.end(), rng);
        slots.resize(size_t(t));
        slots[3] = -1;  // padding tokens
        slots[20] = -7;
        const int64_t row = kv_heads * d;
        const auto k = rounded(random_floats(rng, size_t(t * row)), dt);
        const auto v = rounded(random_floats(rng, size_t(t * row)), dt);
        const auto cache0 = rounded(random_floats(rng, size_t(blocks * bs * row)), dt);

        const Tensor gk = p.gpu_floats(dt, {t, row}, k), gv = p.gpu_floats(dt, {t, row}, v);
        const Tensor gkc = p.gpu_floats(dt, {blocks, bs, kv_heads, d}, cache0);
        const Tensor gvc = p.gpu_floats(dt, {blocks, bs, kv_heads, d}, cache0);
        const Tensor gslots = p.gpu_i32({t}, slots);
        p.gpu().write_kv(gk, gv, gkc, gvc, gslots);
        const Tensor ck = p.cpu_f32({t, row}, k), cv = p.cpu_f32({t, row}, v);
        const Tensor ckc = p.cpu_f32({blocks, bs, kv_heads, d}, cache0);
        const Tensor cvc = p.cpu_f32({blocks, bs, kv_heads, d}, cache0);
        const Tensor cslots = p.cpu_i32({t}, slots);
        p.cpu().write_kv(ck, cv, ckc, cvc, cslots);
        const std::string what = fmt::format("write_kv {} d={} block_size={}", dname(dt), d, bs);
        report(what + " k_cache", norm_error(p.read(gkc), p.read(ckc)), 1e-7);
        report(what + " v_cache", norm_error(p.read(gvc), p.read(cvc)), 1e-7);
      }
    }
  }
}

TEST_CASE("cuda act_mul (silu, gelu, gelu tanh) matches the CPU", "[cuda][ops]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(6);
  for (GatedActivation act :
       {GatedActivation::silu, GatedActivation::gelu, GatedActivation::gelu_tanh}) {
    for (DType dt : kFloatTypes) {
      for (int64_t inter : {14336, 100, 11}) {
        for (int64_t t : {1, 7, 33}) {
          const auto gu = rounded(random_floats(rng, size_t(t * 2 * inter), -4.0f, 4.0f), dt);
          const Tensor g_in = p.gpu_floats(dt, {t, 2 * inter}, gu);
          const Tensor g_out = p.gpu_nan(dt, {t, inter});
          p.gpu().act_mul(act, g_in, g_out);
          const Tensor c_in = p.cpu_f32({t, 2 * inter}, gu);
          const Tensor c_out = p.cpu_nan({t, inter});
          p.cpu().act_mul(act, c_in, c_out);
          report(fmt::format("act_mul {} {} T={} I={}", gated_activation_name(act), dname(dt), t,
                             inter),
                 norm_error(p.read(g_out), p.read(c_out)), tolerance(dt));
        }
      }
    }
  }
}

TEST_CASE("cuda upload, download and copy round-trip, and memory_info is sane", "[cuda][memory]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(7);
  const auto host = random_floats(rng, 1001);
  const Tensor a = p.gpu_floats(DType::f32, {1001}, host);
  const Tensor b = p.gpu_nan(DType::f32, {7, 143});
  p.gpu().copy(b, a);
  CHECK(p.read(b) == host);
  // A partial upload leaves the rest alone.
  const std::vector<float> head = {1.0f, 2.0f, 3.0f};
  p.gpu().upload(a, head.data(), head.size() * sizeof(float));
  const auto back = p.read(a);
  CHECK(back[0] == 1.0f);
  CHECK(back[2] == 3.0f);
  CHECK(back[3] == host[3]);
  const MemoryInfo info = p.gpu().memory_info();
  CHECK(info.total_bytes > 0);
  CHECK(info.free_bytes <= info.total_bytes);
  CHECK(p.gpu().device().kind == DeviceKind::cuda);
  CHECK(p.gpu().compute_dtype(DType::bf16) == DType::bf16);
  CHECK(p.gpu().compute_dtype(DType::f16) == DType::f16);
  CHECK(p.gpu().compute_dtype(DType::f32) == DType::f32);
  std::printf("%s: %zu of %zu bytes free\n", p.gpu().name().c_str(), info.free_bytes,
              info.total_bytes);
}

}  // namespace
}  // namespace troupe::test
