#include "runtime/sched/scheduler.hpp"

#include <algorithm>

#include "runtime/error.hpp"

namespace troupe {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "";
    case FinishReason::length: return "length";
    case FinishReason::stop: return "stop";
    case FinishReason::abort: return "abort";
    case FinishReason::error: return "error";
  }
  return "";
}

void StepTokenHistogram::observe(uint64_t tokens) {
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (tokens <= kBounds[i]) {
      ++counts[i];
      break;
    }
  ++count;
  sum += tokens;
}

Scheduler::Scheduler(SchedulerConfig config)
    : config_(config), preemption_(config.preemption_mode) {
  if (config_.max_num_batched_tokens <= 0)
    fail("max_num_batched_tokens = {}: must be > 0", config_.max_num_batched_tokens);
  if (config_.max_num_seqs <= 0) fail("max_num_seqs = {}: must be > 0", config_.max_num_seqs);
}

void Scheduler::add(SeqSpec spec) {
  if (seqs_.contains(spec.seq_id)) fail("scheduler: sequence id {} is already in use", spec.seq_id);
  const auto len = int32_t(spec.prompt_token_ids.size());
  if (len == 0) fail("scheduler: sequence {} has an empty prompt", spec.seq_id);
  if (config_.max_model_len > 0 && len > config_.max_model_len)
    fail("scheduler: prompt of {} tokens exceeds max_model_len = {}", len, config_.max_model_len);
  if (spec.seq_id >= kFirstBeamSeqId)
    fail("scheduler: sequence id {} is in the range of forked beams (>= {})", spec.seq_id,
         kFirstBeamSeqId);
  Seq s;
  s.tokens = spec.prompt_token_ids;
  s.num_prompt = len;
  s.arrival = next_arrival_++;
  if (spec.beam) {
    if (spec.sampling.num_logprobs < spec.beam->num_candidates)
      fail("scheduler: beam sequence {} returns {} logprobs, fewer than its {} candidates",
           spec.seq_id, spec.sampling.num_logprobs, spec.beam->num_candidates);
    int32_t max_new = spec.stop.max_tokens;
    if (config_.max_model_len > 0) max_new = std::min(max_new, config_.max_model_len - len);
    s.group = spec.seq_id;
    std::vector<int32_t> ends = spec.stop.eos_token_ids;
    ends.insert(ends.end(), spec.stop.stop_token_ids.begin(), spec.stop.stop_token_ids.end());
    groups_.emplace(spec.seq_id,
                    Group{BeamSearch(*spec.beam, max_new, std::move(ends)), {spec.seq_id}});
  }
  s.spec = std::move(spec);
  const uint64_t id = s.spec.seq_id;
  seqs_.emplace(id, std::move(s));
  waiting_.push_back(id);
}

void Scheduler::retire(uint64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  Seq& s = it->second;
  if (s.running) {
    running_.erase(std::find(running_.begin(), running_.end(), seq_id));
    releases_.push_back(
        KVRelease{seq_id, std::move(s.pending_kv), s.num_computed, std::move(s.pending_plp)});
  } else if (s.swapped) {
    swapped_.erase(std::find(swapped_.begin(), swapped_.end(), seq_id));
    releases_.push_back(KVRelease{seq_id, {}, 0});  // frees its CPU blocks
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), seq_id));
  }
  if (s.known_to_executors) forget_.push_back(seq_id);
  seqs_.erase(it);
}

void Scheduler::retire_group(uint64_t root) {
  auto g = groups_.find(root);
  if (g == groups_.end()) return;
  for (uint64_t id : g->second.live) retire(id);
  groups_.erase(g);
}

bool Scheduler::abort(uint64_t seq_id) {
  if (groups_.contains(seq_id)) {
    retire_group(seq_id);
    return true;
  }
  if (auto it = seqs_.find(seq_id); it != seqs_.end() && it->second.group != 0) {
    retire_group(it->second.group);
    return true;
  }
  if (!seqs_.contains(seq_id)) return false;
  retire(seq_id);
  return true;
}

