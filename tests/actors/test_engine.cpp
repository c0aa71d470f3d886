// The whole actor pipeline (engine, tokenizer pool, scheduler, cache manager, executor) on the
// CPU backend, against what transformers computed for the same checkpoints: greedy tokens must
// be identical however the engine batches, chunks or preempts, in-process or with the executor
// in a second process.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "actors/engine.hpp"
#include "actors/executor_actor.hpp"  // cuda_device_count
#include "actors/llm.hpp"
#include "actors/messages.hpp"
#include "runtime/error.hpp"
#include "tests/actors/engine_fixtures.hpp"
#include "tests/actors/worker_process.hpp"
#include "tests/runtime/test_tokenizer_util.hpp"

using namespace troupe;
namespace fs = std::filesystem;
using namespace troupe::engine_fixtures;

TEST_CASE("greedy tokens through the actors equal transformers', however the batch is cut",
          "[engine]") {
  for (const std::string name : {"llama_gqa", "llama3_tied", "qwen2", "qwen3"}) {
    if (!fs::exists(kFixtures / name / "reference.json")) {
      WARN("fixture " << name << " missing: run tools/make_fixtures.py");
      continue;
    }
    const Reference ref = load_reference(name);
    DYNAMIC_SECTION(name << ", roomy") {
      LLM llm(fixture_args(name));
      check_greedy(ref, llm.generate(prompts_of(ref), greedy_params(24), {.use_tqdm = false}));
    }
    DYNAMIC_SECTION(name << ", chunked prefill, block size 8, tiny KV cache (preemption)") {
      EngineArgs a = fixture_args(name);
      a.block_size = 8;  // the smallest the CUDA kernels take
      a.max_num_batched_tokens = 16;
      a.max_num_seqs = 4;
      // 128 tokens: the 5 prompts (167 tokens + 120) cannot all fit, and the running ones
      // outgrow the cache (20 blocks happened to fit the first four without a preemption).
      a.num_gpu_blocks_override = 16;
      a.max_model_len = 128;
      LLM llm(a);
      check_greedy(ref, llm.generate(prompts_of(ref), greedy_params(24), {.use_tqdm = false}));
      CHECK(llm.scheduler_stats().num_preemptions > 0);
    }
  }
}

TEST_CASE("a sliding window shorter than max_model_len is refused, within it the tokens hold",
          "[engine]") {
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) return;
  // llama_gqa with Mistral v0.1's kind of window: 128 tokens, fewer than its 512 positions.
  const fs::path dir = fs::temp_directory_path() / "troupe_sliding_window_model";
  fs::remove_all(dir);
  fs::copy(kFixtures / "llama_gqa", dir);
  nlohmann::json config;
  {
    std::ifstream in(dir / "config.json");
    config = nlohmann::json::parse(in);
  }
  config["sliding_window"] = 128;
  std::ofstream(dir / "config.json") << config.dump(2);
  EngineArgs a = fixture_args("llama_gqa");
  a.model = dir.string();
  a.max_model_len = 256;
  CHECK_THROWS_WITH(LLM(a), Catch::Contains("sliding_window = 128") &&
                                Catch::Contains("max_model_len 256") &&
                                Catch::Contains("--max-model-len <= 128") &&
                                Catch::Contains((dir / "config.json").string()));
  // Every sequence fits the window (prompts of up to 100 tokens + 24): transformers' tokens.
  a.max_model_len = 128;
  {
    LLM llm(a);
    const Reference ref = load_reference("llama_gqa");
    check_greedy(ref, llm.generate(prompts_of(ref), greedy_params(24), {.use_tqdm = false}));
  }
  fs::remove_all(dir);
}

