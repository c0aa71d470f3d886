// Moving a rank to another worker with its KV cache (issue 19: "moving a running sequence's
// blocks to another executor"). A worker asked to leave (the injected `drain` fault, which is
// what a SIGTERM to `troupe worker` does; or LLM::drain_rank from another thread) has its rank
// taken over by a fresh worker process that loads the rank's shard and copies the KV cache (and
// swap space) over UCX; the requests running then finish with transformers' greedy tokens (the
// seeded ones with those of the same layout left alone), and nothing is recomputed.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "actors/llm.hpp"
#include "runtime/error.hpp"
#include "tests/actors/engine_fixtures.hpp"

using namespace troupe;
using namespace troupe::engine_fixtures;

namespace {

constexpr size_t kRequests = 16;
constexpr int64_t kTokens = 20;

bool have_fixture() {
  if (fs::exists(kFixtures / "llama_gqa" / "reference.json")) return true;
  WARN("fixture llama_gqa missing: run tools/make_fixtures.py");
  return false;
}

// Request i is the fixture's prompt i % 5: even ones greedy (checked against transformers),
// odd ones seeded at temperature 1 (checked against an undisturbed run).
std::vector<Prompt> many_prompts(const Reference& ref) {
  std::vector<Prompt> out;
  for (size_t i = 0; i < kRequests; ++i) out.emplace_back(ref.prompts[i % ref.prompts.size()]);
  return out;
}

std::vector<SamplingParams> mixed_params() {
  std::vector<SamplingParams> out;
  for (size_t i = 0; i < kRequests; ++i) {
    SamplingParams p = greedy_params(kTokens);
    if (i % 2 == 1) {
      p.temperature = 1.0;
      p.seed = int64_t(500 + i);
    }
    out.push_back(p);
  }
  return out;
}

EngineArgs parallel_args(int64_t tp, int64_t pp) {
  EngineArgs a = fixture_args("llama_gqa");
  a.block_size = 4;  // many blocks per sequence
  a.tensor_parallel_size = tp;
  a.pipeline_parallel_size = pp;
  return a;
}

struct Run {
  std::vector<std::vector<int32_t>> tokens;
  SchedulerStats ss;
  KVStats kv;
};

Run collect(LLM& llm, const std::vector<RequestOutput>& outs) {
  Run r;
  for (const auto& o : outs) {
    CHECK(o.error.empty());
    CHECK(o.finished);
    r.tokens.push_back(o.outputs.at(0).token_ids);
  }
  r.ss = llm.scheduler_stats();
  r.kv = llm.kv_stats();
  return r;
}

Run run(EngineArgs a, const Reference& ref) {
  LLM llm(std::move(a));
  return collect(llm, llm.generate(many_prompts(ref), mixed_params(), {.use_tqdm = false}));
}

void check_greedy(const Run& got, const Reference& ref) {
  REQUIRE(got.tokens.size() == kRequests);
  for (size_t i = 0; i < kRequests; i += 2) {
    INFO("request " << i);
    const auto& want = ref.greedy[i % ref.greedy.size()];
    CHECK(got.tokens[i] == std::vector<int32_t>(want.begin(), want.begin() + kTokens));
  }
}

void check_moved_once(const Run& got) {
  CHECK(got.ss.migrations == 1);
  CHECK(got.ss.blocks_migrated > 0);
  CHECK(got.ss.faults_seen == 0);
  CHECK(got.ss.recoveries == 0);
  CHECK(got.ss.sequences_recomputed == 0);
  CHECK(got.ss.migration_seconds > 0);
}

}  // namespace

TEST_CASE("a drained rank moves to a fresh worker with its KV cache: the same tokens and "
          "nothing recomputed",
          "[engine][parallel][migrate]") {
  if (!have_fixture()) return;
  const Reference ref = load_reference("llama_gqa");
  struct Case {
    int64_t tp, pp;
    int32_t rank;
  };
  for (const Case c : {Case{2, 1, 1}, Case{2, 1, 0}, Case{1, 2, 0}, Case{1, 2, 1}}) {
    DYNAMIC_SECTION("tp " << c.tp << " x pp " << c.pp << ", rank " << c.rank) {
      const Run clean = run(parallel_args(c.tp, c.pp), ref);
      check_greedy(clean, ref);
      EngineArgs a = parallel_args(c.tp, c.pp);
      a.fault = {fmt::format("drain:rank={},step=6", c.rank)};
      const Run got = run(a, ref);
      check_greedy(got, ref);
      CHECK(got.tokens == clean.tokens);
      check_moved_once(got);
      CHECK(got.ss.swap_blocks_migrated == 0);
    }
  }
}