KVAsk Scheduler::propose() {
  const bool ahead = !in_flight_.empty();
  if (ahead && !can_plan_ahead())
    fail("scheduler: propose() with {} step(s) in flight (async_scheduling {})", in_flight_.size(),
         config_.async_scheduling ? "on, but the next plan must wait" : "off");
  KVAsk ask;
  ask.released = std::move(releases_);
  releases_.clear();
  ask.forks = std::move(forks_);
  forks_.clear();
  const bool pipeline = config_.pipeline_parallel_size > 1;
  const int32_t pp = std::max(1, config_.pipeline_parallel_size);
  ask.max_running_seqs = config_.max_num_seqs * pp;
  // This step's sequences: at most max_num_seqs, and under a pipeline at most its share.
  int32_t step_cap = config_.max_num_seqs;
  if (pipeline) {
    const auto there = int32_t(running_.size() + swapped_.size() + waiting_.size());
    step_cap = std::min(step_cap, std::max(1, (there + pp - 1) / pp));
  }
  int32_t in_step = 0;
  int32_t budget = config_.max_num_batched_tokens;
  int32_t logprob_rows = prompt_logprob_rows_per_step(config_.max_num_batched_tokens);
  // A chunk of a sequence that wants prompt logprobs costs one logits row per prompt position.
  auto cap_for_prompt_logprobs = [&](const Seq& s, int32_t start, int32_t n) {
    if (s.spec.sampling.num_prompt_logprobs < 0) return n;
    const int32_t rows = std::max(0, std::min(start + n, s.num_prompt - 1) - start);
    if (rows <= logprob_rows) {
      logprob_rows -= rows;
      return n;
    }
    const int32_t capped = logprob_rows;
    logprob_rows = 0;
    return capped;
  };
  for (uint64_t id : running_) {
    Seq& s = seqs_.at(id);
    s.num_scheduled = 0;
    if (pipeline && s.num_in_flight > 0) continue;  // its next step waits for this one's token
    if (in_step >= step_cap) continue;               // the next micro-batch's
    // A beam with its candidates waits for its group; one sampling in flight waits for them.
    if (s.group != 0 && (s.candidates || s.samples_in_flight > 0)) continue;
    // Planning ahead: the step in flight computes num_in_flight more tokens and may sample one
    // more, whose id only the executor will know.
    const int32_t unknown = s.samples_in_flight;
    if (unknown > 1) fail("scheduler: sequence {} samples in {} steps in flight", id, unknown);
    const auto known = int32_t(s.tokens.size());
    if (unknown > 0 && (s.num_outputs() + 1 >= s.spec.stop.max_tokens ||
                        (config_.max_model_len > 0 && known + 1 >= config_.max_model_len)))
      continue;  // that token is its last (length): nothing more to schedule
    const int32_t start = s.num_computed + s.num_in_flight;
    const int32_t remaining = known + unknown - start;
    const int32_t n = cap_for_prompt_logprobs(s, start, std::min(remaining, budget));
    if (n <= 0) continue;
    s.num_scheduled = n;
    budget -= n;
    ++in_step;
    ask.running.push_back(
        KVRunningAsk{id, std::move(s.pending_kv), start, n, unknown, std::move(s.pending_plp),
                     !s.known_to_executors});
    s.pending_kv.clear();
    s.pending_plp = {};
  }
  // A plan made ahead preempts nobody (see the header); the next one, made with nothing in
  // flight, does. Beam groups are preempted by recompute (the cache manager takes them whole).
  if (!ahead) {
    ask.preemption_order = preemption_.order(ask.running);
    for (KVPreemption& v : ask.preemption_order)
      if (seqs_.at(v.seq_id).group != 0) v.mode = PreemptionMode::recompute;
  }
  int32_t count = int32_t(running_.size());
  // Swapped-out sequences, oldest first, continue from where they were.
  bool every_swapped_asks = true;
  for (uint64_t id : swapped_) {
    Seq& s = seqs_.at(id);
    s.num_scheduled = 0;
    const int32_t remaining = int32_t(s.tokens.size()) - s.num_computed;
    const int32_t n = budget <= 0 || count >= ask.max_running_seqs || in_step >= step_cap
                          ? 0
                          : cap_for_prompt_logprobs(s, s.num_computed, std::min(remaining, budget));
    if (n <= 0) {
      every_swapped_asks = false;
      break;
    }
    s.num_scheduled = n;
    budget -= n;
    ++count;
    ++in_step;
    ask.swapped.push_back(KVSwappedAsk{id, s.tokens, s.num_computed, n});
  }
  if (!every_swapped_asks) return ask;
  for (size_t at = 0; at < waiting_.size(); ++at) {
    if (budget <= 0 || count >= ask.max_running_seqs || in_step >= step_cap) break;
    const uint64_t id = waiting_[at];
    Seq& s = seqs_.at(id);
    if (s.group != 0) {
      size_t taken = 0;
      if (!propose_waiting_group(at, ask, budget, count, in_step, step_cap, &taken)) break;
      at += taken - 1;
      continue;
    }
    const int32_t remaining = int32_t(s.tokens.size());
    if (!config_.enable_chunked_prefill && remaining > budget) break;
    const int32_t n = cap_for_prompt_logprobs(s, 0, std::min(remaining, budget));
    if (n <= 0) break;
    budget -= n;
    ++count;
    ++in_step;
    // Prompt logprobs may split a prompt even without chunked prefill (logits rows are capped).
    // A prefix hit then also serves the stored entries of the positions not delivered yet.
    const int32_t k = s.spec.sampling.num_prompt_logprobs;
    const bool wants_prompt_logprobs = k >= 0;
    const bool wants_entries = wants_prompt_logprobs && s.prompt_logprobs_sent < s.num_prompt - 1;
    ask.waiting.push_back(KVWaitingAsk{id, s.tokens, n, true,
                                       config_.enable_chunked_prefill || wants_prompt_logprobs,
                                       s.spec.cache_salt, wants_entries ? k : -1, s.num_prompt});
  }
  return ask;
}

