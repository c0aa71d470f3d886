// Batch-invariant mode on the CUDA backend (Backend::set_batch_invariant): linear computes each
// output row with the same bits whatever rows share the call (T = 1 to 200, the row anywhere
// among them), for every dtype, with and without bias, f32 logits too, and still matches the
// CPU. The engine-level check (a request alone and among 1 to 64 others, chunked prefill,
// decode graphs) is tests/actors/test_batch_invariant.cpp.
#include <cstring>

#include "tests/cuda/cuda_harness.hpp"

using namespace troupe;
using namespace troupe::test;

TEST_CASE("cuda batch-invariant linear: a row's bits do not depend on the rows beside it",
          "[cuda][ops][batch_invariant]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  p.gpu().set_batch_invariant(true);
  std::mt19937_64 rng(21);
  struct Shape {
    int64_t k, n;
  };
  // K % 8 == 0 takes the tensor-core kernel for f16/bf16 (K = 72 and 688 leave a partial
  // 32-wide k tile; N = 300, 9 a partial 64-wide n tile); K = 13 and f32 the fallback kernel.
  const Shape shapes[] = {{256, 300}, {4096, 1000}, {72, 9}, {688, 256}, {13, 7}};
  const int64_t total = 200;
  for (DType dt : kFloatTypes) {
    for (const Shape& s : shapes) {
      for (int mode = 0; mode < 3; ++mode) {  // 0: plain; 1: bias; 2: f32 out with bias
        const bool with_bias = mode >= 1;
        const DType out_dt = mode == 2 ? DType::f32 : dt;
        if (mode == 2 && dt == DType::f32) continue;
        const float scale = 1.0f / std::sqrt(float(s.k));
        const auto x = rounded(random_floats(rng, size_t(total * s.k)), dt);
        const auto w = rounded(random_floats(rng, size_t(s.n * s.k), -scale, scale), dt);
        const auto b = rounded(random_floats(rng, size_t(s.n)), dt);
        const Tensor gx = p.gpu_floats(dt, {total, s.k}, x);
        const Tensor gw = p.gpu_floats(dt, {s.n, s.k}, w);
        const Tensor gb = p.gpu_floats(dt, {s.n}, b);
        const Tensor all = p.gpu_nan(out_dt, {total, s.n});
        p.gpu().linear(gx, gw, with_bias ? &gb : nullptr, all);
        const auto want = p.read(all);

        const std::string what = fmt::format("invariant linear {}->{} K={} N={}{}", dname(dt),
                                             dname(out_dt), s.k, s.n, with_bias ? " +bias" : "");
        const Tensor cx = p.cpu_f32({total, s.k}, x), cw = p.cpu_f32({s.n, s.k}, w);
        const Tensor cb = p.cpu_f32({s.n}, b);
        const Tensor c_out = p.cpu_nan({total, s.n});
        p.cpu().linear(cx, cw, with_bias ? &cb : nullptr, c_out);
        report(what + " T=200", norm_error(want, p.read(c_out)), tolerance(dt));

        // The same rows in calls of 1 to 130 rows starting anywhere: bit for bit.
        struct Part {
          int64_t begin, rows;
        };
        for (const Part part : {Part{0, 1}, Part{137, 1}, Part{5, 2}, Part{64, 7}, Part{3, 64},
                                Part{70, 65}, Part{1, 130}}) {
          const Tensor out = p.gpu_nan(out_dt, {part.rows, s.n});
          p.gpu().linear(gx.rows(part.begin, part.begin + part.rows), gw, with_bias ? &gb : nullptr,
                         out);
          const auto got = p.read(out);
          const size_t offset = size_t(part.begin * s.n);
          INFO(what << ": rows [" << part.begin << ", " << part.begin + part.rows << ")");
          CHECK(std::memcmp(got.data(), want.data() + offset, got.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}
