// Swap space on the GPU: swap_blocks between device KV caches and page-locked host memory
// (allocate_host), checked bit for bit, in stream order (swap out, swap in into the vacated
// blocks, overwrite, all enqueued back to back), and a ModelRunner round trip: a sequence
// swapped out, its blocks reused by another sequence, swapped back into other blocks, must give
// the logits of a run that never swapped, bit for bit.
#include <algorithm>
#include <cstring>
#include <random>

#include "runtime/error.hpp"
#include "runtime/exec/model_runner.hpp"
#include "tests/cuda/cuda_harness.hpp"
#include "tests/models/runner_swap_case.hpp"

namespace troupe::test {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

TEST_CASE("cuda swap_blocks: a round trip through pinned host memory is bit for bit",
          "[cuda][swap]") {
  TROUPE_REQUIRE_GPU();
  auto gpu = make_cuda_backend(0);
  for (DType dt : {DType::bf16, DType::f16, DType::f32}) {
    const int64_t blocks = 12, bs = 16, heads = 2, d = 128;
    Buffer dev = gpu->allocate(size_t(blocks * bs * heads * d) * dtype_size(dt));
    Buffer host = gpu->allocate_host(size_t(6 * bs * heads * d) * dtype_size(dt));
    CHECK(host.device().kind == DeviceKind::cpu);
    const Tensor cache = dev.tensor(dt, {blocks, bs, heads, d});
    const Tensor swap = host.tensor(dt, {6, bs, heads, d});
    const size_t block_bytes = size_t(bs * heads * d) * dtype_size(dt);
    const auto original = random_bytes(cache.nbytes(), 7);
    gpu->upload(cache, original.data(), original.size());

    // Swap blocks 3, 0, 11 out; overwrite the whole cache; swap them back into 5, 6, 0, all
    // enqueued without a synchronisation in between.
    const std::vector<BlockCopy> out{{3, 4}, {0, 1}, {11, 2}};
    const std::vector<BlockCopy> in{{4, 5}, {1, 6}, {2, 0}};
    gpu->swap_blocks(swap, cache, out);
    const std::vector<uint8_t> zeros(cache.nbytes(), 0);
    gpu->upload(cache, zeros.data(), zeros.size());
    gpu->swap_blocks(cache, swap, in);
    std::vector<uint8_t> after(cache.nbytes());
    gpu->download(after.data(), cache, after.size());
    auto block = [&](const std::vector<uint8_t>& v, int64_t b) {
      return std::vector<uint8_t>(v.begin() + ptrdiff_t(size_t(b) * block_bytes),
                                  v.begin() + ptrdiff_t(size_t(b + 1) * block_bytes));
    };
    INFO(dname(dt));
    CHECK(block(after, 5) == block(original, 3));
    CHECK(block(after, 6) == block(original, 0));
    CHECK(block(after, 0) == block(original, 11));
    CHECK(block(after, 1) == std::vector<uint8_t>(block_bytes, 0));
    // The host copy itself, read once the stream is idle.
    gpu->synchronize();
    CHECK(std::memcmp(static_cast<const uint8_t*>(host.data()) + 4 * block_bytes,
                      original.data() + 3 * block_bytes, block_bytes) == 0);

    // Bad calls are errors, not corrupt copies.
    const std::vector<BlockCopy> bad{{12, 0}};
    CHECK_THROWS_AS(gpu->swap_blocks(swap, cache, bad), Error);
    CHECK_THROWS_AS(gpu->swap_blocks(cache, cache, out), Error);  // device to device
  }
}

TEST_CASE("cuda runner: swap out, overwrite, swap in elsewhere gives the unswapped logits",
          "[cuda][swap]") {
  TROUPE_REQUIRE_GPU();
  testing::check_swap_round_trip(
      [](int64_t swap_bytes) {
        return std::make_unique<ModelRunner>(make_cuda_backend(0),
                                             testing::swap_runner_init("cuda", 8, swap_bytes));
      },
      8);
}

}  // namespace
}  // namespace troupe::test
