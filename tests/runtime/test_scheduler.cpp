// The scheduling policy with a fake executor: a deterministic "model" whose next token is a
// function of the whole sequence so far. Whatever the cache size, budget or chunking, every
// sequence must produce exactly the tokens it would produce alone — which is what makes
// preemption by recompute, chunked prefill and prefix hits safe.
#include <catch2/catch.hpp>

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <span>

#include "runtime/error.hpp"
#include "runtime/sched/scheduler.hpp"

using namespace troupe;

namespace {

constexpr int32_t kVocab = 1000;

uint64_t fake_hash(std::span<const int32_t> tokens) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tokens) h = (h ^ uint64_t(t)) * 1099511628211ull;
  return h;
}

int32_t fake_next(const std::vector<int32_t>& tokens) {
  return int32_t(fake_hash(tokens) % kVocab);
}

/// The fake model's prompt logprob entry of token tokens.back() with top-k: a function of all
/// the tokens up to it, as a real model's is.
PositionLogprobs fake_prompt_entry(std::span<const int32_t> tokens, int32_t k) {
  const uint64_t h = fake_hash(tokens.first(tokens.size() - 1));
  PositionLogprobs e;
  e.chosen = LogprobEntry{tokens.back(), -float(fake_hash(tokens) % 1000) / 64.0f,
                          int32_t(fake_hash(tokens) % 7) + 1};
  for (int32_t j = 0; j < k; ++j)
    e.top.push_back(LogprobEntry{int32_t((h + uint64_t(j) * 31) % kVocab),
                                 -float(j) - float(h % 100) / 128.0f, j + 1});
  return e;
}

bool same_entry(const PositionLogprobs& a, const PositionLogprobs& b) {
  auto same = [](const LogprobEntry& x, const LogprobEntry& y) {
    return x.token == y.token && x.logprob == y.logprob && x.rank == y.rank;
  };
  if (!same(a.chosen, b.chosen) || a.top.size() != b.top.size()) return false;
  for (size_t i = 0; i < a.top.size(); ++i)
    if (!same(a.top[i], b.top[i])) return false;
  return true;
}

/// Mirrors the executor's persistent batch and checks every plan against the KV grants. It
/// also keeps a fake KV cache (GPU and CPU pools): each slot holds the token whose "KV" was
/// written there, swaps copy whole blocks, and before a step reads positions [0, start) of a
/// sequence they must hold that sequence's tokens (so a lost or misplaced swap shows).
class FakeExecutor {
 public:
  explicit FakeExecutor(int32_t block_size, int32_t num_blocks = 1024, int32_t num_cpu_blocks = 0)
      : block_size_(block_size),
        gpu_(size_t(num_blocks) * size_t(block_size), -1),
        cpu_(size_t(num_cpu_blocks) * size_t(block_size), -1) {}