bool Scheduler::propose_waiting_group(size_t at, KVAsk& ask, int32_t& budget, int32_t& count,
                                      int32_t& in_step, int32_t step_cap, size_t* taken) {
  const uint64_t group = seqs_.at(waiting_[at]).group;
  size_t end = at;
  while (end < waiting_.size() && seqs_.at(waiting_[end]).group == group) ++end;
  const auto members = int32_t(end - at);
  if (members != int32_t(groups_.at(group).live.size()))
    fail("scheduler: beam group {} has {} of its {} beams waiting together", group, members,
         groups_.at(group).live.size());
  // Every beam gets at least one token, so that all of them are admitted together.
  if (budget < members || count + members > ask.max_running_seqs || in_step + members > step_cap)
    return false;
  for (size_t k = at; k < end; ++k) {
    Seq& s = seqs_.at(waiting_[k]);
    const int32_t after = int32_t(end - k - 1);
    const int32_t n = std::min(int32_t(s.tokens.size()), budget - after);
    budget -= n;
    ++count;
    ++in_step;
    // Beam search refuses prompt logprobs (SamplingParams), so no member asks for them.
    KVWaitingAsk w{waiting_[k], s.tokens, n, true, true, s.spec.cache_salt};
    w.group = group;
    ask.waiting.push_back(std::move(w));
  }
  *taken = size_t(members);
  return true;
}

