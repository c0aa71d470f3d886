// Block pool and KV cache manager: reference counts, LRU eviction, exact prefix hits,
// preemption order and admission rules.
#include <catch2/catch.hpp>

#include <algorithm>

#include <numeric>

#include "runtime/error.hpp"
#include "runtime/kv/kv_cache_manager.hpp"
#include "runtime/sched/preemption_policy.hpp"

using namespace troupe;

namespace {
std::vector<int32_t> iota_tokens(int32_t n, int32_t start = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}
/// The scheduler's victims for `ask` (its policy, lowest priority first), as a synchronous
/// step's ask carries them.
KVAsk& with_victims(KVAsk& ask, PreemptionMode mode = PreemptionMode::recompute) {
  ask.preemption_order = PreemptionPolicy(mode).order(ask.running);
  return ask;
}
}  // namespace

TEST_CASE("block pool allocates, releases and refuses what it does not have", "[kv]") {
  BlockPool pool(4, 2);
  auto a = pool.allocate(3);
  REQUIRE(a);
  CHECK(a->size() == 3);
  CHECK(pool.num_free() == 1);
  CHECK_FALSE(pool.allocate(2));
  CHECK(pool.num_free() == 1);  // a refused allocation takes nothing
  pool.release(*a);
  CHECK(pool.num_free() == 4);
  CHECK_THROWS_AS(pool.release(std::vector<int32_t>{(*a)[0]}), Error);  // double free
  CHECK_THROWS_AS(BlockPool(0, 16), Error);
}

TEST_CASE("freed blocks are reused least recently freed first", "[kv]") {
  BlockPool pool(3, 1);
  auto all = *pool.allocate(3);
  pool.release(std::vector<int32_t>{all[2]});
  pool.release(std::vector<int32_t>{all[0]});
  pool.release(std::vector<int32_t>{all[1]});
  auto again = *pool.allocate(3);
  CHECK(again == std::vector<int32_t>{all[2], all[0], all[1]});
}

TEST_CASE("prefix entries are exact: tokens, parent and salt all have to match", "[kv]") {
  BlockPool pool(8, 4);
  auto blocks = *pool.allocate(2);
  std::vector<int32_t> t0{1, 2, 3, 4}, t1{5, 6, 7, 8};
  pool.register_full(blocks[0], -1, t0, 0);
  pool.register_full(blocks[1], blocks[0], t1, 0);
  pool.release(std::vector<int32_t>{blocks[1], blocks[0]});
  CHECK(pool.num_free() == 8);

  auto h0 = pool.acquire_cached(-1, t0, 0);
  REQUIRE(h0);
  CHECK(*h0 == blocks[0]);
  CHECK(pool.ref_count(blocks[0]) == 1);
  CHECK(pool.num_free() == 7);  // the hit left the free list
  auto h1 = pool.acquire_cached(*h0, t1, 0);
  REQUIRE(h1);
  CHECK(*h1 == blocks[1]);

  CHECK_FALSE(pool.acquire_cached(-1, t0, 7));  // another salt
  CHECK_FALSE(pool.acquire_cached(-1, std::vector<int32_t>{1, 2, 3, 5}, 0));
  CHECK_FALSE(pool.acquire_cached(-1, t1, 0));  // right tokens, wrong parent
}

TEST_CASE("the blocks with contents are those in use and those cached, and no others", "[kv]") {
  BlockPool pool(8, 2);
  CHECK(pool.blocks_with_contents().empty());
  auto held = *pool.allocate(3);   // in use
  auto cached = *pool.allocate(2);  // registered, then released: free but cached
  pool.register_full(cached[0], -1, std::vector<int32_t>{1, 2}, 0);
  pool.register_full(cached[1], cached[0], std::vector<int32_t>{3, 4}, 0);
  pool.release(std::vector<int32_t>{cached[1], cached[0]});
  auto gone = *pool.allocate(1);  // used and released without a prefix entry
  pool.release(gone);
  std::vector<int32_t> want = held;
  want.insert(want.end(), cached.begin(), cached.end());
  std::sort(want.begin(), want.end());
  CHECK(pool.blocks_with_contents() == want);
  // Once the prefix cache is forgotten only the blocks in use are listed.
  pool.reset_prefix_cache();
  CHECK(pool.blocks_with_contents() == [&] {
    std::vector<int32_t> h = held;
    std::sort(h.begin(), h.end());
    return h;
  }());
}

