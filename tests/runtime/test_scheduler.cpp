// The scheduling policy with a fake executor: a deterministic "model" whose next token is a
// function of the whole sequence so far. Whatever the cache size, budget or chunking, every
// sequence must produce exactly the tokens it would produce alone — which is what makes
// preemption by recompute, chunked prefill and prefix hits safe.
#include <catch2/catch.hpp>

#include <map>
#include <numeric>

#include "runtime/error.hpp"
#include "runtime/sched/scheduler.hpp"

using namespace troupe;

namespace {

constexpr int32_t kVocab = 1000;

int32_t fake_next(const std::vector<int32_t>& tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ uint64_t(t)) * 1099511628211ull;
  return int32_t(h % kVocab);
}

/// Mirrors the executor's persistent batch and checks every plan against the KV grants.
class FakeExecutor {
 public:
  explicit FakeExecutor(int32_t block_size) : block_size_(block_size) {}

  StepResult execute(const StepPlan& plan) {
    for (uint64_t id : plan.finished_seq_ids) seqs_.erase(id);
    StepResult r;
    r.step_id = plan.step_id;
    auto run = [&](uint64_t id, int32_t start, int32_t n) {
      Seq& s = seqs_.at(id);
      REQUIRE(start == s.computed);  // no gaps, no recomputation without a reset
      REQUIRE(start + n <= int32_t(s.tokens.size()));
      REQUIRE(int32_t(s.blocks.size()) * block_size_ >= start + n);
      s.computed = start + n;
      ++tokens_computed;
      SeqStepOutput o;
      o.seq_id = id;
      if (s.computed == int32_t(s.tokens.size())) {
        o.sampled = true;
        o.token = fake_next(s.tokens);
        o.logprobs.chosen = LogprobEntry{o.token, -0.5f, 1};
      }
      if (s.prompt_logprobs)
        for (int32_t p = start; p < std::min(start + n, s.num_prompt - 1); ++p)
          o.prompt_logprobs.push_back(PositionLogprobs{LogprobEntry{s.tokens[size_t(p + 1)], -1.0f, 1}, {}});
      r.outputs.push_back(std::move(o));
    };
    for (const NewSeq& n : plan.new_seqs) {
      REQUIRE_FALSE(seqs_.contains(n.seq_id));
      seqs_[n.seq_id] = Seq{n.token_ids, n.block_ids, n.num_computed_tokens, n.num_prompt_tokens,
                            n.sampling.num_prompt_logprobs >= 0};
      run(n.seq_id, n.num_computed_tokens, n.num_new_tokens);
    }
    for (const CachedSeq& c : plan.cached_seqs) {
      Seq& s = seqs_.at(c.seq_id);
      s.tokens.insert(s.tokens.end(), c.appended_token_ids.begin(), c.appended_token_ids.end());
      s.blocks.insert(s.blocks.end(), c.new_block_ids.begin(), c.new_block_ids.end());
      run(c.seq_id, c.num_computed_tokens, c.num_new_tokens);
    }
    return r;
  }
  size_t live() const { return seqs_.size(); }
  uint64_t tokens_computed = 0;

 private:
  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<int32_t> blocks;
    int32_t computed = 0;
    int32_t num_prompt = 0;
    bool prompt_logprobs = false;
  };
  int32_t block_size_;
  std::map<uint64_t, Seq> seqs_;
};

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::none;
  std::optional<int32_t> stop_token;
  size_t prompt_logprobs = 0;
};

