// The distributed runtime on the CPU: tensor and pipeline parallel engines whose ranks are
// `troupe worker` processes (started by the engine itself, joined over CAF, wired by shared
// memory and UCX) against a one-rank engine, and `troupe worker`'s sessions: run after run,
// a second engine refused while one is served, a frozen or killed worker named in the error.
#include <signal.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "actors/llm.hpp"
#include "runtime/error.hpp"
#include "tests/actors/worker_process.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(TROUPE_FIXTURES_DIR) / "models";

std::vector<Prompt> fixture_prompts(const std::string& name) {
  std::ifstream in(kFixtures / name / "reference.json");
  REQUIRE(in.good());
  const auto j = nlohmann::json::parse(in);
  std::vector<Prompt> out;
  for (const auto& p : j["prompts"]) out.emplace_back(p["token_ids"].get<std::vector<int32_t>>());
  return out;
}

EngineArgs fixture_args(const std::string& name) {
  EngineArgs a;
  a.model = (kFixtures / name).string();
  a.skip_tokenizer_init = true;
  a.disable_log_stats = true;
  a.max_model_len = 256;
  a.dtype = "float32";
  return a;
}

SamplingParams greedy_with_logprobs(int64_t n) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = n;
  p.ignore_eos = true;
  p.detokenize = false;
  p.logprobs = 3;
  return p;
}

void check_same(const std::vector<RequestOutput>& want, const std::vector<RequestOutput>& got,
                double tolerance = 1e-4) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("prompt " << i);
    const CompletionOutput& w = want[i].outputs.at(0);
    const CompletionOutput& g = got[i].outputs.at(0);
    CHECK(g.token_ids == w.token_ids);
    REQUIRE(w.logprobs.has_value());
    REQUIRE(g.logprobs.has_value());
    REQUIRE(g.logprobs->size() == w.logprobs->size());
    for (size_t t = 0; t < w.logprobs->size(); ++t)
      for (const auto& [token, lp] : (*w.logprobs)[t]) {
        REQUIRE((*g.logprobs)[t].count(token) == 1);
        // Only the order of float32 sums differs from one rank's: the ranks' GEMMs see other
        // shapes and thread counts than the one-rank engine's batch (up to 3e-5 seen; the
        // runner-level test, tests/models/test_parallel_runner.cpp, holds 1e-5 on one batch).
        CHECK(std::abs((*g.logprobs)[t].at(token).logprob - lp.logprob) <= tolerance);
      }
  }
}

}  // namespace

TEST_CASE("tensor and pipeline parallel engines give one rank's tokens and logprobs",
          "[engine][parallel]") {
  for (const char* fixture : {"llama_gqa", "qwen2"}) {
    if (!fs::exists(kFixtures / fixture / "reference.json")) continue;
    const auto prompts = fixture_prompts(fixture);
    std::vector<RequestOutput> want;
    {
      LLM one(fixture_args(fixture));
      want = one.generate(prompts, greedy_with_logprobs(12), {.use_tqdm = false});
    }
    for (auto [tp, pp] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
      DYNAMIC_SECTION(fixture << " at tensor_parallel_size " << tp << " x pipeline_parallel_size "
                              << pp) {
        EngineArgs a = fixture_args(fixture);
        a.tensor_parallel_size = tp;
        a.pipeline_parallel_size = pp;
        LLM split(a);
        check_same(want, split.generate(prompts, greedy_with_logprobs(12), {.use_tqdm = false}));
        // A second batch on the same engine: the ranks stayed in lockstep.
        check_same(want, split.generate(prompts, greedy_with_logprobs(12), {.use_tqdm = false}));
      }
    }
  }
}

TEST_CASE("a pipeline step's grant that comes after the step before it has finished",
          "[engine][parallel][fault]") {
  // With pipeline stages the scheduler plans the next step while one runs; a step planned
  // while its only sequence was still in flight is empty. When that plan's grant came back
  // after the running step's result (a busy head; here an injected 300 ms delay), the empty
  // plan was taken as final: nothing more was planned and generate() never returned, or every
  // request failed with "a waiting request cannot fit in the KV cache" (2026-12-06, seen in CI
  // as a second generate() raced the first one's last steps).
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) return;
  const auto prompts = fixture_prompts("llama_gqa");
  const std::vector<Prompt> one{prompts.front()};
  std::vector<RequestOutput> want;
  {
    LLM single(fixture_args("llama_gqa"));
    want = single.generate(one, greedy_with_logprobs(12), {.use_tqdm = false});
  }
  EngineArgs a = fixture_args("llama_gqa");
  a.pipeline_parallel_size = 2;
  a.fault = {"delay:message=grant,step=2,ms=300"};
  LLM split(a);
  // Bounded: a stalled engine is cancelled after 20 s, and its aborted output fails the check.
  std::atomic<bool> cancel{false};
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 2000 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    cancel = true;
  });
  const auto got =
      split.generate(one, greedy_with_logprobs(12), {.use_tqdm = false, .cancel = &cancel});
  done = true;
  watchdog.join();
  REQUIRE(got.size() == 1);
  CHECK(got[0].outputs.at(0).finish_reason == "length");
  check_same(want, got);
}