TEST_CASE("an evicted parent invalidates its cached children", "[kv]") {
  BlockPool pool(2, 2);
  auto b = *pool.allocate(2);
  std::vector<int32_t> t0{1, 2}, t1{3, 4};
  pool.register_full(b[0], -1, t0, 0);
  pool.register_full(b[1], b[0], t1, 0);
  // Free the parent first so it is evicted first; then re-cache new content in it.
  pool.release(std::vector<int32_t>{b[0]});
  pool.release(std::vector<int32_t>{b[1]});
  auto reused = *pool.allocate(1);
  CHECK(reused[0] == b[0]);
  CHECK_FALSE(pool.is_cached(b[0]));
  pool.register_full(b[0], -1, t0, 0);  // same content again, new generation
  auto p = pool.acquire_cached(-1, t0, 0);
  REQUIRE(p);
  // The child was cached under the old generation of its parent: no hit.
  CHECK_FALSE(pool.acquire_cached(*p, t1, 0));
}

TEST_CASE("running sequences grow, and when blocks run out the lowest priority is preempted",
          "[kv]") {
  KVCacheManager kv(4, 4, false);
  KVAsk admit;
  admit.waiting.push_back(KVWaitingAsk{1, iota_tokens(8), 8, true, true, 0});
  admit.waiting.push_back(KVWaitingAsk{2, iota_tokens(8, 500), 8, true, true, 0});
  KVGrant g = kv.grant(admit);
  REQUIRE(g.admitted.size() == 2);
  CHECK(g.admitted[0].block_ids.size() == 2);
  CHECK(kv.stats().num_free_blocks == 0);

  // Sequence 1 (higher priority) needs a third block: sequence 2 is preempted.
  KVAsk grow;
  grow.running.push_back(KVRunningAsk{1, {7}, 8, 1});
  grow.running.push_back(KVRunningAsk{2, {9}, 8, 1});
  g = kv.grant(with_victims(grow));
  REQUIRE(g.running.size() == 1);
  CHECK(g.running[0].seq_id == 1);
  CHECK(g.running[0].new_block_ids.size() == 1);
  CHECK(g.preempted == std::vector<uint64_t>{2});
  CHECK_FALSE(kv.holds(2));
  CHECK(kv.block_table(1).size() == 3);
}

TEST_CASE("a step planned ahead preempts nobody: who cannot grow sits it out", "[kv][async]") {
  KVCacheManager kv(4, 4, true);
  KVAsk admit;
  admit.waiting.push_back(KVWaitingAsk{1, iota_tokens(8), 8, true, true, 0});
  admit.waiting.push_back(KVWaitingAsk{2, iota_tokens(7, 500), 7, true, true, 0});
  REQUIRE(kv.grant(admit).admitted.size() == 2);
  CHECK(kv.stats().num_free_blocks == 0);
  // Both sample a token in the step in flight; the next step computes it (known + 1).
  KVAsk ahead;                                            // no preemption_order: planned ahead
  ahead.running.push_back(KVRunningAsk{1, {}, 8, 1, 1});  // needs a third block: none left
  ahead.running.push_back(KVRunningAsk{2, {}, 7, 1, 1});  // fits its second block
  ahead.waiting.push_back(KVWaitingAsk{3, iota_tokens(2, 900), 2, true, true, 0});
  KVGrant g = kv.grant(ahead);
  CHECK(g.short_of_blocks);
  CHECK(g.preempted.empty());
  CHECK(g.swapped_out.empty());
  CHECK(g.admitted.empty());  // nothing is admitted while running sequences wait
  REQUIRE(g.running.size() == 1);
  CHECK(g.running[0].seq_id == 2);
  CHECK(kv.holds(1));
  CHECK(kv.block_table(1).size() == 2);
  // A later ask confirms the tokens; one that asks past known + unknown is refused.
  KVAsk next;
  next.running.push_back(KVRunningAsk{2, {42}, 8, 2, 0});
  CHECK_THROWS_WITH(kv.grant(next), Catch::Contains("asks for 10 tokens but 8 are known"));
}