void Scheduler::step_group(uint64_t root, std::vector<SeqUpdate>& updates) {
  Group& g = groups_.at(root);
  std::vector<std::vector<LogprobEntry>> candidates;
  candidates.reserve(g.live.size());
  for (uint64_t id : g.live) {
    const Seq& s = seqs_.at(id);
    if (!s.candidates) return;  // a beam still computing
    candidates.push_back(*s.candidates);
  }
  const std::vector<BeamSearch::Next> next = g.search.step(candidates);
  if (g.search.done()) {
    const Seq& any = seqs_.at(g.live.front());
    const auto now = std::chrono::steady_clock::now();
    const std::vector<BeamSearch::Hypothesis> best = g.search.results();
    const std::vector<uint64_t>& outs = g.search.spec().output_seq_ids;
    for (size_t i = 0; i < outs.size(); ++i) {
      SeqUpdate u;
      u.seq_id = outs[i];
      u.num_cached_tokens = any.num_cached_tokens;
      u.first_scheduled = any.first_scheduled;
      u.time = now;
      u.finish = FinishReason::length;
      if (i < best.size()) {
        u.new_token_ids = best[i].beam.tokens;
        u.logprobs = best[i].beam.logprobs;
        if (best[i].ended_by_eos) {
          u.finish = FinishReason::stop;
          const auto& stops = any.spec.stop.stop_token_ids;
          if (std::find(stops.begin(), stops.end(), u.new_token_ids.back()) != stops.end())
            u.stop_token = u.new_token_ids.back();
        }
      }
      updates.push_back(std::move(u));
    }
    retire_group(root);
    return;
  }
  // Each next beam is a new sequence forked from its parent; parents with no child end.
  std::vector<std::vector<uint64_t>> children(g.live.size());
  std::vector<uint64_t> live;
  live.reserve(next.size());
  for (const BeamSearch::Next& n : next) {
    const uint64_t id = next_beam_id_++;
    const Seq& parent = seqs_.at(g.live[n.parent]);
    Seq c = parent;
    c.spec.seq_id = id;
    c.tokens.push_back(n.token);
    c.pending_kv = {n.token};
    c.pending_exec.clear();
    c.candidates.reset();
    c.spec.sampling.num_prompt_logprobs = -1;  // the root delivered them
    c.known_to_executors = false;
    c.num_scheduled = 0;
    seqs_.emplace(id, std::move(c));
    children[n.parent].push_back(id);
    live.push_back(id);
  }
  const auto first =
      std::find_first_of(running_.begin(), running_.end(), g.live.begin(), g.live.end());
  const auto insert_at = first - running_.begin();
  for (size_t p = 0; p < g.live.size(); ++p) {
    const uint64_t pid = g.live[p];
    if (children[p].empty()) {
      retire(pid);
      continue;
    }
    Seq& ps = seqs_.at(pid);
    forks_.push_back(KVFork{pid, std::move(ps.pending_kv), children[p], root});
    running_.erase(std::find(running_.begin(), running_.end(), pid));
    if (ps.known_to_executors) forget_.push_back(pid);
    seqs_.erase(pid);
  }
  running_.insert(
      running_.begin() + std::min<std::ptrdiff_t>(insert_at, std::ptrdiff_t(running_.size())),
      live.begin(), live.end());
  g.live = std::move(live);
}