TEST_CASE("the executor in a second process gives the same tokens", "[engine][remote]") {
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) {
    WARN("fixture llama_gqa missing");
    return;
  }
  const Reference ref = load_reference("llama_gqa");
  WorkerProcess worker;  // `troupe worker --port 0` on 127.0.0.1
  EngineArgs a = fixture_args("llama_gqa");
  a.executor_endpoints = {worker.endpoint()};
  {
    LLM llm(a);
    CHECK_FALSE(llm.backend().empty());
    check_greedy(ref, llm.generate(prompts_of(ref), greedy_params(24), {.use_tqdm = false}));
  }
  // The worker outlives the engine (it serves run after run: tests/actors/test_parallel.cpp).
  CHECK_FALSE(worker.wait_exit(0.5));
}

TEST_CASE("seeded sampling is reproducible and n > 1 gives distinct samples", "[engine]") {
  if (!fs::exists(kFixtures / "llama_gqa")) return;
  const Reference ref = load_reference("llama_gqa");
  LLM llm(fixture_args("llama_gqa"));
  SamplingParams p;
  p.temperature = 1.0;
  p.top_p = 0.9;
  p.seed = 1234;
  p.max_tokens = 16;
  p.n = 3;
  p.detokenize = false;
  p.ignore_eos = true;
  const std::vector<Prompt> prompts{ref.prompts[3]};
  auto a = llm.generate(prompts, p, {.use_tqdm = false});
  // The same request again, now batched with other work: the same samples.
  auto b = llm.generate({ref.prompts[3], ref.prompts[4], ref.prompts[2]}, p, {.use_tqdm = false});
  REQUIRE(a[0].outputs.size() == 3);
  for (int i = 0; i < 3; ++i)
    CHECK(a[0].outputs[size_t(i)].token_ids == b[0].outputs[size_t(i)].token_ids);
  std::set<std::vector<int32_t>> distinct;
  for (const auto& o : a[0].outputs) distinct.insert(o.token_ids);
  CHECK(distinct.size() == 3);
}

TEST_CASE("best_of > n returns the n best samples by cumulative logprob", "[engine]") {
  if (!fs::exists(kFixtures / "llama_gqa")) return;
  const Reference ref = load_reference("llama_gqa");
  LLM llm(fixture_args("llama_gqa"));
  SamplingParams all;
  all.temperature = 1.0;
  all.seed = 99;
  all.max_tokens = 8;
  all.n = 6;
  all.logprobs = 0;
  all.detokenize = false;
  all.ignore_eos = true;
  // Every sample (seeds 99..104, the same ones best_of draws), ranked here exhaustively.
  const auto every = llm.generate({Prompt(ref.prompts[1])}, all, {.use_tqdm = false});
  REQUIRE(every[0].outputs.size() == 6);
  std::vector<std::pair<double, std::vector<int32_t>>> ranked;
  for (const auto& o : every[0].outputs) ranked.emplace_back(*o.cumulative_logprob, o.token_ids);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (bool with_logprobs : {true, false}) {
    SamplingParams best = all;
    best.n = 2;
    best.best_of = 6;
    if (!with_logprobs) best.logprobs.reset();
    const auto out = llm.generate({Prompt(ref.prompts[1])}, best, {.use_tqdm = false});
    REQUIRE(out[0].outputs.size() == 2);
    for (size_t i = 0; i < 2; ++i) {
      INFO("rank " << i << ", logprobs " << with_logprobs);
      CHECK(out[0].outputs[i].index == int32_t(i));
      CHECK(out[0].outputs[i].token_ids == ranked[i].second);
      CHECK(out[0].outputs[i].finish_reason == "length");
      CHECK(bool(out[0].outputs[i].cumulative_logprob) == with_logprobs);
      if (with_logprobs) CHECK(*out[0].outputs[i].cumulative_logprob == Approx(ranked[i].first));
    }
  }
  CHECK(llm.kv_stats().num_free_blocks == llm.kv_stats().num_blocks);  // nothing leaked
}

