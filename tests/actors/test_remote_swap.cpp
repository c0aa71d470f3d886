// Swap space on a memory node (`troupe worker --kv-store`, --swap-space-remote): a real worker
// process on 127.0.0.1 holds the swap space, the engine (CPU backend, a cache of 16 blocks)
// preempts by swapping under 16 requests, and the greedy tokens must be transformers' (the run
// without preemption) over UCX tcp and over shared memory; a memory node killed with SIGKILL
// mid-run fails the requests naming it, in bounded time, and never gives a wrong token.
#include <catch2/catch.hpp>

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "actors/llm.hpp"
#include "runtime/error.hpp"
#include "tests/actors/engine_fixtures.hpp"
#include "tests/actors/worker_process.hpp"

using namespace troupe;
namespace fs = std::filesystem;
using namespace troupe::engine_fixtures;

namespace {

// UCX_TLS for this process and the memory node it forks (both sides must agree), put back
// when the test ends.
class UcxTlsEnv {
 public:
  explicit UcxTlsEnv(const char* tls) {
    if (const char* old = getenv("UCX_TLS")) old_ = old;
    setenv("UCX_TLS", tls, 1);
  }
  ~UcxTlsEnv() {
    if (old_)
      setenv("UCX_TLS", old_->c_str(), 1);
    else
      unsetenv("UCX_TLS");
  }
  UcxTlsEnv(const UcxTlsEnv&) = delete;
  UcxTlsEnv& operator=(const UcxTlsEnv&) = delete;

 private:
  std::optional<std::string> old_;
};

bool have_fixture() {
  if (fs::exists(kFixtures / "llama_gqa" / "reference.json")) return true;
  WARN("fixture llama_gqa missing: run tools/make_fixtures.py");
  return false;
}

// 16 requests: the fixture's prompts over and over (request i is prompt i % 5).
constexpr size_t kRequests = 16;

std::vector<Prompt> many_prompts(const Reference& ref) {
  std::vector<Prompt> out;
  for (size_t i = 0; i < kRequests; ++i) out.emplace_back(ref.prompts[i % ref.prompts.size()]);
  return out;
}

EngineArgs remote_swap_args(const std::string& node) {
  EngineArgs a = tiny_cache_args("llama_gqa");
  a.preemption_mode = "swap";
  a.swap_space = 0.01;  // 10 MiB: hundreds of blocks of this model, on the node
  a.swap_space_remote = node;
  return a;
}

}  // namespace

TEST_CASE("swap space on a memory node: transformers' greedy tokens over tcp and shared memory",
          "[engine][swap][remote_swap]") {
  if (!have_fixture()) return;
  const Reference ref = load_reference("llama_gqa");
  for (const char* tls : {"tcp", "sm"}) {
    DYNAMIC_SECTION("UCX_TLS=" << tls) {
      UcxTlsEnv env(tls);
      WorkerProcess node({"--kv-store", "0.05"});
      LLM llm(remote_swap_args(node.endpoint()));
      const auto outs = llm.generate(many_prompts(ref), greedy_params(24), {.use_tqdm = false});
      REQUIRE(outs.size() == kRequests);
      for (size_t i = 0; i < kRequests; ++i) {
        INFO("request " << i);
        CHECK(outs[i].error.empty());
        CHECK(outs[i].outputs.at(0).token_ids == ref.greedy[i % ref.greedy.size()]);
      }
      const SchedulerStats ss = llm.scheduler_stats();
      const KVStats kv = llm.kv_stats();
      CHECK(ss.num_swap_outs > 0);
      CHECK(ss.num_swap_ins == ss.num_swap_outs);
      CHECK(ss.num_preemptions == ss.num_swap_outs);  // none fell back to recompute
      CHECK(kv.num_cpu_blocks > 64);                  // more than the local staging cache
      CHECK(kv.blocks_swapped_out > 0);
      CHECK(kv.blocks_swapped_in == kv.blocks_swapped_out);
      CHECK(kv.swap_fallbacks == 0);
    }
  }
}

