// Fault injection and recovery through the real actors and `troupe worker` processes (issue
// 22): for every fault kind, 16 concurrent requests (greedy and seeded) finish with exactly the
// tokens of the same engine without the fault, or fail with an error naming the fault; the
// engine's counters say what happened. A bounded soak test at the end throws random faults at
// random steps at a long-lived engine and counts requests in and out.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "actors/llm.hpp"
#include "runtime/error.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(TROUPE_FIXTURES_DIR) / "models";

std::vector<Prompt> fixture_prompts(size_t count) {
  std::ifstream in(kFixtures / "llama_gqa" / "reference.json");
  REQUIRE(in.good());
  const auto j = nlohmann::json::parse(in);
  std::vector<Prompt> out;
  for (size_t i = 0; i < count; ++i) {
    auto ids = j["prompts"][i % j["prompts"].size()]["token_ids"].get<std::vector<int32_t>>();
    ids.push_back(int32_t(7 + i));  // each prompt its own
    out.emplace_back(ids);
  }
  return out;
}

EngineArgs args(int64_t tp = 1, int64_t pp = 1) {
  EngineArgs a;
  a.model = (kFixtures / "llama_gqa").string();
  a.skip_tokenizer_init = true;
  a.disable_log_stats = true;
  a.max_model_len = 256;
  a.dtype = "float32";
  a.block_size = 4;  // sequences grow new blocks every few tokens (refuse-kv bites)
  a.tensor_parallel_size = tp;
  a.pipeline_parallel_size = pp;
  return a;
}

/// Half greedy, half seeded sampling at temperature 1.
std::vector<SamplingParams> mixed_params(size_t count, int64_t max_tokens) {
  std::vector<SamplingParams> out;
  for (size_t i = 0; i < count; ++i) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.detokenize = false;
    if (i % 2 == 1) {
      p.temperature = 1.0;
      p.seed = int64_t(1000 + i);
    } else {
      p.temperature = 0.0;
    }
    out.push_back(p);
  }
  return out;
}

std::vector<std::vector<int32_t>> tokens_of(const std::vector<RequestOutput>& outs) {
  std::vector<std::vector<int32_t>> t;
  for (const auto& o : outs) {
    CHECK(o.finished);
    t.push_back(o.outputs.at(0).token_ids);
  }
  return t;
}

struct Run {
  std::vector<std::vector<int32_t>> tokens;
  SchedulerStats stats;
  double seconds = 0;
};

Run run(EngineArgs a, size_t requests = 16, int64_t max_tokens = 20) {
  LLM llm(std::move(a));
  const auto t0 = std::chrono::steady_clock::now();
  Run r;
  r.tokens = tokens_of(llm.generate(fixture_prompts(requests), mixed_params(requests, max_tokens),
                                    {.use_tqdm = false}));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.stats = llm.scheduler_stats();
  return r;
}

bool have_fixture() { return fs::exists(kFixtures / "llama_gqa" / "reference.json"); }

}  // namespace

TEST_CASE("an in-process executor's faults: requests finish with the fault-free tokens",
          "[engine][faults]") {
  if (!have_fixture()) return;
  const Run clean = run(args());
  struct Case {
    const char* fault;
    bool recovers;  // the executor is lost and replaced
  };
  for (const Case c : {Case{"kill-executor:step=4", true}, Case{"freeze:step=4", true},
                       Case{"drop:message=execute,step=4", true},
                       Case{"drop:message=result,step=4", true},
                       Case{"delay:message=execute,step=3,ms=300", false},
                       Case{"delay:message=result,step=3,ms=300", false},
                       Case{"slow:factor=3,step=2", false}, Case{"refuse-kv:step=5,count=4", false}}) {
    {
      INFO(c.fault);
      EngineArgs a = args();
      a.fault = {c.fault};
      a.execute_timeout = 2.0;  // the unanswered step: 2 s, not vLLM's 300
      const Run got = run(a);
      CHECK(got.tokens == clean.tokens);
      CHECK(got.stats.faults_seen == (c.recovers ? 1u : 0u));
      CHECK(got.stats.recoveries == (c.recovers ? 1u : 0u));
      // Every sequence the scheduler held then (under load, some of the 16 arrive later).
      if (c.recovers) CHECK((got.stats.sequences_recomputed >= 1 &&
                             got.stats.sequences_recomputed <= 16));
      if (std::string(c.fault).starts_with("refuse-kv")) CHECK(got.stats.num_preemptions > 0);
    }
  }
}