TEST_CASE("with batch-invariant linears, worker-process ranks hold one rank's logprobs to 1e-5",
          "[engine][parallel][batch_invariant]") {
  // The bound for ranks in separate processes. In the default mode OpenBLAS blocks by
  // shape and thread count, which the worker processes change (hence 1e-4 above); with the
  // fixed-order linear only the split of row-parallel sums over ranks remains, as in the
  // runner-level test.
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) return;
  const auto prompts = fixture_prompts("llama_gqa");
  EngineArgs a = fixture_args("llama_gqa");
  a.batch_invariant = true;
  std::vector<RequestOutput> want;
  {
    LLM one(a);
    want = one.generate(prompts, greedy_with_logprobs(12), {.use_tqdm = false});
  }
  a.tensor_parallel_size = 2;
  a.pipeline_parallel_size = 2;
  LLM split(a);
  check_same(want, split.generate(prompts, greedy_with_logprobs(12), {.use_tqdm = false}), 1e-5);
}

TEST_CASE("a worker serves engine after engine and refuses a second one while busy",
          "[engine][remote][worker]") {
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) return;
  const auto prompts = fixture_prompts("llama_gqa");
  WorkerProcess worker;
  EngineArgs a = fixture_args("llama_gqa");
  a.executor_endpoints = {worker.endpoint()};
  std::vector<RequestOutput> first;
  {
    LLM llm(a);
    first = llm.generate(prompts, greedy_with_logprobs(8), {.use_tqdm = false});
    // A second engine while the first is served: refused, naming who is served; the first
    // engine goes on untouched.
    std::string error;
    try {
      LLM intruder(a);
    } catch (const Error& e) {
      error = e.what();
    }
    CHECK_THAT(error, Catch::Contains("busy") && Catch::Contains(worker.endpoint()));
    check_same(first, llm.generate(prompts, greedy_with_logprobs(8), {.use_tqdm = false}));
  }
  // The first engine left: the next one is served, with the same results.
  for (int run = 0; run < 2; ++run) {
    LLM llm(a);
    check_same(first, llm.generate(prompts, greedy_with_logprobs(8), {.use_tqdm = false}));
  }
  CHECK_FALSE(worker.wait_exit(0.2));
}

TEST_CASE("a frozen worker fails the run within the heartbeat timeout, naming it",
          "[engine][remote][fault]") {
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) return;
  const auto prompts = fixture_prompts("llama_gqa");
  WorkerProcess worker;
  EngineArgs a = fixture_args("llama_gqa");
  a.executor_endpoints = {worker.endpoint()};
  LLM llm(a);
  std::vector<Prompt> many;
  for (int i = 0; i < 16; ++i) many.push_back(prompts[size_t(i) % prompts.size()]);
  std::thread stopper([&] {
    for (int i = 0; i < 20000 && llm.scheduler_stats().steps < 5; ++i)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    ::kill(worker.pid(), SIGSTOP);
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  try {
    (void)llm.generate(many, greedy_with_logprobs(190), {.use_tqdm = false});
  } catch (const Error& e) {
    error = e.what();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stopper.join();
  ::kill(worker.pid(), SIGKILL);
  CHECK_THAT(error, Catch::Contains("executor 0") && Catch::Contains(worker.endpoint()));
  CHECK(took < 30.0);  // the 5 s heartbeat timeout, not forever (bounded, loose for loaded CI)
}

TEST_CASE("a parallel layout the model cannot take is refused before any worker starts",
          "[engine][parallel]") {
  EngineArgs a = fixture_args("llama_gqa");  // 4 heads, 2 KV heads, 2 layers
  a.tensor_parallel_size = 3;
  CHECK_THROWS_WITH(LLM(a), Catch::Contains("num_attention_heads (4)") && Catch::Contains("3"));
  a.tensor_parallel_size = 1;
  a.pipeline_parallel_size = 3;
  CHECK_THROWS_WITH(LLM(a), Catch::Contains("num_hidden_layers (2)") &&
                                Catch::Contains("pipeline_parallel_size (3)"));
}
