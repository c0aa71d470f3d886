// A randomized run of the KV cache manager with beam forks: thousands of steps of admissions
// (with prefix hits), growth, forks, releases, preemption by recompute and by swap, swap-ins
// and evictions, on a cache small enough that every one of them happens. The test keeps its
// own model of what the executors' memory holds (which token's KV sits in each slot of each GPU
// and CPU block: copies, swaps and writes applied as the grant says) and checks after every step
//   - reference counts: each block's count is the number of block tables that hold it, and the
//     free count is the number of blocks no table holds;
//   - contents: every computed position of every running sequence reads back its own token
//     (so no write ever reached a block another sequence still reads: copy-on-write works, and
//     prefix hits serve the right KV);
//   - beam groups: all of a group's sequences are held, or none; none is swapped;
//   - the CPU pool: free blocks plus the swapped sequences' blocks are all of it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "runtime/kv/kv_cache_manager.hpp"

using namespace troupe;

namespace {

enum class Where { waiting, running, swapped };

struct SimSeq {
  std::vector<int32_t> tokens;
  int32_t computed = 0;
  std::vector<int32_t> unsent;  // tokens the cache manager has not heard of
  uint64_t group = 0;
  Where where = Where::waiting;
  bool fresh_child = false;  // forked and not granted yet: its grant carries its table
};

class Sim {
 public:
  Sim(uint64_t seed, int32_t num_blocks, int32_t block_size, int32_t num_cpu_blocks)
      : rng_(seed),
        bs_(block_size),
        cm_(num_blocks, block_size, true, num_cpu_blocks),
        gpu_(size_t(num_blocks), std::vector<int32_t>(size_t(block_size), -1)),
        cpu_(size_t(num_cpu_blocks), std::vector<int32_t>(size_t(block_size), -1)) {}

  void step() {
    KVAsk ask;
    ask.max_running_seqs = 24;
    // New requests: half of them beam groups (their root's id is the group).
    if (pick(3) == 0) {
      const uint64_t id = next_id_++;
      SimSeq s;
      const int32_t len = 1 + pick(12);
      for (int32_t i = 0; i < len; ++i) s.tokens.push_back(pick(3));  // tiny vocab: prefix hits
      s.group = pick(2) == 0 ? id : 0;
      seqs_.emplace(id, std::move(s));
      waiting_.push_back(id);
    }
    // Releases and forks of running sequences.
    for (auto it = seqs_.begin(); it != seqs_.end();) {
      const uint64_t id = it->first;
      SimSeq& s = it->second;
      const bool done = int32_t(s.tokens.size()) >= 24 || pick(30) == 0;
      if (s.where == Where::running && done) {
        ask.released.push_back(KVRelease{id, std::move(s.unsent), s.computed});
        it = seqs_.erase(it);
        continue;
      }
      if (s.where == Where::swapped && done) {
        ask.released.push_back(KVRelease{id, {}, 0});
        swapped_.erase(std::find(swapped_.begin(), swapped_.end(), id));
        it = seqs_.erase(it);
        continue;
      }
      const bool forkable = s.where == Where::running && s.group != 0 && !s.fresh_child &&
                            s.computed == int32_t(s.tokens.size());
      // A group keeps at most 4 beams, as a 4-beam request does.
      int32_t members = 0;
      for (const auto& [oid, o] : seqs_) members += o.group == s.group ? 1 : 0;
      for (const auto& [oid, o] : born_) members += o.group == s.group ? 1 : 0;
      const int32_t kids = std::min(1 + pick(3), 4 - members + 1);
      if (forkable && kids > 0 && pick(3) == 0) {
        KVFork f{id, std::move(s.unsent), {}, s.group};
        for (int32_t k = 0; k < kids; ++k) {
          SimSeq c;
          c.tokens = s.tokens;
          c.tokens.push_back(pick(3));
          c.unsent = {c.tokens.back()};
          c.computed = s.computed;
          c.group = s.group;
          c.where = Where::running;
          c.fresh_child = true;
          const uint64_t cid = next_id_++;
          f.children.push_back(cid);
          born_.emplace(cid, std::move(c));
        }
        ask.forks.push_back(std::move(f));
        it = seqs_.erase(it);
        ++forks_;
        continue;
      }
      ++it;
    }
    for (auto& [id, c] : born_) seqs_.emplace(id, std::move(c));
    born_.clear();
    // Running sequences ask for their next chunk, or a sampled token and its slot.
    for (auto& [id, s] : seqs_) {
      if (s.where != Where::running || pick(5) == 0) continue;
      if (s.computed == int32_t(s.tokens.size()) && !s.fresh_child) {
        s.tokens.push_back(pick(3));
        s.unsent.push_back(s.tokens.back());
      }
      const int32_t n = std::min(int32_t(s.tokens.size()) - s.computed, 1 + pick(6));
      if (n <= 0) continue;
      ask.running.push_back(KVRunningAsk{id, std::move(s.unsent), s.computed, n, 0, {}, s.fresh_child});
      s.unsent.clear();
    }
    std::vector<uint64_t> order;
    for (const auto& r : ask.running) order.push_back(r.seq_id);
    std::shuffle(order.begin(), order.end(), rng_);
    for (uint64_t id : order)
      ask.preemption_order.push_back(
          KVPreemption{id, pick(2) == 0 ? PreemptionMode::swap : PreemptionMode::recompute});
    for (uint64_t id : swapped_) {
      SimSeq& s = seqs_.at(id);
      if (s.computed == int32_t(s.tokens.size())) s.tokens.push_back(pick(3));
      ask.swapped.push_back(KVSwappedAsk{id, s.tokens, s.computed,
                                         std::min(int32_t(s.tokens.size()) - s.computed, 4)});
    }
    // Waiting sequences in order; a beam group's members together (all of them or none).
    for (size_t i = 0; i < waiting_.size(); ++i) {
      const SimSeq& s = seqs_.at(waiting_[i]);
      KVWaitingAsk w{waiting_[i], s.tokens, 1 + pick(16), true, true, 0};
      w.group = s.group;
      ask.waiting.push_back(std::move(w));
    }
    const KVGrant g = cm_.grant(ask);
    apply(ask, g);
    check();
  }