TEST_CASE("bad requests get one clear error and leave the engine working", "[engine]") {
  if (!fs::exists(kFixtures / "llama_gqa")) return;
  const Reference ref = load_reference("llama_gqa");
  LLM llm(fixture_args("llama_gqa"));
  std::vector<int32_t> too_long(300, 5);
  CHECK_THROWS_WITH(llm.generate({Prompt(too_long)}, greedy_params(4), {.use_tqdm = false}),
                    Catch::Contains("max_model_len = 256"));
  CHECK_THROWS_WITH(
      llm.generate({Prompt(std::vector<int32_t>{1, 999})}, greedy_params(4), {.use_tqdm = false}),
      Catch::Contains("prompt_token_ids[1] = 999"));
  SamplingParams bad = greedy_params(4);
  bad.logprobs = 50;
  CHECK_THROWS_WITH(llm.generate({Prompt(ref.prompts[2])}, bad, {.use_tqdm = false}),
                    Catch::Contains("max_logprobs"));
  bad = greedy_params(4);
  bad.top_p = 1.5;
  CHECK_THROWS_WITH(llm.generate({Prompt(ref.prompts[2])}, bad, {.use_tqdm = false}),
                    Catch::Contains("top_p"));
  CHECK_THROWS_WITH(llm.generate({Prompt("text")}, greedy_params(4), {.use_tqdm = false}),
                    Catch::Contains("tokenizer"));
  // Still serving.
  auto ok = llm.generate({Prompt(ref.prompts[2])}, greedy_params(24), {.use_tqdm = false});
  CHECK(ok[0].outputs[0].token_ids == ref.greedy[2]);
}

TEST_CASE("logprobs: the sampled token's logprob, top-N, and prompt logprobs", "[engine]") {
  if (!fs::exists(kFixtures / "llama_gqa")) return;
  const Reference ref = load_reference("llama_gqa");
  LLM llm(fixture_args("llama_gqa"));
  SamplingParams p = greedy_params(5);
  p.logprobs = 3;
  p.prompt_logprobs = 2;
  auto out = llm.generate({Prompt(ref.prompts[2])}, p, {.use_tqdm = false});
  const auto& c = out[0].outputs[0];
  REQUIRE(c.logprobs);
  REQUIRE(c.logprobs->size() == 5);
  double sum = 0;
  for (size_t i = 0; i < 5; ++i) {
    const auto& pos = (*c.logprobs)[i];
    REQUIRE(pos.contains(c.token_ids[i]));
    CHECK(pos.at(c.token_ids[i]).rank == 1);  // greedy picks the most likely token
    CHECK(pos.size() == 3);                   // the chosen token is one of the top 3
    sum += pos.at(c.token_ids[i]).logprob;
  }
  REQUIRE(c.cumulative_logprob);
  CHECK(*c.cumulative_logprob == Approx(sum).epsilon(1e-6));
  REQUIRE(out[0].prompt_logprobs);
  CHECK(out[0].prompt_logprobs->size() == ref.prompts[2].size());
  CHECK(out[0].prompt_logprobs->front().empty());
  // Against transformers: log_softmax of the reference logits at position i - 1.
  std::ifstream in(kFixtures / "llama_gqa" / "reference.json");
  const auto j = nlohmann::json::parse(in);
  const auto full = j["full_logits"].get<std::vector<std::vector<double>>>();
  REQUIRE(j["full_logits_prompt_index"].get<int>() == 2);
  for (size_t i = 1; i < ref.prompts[2].size(); ++i) {
    const auto& pos = (*out[0].prompt_logprobs)[i];
    const int32_t tok = ref.prompts[2][i];
    REQUIRE(pos.contains(tok));
    const auto& row = full[i - 1];
    double mx = row[0];
    for (double v : row) mx = std::max(mx, v);
    double z = 0;
    for (double v : row) z += std::exp(v - mx);
    const double expected = row[size_t(tok)] - mx - std::log(z);
    CHECK(pos.at(tok).logprob == Approx(expected).margin(1e-4));
    CHECK(pos.size() <= 3);  // the prompt token and the top 2
  }
}