StepPlan Scheduler::apply(const KVGrant& grant) {
  StepPlan plan;
  plan.step_id = next_step_++;
  plan.finished_seq_ids = std::move(forget_);
  forget_.clear();
  plan.copy_blocks = grant.copies;
  const bool ahead = !in_flight_.empty();
  if (ahead && (!grant.preempted.empty() || !grant.swapped_out.empty()))
    fail("scheduler: a plan made ahead of step {} preempts", in_flight_.back().step_id);
  // A plan made ahead that left sequences out for lack of blocks: the next waits for the
  // steps in flight, so that it may preempt.
  sync_needed_ = grant.short_of_blocks;
  InFlight step{plan.step_id, {}};
  // Books `n` tokens of `s` from `start` into this step; true when they end at its next token.
  auto book = [&](uint64_t id, Seq& s, int32_t start, int32_t n) {
    const bool samples = start + n == int32_t(s.tokens.size()) + s.samples_in_flight;
    step.seqs.emplace(id, Scheduled{id, start, n, samples});
    s.num_in_flight += n;
    s.samples_in_flight += samples ? 1 : 0;
  };

  for (uint64_t id : grant.preempted) {
    if (!seqs_.contains(id)) continue;
    Seq& s = seqs_.at(id);
    running_.erase(std::find(running_.begin(), running_.end(), id));
    waiting_.push_front(id);
    s.running = false;
    s.num_computed = 0;
    s.num_scheduled = 0;
    s.candidates.reset();
    s.pending_kv.clear();
    s.pending_exec.clear();
    s.pending_plp = {};
    s.cached_prompt_logprobs.clear();
    if (s.known_to_executors) plan.finished_seq_ids.push_back(id);
    s.known_to_executors = false;
    ++preemptions_;
  }
  for (uint64_t id : grant.swapped_out) {
    if (!seqs_.contains(id)) continue;  // its release (queued by retire) frees the CPU blocks
    Seq& s = seqs_.at(id);
    running_.erase(std::find(running_.begin(), running_.end(), id));
    auto pos = std::find_if(swapped_.begin(), swapped_.end(),
                            [&](uint64_t o) { return seqs_.at(o).arrival > s.arrival; });
    swapped_.insert(pos, id);
    s.running = false;
    s.swapped = true;
    s.num_scheduled = 0;  // num_computed stays: the KV is kept in CPU blocks
    s.pending_kv.clear();  // the swap-in re-sends every token
    s.pending_exec.clear();
    if (s.known_to_executors) plan.finished_seq_ids.push_back(id);
    s.known_to_executors = false;
    ++preemptions_;
    ++swap_outs_;
  }
  plan.swap_out = grant.swap_out;
  plan.swap_in = grant.swap_in;
  // A sequence aborted while the cache manager was granting: a running one's release is
  // queued already (retire); a waiting or swapped one the grant took in is released here.
  for (const KVRunningGrant& g : grant.running) {
    auto it = seqs_.find(g.seq_id);
    if (it == seqs_.end()) continue;
    Seq& s = it->second;
    const int32_t start = s.num_computed + s.num_in_flight;
    if (!s.known_to_executors) {  // a forked beam: its whole table, all its tokens
      s.known_to_executors = true;
      plan.new_seqs.push_back(NewSeq{g.seq_id, s.tokens, s.num_prompt, s.spec.sampling,
                                     g.block_table, start, s.num_scheduled});
    } else {
      plan.cached_seqs.push_back(
          CachedSeq{g.seq_id, std::move(s.pending_exec), g.new_block_ids, start, s.num_scheduled});
    }
    s.pending_exec.clear();
    book(g.seq_id, s, start, s.num_scheduled);
  }
  for (const KVSwappedIn& g : grant.swapped_in) {
    if (!seqs_.contains(g.seq_id)) {
      releases_.push_back(KVRelease{g.seq_id, {}, 0});
      continue;
    }
    if (swapped_.empty() || swapped_.front() != g.seq_id)
      fail("scheduler: swap-in of sequence {} out of queue order", g.seq_id);
    swapped_.pop_front();
    Seq& s = seqs_.at(g.seq_id);
    s.swapped = false;
    s.running = true;
    running_.push_back(g.seq_id);
    s.pending_kv.clear();
    s.pending_exec.clear();
    s.known_to_executors = true;
    plan.new_seqs.push_back(NewSeq{g.seq_id, s.tokens, s.num_prompt, s.spec.sampling, g.block_ids,
                                   s.num_computed, s.num_scheduled});
    book(g.seq_id, s, s.num_computed, s.num_scheduled);
    ++swap_ins_;
  }
  for (const KVAdmission& a : grant.admitted) {
    if (!seqs_.contains(a.seq_id)) {
      releases_.push_back(KVRelease{a.seq_id, {}, 0});
      continue;
    }
    if (waiting_.empty() || waiting_.front() != a.seq_id)
      fail("scheduler: admission of sequence {} out of queue order", a.seq_id);
    waiting_.pop_front();
    Seq& s = seqs_.at(a.seq_id);
    s.running = true;
    running_.push_back(a.seq_id);
    s.num_computed = a.num_cached_tokens;
    if (s.num_cached_tokens < 0) s.num_cached_tokens = a.num_cached_tokens;
    s.cached_prompt_logprobs = a.prompt_logprobs;
    if (!s.first_scheduled) s.first_scheduled = std::chrono::steady_clock::now();
    s.pending_kv.clear();
    s.pending_exec.clear();
    s.known_to_executors = true;
    plan.new_seqs.push_back(NewSeq{a.seq_id, s.tokens, s.num_prompt, s.spec.sampling, a.block_ids,
                                   a.num_cached_tokens, a.num_new_tokens});
    book(a.seq_id, s, a.num_cached_tokens, a.num_new_tokens);
  }
  if (!step.seqs.empty()) {
    if (ahead) ++planned_ahead_;
    in_flight_.push_back(std::move(step));
  }
  return plan;
}