TEST_CASE("a block completed by a token not yet known is registered once it is", "[kv][async]") {
  KVCacheManager kv(8, 4, true);
  KVAsk admit;
  admit.waiting.push_back(KVWaitingAsk{1, iota_tokens(7), 7, true, true, 0});
  REQUIRE(kv.grant(admit).admitted.size() == 1);
  KVAsk ahead;  // position 7 (the token the first step samples) completes block 1
  ahead.running.push_back(KVRunningAsk{1, {}, 7, 1, 1});
  REQUIRE(kv.grant(ahead).running.size() == 1);
  // The token turns out to be 555: a prompt 100..106, 555 hits both blocks once it is known.
  KVAsk known;
  known.running.push_back(KVRunningAsk{1, {555}, 8, 1, 1});
  REQUIRE(kv.grant(known).running.size() == 1);
  auto follow_up = iota_tokens(7);
  follow_up.push_back(555);
  follow_up.push_back(1);
  KVAsk b;
  b.waiting.push_back(KVWaitingAsk{2, follow_up, 9, true, true, 0});
  KVGrant g = kv.grant(b);
  REQUIRE(g.admitted.size() == 1);
  CHECK(g.admitted[0].num_cached_tokens == 8);
}

TEST_CASE("a sequence that cannot grow even alone preempts itself", "[kv]") {
  KVCacheManager kv(2, 2, false);
  KVAsk admit;
  admit.waiting.push_back(KVWaitingAsk{1, iota_tokens(4), 4, true, true, 0});
  REQUIRE(kv.grant(admit).admitted.size() == 1);
  KVAsk grow;
  grow.running.push_back(KVRunningAsk{1, {1}, 4, 1});
  KVGrant g = kv.grant(with_victims(grow));
  CHECK(g.running.empty());
  CHECK(g.preempted == std::vector<uint64_t>{1});
  CHECK(kv.stats().num_free_blocks == 2);
}

namespace {
/// Sequences 1, 2 and 3 of 8 tokens each fill a pool of 6 blocks of 4; then each asks for 5
/// more tokens (two more blocks), with the victims `order` gives.
KVGrant three_grow(KVCacheManager& kv, std::vector<KVPreemption> order) {
  KVAsk admit;
  for (uint64_t id = 1; id <= 3; ++id)
    admit.waiting.push_back(KVWaitingAsk{id, iota_tokens(8, int32_t(id) * 100), 8, true, true, 0});
  REQUIRE(kv.grant(admit).admitted.size() == 3);
  REQUIRE(kv.stats().num_free_blocks == 0);
  KVAsk grow;
  for (uint64_t id = 1; id <= 3; ++id)
    grow.running.push_back(KVRunningAsk{id, iota_tokens(5, 900), 8, 5});
  grow.preemption_order = std::move(order);
  return kv.grant(grow);
}
constexpr PreemptionMode kRecompute = PreemptionMode::recompute;
constexpr PreemptionMode kSwap = PreemptionMode::swap;
}  // namespace

TEST_CASE("the cache manager preempts whom the ask names, in its order and mode", "[kv][preempt]") {
  SECTION("the policy's order: the lowest priority goes first") {
    KVCacheManager kv(6, 4, false);
    KVGrant g = three_grow(kv, {{3, kRecompute}, {2, kRecompute}, {1, kRecompute}});
    // 1 takes 3's two blocks; 2 preempts itself (nothing else ranks below it).
    CHECK(g.preempted == std::vector<uint64_t>{3, 2});
    REQUIRE(g.running.size() == 1);
    CHECK(g.running[0].seq_id == 1);
  }
  SECTION("another order is followed as given: nothing is decided here") {
    KVCacheManager kv(6, 4, false, 8);
    KVGrant g = three_grow(kv, {{2, kSwap}, {1, kRecompute}, {3, kRecompute}});
    // 1 cannot grow and takes 2's blocks (2 is swapped out, as asked); 3 cannot grow, and its
    // next victim, 1, was granted already and is passed over: 3 preempts itself.
    CHECK(g.swapped_out == std::vector<uint64_t>{2});
    CHECK(g.preempted == std::vector<uint64_t>{3});
    REQUIRE(g.running.size() == 1);
    CHECK(g.running[0].seq_id == 1);
    CHECK(kv.is_swapped(2));
    CHECK(kv.block_table(1).size() == 4);
  }
  SECTION("a sequence whose victims run out sits the step out and keeps its blocks") {
    KVCacheManager kv(6, 4, false);
    KVGrant g = three_grow(kv, {{3, kRecompute}});
    CHECK(g.preempted == std::vector<uint64_t>{3});
    REQUIRE(g.running.size() == 1);
    CHECK(g.running[0].seq_id == 1);
    CHECK(g.short_of_blocks);  // 2 could not grow and nobody was left to preempt
    CHECK(kv.holds(2));
    CHECK(kv.block_table(2).size() == 2);
  }
  SECTION("a victim that is not running in the ask is refused") {
    KVCacheManager kv(6, 4, false);
    CHECK_THROWS_WITH(three_grow(kv, {{3, kRecompute}, {7, kRecompute}}),
                      Catch::Contains("preemption_order names sequence 7") &&
                          Catch::Contains("not running in this ask"));
  }
}