TEST_CASE("logprobs = 0 gives the sampled token's only, -1 the whole vocabulary", "[engine]") {
  if (!fs::exists(kFixtures / "llama_gqa")) return;
  const Reference ref = load_reference("llama_gqa");
  EngineArgs a = fixture_args("llama_gqa");
  a.max_logprobs = -1;  // vLLM: -1 lifts the limit, and then logprobs = -1 is allowed
  LLM llm(a);
  SamplingParams p = greedy_params(3);
  p.logprobs = 0;
  auto only = llm.generate({Prompt(ref.prompts[2])}, p, {.use_tqdm = false});
  const auto& c = only[0].outputs[0];
  REQUIRE(c.logprobs);
  REQUIRE(c.logprobs->size() == 3);
  double sum = 0;
  for (size_t i = 0; i < 3; ++i) {
    const auto& pos = (*c.logprobs)[i];
    REQUIRE(pos.size() == 1);
    REQUIRE(pos.contains(c.token_ids[i]));
    CHECK(pos.at(c.token_ids[i]).rank == 1);
    CHECK(pos.at(c.token_ids[i]).logprob < 0.0f);
    sum += pos.at(c.token_ids[i]).logprob;
  }
  REQUIRE(c.cumulative_logprob);
  CHECK(*c.cumulative_logprob == Approx(sum).epsilon(1e-6));
  p.logprobs = -1;
  p.max_tokens = 2;
  auto all = llm.generate({Prompt(ref.prompts[2])}, p, {.use_tqdm = false});
  REQUIRE(all[0].outputs[0].logprobs);
  const auto& positions = *all[0].outputs[0].logprobs;
  REQUIRE(positions.size() == 2);
  std::ifstream in(kFixtures / "llama_gqa" / "reference.json");
  const size_t vocab = nlohmann::json::parse(in)["full_logits"][0].size();
  for (const auto& pos : positions) {
    REQUIRE(pos.size() == vocab);
    double mass = 0;
    for (const auto& [tok, lp] : pos) mass += std::exp(double(lp.logprob));
    CHECK(mass == Approx(1.0).epsilon(1e-4));
  }
}

TEST_CASE("preemption by swap gives the same greedy tokens, and falls back to recompute",
          "[engine][swap]") {
  for (const std::string name : {"llama_gqa", "qwen2"}) {
    if (!fs::exists(kFixtures / name / "reference.json")) {
      WARN("fixture " << name << " missing: run tools/make_fixtures.py");
      continue;
    }
    const Reference ref = load_reference(name);
    DYNAMIC_SECTION(name << ", swap space for every sequence") {
      EngineArgs a = tiny_cache_args(name);
      a.preemption_mode = "swap";
      a.swap_space = 0.01;  // 10 MiB: hundreds of blocks of these small models
      LLM llm(a);
      check_greedy(ref, llm.generate(prompts_of(ref), greedy_params(24), {.use_tqdm = false}));
      const SchedulerStats ss = llm.scheduler_stats();
      const KVStats kv = llm.kv_stats();
      CHECK(ss.num_swap_outs > 0);
      CHECK(ss.num_swap_ins == ss.num_swap_outs);
      CHECK(ss.num_preemptions == ss.num_swap_outs);  // none by recompute
      CHECK(ss.num_swapped == 0);
      CHECK(kv.num_cpu_blocks > 20);
      CHECK(kv.blocks_swapped_out > 0);
      CHECK(kv.blocks_swapped_in == kv.blocks_swapped_out);
      CHECK(kv.swap_fallbacks == 0);
      CHECK(kv.num_free_cpu_blocks == kv.num_cpu_blocks);
      CHECK(kv.num_free_blocks == kv.num_blocks);
    }
    DYNAMIC_SECTION(name << ", swap space too small for one block: recompute") {
      EngineArgs a = tiny_cache_args(name);
      a.preemption_mode = "swap";
      a.swap_space = 1e-9;  // about one byte
      LLM llm(a);
      check_greedy(ref, llm.generate(prompts_of(ref), greedy_params(24), {.use_tqdm = false}));
      const SchedulerStats ss = llm.scheduler_stats();
      const KVStats kv = llm.kv_stats();
      CHECK(kv.num_cpu_blocks == 0);
      CHECK(ss.num_preemptions > 0);
      CHECK(ss.num_swap_outs == 0);
      CHECK(kv.swap_fallbacks == ss.num_preemptions);
    }
    DYNAMIC_SECTION(name << ", default mode recomputes and pins no swap space") {
      LLM llm(tiny_cache_args(name));  // swap_space = 4 GiB, preemption_mode = None
      check_greedy(ref, llm.generate(prompts_of(ref), greedy_params(24), {.use_tqdm = false}));
      CHECK(llm.scheduler_stats().num_preemptions > 0);
      CHECK(llm.scheduler_stats().num_swap_outs == 0);
      CHECK(llm.kv_stats().num_cpu_blocks == 0);
    }
  }
}