TEST_CASE("every worker leaving at once: the ranks move one after another",
          "[engine][parallel][migrate]") {
  // A node with all of an engine's workers drained (both SIGTERMed together): the second ask
  // waits for the first move rather than being refused.
  if (!have_fixture()) return;
  const Reference ref = load_reference("llama_gqa");
  const Run clean = run(parallel_args(2, 1), ref);
  EngineArgs a = parallel_args(2, 1);
  a.fault = {"drain:rank=0,step=6", "drain:rank=1,step=6"};
  const Run got = run(a, ref);
  check_greedy(got, ref);
  CHECK(got.tokens == clean.tokens);
  CHECK(got.ss.migrations == 2);
  CHECK(got.ss.faults_seen == 0);
  CHECK(got.ss.sequences_recomputed == 0);
}

TEST_CASE("a drained rank's swap space moves with it: swapped-out sequences come back from "
          "the new worker",
          "[engine][parallel][migrate][swap]") {
  if (!have_fixture()) return;
  const Reference ref = load_reference("llama_gqa");
  EngineArgs a = tiny_cache_args("llama_gqa");  // 16 blocks of 8 tokens: swapping all along
  a.tensor_parallel_size = 2;
  a.preemption_mode = "swap";
  a.swap_space = 0.01;
  // Moves at several steps, so that some find sequences swapped out.
  a.fault = {"drain:rank=1,step=8", "drain:rank=0,step=20", "drain:rank=1,step=40"};
  std::vector<SamplingParams> params(kRequests, greedy_params(kTokens));
  LLM llm(a);
  const Run got = collect(llm, llm.generate(many_prompts(ref), params, {.use_tqdm = false}));
  for (size_t i = 0; i < kRequests; ++i) {
    INFO("request " << i);
    const auto& want = ref.greedy[i % ref.greedy.size()];
    CHECK(got.tokens[i] == std::vector<int32_t>(want.begin(), want.begin() + kTokens));
  }
  CHECK(got.ss.migrations == 3);
  CHECK(got.ss.num_swap_outs > 0);
  CHECK(got.ss.swap_blocks_migrated > 0);
  CHECK(got.ss.sequences_recomputed == 0);
  CHECK(got.kv.swap_fallbacks == 0);
}

TEST_CASE("LLM::drain_rank from another thread while generate() runs", "[engine][parallel][migrate]") {
  if (!have_fixture()) return;
  const Reference ref = load_reference("llama_gqa");
  LLM llm(parallel_args(2, 1));
  std::string moved, failed;
  std::atomic<bool> done{false};
  std::thread mover([&] {
    // Once a few steps have run (bounded: 30 s), while requests are still running.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done && std::chrono::steady_clock::now() < until && llm.scheduler_stats().steps < 4)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    try {
      moved = llm.drain_rank(1);
    } catch (const std::exception& e) {
      failed = e.what();
    }
  });
  std::vector<SamplingParams> params(kRequests, greedy_params(kTokens));
  params[0].max_tokens = 150;  // one long request keeps a sequence running through the move
  const Run got = collect(llm, llm.generate(many_prompts(ref), params, {.use_tqdm = false}));
  done = true;
  mover.join();
  CHECK(failed.empty());
  CHECK_THAT(moved, Catch::Contains("moved executor 1") && Catch::Contains("with its KV cache"));
  for (size_t i = 1; i < kRequests; ++i) {
    INFO("request " << i);
    const auto& want = ref.greedy[i % ref.greedy.size()];
    CHECK(got.tokens[i] == std::vector<int32_t>(want.begin(), want.begin() + kTokens));
  }
  check_moved_once(got);
  // The engine goes on serving on the new layout.
  const Run again = collect(llm, llm.generate(many_prompts(ref), greedy_params(kTokens),
                                              {.use_tqdm = false}));
  check_greedy(again, ref);
}

TEST_CASE("a rank that cannot move is refused by name and the engine runs on",
          "[engine][migrate]") {
  if (!have_fixture()) return;
  const Reference ref = load_reference("llama_gqa");
  {
    LLM llm(fixture_args("llama_gqa"));  // one executor in this process
    CHECK_THROWS_WITH(llm.drain_rank(0), Catch::Contains("runs in this process") &&
                                             Catch::Contains("no other executor"));
    CHECK_THROWS_WITH(llm.drain_rank(3), Catch::Contains("rank 3 does not exist"));
    const auto outs = llm.generate(prompts_of(ref), greedy_params(8), {.use_tqdm = false});
    REQUIRE(outs.size() == ref.prompts.size());
    CHECK(outs[0].outputs.at(0).token_ids ==
          std::vector<int32_t>(ref.greedy[0].begin(), ref.greedy[0].begin() + 8));
    CHECK(llm.scheduler_stats().migrations == 0);
  }
  EngineArgs a = fixture_args("llama_gqa");
  a.fault = {"drain:rank=0,step=3"};
  CHECK_THROWS_WITH(LLM(a), Catch::Contains("drain:rank=0,step=3") &&
                                Catch::Contains("no worker to move its rank to"));
  a = parallel_args(2, 1);
  a.fault = {"drain:rank=2,step=3"};
  CHECK_THROWS_WITH(LLM(a), Catch::Contains("rank 2 is outside [0, 2)"));
}