TEST_CASE("admission stops at the first waiting sequence that does not fit", "[kv]") {
  KVCacheManager kv(3, 4, false);
  KVAsk ask;
  ask.waiting.push_back(KVWaitingAsk{1, iota_tokens(8), 8, true, true, 0});  // 2 blocks
  ask.waiting.push_back(KVWaitingAsk{2, iota_tokens(8), 8, true, true, 0});  // 2 more: no
  ask.waiting.push_back(KVWaitingAsk{3, iota_tokens(4), 4, true, true, 0});  // would fit
  KVGrant g = kv.grant(ask);
  REQUIRE(g.admitted.size() == 1);  // first-come first-served: 3 does not jump the queue
  CHECK(g.admitted[0].seq_id == 1);
  CHECK(kv.stats().num_free_blocks == 1);
}

TEST_CASE("without partial admission a prompt is admitted whole or not at all", "[kv]") {
  KVCacheManager kv(16, 4, false);
  KVAsk ask;
  ask.waiting.push_back(KVWaitingAsk{1, iota_tokens(10), 6, true, /*allow_partial=*/false, 0});
  CHECK(kv.grant(ask).admitted.empty());
  ask.waiting[0].allow_partial = true;
  KVGrant g = kv.grant(ask);
  REQUIRE(g.admitted.size() == 1);
  CHECK(g.admitted[0].num_new_tokens == 6);
  CHECK(g.admitted[0].block_ids.size() == 2);
}

TEST_CASE("prefix caching reuses full computed blocks and always leaves a token to compute",
          "[kv]") {
  KVCacheManager kv(32, 4, true);
  const auto prompt = iota_tokens(12);
  KVAsk a;
  a.waiting.push_back(KVWaitingAsk{1, prompt, 12, true, true, 0});
  KVGrant g = kv.grant(a);
  REQUIRE(g.admitted.size() == 1);
  CHECK(g.admitted[0].num_cached_tokens == 0);
  const auto table1 = g.admitted[0].block_ids;

  // Same prompt: 3 full blocks, but at most (12 - 1) / 4 = 2 may hit.
  KVAsk b;
  b.waiting.push_back(KVWaitingAsk{2, prompt, 12, true, true, 0});
  g = kv.grant(b);
  REQUIRE(g.admitted.size() == 1);
  CHECK(g.admitted[0].num_cached_tokens == 8);
  CHECK(g.admitted[0].num_new_tokens == 4);
  CHECK(g.admitted[0].block_ids[0] == table1[0]);
  CHECK(g.admitted[0].block_ids[1] == table1[1]);
  CHECK(g.admitted[0].block_ids[2] != table1[2]);

  // A longer prompt sharing the prefix hits all three blocks of the first.
  auto longer = prompt;
  longer.push_back(999);
  KVAsk c;
  c.waiting.push_back(KVWaitingAsk{3, longer, 13, true, true, 0});
  g = kv.grant(c);
  CHECK(g.admitted[0].num_cached_tokens == 12);
  CHECK(g.admitted[0].num_new_tokens == 1);

  // A request that may not hit takes nothing.
  KVAsk d;
  d.waiting.push_back(KVWaitingAsk{4, prompt, 12, /*allow_prefix_hit=*/false, true, 0});
  g = kv.grant(d);
  CHECK(g.admitted[0].num_cached_tokens == 0);
  CHECK(kv.stats().prefix_hits == 20);
}

TEST_CASE("finished sequences leave their computed blocks cached for later requests", "[kv]") {
  KVCacheManager kv(8, 4, true);
  KVAsk a;
  a.waiting.push_back(KVWaitingAsk{1, iota_tokens(6), 6, true, true, 0});
  REQUIRE(kv.grant(a).admitted.size() == 1);
  // It generated two tokens; 7 of its 8 tokens were computed when it finished.
  KVAsk release;
  release.released.push_back(KVRelease{1, {106, 107}, 7});
  (void)kv.grant(release);
  CHECK(kv.stats().num_free_blocks == 8);
  KVAsk b;
  auto follow_up = iota_tokens(8);  // 100..107, the first sequence's prompt and outputs
  follow_up.push_back(5);
  b.waiting.push_back(KVWaitingAsk{2, follow_up, 9, true, true, 0});
  KVGrant g = kv.grant(b);
  CHECK(g.admitted[0].num_cached_tokens == 4);  // block 2 held token 107 uncomputed
}