TEST_CASE("preemption by swap with the executor in a second process", "[engine][remote][swap]") {
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) {
    WARN("fixture llama_gqa missing");
    return;
  }
  const Reference ref = load_reference("llama_gqa");
  WorkerProcess worker;
  EngineArgs a = tiny_cache_args("llama_gqa");
  a.executor_endpoints = {worker.endpoint()};
  a.preemption_mode = "swap";
  a.swap_space = 0.01;
  {
    LLM llm(a);
    check_greedy(ref, llm.generate(prompts_of(ref), greedy_params(24), {.use_tqdm = false}));
    CHECK(llm.scheduler_stats().num_swap_outs > 0);
    CHECK(llm.kv_stats().blocks_swapped_in > 0);
  }
  // The worker freed the run's swap space and serves the next engine (sessions).
  LLM again(a);
  check_greedy(ref, again.generate(prompts_of(ref), greedy_params(24), {.use_tqdm = false}));
}

TEST_CASE("bad preemption settings are one clear error naming the field", "[engine][swap]") {
  EngineArgs a = fixture_args("llama_gqa");
  a.preemption_mode = "bogus";
  CHECK_THROWS_WITH(
      LLM(a), Catch::Contains("preemption_mode = \"bogus\"") && Catch::Contains("recompute|swap"));
  a.preemption_mode = "swap";
  a.swap_space = 0;
  CHECK_THROWS_WITH(
      LLM(a), Catch::Contains("preemption_mode = \"swap\"") && Catch::Contains("swap_space = 0"));
}