FinishReason Scheduler::check_stop(const Seq& s, std::optional<int32_t>* stop_token) const {
  const int32_t n_out = s.num_outputs();
  if ((config_.max_model_len > 0 && int32_t(s.tokens.size()) >= config_.max_model_len) ||
      n_out >= s.spec.stop.max_tokens)
    return FinishReason::length;
  if (n_out < s.spec.stop.min_tokens) return FinishReason::none;
  const int32_t last = s.tokens.back();
  const auto& eos = s.spec.stop.eos_token_ids;
  if (std::find(eos.begin(), eos.end(), last) != eos.end()) return FinishReason::stop;
  const auto& stops = s.spec.stop.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), last) != stops.end()) {
    *stop_token = last;
    return FinishReason::stop;
  }
  return FinishReason::none;
}

std::vector<SeqUpdate> Scheduler::on_result(const StepResult& result) {
  std::vector<SeqUpdate> updates;
  if (in_flight_.empty() || in_flight_.front().step_id != result.step_id) {
    if (result.outputs.empty()) return updates;  // a plan with no sequences
    fail("scheduler: result of step {} while step {} is the oldest in flight", result.step_id,
         in_flight_.empty() ? std::string("none") : std::to_string(in_flight_.front().step_id));
  }
  const InFlight step = std::move(in_flight_.front());
  in_flight_.pop_front();
  const auto now = std::chrono::steady_clock::now();
  updates.reserve(result.outputs.size());
  std::vector<uint64_t> groups_sampled;
  for (const SeqStepOutput& out : result.outputs) {
    auto it = seqs_.find(out.seq_id);
    if (it == seqs_.end()) continue;  // finished, or aborted, while the step ran
    auto booked = step.seqs.find(out.seq_id);
    if (booked == step.seqs.end())
      fail("scheduler: step {} returned sequence {}, which it did not schedule", result.step_id,
           out.seq_id);
    const Scheduled& b = booked->second;
    Seq& s = it->second;
    if (b.start != s.num_computed || out.sampled != b.samples)
      fail("scheduler: step {} of sequence {}: tokens from {} (computed {}), sampled {} (booked "
           "{})",
           result.step_id, out.seq_id, b.start, s.num_computed, out.sampled, b.samples);
    const int32_t chunk_start = s.num_computed;
    s.num_computed += b.count;
    s.num_in_flight -= b.count;
    if (b.samples) --s.samples_in_flight;
    SeqUpdate u;
    u.seq_id = out.seq_id;
    u.num_cached_tokens = s.num_cached_tokens;
    u.first_scheduled = s.first_scheduled;
    u.time = now;
    // Prompt logprobs: entry j belongs to position chunk_start + j (predicting the token after
    // it); those the prefix cache served (positions 0 ..) come first; positions delivered
    // before a preemption are not sent twice.
    auto deliver = [&](int32_t pos, const PositionLogprobs& e) {
      if (pos < s.prompt_logprobs_sent) return;
      u.prompt_logprobs.push_back(e);
      s.prompt_logprobs_sent = pos + 1;
    };
    for (size_t j = 0; j < s.cached_prompt_logprobs.size(); ++j)
      deliver(int32_t(j), s.cached_prompt_logprobs[j]);
    s.cached_prompt_logprobs.clear();
    for (size_t j = 0; j < out.prompt_logprobs.size(); ++j)
      deliver(chunk_start + int32_t(j), out.prompt_logprobs[j]);
    if (!out.prompt_logprobs.empty()) {
      // For the cache manager: entries of tokens chunk_start + 1 .., continuing the run.
      KVPromptLogprobs& keep = s.pending_plp;
      if (keep.entries.empty()) {
        keep.first_token = chunk_start + 1;
        keep.k = s.spec.sampling.num_prompt_logprobs;
      }
      if (keep.first_token + int32_t(keep.entries.size()) == chunk_start + 1)
        keep.entries.insert(keep.entries.end(), out.prompt_logprobs.begin(),
                            out.prompt_logprobs.end());
    }
    if (out.sampled && s.group != 0) {
      // A beam's sample is its candidates; its group steps once every beam has them.
      s.candidates = out.logprobs.top;
      if (std::find(groups_sampled.begin(), groups_sampled.end(), s.group) == groups_sampled.end())
        groups_sampled.push_back(s.group);
    } else if (out.sampled) {
      s.tokens.push_back(out.token);
      s.pending_kv.push_back(out.token);
      s.pending_exec.push_back(out.token);
      u.new_token_ids.push_back(out.token);
      u.logprobs.push_back(out.logprobs);  // the chosen token's logprob is always there
      u.finish = check_stop(s, &u.stop_token);
    }
    const bool finished = u.finish != FinishReason::none;
    if (!u.new_token_ids.empty() || !u.prompt_logprobs.empty() || finished)
      updates.push_back(std::move(u));
    if (finished) retire(out.seq_id);
  }
  for (uint64_t root : groups_sampled)
    if (groups_.contains(root)) step_group(root, updates);
  return updates;
}