// ---- prompt logprobs beside cached blocks ----

namespace {
/// A made-up entry of token `t` of `prompt` computed with top-k (distinct per token and k).
PositionLogprobs entry_of(const std::vector<int32_t>& prompt, int32_t t, int32_t k) {
  PositionLogprobs e{LogprobEntry{prompt[size_t(t)], -0.25f * float(t), t % 5 + 1}, {}};
  for (int32_t j = 0; j < k; ++j)
    e.top.push_back(LogprobEntry{1000 + t * 10 + j, -float(j), j + 1});
  return e;
}
/// Entries of tokens [first, last] of `prompt`.
KVPromptLogprobs entries_of(const std::vector<int32_t>& prompt, int32_t first, int32_t last,
                            int32_t k) {
  KVPromptLogprobs in{first, k, {}};
  for (int32_t t = first; t <= last; ++t) in.entries.push_back(entry_of(prompt, t, k));
  return in;
}
void check_entries(const KVAdmission& a, const std::vector<int32_t>& prompt, int32_t k) {
  for (size_t p = 0; p < a.prompt_logprobs.size(); ++p) {
    const PositionLogprobs want = entry_of(prompt, int32_t(p) + 1, k);
    const PositionLogprobs& got = a.prompt_logprobs[p];
    INFO("position " << p);
    CHECK(got.chosen.token == want.chosen.token);
    CHECK(got.chosen.logprob == want.chosen.logprob);
    CHECK(got.chosen.rank == want.chosen.rank);
    REQUIRE(got.top.size() == want.top.size());
    for (size_t j = 0; j < got.top.size(); ++j) CHECK(got.top[j].token == want.top[j].token);
  }
}
}  // namespace

TEST_CASE("prompt logprob entries stay beside cached blocks and serve later requests", "[kv]") {
  KVCacheManager kv(16, 4, true);
  const auto prompt = iota_tokens(14);
  auto ask_for = [&](uint64_t id, int32_t k, const std::vector<int32_t>& tokens) {
    KVAsk a;
    a.waiting.push_back(
        KVWaitingAsk{id, tokens, int32_t(tokens.size()), true, true, 0, k, int32_t(tokens.size())});
    KVGrant g = kv.grant(a);
    REQUIRE(g.admitted.size() == 1);
    return g.admitted[0];
  };
  auto finish = [&](uint64_t id, const std::vector<int32_t>& tokens, KVPromptLogprobs in) {
    KVAsk r;
    r.released.push_back(KVRelease{id, {}, int32_t(tokens.size()), std::move(in)});
    (void)kv.grant(r);
  };

  // The first request computes every entry with top-2; blocks 0-2 are full and get theirs.
  KVAdmission a = ask_for(1, 2, prompt);
  CHECK(a.num_cached_tokens == 0);
  CHECK(a.prompt_logprobs.empty());
  finish(1, prompt, entries_of(prompt, 1, 13, 2));
  CHECK(kv.stats().prompt_logprob_blocks == 3);
  const uint64_t bytes = kv.stats().prompt_logprob_bytes;
  CHECK(bytes >= 11 * 3 * sizeof(LogprobEntry));

  // Same prompt with top-1: blocks 0-2 hit, then back off one block so position 11 (predicting
  // token 12) is computed; tokens 1-8 come from the store, trimmed to one entry each.
  a = ask_for(2, 1, prompt);
  CHECK(a.num_cached_tokens == 8);
  CHECK(a.num_new_tokens == 6);
  REQUIRE(a.prompt_logprobs.size() == 8);
  check_entries(a, prompt, 1);
  finish(2, prompt, entries_of(prompt, 9, 13, 1));  // keeps the stored k = 2 entries
  CHECK(kv.stats().prompt_logprob_bytes == bytes);

  // Top-3 is more than stored: no hit for this request.
  a = ask_for(3, 3, prompt);
  CHECK(a.num_cached_tokens == 0);
  CHECK(a.prompt_logprobs.empty());
  // It stores its larger entries (in two chunks: a running ask, then the release).
  KVAsk run;
  run.running.push_back(KVRunningAsk{3, {}, 14, 0, 0, entries_of(prompt, 1, 6, 3)});
  (void)kv.grant(run);
  finish(3, prompt, entries_of(prompt, 7, 13, 3));
  CHECK(kv.stats().prompt_logprob_bytes > bytes);
  a = ask_for(4, 3, prompt);
  CHECK(a.num_cached_tokens == 8);
  check_entries(a, prompt, 3);
  finish(4, prompt, {});

  // Without prompt logprobs the whole hit is used (no back-off).
  a = ask_for(5, -1, prompt);
  CHECK(a.num_cached_tokens == 12);
  CHECK(a.prompt_logprobs.empty());
  finish(5, prompt, {});

  // A longer prompt whose entries stop at a block without them (block 3 held token 13 only
  // uncomputed): the hit backs off from block 2 as before.
  auto longer = prompt;
  for (int32_t t = 0; t < 6; ++t) longer.push_back(900 + t);
  a = ask_for(6, 0, longer);
  CHECK(a.num_cached_tokens == 8);
  check_entries(a, longer, 0);
  finish(6, longer, {});

  // Evicting a block drops its entries: a request for 16 other blocks reuses all of them.
  KVAsk other;
  other.waiting.push_back(KVWaitingAsk{7, iota_tokens(64, 5000), 64, true, true, 0});
  REQUIRE(kv.grant(other).admitted.size() == 1);
  CHECK(kv.stats().prompt_logprob_blocks == 0);
  CHECK(kv.stats().prompt_logprob_bytes == 0);

  // Asks that contradict the sequence are refused, naming what is wrong.
  KVAsk bad;
  bad.waiting.push_back(KVWaitingAsk{8, prompt, 14, true, true, 0, 0, 15});
  CHECK_THROWS_WITH(kv.grant(bad), Catch::Contains("num_prompt_tokens = 15"));
  KVAsk bad_release;
  bad_release.released.push_back(
      KVRelease{7, {}, 64, entries_of(iota_tokens(70, 5000), 60, 66, 0)});
  CHECK_THROWS_WITH(kv.grant(bad_release), Catch::Contains("prompt logprobs of tokens [60, 67)"));
}