TEST_CASE("async scheduling: the same tokens, stops, samples and logprobs as step by step",
          "[engine][async]") {
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) return;
  const Reference ref = load_reference("llama_gqa");
  EngineArgs sync_args = fixture_args("llama_gqa");
  EngineArgs async_args = sync_args;
  async_args.async_scheduling = true;
  SECTION("greedy equals transformers, roomy and with preemption") {
    for (const EngineArgs& base : {async_args, tiny_cache_args("llama_gqa")}) {
      EngineArgs a = base;
      a.async_scheduling = true;
      LLM llm(a);
      check_greedy(ref, llm.generate(prompts_of(ref), greedy_params(24), {.use_tqdm = false}));
      CHECK(llm.scheduler_stats().steps_planned_ahead > 0);
      if (a.num_gpu_blocks_override) CHECK(llm.scheduler_stats().num_preemptions > 0);
    }
  }
  SECTION("preemption by swap, through a worker process") {
    WorkerProcess worker;
    EngineArgs a = tiny_cache_args("llama_gqa");
    a.async_scheduling = true;
    a.preemption_mode = "swap";
    a.swap_space = 0.01;
    a.executor_endpoints = {worker.endpoint()};
    {
      LLM llm(a);
      check_greedy(ref, llm.generate(prompts_of(ref), greedy_params(24), {.use_tqdm = false}));
      CHECK(llm.scheduler_stats().num_swap_outs > 0);
      CHECK(llm.scheduler_stats().steps_planned_ahead > 0);
      CHECK(llm.kv_stats().num_free_blocks == llm.kv_stats().num_blocks);
    }
    CHECK_FALSE(worker.wait_exit(0.2));  // it serves run after run
  }
  SECTION("prefix caching and prompt logprobs across repeated prompts") {
    // The same prompts three times: the second round hits the prefix cache, whose blocks were
    // registered while steps ran ahead; the third asks for prompt logprobs, which hit only
    // blocks with stored prompt logprobs (none: the rounds before asked for none).
    SamplingParams p = greedy_params(12);
    p.prompt_logprobs = 1;
    std::vector<RequestOutput> rounds[2][3];
    for (int i = 0; i < 2; ++i) {
      LLM llm(i == 0 ? sync_args : async_args);
      rounds[i][0] = llm.generate(prompts_of(ref), greedy_params(12), {.use_tqdm = false});
      rounds[i][1] = llm.generate(prompts_of(ref), greedy_params(12), {.use_tqdm = false});
      CHECK(llm.kv_stats().prefix_hits > 0);
      rounds[i][2] = llm.generate(prompts_of(ref), p, {.use_tqdm = false});
    }
    for (int round = 0; round < 3; ++round)
      for (size_t r = 0; r < ref.prompts.size(); ++r) {
        const auto& x = rounds[0][round][r];
        const auto& y = rounds[1][round][r];
        CHECK(x.outputs[0].token_ids == y.outputs[0].token_ids);
        std::vector<int32_t> head(ref.greedy[r].begin(), ref.greedy[r].begin() + 12);
        CHECK(y.outputs[0].token_ids == head);
        if (round == 2) {
          REQUIRE(x.prompt_logprobs);
          REQUIRE(y.prompt_logprobs);
          REQUIRE(x.prompt_logprobs->size() == y.prompt_logprobs->size());
          for (size_t k = 1; k < x.prompt_logprobs->size(); ++k) {
            const int32_t tok = ref.prompts[r][k];
            CHECK((*x.prompt_logprobs)[k].at(tok).logprob ==
                  Approx((*y.prompt_logprobs)[k].at(tok).logprob).margin(1e-5));
          }
        }
      }
  }
  SECTION("seeded sampling with penalties, stop tokens and logprobs") {
    SamplingParams p;
    p.temperature = 0.9;
    p.top_k = 20;
    p.seed = 77;
    p.n = 2;
    p.max_tokens = 20;
    p.presence_penalty = 0.5;
    p.repetition_penalty = 1.2;
    p.logprobs = 2;
    p.detokenize = false;
    p.ignore_eos = true;
    // Stops on a token that the greedy continuation of prompt 3 meets early.
    SamplingParams stopping = greedy_params(24);
    stopping.stop_token_ids = {ref.greedy[3][4]};
    std::vector<RequestOutput> outs[2];
    std::vector<RequestOutput> stops[2];
    for (int i = 0; i < 2; ++i) {
      LLM llm(i == 0 ? sync_args : async_args);
      outs[i] = llm.generate(prompts_of(ref), p, {.use_tqdm = false});
      stops[i] = llm.generate(prompts_of(ref), stopping, {.use_tqdm = false});
      CHECK((llm.scheduler_stats().steps_planned_ahead > 0) == (i == 1));
    }
    REQUIRE(outs[0].size() == outs[1].size());
    for (size_t r = 0; r < outs[0].size(); ++r) {
      for (size_t c = 0; c < 2; ++c) {
        const auto& x = outs[0][r].outputs.at(c);
        const auto& y = outs[1][r].outputs.at(c);
        CHECK(x.token_ids == y.token_ids);
        // Batches are cut differently, so float sums may round differently.
        REQUIRE(x.logprobs);
        REQUIRE(y.logprobs);
        REQUIRE(x.cumulative_logprob);
        REQUIRE(y.cumulative_logprob);
        CHECK(*x.cumulative_logprob == Approx(*y.cumulative_logprob).epsilon(1e-5));
        CHECK(x.logprobs->size() == y.logprobs->size());
      }
      CHECK(stops[0][r].outputs[0].token_ids == stops[1][r].outputs[0].token_ids);
      CHECK(stops[0][r].outputs[0].finish_reason == stops[1][r].outputs[0].finish_reason);
    }
    // Prompt 3 stopped at its fifth token (or where that token first occurs).
    const auto& s3 = stops[1][3].outputs[0];
    CHECK(s3.finish_reason == "stop");
    CHECK(s3.token_ids.size() <= 5);
    CHECK(s3.token_ids.back() == ref.greedy[3][4]);
  }
}