  StepResult execute(const StepPlan& plan) {
    for (uint64_t id : plan.finished_seq_ids) seqs_.erase(id);
    auto copy_block = [&](std::vector<int32_t>& dst, int32_t d, const std::vector<int32_t>& src,
                          int32_t sblk) {
      REQUIRE(size_t(d + 1) * size_t(block_size_) <= dst.size());
      REQUIRE(size_t(sblk + 1) * size_t(block_size_) <= src.size());
      std::copy_n(src.begin() + ptrdiff_t(sblk) * block_size_, block_size_,
                  dst.begin() + ptrdiff_t(d) * block_size_);
    };
    for (const BlockSwap& b : plan.swap_out) copy_block(cpu_, b.cpu_block, gpu_, b.gpu_block);
    for (const BlockSwap& b : plan.swap_in) copy_block(gpu_, b.gpu_block, cpu_, b.cpu_block);
    blocks_swapped += plan.swap_out.size() + plan.swap_in.size();
    StepResult r;
    r.step_id = plan.step_id;
    struct Run {
      uint64_t id;
      int32_t start, n;
    };
    std::vector<Run> runs;
    auto schedule = [&](uint64_t id, int32_t start, int32_t n) {
      Seq& s = seqs_.at(id);
      REQUIRE(start == s.computed);  // no gaps, no recomputation without a reset
      REQUIRE(start + n <= int32_t(s.tokens.size()));
      REQUIRE(int32_t(s.blocks.size()) * block_size_ >= start + n);
      runs.push_back(Run{id, start, n});
    };
    for (const NewSeq& n : plan.new_seqs) {
      REQUIRE_FALSE(seqs_.contains(n.seq_id));
      seqs_[n.seq_id] = Seq{n.token_ids, n.block_ids, n.num_computed_tokens, n.num_prompt_tokens,
                            n.sampling.num_prompt_logprobs};
      if (n.num_computed_tokens > 0) resumed.push_back({n.seq_id, n.num_computed_tokens});
      schedule(n.seq_id, n.num_computed_tokens, n.num_new_tokens);
    }
    for (const CachedSeq& c : plan.cached_seqs) {
      Seq& s = seqs_.at(c.seq_id);
      // Like the model runner: the tokens it sampled are in already; the plan confirms them.
      for (int32_t t : c.appended_token_ids) {
        REQUIRE(s.unconfirmed > 0);
        REQUIRE(s.tokens[s.tokens.size() - size_t(s.unconfirmed)] == t);
        --s.unconfirmed;
      }
      s.blocks.insert(s.blocks.end(), c.new_block_ids.begin(), c.new_block_ids.end());
      schedule(c.seq_id, c.num_computed_tokens, c.num_new_tokens);
    }
    auto slot = [&](const Seq& s, int32_t p) -> int32_t& {
      return gpu_[size_t(s.blocks[size_t(p / block_size_)]) * size_t(block_size_) +
                  size_t(p % block_size_)];
    };
    // Like a forward: every KV write of the step lands before any attention reads.
    for (const Run& run : runs) {
      Seq& s = seqs_.at(run.id);
      for (int32_t p = run.start; p < run.start + run.n; ++p) slot(s, p) = s.tokens[size_t(p)];
    }
    for (const Run& run : runs) {
      Seq& s = seqs_.at(run.id);
      for (int32_t p = 0; p < run.start + run.n; ++p) {
        INFO("sequence " << run.id << " position " << p);
        REQUIRE(slot(s, p) == s.tokens[size_t(p)]);
      }
      s.computed = run.start + run.n;
      tokens_computed += uint64_t(run.n);
      SeqStepOutput o;
      o.seq_id = run.id;
      if (s.computed == int32_t(s.tokens.size())) {
        o.sampled = true;
        o.token = fake_next(s.tokens);
        o.logprobs.chosen = LogprobEntry{o.token, -0.5f, 1};
        s.tokens.push_back(o.token);
        ++s.unconfirmed;
      }
      if (s.prompt_logprobs >= 0)
        for (int32_t p = run.start; p < std::min(run.start + run.n, s.num_prompt - 1); ++p)
          o.prompt_logprobs.push_back(fake_prompt_entry(
              std::span<const int32_t>(s.tokens.data(), size_t(p + 2)), s.prompt_logprobs));
      r.outputs.push_back(std::move(o));
    }
    return r;
  }
  size_t live() const { return seqs_.size(); }
  uint64_t tokens_computed = 0;
  uint64_t blocks_swapped = 0;
  std::vector<std::pair<uint64_t, int32_t>> resumed;  // (seq, num_computed) of NewSeqs with KV

 private:
  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<int32_t> blocks;
    int32_t computed = 0;
    int32_t num_prompt = 0;
    int32_t prompt_logprobs = -1;
    int32_t unconfirmed = 0;  // sampled here, not yet confirmed by a plan
  };
  int32_t block_size_;
  std::vector<int32_t> gpu_, cpu_;
  std::map<uint64_t, Seq> seqs_;
};

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::none;
  std::optional<int32_t> stop_token;
  size_t prompt_logprobs = 0;
  std::vector<PositionLogprobs> prompt_entries;
  int32_t num_cached_tokens = -1;
};

/// Runs the scheduler to completion and returns every sequence's outputs.
/// Swap settings of a run_all, and what it reports about them.
struct SwapRun {
  PreemptionMode mode = PreemptionMode::recompute;
  int32_t cpu_blocks = 0;
  SchedulerStats stats;  // at the end
  KVStats kv;            // at the end
  uint64_t tokens_computed = 0;
  std::vector<std::pair<uint64_t, int32_t>> resumed;
};

/// What drive() reports: every plan (and whether it was made ahead), every time a plan must
/// wait for the step in flight, every update.
struct DriveHooks {
  std::function<void(const StepPlan&, bool ahead)> on_plan;
  std::function<void()> on_wait;
  std::function<void(const SeqUpdate&)> on_update;
};

/// Runs steps until nothing is left, planning ahead whenever the scheduler allows (async
/// scheduling): the fake executor runs each plan as it is made, and a result is applied only
/// after the next plan (when there is one) was made. `results` holds the steps already in
/// flight. Returns the loop's iterations.
int drive(Scheduler& sched, KVCacheManager& kv, FakeExecutor& exec,
          std::deque<StepResult>& results, const DriveHooks& hooks) {
  int n = 0;
  while (sched.has_work() || sched.has_pending_releases() || !results.empty()) {
    REQUIRE(++n < 100000);
    REQUIRE(results.size() == sched.steps_in_flight());
    const bool more = sched.has_work() || sched.has_pending_releases();
    if (more && (results.empty() || sched.can_plan_ahead())) {
      const bool ahead = !results.empty();
      StepPlan plan = sched.apply(kv.grant(sched.propose()));
      if (hooks.on_plan) hooks.on_plan(plan, ahead);
      if (ahead) CHECK(plan.swap_out.empty());  // plans made ahead never preempt
      if (!plan.empty()) {
        results.push_back(exec.execute(plan));
        // May plan the next one ahead (async scheduling; pipeline parallelism up to its depth).
        if (results.size() == 1 || sched.can_plan_ahead()) continue;
      } else {
        (void)exec.execute(plan);  // lets the executor forget finished sequences and swap
        if (results.empty()) continue;
      }
    } else if (more && hooks.on_wait) {
      hooks.on_wait();
    }
    const StepResult r = std::move(results.front());
    results.pop_front();
    for (const SeqUpdate& u : sched.on_result(r))
      if (hooks.on_update) hooks.on_update(u);
  }
  return n;
}