/// Runs the scheduler to completion and returns every sequence's outputs.
std::map<uint64_t, Outcome> run_all(SchedulerConfig cfg, int32_t num_blocks, int32_t block_size,
                                    bool prefix, std::vector<SeqSpec> specs,
                                    uint64_t* preemptions = nullptr, int* steps = nullptr) {
  Scheduler sched(cfg);
  KVCacheManager kv(num_blocks, block_size, prefix);
  FakeExecutor exec(block_size);
  for (auto& s : specs) sched.add(s);
  std::map<uint64_t, Outcome> out;
  int n = 0;
  while (sched.has_work() || sched.has_pending_releases()) {
    REQUIRE(++n < 100000);
    StepPlan plan = sched.apply(kv.grant(sched.propose()));
    // The token budget and the sequence cap hold in every plan.
    int32_t tokens = 0;
    for (auto& s : plan.new_seqs) tokens += s.num_new_tokens;
    for (auto& s : plan.cached_seqs) tokens += s.num_new_tokens;
    REQUIRE(tokens <= cfg.max_num_batched_tokens);
    REQUIRE(plan.new_seqs.size() + plan.cached_seqs.size() <= size_t(cfg.max_num_seqs));
    if (plan.empty()) {
      (void)exec.execute(plan);  // lets the executor forget finished sequences
      continue;
    }
    for (auto& u : sched.on_result(exec.execute(plan))) {
      auto& o = out[u.seq_id];
      o.tokens.insert(o.tokens.end(), u.new_token_ids.begin(), u.new_token_ids.end());
      o.prompt_logprobs += u.prompt_logprobs.size();
      if (u.finish != FinishReason::none) {
        o.finish = u.finish;
        o.stop_token = u.stop_token;
      }
    }
  }
  CHECK(kv.stats().num_free_blocks == num_blocks);  // nothing leaked
  if (preemptions) *preemptions = sched.stats().num_preemptions;
  if (steps) *steps = n;
  return out;
}

std::vector<int32_t> alone(std::vector<int32_t> prompt, int32_t max_tokens) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < max_tokens; ++i) {
    out.push_back(fake_next(prompt));
    prompt.push_back(out.back());
  }
  return out;
}

SeqSpec make_spec(uint64_t id, int32_t prompt_len, int32_t max_tokens, int32_t first = 1) {
  SeqSpec s;
  s.seq_id = id;
  s.prompt_token_ids.resize(size_t(prompt_len));
  std::iota(s.prompt_token_ids.begin(), s.prompt_token_ids.end(), first);
  s.stop.max_tokens = max_tokens;
  return s;
}

}  // namespace

TEST_CASE("every sequence gets exactly its own continuation, whatever the batching", "[sched]") {
  std::vector<SeqSpec> specs;
  for (uint64_t i = 0; i < 12; ++i)
    specs.push_back(make_spec(i + 1, 3 + int32_t(i * 7 % 40), 5 + int32_t(i % 4) * 6, int32_t(i * 13)));

  struct Setup {
    const char* name;
    SchedulerConfig cfg;
    int32_t blocks;
    bool prefix;
  };
  const Setup setups[] = {
      {"roomy", {4096, 64, 1024, true}, 256, true},
      {"small budget, chunked prefill", {16, 64, 1024, true}, 256, false},
      {"few sequences at a time", {4096, 3, 1024, true}, 256, true},
      {"tiny cache: preemption by recompute", {64, 8, 1024, true}, 20, true},
      {"no chunked prefill", {64, 64, 64, false}, 64, false},
  };
  for (const auto& setup : setups) {
    DYNAMIC_SECTION(setup.name) {
      uint64_t preemptions = 0;
      auto out = run_all(setup.cfg, setup.blocks, 4, setup.prefix, specs, &preemptions);
      REQUIRE(out.size() == specs.size());
      for (const auto& s : specs) {
        const auto& o = out.at(s.seq_id);
        CHECK(o.finish == FinishReason::length);
        CHECK(o.tokens == alone(s.prompt_token_ids, s.stop.max_tokens));
      }
      if (std::string(setup.name).find("preemption") != std::string::npos)
        CHECK(preemptions > 0);
    }
  }
}

TEST_CASE("chunked prefill splits a long prompt under the token budget", "[sched]") {
  SchedulerConfig cfg{10, 8, 1024, true};
  Scheduler sched(cfg);
  KVCacheManager kv(64, 4, false);
  sched.add(make_spec(1, 25, 2));
  std::vector<int32_t> chunks;
  FakeExecutor exec(4);
  while (sched.has_work()) {
    StepPlan plan = sched.apply(kv.grant(sched.propose()));
    for (auto& n : plan.new_seqs) chunks.push_back(n.num_new_tokens);
    for (auto& c : plan.cached_seqs) chunks.push_back(c.num_new_tokens);
    (void)sched.on_result(exec.execute(plan));
  }
  CHECK(chunks == std::vector<int32_t>{10, 10, 5, 1});
}