TEST_CASE("worker processes' faults: a killed, frozen or failing rank is replaced and "
          "requests finish with the fault-free tokens",
          "[engine][faults][parallel]") {
  if (!have_fixture()) return;
  struct Case {
    int64_t tp, pp;
    const char* fault;
  };
  const Run clean_tp = run(args(2, 1));
  const Run clean_pp = run(args(1, 2));
  for (const Case c : {Case{2, 1, "kill-worker:rank=1,step=4"},
                       Case{2, 1, "kill-executor:rank=0,step=6"},
                       Case{2, 1, "freeze:rank=1,step=4"},
                       Case{2, 1, "drop:message=result,rank=1,step=5"},
                       Case{1, 2, "ucx-fail:rank=0,step=5"},
                       Case{1, 2, "kill-worker:rank=1,step=5"}}) {
    {
      INFO(c.fault << " at tp " << c.tp << " x pp " << c.pp);
      EngineArgs a = args(c.tp, c.pp);
      a.fault = {c.fault};
      a.execute_timeout = 3.0;
      const Run got = run(a);
      CHECK(got.tokens == (c.tp == 2 ? clean_tp : clean_pp).tokens);
      CHECK(got.stats.faults_seen == 1);
      CHECK(got.stats.recoveries == 1);
      CHECK((got.stats.sequences_recomputed >= 1 && got.stats.sequences_recomputed <= 16));
      CHECK(got.stats.last_recovery_seconds > 0);
    }
  }
}

TEST_CASE("with no restarts left a lost executor fails every request naming the fault",
          "[engine][faults]") {
  if (!have_fixture()) return;
  for (int64_t restarts : {0, 1}) {
    DYNAMIC_SECTION("max_executor_restarts " << restarts) {
      EngineArgs a = args(2, 1);
      // With one restart allowed, the replacement is killed too before any step completes.
      a.fault = {"kill-worker:rank=1,step=3", "kill-worker:rank=1,step=4"};
      a.max_executor_restarts = restarts;
      LLM llm(a);
      std::string error;
      try {
        (void)llm.generate(fixture_prompts(16), mixed_params(16, 20), {.use_tqdm = false});
      } catch (const Error& e) {
        error = e.what();
      }
      CHECK_THAT(error, Catch::Contains("executor 1 (tp 1, pp 0; the worker at 127.0.0.1:"));
      if (restarts > 0) CHECK_THAT(error, Catch::Contains("max_executor_restarts = 1"));
      CHECK(llm.scheduler_stats().faults_seen == uint64_t(restarts + 1));
      // The engine refuses further work with the same reason rather than hanging.
      CHECK_THROWS_AS(llm.generate(fixture_prompts(1), mixed_params(1, 4), {.use_tqdm = false}),
                      Error);
    }
  }
}

TEST_CASE("a fault the layout cannot take is refused before anything starts", "[engine][faults]") {
  EngineArgs a = args();
  a.fault = {"kill-worker:rank=0,step=3"};
  CHECK_THROWS_WITH(LLM(a), Catch::Contains("no worker process to kill"));
  a = args(2, 1);
  a.fault = {"ucx-fail:rank=0"};
  CHECK_THROWS_WITH(LLM(a), Catch::Contains("pipeline_parallel_size is 1"));
  a.fault = {"kill-worker:rank=2"};
  CHECK_THROWS_WITH(LLM(a), Catch::Contains("rank 2 is outside [0, 2)"));
}