/// Runs `specs` to completion (with cfg.async_scheduling, planning ahead as drive() does) and
/// returns every sequence's outputs.
std::map<uint64_t, Outcome> run_all(SchedulerConfig cfg, int32_t num_blocks, int32_t block_size,
                                    bool prefix, std::vector<SeqSpec> specs,
                                    uint64_t* preemptions = nullptr, int* steps = nullptr,
                                    SwapRun* swap = nullptr, int* planned_ahead = nullptr) {
  cfg.preemption_mode = swap ? swap->mode : PreemptionMode::recompute;
  Scheduler sched(cfg);
  const int32_t cpu_blocks = swap ? swap->cpu_blocks : 0;
  KVCacheManager kv(num_blocks, block_size, prefix, cpu_blocks);
  FakeExecutor exec(block_size, num_blocks, cpu_blocks);
  for (auto& s : specs) sched.add(s);
  std::map<uint64_t, Outcome> out;
  std::deque<StepResult> results;
  DriveHooks hooks;
  hooks.on_plan = [&](const StepPlan& plan, bool ahead) {
    // The token budget and the sequence cap hold in every plan.
    int32_t tokens = 0;
    for (auto& s : plan.new_seqs) tokens += s.num_new_tokens;
    for (auto& s : plan.cached_seqs) tokens += s.num_new_tokens;
    REQUIRE(tokens <= cfg.max_num_batched_tokens);
    REQUIRE(plan.new_seqs.size() + plan.cached_seqs.size() <= size_t(cfg.max_num_seqs));
    if (ahead && !plan.empty() && planned_ahead) ++*planned_ahead;
  };
  hooks.on_update = [&](const SeqUpdate& u) {
    auto& o = out[u.seq_id];
    o.tokens.insert(o.tokens.end(), u.new_token_ids.begin(), u.new_token_ids.end());
    o.prompt_logprobs += u.prompt_logprobs.size();
    o.prompt_entries.insert(o.prompt_entries.end(), u.prompt_logprobs.begin(),
                            u.prompt_logprobs.end());
    if (o.num_cached_tokens < 0) o.num_cached_tokens = u.num_cached_tokens;
    if (u.finish != FinishReason::none) {
      o.finish = u.finish;
      o.stop_token = u.stop_token;
    }
  };
  const int n = drive(sched, kv, exec, results, hooks);
  CHECK(kv.stats().num_free_blocks == num_blocks);  // nothing leaked
  CHECK(kv.stats().num_free_cpu_blocks == cpu_blocks);
  if (preemptions) *preemptions = sched.stats().num_preemptions;
  if (steps) *steps = n;
  if (swap) {
    swap->stats = sched.stats();
    swap->kv = kv.stats();
    swap->tokens_computed = exec.tokens_computed;
    swap->resumed = exec.resumed;
  }
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
  // 0: one step at a time; 1: async scheduling; 2 and 3: pipeline parallelism (that many
  // micro-batches of disjoint sequences in flight).
  const int mode = GENERATE(0, 1, 2, 3);
  for (const auto& setup : setups) {
    DYNAMIC_SECTION(setup.name << (mode == 1 ? ", async scheduling" : "")
                               << (mode >= 2 ? ", pipeline parallel " + std::to_string(mode) : "")) {
      uint64_t preemptions = 0;
      int ahead = 0;
      SchedulerConfig cfg = setup.cfg;
      cfg.async_scheduling = mode == 1;
      cfg.pipeline_parallel_size = mode >= 2 ? mode : 1;
      auto out = run_all(cfg, setup.blocks, 4, setup.prefix, specs, &preemptions, nullptr,
                         nullptr, &ahead);
      if (mode == 0 || setup.name == std::string("roomy")) CHECK((ahead > 0) == (mode != 0));
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
  // With async scheduling the step planned ahead of the stop is wasted; the outputs are the same.
  const bool async = GENERATE(false, true);
  auto run_all = [&](SchedulerConfig cfg, int32_t num_blocks, int32_t block_size, bool prefix,
                     std::vector<SeqSpec> specs) {
    cfg.async_scheduling = async;
    return ::run_all(cfg, num_blocks, block_size, prefix, std::move(specs));
  };

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
  auto out = run_all({16, 6, 1024, true, GENERATE(false, true)}, 16, 4, true, specs, &preemptions);
  CHECK(preemptions > 0);
  for (const auto& s : specs) {
    CHECK(out[s.seq_id].prompt_logprobs == 29);
    CHECK(out[s.seq_id].tokens == alone(s.prompt_token_ids, 12));
  }
}

TEST_CASE("prompt logprobs from the prefix cache equal those computed without it",
          "[sched][prefix]") {
  // Prompts sharing a 21-token prefix (block size 4: five full blocks and one token), with
  // suffixes of several lengths, so the hit ends at various block boundaries; the top-k varies,
  // and a later sequence asks more than the stored k (a miss for those blocks).
  std::vector<SeqSpec> specs;
  std::vector<int32_t> shared(21);
  std::iota(shared.begin(), shared.end(), 7);
  const int32_t ks[] = {0, 2, 1, 0, 3, 2, 0, 5, 1, 2};
  for (uint64_t i = 0; i < 10; ++i) {
    SeqSpec s;
    s.seq_id = i + 1;
    s.prompt_token_ids = shared;
    for (uint64_t j = 0; j < 1 + (i * 3) % 9; ++j)
      s.prompt_token_ids.push_back(int32_t(500 + i * 10 + j));
    s.stop.max_tokens = 3;
    s.sampling.num_prompt_logprobs = ks[i];
    specs.push_back(s);
  }
  // A prompt that is all prefix (a hit cannot reach its last block).
  SeqSpec whole = specs[0];
  whole.seq_id = 11;
  whole.prompt_token_ids = shared;
  whole.sampling.num_prompt_logprobs = 1;
  specs.push_back(whole);
  const bool async = GENERATE(false, true);
  const int32_t budget = GENERATE(8, 13, 64);
  SchedulerConfig cfg{budget, 2, 1024, true};
  cfg.async_scheduling = async;
  INFO("async " << async << ", budget " << budget);
  SwapRun run;
  auto out = run_all(cfg, 64, 4, true, specs, nullptr, nullptr, &run);
  int32_t served = 0;
  for (const auto& s : specs) {
    const Outcome& o = out[s.seq_id];
    INFO("sequence " << s.seq_id);
    CHECK(o.tokens == alone(s.prompt_token_ids, 3));
    REQUIRE(o.prompt_entries.size() == s.prompt_token_ids.size() - 1);
    for (size_t t = 1; t < s.prompt_token_ids.size(); ++t) {
      INFO("token " << t);
      CHECK(same_entry(o.prompt_entries[t - 1],
                       fake_prompt_entry(std::span(s.prompt_token_ids).first(t + 1),
                                         s.sampling.num_prompt_logprobs)));
    }
    CHECK(o.num_cached_tokens % 4 == 0);
    served += o.num_cached_tokens > 0 ? 1 : 0;
  }
  CHECK(served >= 5);
  CHECK(out[8].num_cached_tokens == 0);  // k = 5: more than any block stored before it
  CHECK(run.kv.prefix_hits > 0);
  CHECK(run.kv.prompt_logprob_blocks > 0);
  CHECK(run.kv.prompt_logprob_bytes > 0);
}

TEST_CASE("a sequence's first scheduled time is its first admission's, through recomputes",
          "[sched][metrics]") {
  using Clock = std::chrono::steady_clock;
  // The tiny cache of the test above: sequences are preempted by recompute and admitted again.
  SchedulerConfig cfg{64, 8, 1024, true};
  cfg.async_scheduling = GENERATE(false, true);
  Scheduler sched(cfg);
  KVCacheManager kv(20, 4, true, 0);
  FakeExecutor exec(4);
  for (uint64_t i = 0; i < 12; ++i)
    sched.add(make_spec(i + 1, 3 + int32_t(i * 7 % 40), 5 + int32_t(i % 4) * 6, int32_t(i * 13)));
  // When each plan was made: [before propose, after apply].
  std::map<uint64_t, std::pair<Clock::time_point, Clock::time_point>> first_plan;
  std::map<uint64_t, int> admissions;
  std::map<uint64_t, Clock::time_point> stamped;
  Clock::time_point plan_start = Clock::now();
  DriveHooks hooks;
  hooks.on_plan = [&](const StepPlan& plan, bool) {
    const auto made = Clock::now();
    for (const NewSeq& n : plan.new_seqs) {
      if (++admissions[n.seq_id] == 1) first_plan[n.seq_id] = {plan_start, made};
    }
    plan_start = made;
  };
  hooks.on_update = [&](const SeqUpdate& u) {
    INFO("sequence " << u.seq_id);
    REQUIRE(u.first_scheduled);
    const auto [lo, hi] = first_plan.at(u.seq_id);
    CHECK(*u.first_scheduled >= lo);
    CHECK(*u.first_scheduled <= hi);
    // The same on every update, whatever admitted it again since.
    auto [it, fresh] = stamped.emplace(u.seq_id, *u.first_scheduled);
    CHECK(it->second == *u.first_scheduled);
    // The step result came back after the plan that first ran it, and before now.
    CHECK(u.time >= *u.first_scheduled);
    CHECK(u.time <= Clock::now());
  };
  std::deque<StepResult> results;
  drive(sched, kv, exec, results, hooks);
  CHECK(sched.stats().num_preemptions > 0);
  int readmitted = 0;
  for (const auto& [id, n] : admissions) readmitted += n > 1 ? 1 : 0;
  CHECK(readmitted > 0);  // some were admitted again after a preemption: the case in question
  CHECK(stamped.size() == 12);
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

TEST_CASE("swap: preempted sequences are swapped out and back, nothing is recomputed",
          "[sched][swap]") {
  std::vector<SeqSpec> specs;
  uint64_t total_positions = 0;  // every position computed exactly once without recompute
  for (uint64_t i = 0; i < 12; ++i) {
    specs.push_back(
        make_spec(i + 1, 3 + int32_t(i * 7 % 40), 5 + int32_t(i % 4) * 6, int32_t(i * 13)));
    total_positions +=
        specs.back().prompt_token_ids.size() + uint64_t(specs.back().stop.max_tokens) - 1;
  }
  SchedulerConfig cfg{64, 8, 1024, true, GENERATE(false, true)};
  SECTION("CPU pool large enough") {
    SwapRun swap{PreemptionMode::swap, 64};
    auto out = run_all(cfg, 20, 4, false, specs, nullptr, nullptr, &swap);
    for (const auto& s : specs) {
      CHECK(out.at(s.seq_id).finish == FinishReason::length);
      CHECK(out.at(s.seq_id).tokens == alone(s.prompt_token_ids, s.stop.max_tokens));
    }
    CHECK(swap.stats.num_swap_outs > 0);
    CHECK(swap.stats.num_swap_ins == swap.stats.num_swap_outs);
    CHECK(swap.stats.num_preemptions == swap.stats.num_swap_outs);  // no recompute
    CHECK(swap.stats.num_swapped == 0);
    CHECK(swap.kv.blocks_swapped_out > 0);
    CHECK(swap.kv.blocks_swapped_in == swap.kv.blocks_swapped_out);
    CHECK(swap.kv.swap_fallbacks == 0);
    CHECK(swap.tokens_computed == total_positions);
    // Swapped-in sequences resumed where they were (the fake executor checked their KV).
    CHECK(swap.resumed.size() == swap.stats.num_swap_ins);
    for (const auto& [id, computed] : swap.resumed) CHECK(computed > 0);
  }
  SECTION("CPU pool too small for any sequence: recompute") {
    SwapRun swap{PreemptionMode::swap, 1};
    auto out = run_all(cfg, 20, 4, false, specs, nullptr, nullptr, &swap);
    for (const auto& s : specs)
      CHECK(out.at(s.seq_id).tokens == alone(s.prompt_token_ids, s.stop.max_tokens));
    CHECK(swap.stats.num_preemptions > 0);
    CHECK(swap.stats.num_swap_outs == 0);
    CHECK(swap.kv.swap_fallbacks == swap.stats.num_preemptions);
    CHECK(swap.tokens_computed > total_positions);  // recomputed
  }
  SECTION("CPU pool for some: a mix of both, with prefix caching and chunked prompts") {
    SwapRun swap{PreemptionMode::swap, 6};
    auto out = run_all({16, 8, 1024, true, cfg.async_scheduling}, 20, 4, true, specs, nullptr,
                       nullptr, &swap);
    for (const auto& s : specs)
      CHECK(out.at(s.seq_id).tokens == alone(s.prompt_token_ids, s.stop.max_tokens));
    CHECK(swap.stats.num_swap_outs > 0);
    CHECK(swap.stats.num_swap_ins == swap.stats.num_swap_outs);
  }
}

TEST_CASE("swap: the scheduler keeps num_computed_tokens across a swap", "[sched][swap]") {
  // Two sequences in a cache of 4 blocks of 4: both prompts take 2 blocks; the first to grow
  // past 8 tokens swaps the other out.
  Scheduler sched({64, 8, 1024, true, false, PreemptionMode::swap});
  KVCacheManager kv(4, 4, false, 8);
  FakeExecutor exec(4, 4, 8);
  sched.add(make_spec(1, 7, 9));  // 16 tokens: the whole cache, alone
  sched.add(make_spec(2, 7, 3, 50));
  StepPlan plan;
  int32_t computed_at_swap = -1;
  for (int step = 0; step < 50 && computed_at_swap < 0; ++step) {
    plan = sched.apply(kv.grant(sched.propose()));
    if (!plan.swap_out.empty()) {
      CHECK(sched.stats().num_swapped == 1);
      CHECK(sched.stats().num_swap_outs == 1);
      computed_at_swap = 8;  // 7 prompt tokens + 1 output computed: 2 blocks' worth
      CHECK(plan.swap_out.size() == 2);
      CHECK(plan.finished_seq_ids == std::vector<uint64_t>{2});
    }
    (void)sched.on_result(exec.execute(plan));
  }
  REQUIRE(computed_at_swap == 8);
  // Sequence 1 runs to the end; then 2 comes back with its 8 computed tokens and one new one.
  bool back = false;
  while (sched.has_work() || sched.has_pending_releases()) {
    plan = sched.apply(kv.grant(sched.propose()));
    for (const NewSeq& n : plan.new_seqs) {
      if (n.seq_id != 2) continue;
      back = true;
      CHECK(n.num_computed_tokens == 8);
      CHECK(n.num_new_tokens == 1);
      CHECK(n.token_ids.size() == 9);
      CHECK(plan.swap_in.size() == 2);
    }
    (void)sched.on_result(exec.execute(plan));
  }
  CHECK(back);
  CHECK(sched.stats().num_swap_ins == 1);
  CHECK(kv.stats().num_free_blocks == 4);
  CHECK(kv.num_free_cpu_blocks() == 8);
}

TEST_CASE("swap: aborting a swapped-out sequence frees its CPU blocks", "[sched][swap]") {
  Scheduler sched({64, 8, 1024, true, false, PreemptionMode::swap});
  KVCacheManager kv(4, 4, false, 8);
  FakeExecutor exec(4, 4, 8);
  sched.add(make_spec(1, 7, 20));
  sched.add(make_spec(2, 7, 20, 50));
  for (int step = 0; step < 50 && sched.stats().num_swapped == 0; ++step)
    (void)sched.on_result(exec.execute(sched.apply(kv.grant(sched.propose()))));
  REQUIRE(sched.stats().num_swapped == 1);
  CHECK(kv.num_free_cpu_blocks() == 6);
  CHECK(sched.abort(2));
  CHECK(sched.stats().num_swapped == 0);
  CHECK(sched.abort(1));
  (void)exec.execute(sched.apply(kv.grant(sched.propose())));
  CHECK(kv.num_free_cpu_blocks() == 8);
  CHECK(kv.stats().num_free_blocks == 4);
  CHECK_FALSE(sched.has_work());
}

// ---- preemption: the policy's choice ----

TEST_CASE("the preemption policy names the lowest priority first, in the configured mode",
          "[sched][preempt]") {
  const std::vector<KVRunningAsk> running{{4, {}, 8, 1}, {9, {}, 8, 1}, {2, {}, 8, 1}};
  const auto ids = [](const std::vector<KVPreemption>& v) {
    std::vector<uint64_t> out;
    for (const auto& p : v) out.push_back(p.seq_id);
    return out;
  };
  for (PreemptionMode mode : {PreemptionMode::recompute, PreemptionMode::swap}) {
    const auto order = PreemptionPolicy(mode).order(running);
    CHECK(ids(order) == std::vector<uint64_t>{2, 9, 4});  // the reverse of priority order
    for (const auto& p : order) CHECK(p.mode == mode);
  }
  CHECK(PreemptionPolicy().order({}).empty());
  CHECK(PreemptionPolicy::name() == "lowest_priority_first");
}

TEST_CASE("the scheduler preempts the sequence admitted last, by recompute or by swap",
          "[sched][preempt]") {
  // Three prompts of 8 tokens fill 6 blocks of 4; each then needs a third block for its
  // second output: the ask names 3, 2, 1 as victims, and 1 and 2 grow into 3's blocks.
  const PreemptionMode mode = GENERATE(PreemptionMode::recompute, PreemptionMode::swap);
  Scheduler sched({64, 8, 1024, true, false, mode});
  KVCacheManager kv(6, 4, false, 8);
  FakeExecutor exec(4, 6, 8);
  for (uint64_t id = 1; id <= 3; ++id) sched.add(make_spec(id, 8, 4, int32_t(id) * 100));
  (void)sched.on_result(exec.execute(sched.apply(kv.grant(sched.propose()))));
  const KVAsk ask = sched.propose();
  REQUIRE(ask.preemption_order.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(ask.preemption_order[i].seq_id == 3 - i);
    CHECK(ask.preemption_order[i].mode == mode);
  }
  const StepPlan plan = sched.apply(kv.grant(ask));
  CHECK(plan.finished_seq_ids == std::vector<uint64_t>{3});  // the executors forget it
  CHECK(plan.cached_seqs.size() == 2);
  CHECK(sched.stats().num_preemptions == 1);
  CHECK(sched.stats().num_swapped == (mode == PreemptionMode::swap ? 1 : 0));
  CHECK(sched.stats().num_waiting == (mode == PreemptionMode::swap ? 0 : 1));
  CHECK(plan.swap_out.size() == (mode == PreemptionMode::swap ? 2u : 0u));
}

// ---- asynchronous scheduling ----

TEST_CASE("async: the step after one that ran short of blocks waits, then preempts",
          "[sched][async]") {
  // Prompts of 8 and 5 tokens fill a cache of 4 blocks of 4. In the plan made ahead the first
  // needs a third block and cannot get it, the second can still grow: that plan runs without
  // the first, and the one after it waits for the steps in flight and preempts.
  Scheduler sched({64, 8, 1024, true, true});
  KVCacheManager kv(4, 4, false);
  FakeExecutor exec(4, 4);
  sched.add(make_spec(1, 8, 6));
  sched.add(make_spec(2, 5, 6, 50));
  std::deque<StepResult> results;
  bool waited = false;
  std::map<uint64_t, std::vector<int32_t>> out;
  DriveHooks hooks;
  hooks.on_wait = [&] {
    waited = true;
    CHECK(sched.steps_in_flight() == 1);
    CHECK_THROWS_WITH((void)sched.propose(), Catch::Contains("the next plan must wait"));
  };
  hooks.on_update = [&](const SeqUpdate& u) {
    out[u.seq_id].insert(out[u.seq_id].end(), u.new_token_ids.begin(), u.new_token_ids.end());
  };
  (void)drive(sched, kv, exec, results, hooks);
  CHECK(waited);
  CHECK(sched.stats().num_preemptions > 0);
  CHECK(kv.stats().num_free_blocks == 4);
  CHECK(out[1] == alone(make_spec(1, 8, 6).prompt_token_ids, 6));
  CHECK(out[2] == alone(make_spec(2, 5, 6, 50).prompt_token_ids, 6));
}

TEST_CASE("async: a sequence is not scheduled past its last token", "[sched][async]") {
  // max_tokens 3: the plan made ahead of the step sampling the third token leaves it out.
  Scheduler sched({64, 8, 1024, true, true});
  KVCacheManager kv(16, 4, false);
  FakeExecutor exec(4);
  sched.add(make_spec(1, 5, 3));
  StepPlan p1 = sched.apply(kv.grant(sched.propose()));
  StepResult r1 = exec.execute(p1);
  REQUIRE(sched.can_plan_ahead());
  const KVAsk ahead = sched.propose();
  CHECK(ahead.preemption_order.empty());       // a plan made ahead preempts nobody
  StepPlan p2 = sched.apply(kv.grant(ahead));  // computes output 1, samples output 2
  REQUIRE(p2.cached_seqs.size() == 1);
  CHECK(p2.cached_seqs[0].num_computed_tokens == 5);
  CHECK(p2.cached_seqs[0].appended_token_ids.empty());  // output 1 is not known yet
  StepResult r2 = exec.execute(p2);
  CHECK(sched.on_result(r1).size() == 1);
  StepPlan p3 = sched.apply(kv.grant(sched.propose()));  // computes output 2, samples output 3
  REQUIRE(p3.cached_seqs.size() == 1);
  CHECK(p3.cached_seqs[0].appended_token_ids.size() == 1);  // confirms output 1
  StepResult r3 = exec.execute(p3);
  CHECK(sched.on_result(r2).size() == 1);
  // Output 3 (in flight) is the last: nothing to plan ahead.
  StepPlan p4 = sched.apply(kv.grant(sched.propose()));
  CHECK(p4.empty());
  auto ups = sched.on_result(r3);
  REQUIRE(ups.size() == 1);
  CHECK(ups[0].finish == FinishReason::length);
  CHECK(exec.tokens_computed == 5 + 2);  // no wasted step
}

TEST_CASE("async: an abort while the cache manager grants leaks nothing", "[sched][async]") {
  Scheduler sched({64, 8, 1024, true, true});
  KVCacheManager kv(16, 4, true);
  FakeExecutor exec(4);
  sched.add(make_spec(1, 5, 20));
  StepResult r1 = exec.execute(sched.apply(kv.grant(sched.propose())));
  sched.add(make_spec(2, 6, 20, 30));
  KVAsk ask = sched.propose();  // running 1 (ahead) and waiting 2
  REQUIRE(ask.waiting.size() == 1);
  KVGrant grant = kv.grant(ask);
  REQUIRE(grant.admitted.size() == 1);
  CHECK(sched.abort(2));  // arrives before the grant is applied
  CHECK(sched.abort(1));
  StepPlan p2 = sched.apply(grant);
  CHECK(p2.empty());
  CHECK(p2.finished_seq_ids == std::vector<uint64_t>{1});  // the executors forget it
  CHECK(sched.on_result(r1).empty());  // 1 is gone: its output is dropped
  (void)sched.apply(kv.grant(sched.propose()));  // the releases reach the cache manager
  CHECK_FALSE(kv.holds(1));
  CHECK_FALSE(kv.holds(2));
  CHECK(kv.stats().num_free_blocks == 16);
  CHECK_FALSE(sched.has_work());
}

TEST_CASE("async: an abort with two steps in flight drops both results and frees the blocks",
          "[sched][async]") {
  Scheduler sched({64, 8, 1024, true, true});
  KVCacheManager kv(32, 4, false);
  FakeExecutor exec(4, 32);
  sched.add(make_spec(1, 6, 30));
  sched.add(make_spec(2, 5, 4, 40));
  StepResult r1 = exec.execute(sched.apply(kv.grant(sched.propose())));
  REQUIRE(sched.can_plan_ahead());
  StepResult r2 = exec.execute(sched.apply(kv.grant(sched.propose())));
  CHECK(sched.steps_in_flight() == 2);
  CHECK(sched.abort(1));  // in both steps
  auto u1 = sched.on_result(r1);
  REQUIRE(u1.size() == 1);  // sequence 2's first token only
  CHECK(u1[0].seq_id == 2);
  std::vector<int32_t> out2 = u1[0].new_token_ids;
  StepResult r3 = exec.execute(sched.apply(kv.grant(sched.propose())));
  for (auto& u : sched.on_result(r2)) {
    CHECK(u.seq_id == 2);
    out2.insert(out2.end(), u.new_token_ids.begin(), u.new_token_ids.end());
  }
  std::deque<StepResult> results{r3};
  DriveHooks hooks;
  hooks.on_update = [&](const SeqUpdate& u) {
    out2.insert(out2.end(), u.new_token_ids.begin(), u.new_token_ids.end());
  };
  (void)drive(sched, kv, exec, results, hooks);
  CHECK(out2 == alone(make_spec(2, 5, 4, 40).prompt_token_ids, 4));
  CHECK_FALSE(kv.holds(1));
  CHECK(kv.stats().num_free_blocks == 32);
  CHECK(exec.live() == 0);
}

// ---- pipeline parallelism ----

TEST_CASE("pipeline parallel: micro-batches in flight hold disjoint sequences",
          "[sched][pipeline]") {
  SchedulerConfig cfg{4096, 2, 1024, true};
  cfg.pipeline_parallel_size = 2;
  Scheduler sched(cfg);
  KVCacheManager kv(256, 4, false);
  FakeExecutor exec(4, 256);
  for (uint64_t id = 1; id <= 4; ++id) sched.add(make_spec(id, 5, 3, int32_t(id) * 10));
  auto ids_of = [](const StepPlan& p) {
    std::set<uint64_t> ids;
    for (const auto& n : p.new_seqs) ids.insert(n.seq_id);
    for (const auto& c : p.cached_seqs) ids.insert(c.seq_id);
    return ids;
  };
  const StepPlan first = sched.apply(kv.grant(sched.propose()));
  CHECK(ids_of(first) == std::set<uint64_t>{1, 2});  // max_num_seqs = 2
  std::deque<StepResult> results{exec.execute(first)};
  REQUIRE(sched.can_plan_ahead());
  const StepPlan second = sched.apply(kv.grant(sched.propose()));
  CHECK(ids_of(second) == std::set<uint64_t>{3, 4});  // 1 and 2 wait for their tokens
  results.push_back(exec.execute(second));
  CHECK_FALSE(sched.can_plan_ahead());  // two micro-batches in flight: the pipeline is full
  (void)sched.on_result(results.front());
  results.pop_front();
  REQUIRE(sched.can_plan_ahead());
  const StepPlan third = sched.apply(kv.grant(sched.propose()));
  CHECK(ids_of(third) == std::set<uint64_t>{1, 2});
}

// ---- fault recovery ----

TEST_CASE("after a lost executor every sequence is recomputed to exactly its own continuation",
          "[sched][faults]") {
  // Steps run with async scheduling (two in flight); at several points the executors are
  // "lost": the results in flight are dropped, the scheduler requeues everything, and a new
  // cache manager and executor that know nothing take over. Every sequence must still end
  // with the tokens it gets alone, and nothing may leak.
  for (int lose_at : {1, 2, 5, 9}) {
    DYNAMIC_SECTION("lost after " << lose_at << " steps") {
      Scheduler sched({64, 4, 1024, true, true});
      auto kv = std::make_unique<KVCacheManager>(64, 4, true);
      auto exec = std::make_unique<FakeExecutor>(4, 64);
      std::vector<SeqSpec> specs;
      for (uint64_t id = 1; id <= 6; ++id) specs.push_back(make_spec(id, 3 + int32_t(id), 12, int32_t(id) * 50));
      for (auto s : specs) sched.add(s);
      std::map<uint64_t, std::vector<int32_t>> out;
      std::map<uint64_t, FinishReason> finish;
      // A recomputed sequence keeps the time it was first scheduled (RequestMetrics).
      std::map<uint64_t, std::chrono::steady_clock::time_point> first_scheduled;
      DriveHooks hooks;
      hooks.on_update = [&](const SeqUpdate& u) {
        out[u.seq_id].insert(out[u.seq_id].end(), u.new_token_ids.begin(), u.new_token_ids.end());
        if (u.finish != FinishReason::none) finish[u.seq_id] = u.finish;
        REQUIRE(u.first_scheduled);
        CHECK(first_scheduled.emplace(u.seq_id, *u.first_scheduled).first->second ==
              *u.first_scheduled);
      };
      std::deque<StepResult> results;
      for (int step = 0; step < lose_at && sched.has_work(); ++step) {
        results.push_back(exec->execute(sched.apply(kv->grant(sched.propose()))));
        if (sched.can_plan_ahead())
          results.push_back(exec->execute(sched.apply(kv->grant(sched.propose()))));
        for (const SeqUpdate& u : sched.on_result(results.front())) hooks.on_update(u);
        results.pop_front();
      }
      const size_t live = sched.stats().num_running + size_t(sched.stats().num_waiting);
      CHECK(sched.requeue_all() == live);
      results.clear();  // lost with the executors
      CHECK(sched.steps_in_flight() == 0);
      CHECK(sched.stats().num_running == 0);
      kv = std::make_unique<KVCacheManager>(64, 4, true);
      exec = std::make_unique<FakeExecutor>(4, 64);
      (void)drive(sched, *kv, *exec, results, hooks);
      for (const auto& s : specs) {
        INFO("sequence " << s.seq_id);
        CHECK(out[s.seq_id] == alone(s.prompt_token_ids, 12));
        CHECK(finish[s.seq_id] == FinishReason::length);
      }
      CHECK(kv->stats().num_free_blocks == 64);
      CHECK(exec->live() == 0);
    }
  }
}