  int forks_ = 0;
  uint64_t preempted_ = 0, swapped_out_ = 0, copies_ = 0, admitted_ = 0;

 private:
  int32_t pick(int32_t n) { return std::uniform_int_distribution<int32_t>(0, n - 1)(rng_); }

  void write(uint64_t id, SimSeq& s, int32_t from, int32_t to) {
    const auto& table = cm_.block_table(id);
    for (int32_t p = from; p < to; ++p) {
      REQUIRE(size_t(p / bs_) < table.size());
      gpu_[size_t(table[size_t(p / bs_)])][size_t(p % bs_)] = s.tokens[size_t(p)];
    }
    s.computed = to;
  }

  void apply(const KVAsk& ask, const KVGrant& g) {
    // The executor's order: swaps out, copies, swaps in, then the forward's writes (a copy may
    // fill a block that a swap-out of the same step vacates).
    for (const auto& sw : g.swap_out) cpu_[size_t(sw.cpu_block)] = gpu_[size_t(sw.gpu_block)];
    for (const auto& c : g.copies) {
      REQUIRE(c.src != c.dst);
      gpu_[size_t(c.dst)] = gpu_[size_t(c.src)];
      ++copies_;
    }
    for (const auto& sw : g.swap_in) gpu_[size_t(sw.gpu_block)] = cpu_[size_t(sw.cpu_block)];
    for (auto it = g.preempted.rbegin(); it != g.preempted.rend(); ++it) {
      SimSeq& s = seqs_.at(*it);
      REQUIRE(s.where == Where::running);
      s.where = Where::waiting;
      s.computed = 0;
      s.unsent.clear();
      s.fresh_child = false;
      waiting_.push_front(*it);
      ++preempted_;
    }
    for (uint64_t id : g.swapped_out) {
      SimSeq& s = seqs_.at(id);
      REQUIRE(s.group == 0);  // beam groups are preempted by recompute
      s.where = Where::swapped;
      s.unsent.clear();
      swapped_.push_back(id);
      ++swapped_out_;
    }
    std::map<uint64_t, int32_t> asked;
    for (const auto& r : ask.running) asked[r.seq_id] = r.num_computed_tokens + r.num_new_tokens;
    for (const auto& r : g.running) {
      SimSeq& s = seqs_.at(r.seq_id);
      if (s.fresh_child) REQUIRE(r.block_table == cm_.block_table(r.seq_id));
      s.fresh_child = false;
      write(r.seq_id, s, s.computed, asked.at(r.seq_id));
    }
    std::map<uint64_t, int32_t> swap_asked;
    for (const auto& w : ask.swapped)
      swap_asked[w.seq_id] = w.num_computed_tokens + w.num_new_tokens;
    for (const auto& w : g.swapped_in) {
      REQUIRE(swapped_.front() == w.seq_id);
      swapped_.pop_front();
      SimSeq& s = seqs_.at(w.seq_id);
      s.where = Where::running;
      s.unsent.clear();
      phase_ = "swap-in";
      check_contents(w.seq_id, s);  // what the swap-in restored
      write(w.seq_id, s, s.computed, swap_asked.at(w.seq_id));
    }
    for (const auto& a : g.admitted) {
      REQUIRE(waiting_.front() == a.seq_id);
      waiting_.pop_front();
      SimSeq& s = seqs_.at(a.seq_id);
      s.where = Where::running;
      s.unsent.clear();
      s.computed = a.num_cached_tokens;
      phase_ = "prefix hit";
      check_contents(a.seq_id, s);  // the prefix hit serves this sequence's own tokens
      write(a.seq_id, s, s.computed, a.num_cached_tokens + a.num_new_tokens);
      ++admitted_;
    }
  }