// The soak test: one engine on two worker processes (TP 2) takes 20 waves of 40 requests of
// random lengths, greedy and seeded, while faults of every kind that loses an executor hit at
// random steps (seeded, so a failure reproduces). Every request comes out, finished, with the
// tokens a fault-free engine gives it. Bounded: about two minutes on 2 cores.
TEST_CASE("soak: random faults at random steps lose no request", "[engine][faults][soak]") {
  if (!have_fixture()) return;
  std::mt19937_64 rng(20261205);
  const char* kinds[] = {"kill-worker:rank={},step={}", "kill-executor:rank={},step={}",
                         "drop:message=result,rank={},step={}", "freeze:rank={},step={}"};
  std::vector<std::string> faults;
  uint64_t step = 0;
  for (int i = 0; i < 20; ++i) {
    step += 10 + rng() % 20;  // apart enough that steps complete in between
    const std::string spec = fmt::format(fmt::runtime(kinds[rng() % 4]), rng() % 2, step);
    faults.push_back(spec);
  }
  faults.push_back(fmt::format("slow:rank=1,factor=2,step={}", 10 + rng() % 50));
  faults.push_back(fmt::format("refuse-kv:step={},count=3", 30 + rng() % 100));
  faults.push_back(fmt::format("delay:message=execute,rank=0,step={},ms=200", 5 + rng() % 100));
  INFO("faults: " << fmt::format("{}", fmt::join(faults, " ")));

  const size_t waves = 20, per_wave = 40;
  std::vector<std::vector<Prompt>> prompts;
  std::vector<std::vector<SamplingParams>> params;
  for (size_t w = 0; w < waves; ++w) {
    auto p = fixture_prompts(per_wave);
    for (auto& pr : p) pr.token_ids.push_back(int32_t(100 + w));
    auto sp = mixed_params(per_wave, 0);
    for (auto& s : sp) s.max_tokens = 4 + int64_t(rng() % 24);
    prompts.push_back(std::move(p));
    params.push_back(std::move(sp));
  }
  std::vector<std::vector<std::vector<int32_t>>> want;
  {
    LLM clean(args(2, 1));
    for (size_t w = 0; w < waves; ++w)
      want.push_back(tokens_of(clean.generate(prompts[w], params[w], {.use_tqdm = false})));
  }
  EngineArgs a = args(2, 1);
  a.fault = faults;
  a.execute_timeout = 3.0;
  LLM llm(a);
  size_t in = 0, out = 0;
  for (size_t w = 0; w < waves; ++w) {
    in += prompts[w].size();
    std::vector<RequestOutput> got;
    REQUIRE_NOTHROW(got = llm.generate(prompts[w], params[w], {.use_tqdm = false}));
    out += got.size();
    CHECK(tokens_of(got) == want[w]);
  }
  CHECK(in == waves * per_wave);
  CHECK(out == in);
  const SchedulerStats ss = llm.scheduler_stats();
  CHECK(ss.faults_seen >= 1);
  CHECK(ss.recoveries == ss.faults_seen);
}

TEST_CASE("shutting an engine down is not an executor fault", "[engine][faults]") {
  // The engine's destructor stops its executors, and the scheduler may see them go before its
  // own exit reaches it: it once took that for a lost executor and began a recovery (restarting
  // executors) during shutdown. The log of several engines' lives must show no loss.
  auto captured = std::make_shared<std::ostringstream>();
  auto previous = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(*captured));
  logger->set_level(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  for (int i = 0; i < 16; ++i) (void)run(args(), 4, 3);
  spdlog::set_default_logger(previous);
  const std::string log = captured->str();
  INFO(log);
  CHECK(log.find("is gone") == std::string::npos);
  CHECK(log.find("replacing the executors") == std::string::npos);
}
