// Swap space in the ModelRunner on the CPU backend: the round trip of runner_swap_case.hpp,
// swaps that are errors, and swap_blocks itself.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/model_runner.hpp"
#include "tests/models/runner_swap_case.hpp"

using namespace troupe;

namespace {

ExecutorInit swap_init(int64_t swap_space_bytes) {
  return testing::swap_runner_init("cpu", 4, swap_space_bytes);
}

}  // namespace

TEST_CASE("cpu runner: swap out, overwrite, swap in elsewhere gives the unswapped logits",
          "[exec][swap]") {
  testing::check_swap_round_trip(
      [](int64_t swap_bytes) {
        return std::make_unique<ModelRunner>(make_cpu_backend(1), swap_init(swap_bytes));
      },
      4);
}

TEST_CASE("cpu runner: a swap without swap space or with bad block ids is an error",
          "[exec][swap]") {
  ModelRunner none(make_cpu_backend(1), swap_init(0));
  StepPlan p;
  p.step_id = 1;
  p.swap_out = {BlockSwap{0, 0}};
  CHECK_THROWS_WITH(none.execute(p), Catch::Contains("no swap space"));

  ModelRunner run(make_cpu_backend(1), swap_init(int64_t(1) << 20));
  p.swap_out = {BlockSwap{0, run.info().num_cpu_blocks}};
  CHECK_THROWS_WITH(run.execute(p),
                    Catch::Contains("swap_blocks") && Catch::Contains("out of range"));
  p.swap_out = {BlockSwap{32, 0}};
  CHECK_THROWS_WITH(run.execute(p), Catch::Contains("out of range"));
}

TEST_CASE("cpu backend: swap_blocks copies blocks both ways and checks its arguments",
          "[exec][swap]") {
  auto b = make_cpu_backend(1);
  Buffer dev = b->allocate(4 * 2 * 3 * sizeof(float));
  Buffer host = b->allocate_host(2 * 2 * 3 * sizeof(float));
  const Tensor d = dev.tensor(DType::f32, {4, 2, 1, 3});
  const Tensor h = host.tensor(DType::f32, {2, 2, 1, 3});
  for (int i = 0; i < 24; ++i) d.as<float>()[i] = float(i);
  const std::vector<BlockCopy> out{{3, 0}, {1, 1}};
  b->swap_blocks(h, d, out);
  for (int i = 0; i < 6; ++i) {
    CHECK(h.as<float>()[i] == float(18 + i));
    CHECK(h.as<float>()[6 + i] == float(6 + i));
  }
  const std::vector<BlockCopy> in{{0, 0}, {1, 2}};
  b->swap_blocks(d, h, in);
  for (int i = 0; i < 6; ++i) {
    CHECK(d.as<float>()[i] == float(18 + i));
    CHECK(d.as<float>()[12 + i] == float(6 + i));
  }
  const Tensor wrong = host.tensor(DType::f32, {2, 3, 1, 2});
  CHECK_THROWS_WITH(b->swap_blocks(wrong, d, out), Catch::Contains("block shapes differ"));
  const std::vector<BlockCopy> bad{{4, 0}};
  CHECK_THROWS_WITH(b->swap_blocks(h, d, bad), Catch::Contains("source block 4 out of range"));
}