TEST_CASE("a detokenizer error fails exactly its requests, with the reason", "[engine][detok]") {
  // A model's vocabulary may be larger than its tokenizer's (padded embeddings): here the
  // llama_gqa fixture (256 ids) runs with the tiny fixture tokenizer cut to ids 0..248. Its
  // greedy continuation of reference prompt 3 reaches id 251 at the seventh token, prompt 2
  // holds id 250 itself, and prompt 0 stays within the tokenizer for all its 24 tokens.
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) return;
  const Reference ref = load_reference("llama_gqa");
  tokenizer_test::TempDir dir;
  nlohmann::json tok = tokenizer_test::tiny_json();
  nlohmann::json vocab = nlohmann::json::object();
  for (const auto& [piece, id] : tok["model"]["vocab"].items())
    if (id.get<int32_t>() < 249) vocab[piece] = id;
  tok["model"]["vocab"] = vocab;
  tok["model"]["merges"] = nlohmann::json::array();
  tok["added_tokens"] = nlohmann::json::array();
  dir.write_json("tokenizer.json", tok);
  EngineArgs args = fixture_args("llama_gqa");
  args.skip_tokenizer_init = false;
  args.tokenizer = dir.path().string();
  SamplingParams params = greedy_params(24);
  params.detokenize = true;

  caf::actor_system_config cfg;
  register_message_types(cfg);
  caf::actor_system sys{cfg};
  {
    Engine engine(sys, args);
    REQUIRE(engine.tokenizer()->vocab_size() == 249);
    caf::scoped_actor self{sys};
    std::map<std::string, size_t> prompt_of;  // request id -> reference prompt
    for (size_t i : {size_t(0), size_t(3), size_t(2)}) {
      EngineRequest req;
      req.prompt_token_ids = ref.prompts[i];
      req.params = params;
      self->request(engine.handle(), std::chrono::seconds(10), submit_atom::value, req,
                    caf::actor_cast<caf::actor>(self))
          .receive([&](const std::string& id) { prompt_of[id] = i; },
                   [&](caf::error& e) { FAIL(error_text(e)); });
    }
    std::map<size_t, RequestOutput> outs;
    bool timed_out = false;
    for (int n = 0; n < 100 && outs.size() < 3 && !timed_out; ++n)
      self->receive(
          [&](output_atom, RequestOutput& o) {
            if (o.finished) outs[prompt_of.at(o.request_id)] = std::move(o);
          },
          caf::after(std::chrono::seconds(30)) >> [&] { timed_out = true; });
    REQUIRE_FALSE(timed_out);
    REQUIRE(outs.size() == 3);
    // Untouched: all its tokens and their text.
    const RequestOutput& ok = outs[0];
    CHECK(ok.error.empty());
    CHECK(ok.outputs[0].finish_reason == "length");
    CHECK(ok.outputs[0].token_ids == ref.greedy[0]);
    CHECK(ok.outputs[0].text == engine.tokenizer()->decode(ref.greedy[0]));
    // Failed when its seventh token reached the detokenizer, with the reason (a step or two
    // more may have come in while the detokenizer answered).
    const RequestOutput& late = outs[3];
    CHECK(late.outputs[0].finish_reason == "error");
    CHECK_THAT(late.error, Catch::Contains("token id 251 is out of range"));
    const std::vector<int32_t>& got = late.outputs[0].token_ids;
    CHECK(got.size() >= 7);
    CHECK(got.size() <= ref.greedy[3].size());
    CHECK(std::equal(got.begin(), got.end(), ref.greedy[3].begin()));
    // Failed when its detokenizer was opened (its prompt holds id 250).
    const RequestOutput& early = outs[2];
    CHECK(early.outputs[0].finish_reason == "error");
    CHECK_THAT(early.error,
               Catch::Contains("(prompt)") && Catch::Contains("token id 250 is out of range"));
  }
  // LLM::generate returns (throws the reason) instead of waiting forever.
  LLM llm(args);
  CHECK_THROWS_WITH(llm.generate({Prompt(ref.prompts[3])}, params, {.use_tqdm = false}),
                    Catch::Contains("token id 251 is out of range"));
  const auto ok = llm.generate({Prompt(ref.prompts[0])}, params, {.use_tqdm = false});
  CHECK(ok[0].outputs[0].token_ids == ref.greedy[0]);
}