// ---- swap space ----

namespace {
/// Two sequences of 8 tokens filling a pool of 4 blocks of 4; sequence 1 then needs a third
/// block, so sequence 2 (lower priority) is preempted.
KVGrant fill_then_grow(KVCacheManager& kv, PreemptionMode mode,
                       std::vector<int32_t>* blocks_of_2 = nullptr) {
  KVAsk admit;
  admit.waiting.push_back(KVWaitingAsk{1, iota_tokens(8), 8, true, true, 0});
  admit.waiting.push_back(KVWaitingAsk{2, iota_tokens(8, 500), 8, true, true, 0});
  KVGrant g = kv.grant(admit);
  REQUIRE(g.admitted.size() == 2);
  if (blocks_of_2) *blocks_of_2 = g.admitted[1].block_ids;
  KVAsk grow;
  grow.running.push_back(KVRunningAsk{1, {7}, 8, 1});
  grow.running.push_back(KVRunningAsk{2, {9}, 8, 1});
  return kv.grant(with_victims(grow, mode));
}
}  // namespace

TEST_CASE("swap mode: a preempted sequence's computed blocks are copied to CPU blocks",
          "[kv][swap]") {
  KVCacheManager kv(4, 4, false, 8);
  std::vector<int32_t> blocks2;
  KVGrant g = fill_then_grow(kv, PreemptionMode::swap, &blocks2);
  REQUIRE(g.running.size() == 1);
  CHECK(g.running[0].seq_id == 1);
  CHECK(g.preempted.empty());
  CHECK(g.swapped_out == std::vector<uint64_t>{2});
  REQUIRE(g.swap_out.size() == 2);  // 8 computed tokens = 2 blocks
  CHECK(g.swap_out[0].gpu_block == blocks2[0]);
  CHECK(g.swap_out[1].gpu_block == blocks2[1]);
  CHECK(g.swap_out[0].cpu_block != g.swap_out[1].cpu_block);
  CHECK(g.swap_in.empty());
  CHECK(kv.is_swapped(2));
  CHECK_FALSE(kv.holds(2));
  CHECK(kv.num_free_cpu_blocks() == 6);
  CHECK(kv.stats().blocks_swapped_out == 2);
  // The one GPU block sequence 1 took was one of sequence 2's (all others are in use).
  CHECK(kv.stats().num_free_blocks == 1);
}