std::vector<SeqUpdate> Scheduler::fail_all() {
  std::vector<SeqUpdate> updates;
  const auto failed = [&](uint64_t id) {
    SeqUpdate u;
    u.seq_id = id;
    u.finish = FinishReason::error;
    updates.push_back(std::move(u));
  };
  // A beam request's sequences are the engine's output ids, not its beams'.
  for (const auto& [root, g] : groups_)
    for (uint64_t id : g.search.spec().output_seq_ids) failed(id);
  groups_.clear();
  forks_.clear();
  for (const auto& [id, s] : seqs_)
    if (s.group == 0) failed(id);
  seqs_.clear();
  running_.clear();
  waiting_.clear();
  swapped_.clear();
  releases_.clear();
  forget_.clear();
  in_flight_.clear();
  sync_needed_ = false;
  return updates;
}

size_t Scheduler::requeue_all() {
  std::vector<uint64_t> ids;
  ids.reserve(seqs_.size());
  for (auto& [id, s] : seqs_) {
    ids.push_back(id);
    s.num_computed = 0;
    s.num_in_flight = 0;
    s.samples_in_flight = 0;
    s.num_scheduled = 0;
    s.pending_kv.clear();
    s.pending_exec.clear();
    s.pending_plp = {};
    s.cached_prompt_logprobs.clear();
    s.candidates.reset();
    s.known_to_executors = false;
    s.running = false;
    s.swapped = false;
  }
  forks_.clear();
  std::sort(ids.begin(), ids.end(),
            [&](uint64_t a, uint64_t b) { return seqs_.at(a).arrival < seqs_.at(b).arrival; });
  running_.clear();
  swapped_.clear();
  waiting_.assign(ids.begin(), ids.end());
  releases_.clear();
  forget_.clear();
  in_flight_.clear();
  sync_needed_ = false;
  return ids.size();
}

void Scheduler::reannounce_running() {
  if (!in_flight_.empty())
    fail("scheduler: re-announcing the running sequences with step {} in flight",
         in_flight_.front().step_id);
  for (uint64_t id : running_) {
    Seq& s = seqs_.at(id);
    // Forgotten first (a rank that keeps it drops its copy; one not scheduled next is sent
    // again when it is), then sent as a NewSeq with its whole block table when scheduled.
    if (s.known_to_executors) forget_.push_back(id);
    s.known_to_executors = false;
    s.pending_exec.clear();  // its tokens are in s.tokens
  }
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats st;
  st.num_running = int32_t(running_.size());
  st.num_waiting = int32_t(waiting_.size());
  st.num_preemptions = preemptions_;
  st.steps = next_step_ - 1;
  st.num_swapped = int32_t(swapped_.size());
  st.num_swap_outs = swap_outs_;
  st.num_swap_ins = swap_ins_;
  st.steps_planned_ahead = planned_ahead_;
  return st;
}

}  // namespace troupe