  void check_contents(uint64_t id, const SimSeq& s) {
    const auto& table = cm_.block_table(id);
    REQUIRE(int32_t(table.size()) >= cm_.blocks_for(s.computed));
    for (int32_t p = 0; p < s.computed; ++p) {
      INFO(phase_ << ": sequence " << id << " position " << p << " of " << s.computed << ", group "
                  << s.group << ", table " << ::Catch::Detail::stringify(table));
      REQUIRE(gpu_[size_t(table[size_t(p / bs_)])][size_t(p % bs_)] == s.tokens[size_t(p)]);
    }
  }

  void check() {
    std::vector<int32_t> refs(size_t(cm_.num_blocks()), 0);
    std::map<uint64_t, std::pair<int, int>> groups;  // group -> (held, not held)
    int32_t swapped_blocks = 0;
    for (const auto& [id, s] : seqs_) {
      REQUIRE(cm_.holds(id) == (s.where == Where::running));
      REQUIRE(cm_.is_swapped(id) == (s.where == Where::swapped));
      if (s.group != 0)
        (s.where == Where::running ? groups[s.group].first : groups[s.group].second)++;
      if (s.where == Where::swapped) swapped_blocks += cm_.blocks_for(s.computed);
      if (s.where != Where::running) continue;
      for (int32_t b : cm_.block_table(id)) ++refs[size_t(b)];
      phase_ = "after the step";
      check_contents(id, s);
    }
    int32_t free_blocks = 0;
    for (int32_t b = 0; b < cm_.num_blocks(); ++b) {
      INFO("block " << b);
      REQUIRE(cm_.pool().ref_count(b) == refs[size_t(b)]);
      free_blocks += refs[size_t(b)] == 0 ? 1 : 0;
    }
    REQUIRE(cm_.pool().num_free() == free_blocks);
    for (const auto& [group, n] : groups) {
      INFO("group " << group);
      REQUIRE((n.first == 0 || n.second == 0));
    }
    REQUIRE(cm_.num_free_cpu_blocks() + swapped_blocks == cm_.num_cpu_blocks());
  }

  std::mt19937_64 rng_;
  const char* phase_ = "";
  int32_t bs_;
  KVCacheManager cm_;
  std::vector<std::vector<int32_t>> gpu_, cpu_;  // [block][slot]: the token whose KV is there
  std::map<uint64_t, SimSeq> seqs_, born_;
  std::deque<uint64_t> waiting_, swapped_;
  uint64_t next_id_ = 1;
};

}  // namespace

TEST_CASE("randomized allocate / fork / free / swap / evict steps keep the accounting exact",
          "[kv][beam]") {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    INFO("seed " << seed);
    Sim sim(seed, 40, 4, 24);
    for (int i = 0; i < 2500; ++i) {
      INFO("step " << i);
      sim.step();
    }
    // The run must have exercised everything it claims to.
    CHECK(sim.forks_ > 50);
    CHECK(sim.copies_ > 50);
    CHECK(sim.preempted_ > 20);
    CHECK(sim.swapped_out_ > 5);
    CHECK(sim.admitted_ > 200);
  }
}
