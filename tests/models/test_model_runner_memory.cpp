// Sizing the KV cache by gpu_memory_utilization: the budget rule (vLLM V1's: this process may
// use total × utilization; what the weights, buffers and a maximum-size profiling step took is
// not available to the KV cache; other processes' memory only limits what is free), and the
// profiling step itself, run on the CPU through RunnerOptions::profile_on_host: it must leave
// no trace (the runner then computes exactly what an unprofiled runner computes).
#include <catch2/catch.hpp>

#include "cpu/cpu_backend.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/model_runner.hpp"
#include "tests/models/plan_driver.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {
constexpr size_t kGiB = size_t(1) << 30;
MemoryInfo mem(double free_gib, double total_gib = 100) {
  return MemoryInfo{size_t(free_gib * double(kGiB)), size_t(total_gib * double(kGiB))};
}
}  // namespace

TEST_CASE("kv cache budget: the fraction minus what this process took", "[exec][memory]") {
  // An idle 100 GiB device; the engine took 20 GiB (weights, buffers, profiling peak).
  CHECK(kv_cache_budget(mem(99), mem(79), 0.9) == int64_t(70 * kGiB));
  CHECK(kv_cache_budget(mem(99), mem(79), 0.5) == int64_t(30 * kGiB));
  // Another process holds 40 GiB: it does not count against this engine's fraction...
  CHECK(kv_cache_budget(mem(59), mem(39), 0.5) == int64_t(30 * kGiB));
  // ...but the device must have the memory free.
  CHECK_THROWS_WITH(kv_cache_budget(mem(59), mem(39), 0.9),
                    Catch::Contains("gpu_memory_utilization = 0.9") &&
                        Catch::Contains("only 39.00 GiB") && Catch::Contains("at most 0.590"));
  // The weights alone exceed the fraction.
  CHECK_THROWS_WITH(kv_cache_budget(mem(99), mem(79), 0.15),
                    Catch::Contains("gpu_memory_utilization = 0.15") &&
                        Catch::Contains("leaving nothing for the KV cache"));
  // Memory freed by someone else meanwhile never makes this engine's share negative.
  CHECK(kv_cache_budget(mem(50), mem(60), 0.5) == int64_t(50 * kGiB));
}

TEST_CASE("cpu runner: the profiling step leaves no trace", "[exec][memory]") {
  ExecutorInit init;
  init.model_dir = std::string(TROUPE_FIXTURES_DIR) + "/models/llama_gqa";
  init.device = "cpu";
  init.block_size = 8;
  init.max_num_batched_tokens = 200;
  init.max_num_seqs = 7;
  init.max_model_len = 128;
  RunnerOptions profiled;
  profiled.profile_on_host = true;
  ModelRunner ref(make_cpu_backend(2), init);
  ModelRunner prof(make_cpu_backend(2), init, profiled);
  CHECK(prof.stats().steps == 0);
  CHECK(prof.num_live_sequences() == 0);
  CHECK(prof.info().num_blocks == ref.info().num_blocks);

  SeqSampling sampled;
  sampled.temperature = 0.8f;
  sampled.top_p = 0.9f;
  sampled.seed = 3;
  sampled.num_logprobs = 2;
  PlanDriver driver(8, std::min(ref.info().num_blocks, prof.info().num_blocks), 11);
  const int32_t vocab = int32_t(ref.model_config().vocab_size);
  std::vector<uint64_t> ids;
  for (const auto& p : random_prompts({5, 17, 1, 30}, vocab, 4))
    ids.push_back(driver.add(p, ids.size() % 2 ? sampled : PlanDriver::greedy()));
  for (int step = 0; step < 12; ++step) {
    const StepPlan plan = driver.plan(ids);
    const StepResult want = ref.execute(plan);
    const StepResult got = prof.execute(plan);
    REQUIRE(got.outputs.size() == want.outputs.size());
    for (size_t i = 0; i < want.outputs.size(); ++i) {
      CHECK(got.outputs[i].token == want.outputs[i].token);
      CHECK(got.outputs[i].logprobs.chosen.logprob == want.outputs[i].logprobs.chosen.logprob);
    }
    CHECK(prof.last_sampled_logits() == ref.last_sampled_logits());
    driver.apply(want);
  }
  CHECK(prof.stats().steps == 12);
}

TEST_CASE("dtype: vLLM's --dtype rules", "[exec][dtype]") {
  using K = DeviceKind;
  // auto: a half checkpoint keeps its dtype; a float32 one runs in float16 on a GPU.
  CHECK(resolve_model_dtype("auto", DType::bf16, K::cuda) == DType::bf16);
  CHECK(resolve_model_dtype("auto", DType::f16, K::cuda) == DType::f16);
  CHECK(resolve_model_dtype("auto", DType::f32, K::cuda) == DType::f16);
  CHECK(resolve_model_dtype("auto", DType::f32, K::cpu) == DType::f32);
  CHECK(resolve_model_dtype("auto", DType::bf16, K::cpu) == DType::bf16);
  // An explicit float dtype wins, in any spelling vLLM takes.
  CHECK(resolve_model_dtype("float32", DType::bf16, K::cuda) == DType::f32);
  CHECK(resolve_model_dtype("float", DType::bf16, K::cuda) == DType::f32);
  CHECK(resolve_model_dtype("half", DType::bf16, K::cuda) == DType::f16);
  CHECK(resolve_model_dtype("bfloat16", DType::f32, K::cuda) == DType::bf16);
  CHECK_THROWS_WITH(resolve_model_dtype("int8", DType::bf16, K::cuda),
                    Catch::Contains("dtype = 'int8'") && Catch::Contains("bfloat16"));
  CHECK_THROWS_WITH(resolve_model_dtype("auto", DType::i32, K::cuda),
                    Catch::Contains("dtype = auto"));
}