TEST_CASE("a worker that dies while loading its model fails the engine's start with the reason",
          "[engine][remote][fault]") {
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) return;
  WorkerProcess worker({"--fault", "exit-on-init"});
  EngineArgs a = fixture_args("llama_gqa");
  a.executor_endpoints = {worker.endpoint()};
  // The engine notices the dropped connection: it neither waits forever for the reply nor
  // starts without the executor.
  std::string error;
  try {
    LLM llm(a);
  } catch (const Error& e) {
    error = e.what();
  }
  INFO(error);
  CHECK_THAT(error, Catch::Contains("executor 0") && Catch::Contains(worker.endpoint()));
  CHECK(worker.wait_exit(10.0));
}

TEST_CASE("losing the executor's process mid-generation fails every request with the reason",
          "[engine][remote][fault]") {
  if (!fs::exists(kFixtures / "llama_gqa" / "reference.json")) return;
  const Reference ref = load_reference("llama_gqa");
  const bool async = GENERATE(false, true);
  INFO("async scheduling " << async);
  WorkerProcess worker;
  EngineArgs a = fixture_args("llama_gqa");
  a.executor_endpoints = {worker.endpoint()};
  a.async_scheduling = async;
  LLM llm(a);
  // 16 sequences of ~200 steps, each step a round trip to the worker: the kill lands while
  // they run (after a few steps, with one or two steps in flight).
  std::vector<Prompt> prompts;
  for (int i = 0; i < 16; ++i) prompts.emplace_back(ref.prompts[size_t(i) % ref.prompts.size()]);
  std::atomic<bool> killed{false};
  std::thread killer([&] {
    for (int i = 0; i < 20000 && llm.scheduler_stats().steps < 5; ++i)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    ::kill(worker.pid(), SIGKILL);
    killed = true;
  });
  std::string error;
  try {
    (void)llm.generate(prompts, greedy_params(190), {.use_tqdm = false});
  } catch (const Error& e) {
    error = e.what();
  }
  killer.join();
  REQUIRE(killed);
  CHECK_THAT(error, Catch::Contains("generation failed") && Catch::Contains("executor 0"));
  // The engine refuses new work with the reason, and says so at once.
  CHECK_THROWS_WITH(llm.generate({Prompt(ref.prompts[2])}, greedy_params(4), {.use_tqdm = false}),
                    Catch::Contains("no executors left") && Catch::Contains("executor 0"));
}

TEST_CASE("an engine on the CPU gets an actor system of 2 workers that do not poll on",
          "[engine]") {
  // The CPU backend's pool keeps every core busy during a step; CAF's default workers polled
  // on every 50 us after each job and took ~8% of two cores (docs/engine.md).
  EngineArgs args;
  args.device = "cpu";
  CHECK(computes_on_cpu(args));
  args.device = "cuda";
  CHECK_FALSE(computes_on_cpu(args));
  args.device = "auto";
  CHECK(computes_on_cpu(args) == (cuda_device_count() == 0));
  for (const bool cpu : {true, false}) {
    caf::actor_system_config cfg;
    register_message_types(cfg);
    set_scheduler(cfg, cpu);
    caf::actor_system sys{cfg};
    CHECK(sys.scheduler().num_workers() == (cpu ? 2u : 4u));
    CHECK(caf::get_or(sys.config(), "work-stealing.moderate-poll-attempts", size_t(500)) ==
          (cpu ? 0u : 500u));
  }
}
