// rope_qkv_to_cache on the GPU: bit for bit equal to the GPU's own rope + write_kv on the same
// values (what the model ran before the fused qkv GEMM), and close to the CPU reference, for
// every compute dtype, neox and gptj, full and partial rotary, GQA, on both the 16-byte path
// and the element path (odd rotary halves, a misaligned qkv view), with padding tokens
// (slot -1) that leave the cache untouched; bad positions and slots are reported at the next
// synchronisation.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "cuda/kernels.hpp"
#include "runtime/error.hpp"
#include "tests/cuda/cuda_harness.hpp"

namespace troupe::test {
namespace {

using Catch::Matchers::Contains;

std::vector<float> columns(const std::vector<float>& x, int64_t row_len, int64_t begin,
                           int64_t width) {
  const int64_t rows = int64_t(x.size()) / row_len;
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r)
    out.insert(out.end(), x.begin() + r * row_len + begin, x.begin() + r * row_len + begin + width);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Case {
  int64_t nh, nkv, d, rotary;
  RopeStyle style;
  int64_t misalign;  // elements the qkv view starts past its buffer's start
};

TEST_CASE("cuda rope_qkv_to_cache equals rope + write_kv exactly and the CPU closely",
          "[cuda][ops]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  std::mt19937_64 rng(23);
  const int64_t blocks = 12, block_size = 16, max_pos = 4096;
  const Case cases[] = {
      {32, 8, 128, 128, RopeStyle::neox, 0},  // Llama-3-8B's shape
      {8, 2, 64, 64, RopeStyle::gptj, 0},     // gptj, 16-byte path
      {4, 2, 16, 16, RopeStyle::neox, 0},     // the test fixtures' head dim
      {5, 1, 80, 80, RopeStyle::neox, 0},
      {4, 4, 64, 24, RopeStyle::neox, 0},  // partial: half 12 (element path in f16/bf16)
      {4, 2, 64, 32, RopeStyle::gptj, 0},  // partial gptj
      {4, 2, 64, 64, RopeStyle::neox, 1},  // misaligned qkv: element path
  };
  for (DType dt : kFloatTypes) {
    for (const Case& c : cases) {
      for (int64_t tokens : {1, 9, 300}) {
        const int64_t q_row = c.nh * c.d, kv_row = c.nkv * c.d, row = q_row + 2 * kv_row;
        const bool neox = c.style == RopeStyle::neox;
        const std::string what =
            fmt::format("rope_qkv_to_cache {} {} heads {}/{} d={} rotary={} T={}{}", dname(dt),
                        neox ? "neox" : "gptj", c.nh, c.nkv, c.d, c.rotary, tokens,
                        c.misalign ? " misaligned" : "");
        INFO(what);
        const auto qkv_host = rounded(random_floats(rng, size_t(tokens * row)), dt);
        std::vector<int32_t> pos(static_cast<size_t>(tokens)), slots(static_cast<size_t>(tokens));
        std::uniform_int_distribution<int32_t> pick_pos(0, int32_t(max_pos - 1));
        std::vector<int32_t> free_slots(size_t(blocks * block_size));
        std::iota(free_slots.begin(), free_slots.end(), 0);
        std::shuffle(free_slots.begin(), free_slots.end(), rng);
        for (int64_t t = 0; t < tokens; ++t) {
          pos[size_t(t)] = pick_pos(rng);
          // Every fifth token is padding; the rest get distinct slots while they last.
          slots[size_t(t)] = t % 5 == 3 || size_t(t) >= free_slots.size() ? -1
                                                                          : free_slots[size_t(t)];
        }
        const auto cs = rope_cos_sin(max_pos, c.rotary);
        const std::vector<float> sentinel(size_t(blocks * block_size * kv_row), 3.0f);

        // GPU: the composition, then the fused op on the same values.
        const Tensor gpos = p.gpu_i32({tokens}, pos), gslots = p.gpu_i32({tokens}, slots);
        const Tensor gcs = p.gpu_floats(DType::f32, {max_pos, c.rotary}, cs);
        const Tensor gq = p.gpu_floats(dt, {tokens, q_row}, columns(qkv_host, row, 0, q_row));
        const Tensor gk =
            p.gpu_floats(dt, {tokens, kv_row}, columns(qkv_host, row, q_row, kv_row));
        const Tensor gv =
            p.gpu_floats(dt, {tokens, kv_row}, columns(qkv_host, row, q_row + kv_row, kv_row));
        const Tensor gkc_ref = p.gpu_floats(dt, {blocks, block_size, c.nkv, c.d}, sentinel);
        const Tensor gvc_ref = p.gpu_floats(dt, {blocks, block_size, c.nkv, c.d}, sentinel);
        p.gpu().rope(gq, gk, gpos, gcs, int32_t(c.d), int32_t(c.rotary), c.style);
        p.gpu().write_kv(gk, gv, gkc_ref, gvc_ref, gslots);

        std::vector<float> padded_host(size_t(c.misalign), 0.0f);
        padded_host.insert(padded_host.end(), qkv_host.begin(), qkv_host.end());
        const Tensor gbuf = p.gpu_floats(dt, {int64_t(padded_host.size())}, padded_host);
        const Tensor gqkv(static_cast<char*>(gbuf.data) + c.misalign * int64_t(dtype_size(dt)),
                          dt, gbuf.device, {tokens, row});
        const Tensor gq_out = p.gpu_nan(dt, {tokens, q_row});
        const Tensor gkc = p.gpu_floats(dt, {blocks, block_size, c.nkv, c.d}, sentinel);
        const Tensor gvc = p.gpu_floats(dt, {blocks, block_size, c.nkv, c.d}, sentinel);
        p.gpu().rope_qkv_to_cache(gqkv, gpos, gcs, int32_t(c.d), int32_t(c.rotary), c.style,
                                  int32_t(c.nh), int32_t(c.nkv), gkc, gvc, gslots, gq_out);
        const bool vec = cuda::rope_qkv_vectorisable(dt, gqkv.data, gq_out.data, gkc.data,
                                                     gvc.data, int(c.d), int(c.rotary), neox);
        if (c.misalign == 0 && c.d == 128) CHECK(vec);  // the Llama shape takes the fast path
        if (c.misalign != 0) CHECK_FALSE(vec);
        CHECK(same_bits(p.read(gq_out), p.read(gq)));
        CHECK(same_bits(p.read(gkc), p.read(gkc_ref)));
        CHECK(same_bits(p.read(gvc), p.read(gvc_ref)));

        // CPU reference of the fused op.
        const Tensor cq_out = p.cpu_nan({tokens, q_row});
        const Tensor ckc = p.cpu_f32({blocks, block_size, c.nkv, c.d}, sentinel);
        const Tensor cvc = p.cpu_f32({blocks, block_size, c.nkv, c.d}, sentinel);
        p.cpu().rope_qkv_to_cache(p.cpu_f32({tokens, row}, qkv_host), p.cpu_i32({tokens}, pos),
                                  p.cpu_f32({max_pos, c.rotary}, cs), int32_t(c.d),
                                  int32_t(c.rotary), c.style, int32_t(c.nh), int32_t(c.nkv), ckc,
                                  cvc, p.cpu_i32({tokens}, slots), cq_out);
        const double bound = dt == DType::f32 ? 1e-6 : tolerance(dt);
        report(what + " q", norm_error(p.read(gq_out), p.read(cq_out)), bound);
        report(what + " k cache", norm_error(p.read(gkc), p.read(ckc)), bound);
        // v is copied: exact in any dtype (its values are already rounded to dt).
        CHECK(same_bits(p.read(gvc), p.read(cvc)));
      }
    }
  }
}

TEST_CASE("cuda rope_qkv_to_cache reports bad positions and slots, and bad shapes",
          "[cuda][errors]") {
  TROUPE_REQUIRE_GPU();
  Pair p;
  const DType bf = DType::bf16;
  const int64_t nh = 4, nkv = 2, d = 64, row = (nh + 2 * nkv) * d;
  const Tensor qkv = p.gpu_floats(bf, {2, row}, std::vector<float>(size_t(2 * row), 0.5f));
  const Tensor q_out = p.gpu_nan(bf, {2, nh * d});
  const Tensor kc = p.gpu_nan(bf, {4, 16, nkv, d}), vc = p.gpu_nan(bf, {4, 16, nkv, d});
  const Tensor cs = p.gpu_floats(DType::f32, {16, d}, rope_cos_sin(16, d));
  const auto N = RopeStyle::neox;
  p.gpu().rope_qkv_to_cache(qkv, p.gpu_i32({2}, {0, 16}), cs, 64, 64, N, 4, 2, kc, vc,
                            p.gpu_i32({2}, {0, 1}), q_out);
  CHECK_THROWS_WITH(p.gpu().synchronize(), Contains("rope"));
  p.gpu().rope_qkv_to_cache(qkv, p.gpu_i32({2}, {0, 1}), cs, 64, 64, N, 4, 2, kc, vc,
                            p.gpu_i32({2}, {0, 64}), q_out);
  CHECK_THROWS_WITH(p.gpu().synchronize(), Contains("slot_mapping"));
  CHECK_THROWS_WITH(p.gpu().rope_qkv_to_cache(qkv, p.gpu_i32({2}, {0, 1}), cs, 64, 64, N, 2, 2,
                                              kc, vc, p.gpu_i32({2}, {0, 1}), q_out),
                    Contains("rope_qkv_to_cache") && Contains("qkv"));
  CHECK_THROWS_WITH(p.gpu().rope_qkv_to_cache(qkv, p.gpu_i32({2}, {0, 1}), cs, 64, 62, N, 4, 2,
                                              kc, vc, p.gpu_i32({2}, {0, 1}), q_out),
                    Contains("rotary_dim"));
  p.gpu().synchronize();  // nothing pending
}

}  // namespace
}  // namespace troupe::test