TEST_CASE("eos and stop tokens end a sequence, but not before min_tokens", "[sched]") {
  const auto prompt = make_spec(1, 5, 50).prompt_token_ids;
  const auto free_run = alone(prompt, 50);

  SECTION("eos") {
    auto spec = make_spec(1, 5, 50);
    spec.stop.eos_token_ids = {free_run[3]};
    auto out = run_all({64, 8, 1024, true}, 64, 4, false, {spec});
    // The first occurrence of that token ends it (it may occur before index 3).
    const auto first = std::find(free_run.begin(), free_run.end(), free_run[3]) - free_run.begin();
    CHECK(out[1].tokens.size() == size_t(first + 1));
    CHECK(out[1].finish == FinishReason::stop);
    CHECK_FALSE(out[1].stop_token);
  }
  SECTION("stop_token_ids report the token") {
    auto spec = make_spec(1, 5, 50);
    spec.stop.stop_token_ids = {free_run[6]};
    auto out = run_all({64, 8, 1024, true}, 64, 4, false, {spec});
    CHECK(out[1].finish == FinishReason::stop);
    REQUIRE(out[1].stop_token);
    CHECK(*out[1].stop_token == free_run[6]);
  }
  SECTION("min_tokens defers a stop") {
    auto spec = make_spec(1, 5, 50);
    spec.stop.eos_token_ids = {free_run[0]};
    spec.stop.min_tokens = 10;
    auto out = run_all({64, 8, 1024, true}, 64, 4, false, {spec});
    CHECK(out[1].tokens.size() >= 10);
  }
  SECTION("max_model_len caps the sequence") {
    auto spec = make_spec(1, 5, 50);
    auto out = run_all({64, 8, 12, true}, 64, 4, false, {spec});
    CHECK(out[1].tokens.size() == 7);
    CHECK(out[1].finish == FinishReason::length);
  }
}

TEST_CASE("prompt logprobs are delivered once per prompt position, across chunks and "
          "preemptions",
          "[sched]") {
  std::vector<SeqSpec> specs;
  for (uint64_t i = 0; i < 6; ++i) {
    auto s = make_spec(i + 1, 30, 12, int32_t(i * 50));
    s.sampling.num_prompt_logprobs = 0;
    specs.push_back(s);
  }
  uint64_t preemptions = 0;
  auto out = run_all({16, 6, 1024, true}, 16, 4, true, specs, &preemptions);
  CHECK(preemptions > 0);
  for (const auto& s : specs) {
    CHECK(out[s.seq_id].prompt_logprobs == 29);
    CHECK(out[s.seq_id].tokens == alone(s.prompt_token_ids, 12));
  }
}

TEST_CASE("abort frees a sequence wherever it is", "[sched]") {
  Scheduler sched({64, 8, 1024, true});
  KVCacheManager kv(64, 4, false);
  FakeExecutor exec(4);
  sched.add(make_spec(1, 8, 100));
  sched.add(make_spec(2, 8, 100));
  (void)sched.on_result(exec.execute(sched.apply(kv.grant(sched.propose()))));
  CHECK(sched.abort(1));
  CHECK_FALSE(sched.abort(1));
  sched.add(make_spec(3, 8, 100));
  CHECK(sched.abort(3));  // still waiting
  StepPlan plan = sched.apply(kv.grant(sched.propose()));
  CHECK(plan.finished_seq_ids == std::vector<uint64_t>{1});
  REQUIRE(plan.cached_seqs.size() == 1);
  CHECK(plan.cached_seqs[0].seq_id == 2);
  (void)exec.execute(plan);
  CHECK(exec.live() == 1);
  CHECK(kv.holds(2));
  CHECK_FALSE(kv.holds(1));
}

TEST_CASE("the scheduler refuses impossible sequences", "[sched]") {
  Scheduler sched({64, 8, 16, true});
  CHECK_THROWS_AS(sched.add(make_spec(1, 17, 1)), Error);
  CHECK_THROWS_AS(sched.add(make_spec(1, 0, 1)), Error);
  sched.add(make_spec(1, 4, 1));
  CHECK_THROWS_WITH(sched.add(make_spec(1, 4, 1)), Catch::Contains("already in use"));
  CHECK_THROWS_AS(Scheduler({0, 8, 16, true}), Error);
}