TEST_CASE("recompute mode and a full CPU pool both preempt by recompute", "[kv][swap]") {
  SECTION("recompute mode") {
    KVCacheManager kv(4, 4, false, 8);
    KVGrant g = fill_then_grow(kv, PreemptionMode::recompute);
    CHECK(g.preempted == std::vector<uint64_t>{2});
    CHECK(g.swapped_out.empty());
    CHECK(g.swap_out.empty());
    CHECK(kv.stats().swap_fallbacks == 0);
  }
  SECTION("swap mode, one CPU block for a two-block sequence") {
    KVCacheManager kv(4, 4, false, 1);
    KVGrant g = fill_then_grow(kv, PreemptionMode::swap);
    CHECK(g.preempted == std::vector<uint64_t>{2});
    CHECK(g.swapped_out.empty());
    CHECK(g.swap_out.empty());
    CHECK_FALSE(kv.is_swapped(2));
    CHECK(kv.num_free_cpu_blocks() == 1);
    CHECK(kv.stats().swap_fallbacks == 1);
  }
  SECTION("swap mode, no CPU blocks at all") {
    KVCacheManager kv(4, 4, false, 0);
    KVGrant g = fill_then_grow(kv, PreemptionMode::swap);
    CHECK(g.preempted == std::vector<uint64_t>{2});
    CHECK(kv.stats().swap_fallbacks == 1);
  }
}

TEST_CASE("swapped sequences come back before any waiting one is admitted", "[kv][swap]") {
  KVCacheManager kv(4, 4, false, 8);
  REQUIRE(fill_then_grow(kv, PreemptionMode::swap).swapped_out == std::vector<uint64_t>{2});
  std::vector<int32_t> tokens2 = iota_tokens(8, 500);
  tokens2.push_back(9);

  // Sequence 1 holds 3 blocks; sequence 2 needs 3 (8 computed + 1 new): no room. A waiting
  // one-block sequence would fit, but must not jump the swapped queue.
  KVAsk ask;
  ask.running.push_back(KVRunningAsk{1, {}, 9, 0});
  ask.swapped.push_back(KVSwappedAsk{2, tokens2, 8, 1});
  ask.waiting.push_back(KVWaitingAsk{3, iota_tokens(2, 900), 2, true, true, 0});
  KVGrant g = kv.grant(ask);
  CHECK(g.swapped_in.empty());
  CHECK(g.swap_in.empty());
  CHECK(g.admitted.empty());
  CHECK(kv.is_swapped(2));

  // Sequence 1 finishes: sequence 2 comes back into fresh blocks, then 3 is admitted.
  KVAsk next;
  next.released.push_back(KVRelease{1, {}, 9});
  next.swapped.push_back(KVSwappedAsk{2, tokens2, 8, 1});
  next.waiting.push_back(KVWaitingAsk{3, iota_tokens(2, 900), 2, true, true, 0});
  g = kv.grant(next);
  REQUIRE(g.swapped_in.size() == 1);
  CHECK(g.swapped_in[0].seq_id == 2);
  const std::vector<int32_t> table = g.swapped_in[0].block_ids;
  REQUIRE(table.size() == 3);
  REQUIRE(g.swap_in.size() == 2);  // the two swapped blocks; the third is new
  CHECK(g.swap_in[0].gpu_block == table[0]);
  CHECK(g.swap_in[1].gpu_block == table[1]);
  CHECK(g.swap_out.empty());
  REQUIRE(g.admitted.size() == 1);
  CHECK(g.admitted[0].seq_id == 3);
  CHECK(kv.holds(2));
  CHECK_FALSE(kv.is_swapped(2));
  CHECK(kv.block_table(2) == table);
  CHECK(kv.num_free_cpu_blocks() == 8);
  CHECK(kv.stats().blocks_swapped_in == 2);

  // Everything released: all GPU and CPU blocks are free again.
  KVAsk done;
  done.released.push_back(KVRelease{2, {}, 9});
  done.released.push_back(KVRelease{3, {}, 2});
  (void)kv.grant(done);
  CHECK(kv.stats().num_free_blocks == 4);
  CHECK(kv.num_free_cpu_blocks() == 8);
  CHECK(kv.num_swapped() == 0);
}