TEST_CASE("swap space on a memory node: refusals name the field, the value and the limit",
          "[engine][swap][remote_swap]") {
  if (!have_fixture()) return;
  SECTION("not host:port") {
    CHECK_THROWS_WITH(LLM(remote_swap_args("localhost")),
                      Catch::Contains("swap_space_remote") && Catch::Contains("host:port"));
  }
  SECTION("without preemption by swap") {
    EngineArgs a = remote_swap_args("127.0.0.1:5000");
    a.preemption_mode = "recompute";
    CHECK_THROWS_WITH(LLM(a), Catch::Contains("swap_space_remote = '127.0.0.1:5000'") &&
                                  Catch::Contains("preemption_mode = \"swap\""));
  }
  SECTION("the CUDA backend") {
    EngineArgs a = remote_swap_args("127.0.0.1:5000");
    a.device = "cuda";
    CHECK_THROWS_WITH(LLM(a), Catch::Contains("swap_space_remote") &&
                                  Catch::Contains("device = cuda") &&
                                  Catch::Contains("not supported yet"));
  }
  SECTION("no memory node there") {
    WorkerProcess gone;  // a free port: start a worker, note its port, kill it
    const std::string ep = gone.endpoint();
    kill(gone.pid(), SIGKILL);
    REQUIRE(gone.wait_exit(10));
    CHECK_THROWS_WITH(LLM(remote_swap_args(ep)),
                      Catch::Contains("swap_space_remote = '" + ep + "'") &&
                          Catch::Contains("cannot reach the memory node"));
  }
  SECTION("a memory node too small for the swap space") {
    WorkerProcess node({"--kv-store", "0.001"});  // 1 MiB for a 10 MiB swap space
    CHECK_THROWS_WITH(LLM(remote_swap_args(node.endpoint())),
                      Catch::Contains("does not fit") && Catch::Contains("--kv-store"));
  }
}

TEST_CASE("swap space on a memory node killed mid-run: requests fail naming it, in bounded time",
          "[engine][swap][remote_swap][faults]") {
  if (!have_fixture()) return;
  const Reference ref = load_reference("llama_gqa");
  UcxTlsEnv env("tcp");
  WorkerProcess node({"--kv-store", "0.05"});
  EngineArgs a = remote_swap_args(node.endpoint());
  a.max_executor_restarts = 1;
  LLM llm(a);
  const std::vector<SamplingParams> params(kRequests, greedy_params(24));
  size_t completed = 0, failed = 0;
  bool killed = false;
  std::string thrown;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    llm.generate(many_prompts(ref), params,
                 [&](size_t i, RequestOutput&& out) {
                   const auto& want = ref.greedy[i % ref.greedy.size()];
                   const auto& got = out.outputs.at(0).token_ids;
                   INFO("request " << i << ": " << out.error);
                   // Never a wrong token: what came back is a prefix of transformers'.
                   REQUIRE(got.size() <= want.size());
                   CHECK(std::equal(got.begin(), got.end(), want.begin()));
                   if (out.error.empty()) {
                     CHECK(got == want);
                     ++completed;
                   } else {
                     ++failed;
                   }
                   if (!killed) {  // the first request done: sequences are swapped out now
                     killed = true;
                     kill(node.pid(), SIGKILL);
                   }
                 },
                 {.use_tqdm = false});
  } catch (const Error& e) {
    thrown = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("completed " << completed << ", failed " << failed << ", error: " << thrown);
  REQUIRE(killed);
  CHECK(node.wait_exit(10));
  CHECK(completed + failed == kRequests);
  CHECK(seconds < 120);
  // The engine cannot recompute without its swap space (a restart finds no memory node), so
  // the requests still running fail with an error that names the node.
  CHECK(failed > 0);
  CHECK_THAT(thrown, Catch::Contains(node.endpoint()) && Catch::Contains("memory node"));
}