TEST_CASE("a sequence aborted while swapped out gives its CPU blocks back", "[kv][swap]") {
  KVCacheManager kv(4, 4, false, 8);
  REQUIRE(fill_then_grow(kv, PreemptionMode::swap).swapped_out.size() == 1);
  KVAsk abort;
  abort.released.push_back(KVRelease{2, {}, 0});
  abort.released.push_back(KVRelease{1, {}, 9});
  (void)kv.grant(abort);
  CHECK_FALSE(kv.is_swapped(2));
  CHECK(kv.num_free_cpu_blocks() == 8);
  CHECK(kv.stats().num_free_blocks == 4);
}

TEST_CASE("swapping out a sequence leaves the prefix blocks it shared intact", "[kv][swap]") {
  // Two sequences with the same first block (prefix hit); the second is swapped out.
  KVCacheManager kv(4, 4, true, 8);
  std::vector<int32_t> a = iota_tokens(8), b = iota_tokens(4);
  for (int32_t t : iota_tokens(4, 700)) b.push_back(t);
  KVAsk first;
  first.waiting.push_back(KVWaitingAsk{1, a, 8, true, true, 0});
  REQUIRE(kv.grant(first).admitted.size() == 1);
  const int32_t shared = kv.block_table(1)[0];
  KVAsk second;
  second.running.push_back(KVRunningAsk{1, {}, 8, 0});
  second.waiting.push_back(KVWaitingAsk{2, b, 8, true, true, 0});
  KVGrant g = kv.grant(second);
  REQUIRE(g.admitted.size() == 1);
  CHECK(g.admitted[0].num_cached_tokens == 4);
  CHECK(kv.block_table(2)[0] == shared);
  CHECK(kv.pool().ref_count(shared) == 2);
  // 1 + 1 + the shared one = 3 of 4 blocks used. Both grow past 8 tokens: 1 takes the last.
  KVAsk grow;
  grow.running.push_back(KVRunningAsk{1, {1}, 8, 1});
  grow.running.push_back(KVRunningAsk{2, {2}, 8, 1});
  g = kv.grant(with_victims(grow, PreemptionMode::swap));
  CHECK(g.swapped_out == std::vector<uint64_t>{2});
  REQUIRE(g.swap_out.size() == 2);
  CHECK(g.swap_out[0].gpu_block == shared);  // read, not freed: sequence 1 still holds it
  CHECK(kv.pool().ref_count(shared) == 1);
  CHECK(kv.pool().is_cached(shared));
  CHECK(kv.block_table(1)[0] == shared);
  // Back in: private blocks, none of them the shared one.
  std::vector<int32_t> b2 = b;
  b2.push_back(2);
  KVAsk back;
  back.released.push_back(KVRelease{1, {}, 9});
  back.swapped.push_back(KVSwappedAsk{2, b2, 8, 1});
  g = kv.grant(back);
  REQUIRE(g.swapped_in.size() == 1);
  for (int32_t blk : g.swapped_in[0].block_ids) {
    CHECK(kv.pool().ref_count(blk) == 1);   // private: shared with nobody
    CHECK_FALSE(kv.pool().is_cached(blk));  // and not registered in the prefix index
  }
}

TEST_CASE("an injected allocation refusal admits nothing and preempts a sequence that must grow",
          "[kv][faults]") {
  KVCacheManager kv(16, 4, false);
  KVAsk first;
  first.waiting.push_back(KVWaitingAsk{1, iota_tokens(4), 4});
  REQUIRE(kv.grant(first).admitted.size() == 1);
  // Refused: the waiting one is not admitted, and the running one, which needs a second block,
  // is preempted (its policy's victim), as with a full cache, though 15 blocks are free.
  KVAsk ask;
  ask.running.push_back(KVRunningAsk{1, {104}, 4, 1, 0});
  ask.waiting.push_back(KVWaitingAsk{2, iota_tokens(4, 300), 4});
  ask.refuse_allocations = true;
  const KVGrant g = kv.grant(with_victims(ask));
  CHECK(g.admitted.empty());
  CHECK(g.running.empty());
  CHECK(g.preempted == std::vector<uint64_t>{1});
  CHECK(kv.stats().num_free_blocks == 16);  // the held blocks came back
  // Not refused: admitted again.
  KVAsk again;
  again.waiting.push_back(KVWaitingAsk{2, iota_tokens(4, 300), 4});
  CHECK(kv.grant(again).admitted.size() == 1);
}
