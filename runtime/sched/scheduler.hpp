// The scheduling policy: waiting and running queues, the token budget, stop conditions.
// Pure CPU logic with no actors and no devices (tested with hand-made step results).
//
// One step is three calls:
//   1. propose()       -> a KVAsk: in priority order, which sequences want how many tokens
//                         under max_num_batched_tokens / max_num_seqs (running ones first,
//                         then waiting ones in arrival order; chunked prefill splits prompts).
//   2. apply(grant)    -> the StepPlan for the executors, after the cache manager granted or
//                         trimmed the ask (sequences preempted by recompute go back to the
//                         front of the waiting queue; swapped-out ones join the swapped queue,
//                         ordered by arrival, keeping num_computed_tokens).
//   3. on_result(res)  -> per-sequence updates: tokens appended, logprobs, finished or not.
// Finished and aborted sequences are released in the next ask and forgotten by the executors
// in the next plan.
//
// Asynchronous scheduling (SchedulerConfig::async_scheduling, vLLM's --async-scheduling): while
// one step is in flight the next may be planned (can_plan_ahead()), so the executor finds it
// waiting when the first ends and the GPU does not idle through planning and applying. A
// sequence that samples in the step in flight is scheduled for the token after it, which only
// the executor knows yet: executors append the tokens they sample themselves, and the plans'
// appended_token_ids confirm them later. What cannot be known ahead costs at most one wasted
// step per sequence: one that stops on a token (eos, stop_token_ids) or is aborted also ran in
// the step planned ahead, whose output for it is dropped. Stops by length are known ahead and
// never scheduled. A plan made ahead preempts nobody (its ask has no preemption_order): a
// sequence that cannot grow sits it out, and the next plan is made with nothing in flight,
// where vLLM's preemption rules apply as in synchronous scheduling.
//
// Preemption: the choice of victims and of recompute or swap is the policy's
// (preemption_policy.hpp); the ask carries it to the cache manager, which frees blocks in that
// order until the sequence that cannot grow fits.
//
// Swapped-out sequences ask to come back after the running ones and before any waiting one
// (waiting sequences are only proposed when every swapped one is). The executors forget a
// swapped-out sequence and learn it again as a NewSeq on swap-in, with its tokens so far and
// num_computed_tokens unchanged: the swap-in restores that KV, nothing is recomputed.
//
// Beam search (SeqSpec::beam): the request's root sequence is the first beam. A beam that
// samples does not take its token: the executor's top-K logprobs are its candidates, and the
// beam waits (is not proposed) until every live beam of its group has its candidates. Then
// BeamSearch (beam_search.hpp) picks the next beams: each is a new sequence (ids from
// kFirstBeamSeqId up), forked from its parent in the cache manager (KVFork: shared blocks,
// copy-on-write of a partly filled last block) and sent to the executors as a NewSeq with its
// whole block table; the parents are forgotten. A group is preempted whole and by recompute,
// admitted whole (cache_manager.hpp), and never planned ahead while one of its beams samples in
// a step in flight. When the search ends, the n best hypotheses go out as one finishing update
// each, to the request's output sequence ids (BeamSpec::output_seq_ids).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/faults/fault_spec.hpp"
#include "runtime/kv/kv_cache_manager.hpp"
#include "runtime/protocol/step.hpp"
#include "runtime/sched/beam_search.hpp"
#include "runtime/sched/preemption_policy.hpp"

namespace troupe {

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 8192;
  int32_t max_num_seqs = 256;
  int32_t max_model_len = 0;
  bool enable_chunked_prefill = true;
  bool async_scheduling = false;  // plan a step while the one before runs (see above)
  // How PreemptionPolicy preempts (--preemption-mode); swap needs the cache manager's CPU pool.
  PreemptionMode preemption_mode = PreemptionMode::recompute;
  // Pipeline parallelism: up to this many steps (micro-batches) in flight at once, each of
  // sequences that are in no other step in flight (a sequence's next step needs the token
  // the last stage samples). 1: no pipeline. As in vLLM's V0 virtual engines, max_num_seqs
  // bounds each micro-batch, so up to pipeline_parallel_size * max_num_seqs sequences run;
  // a micro-batch takes at most its share (1 / pipeline_parallel_size) of the sequences there
  // are, so that the stages get batches of like size instead of one full and one empty.
  int32_t pipeline_parallel_size = 1;
};

/// The scheduler actor's settings: the policy, and its periodic stats line.
struct SchedulerLoopConfig {
  SchedulerConfig policy;
  bool log_stats = true;
  double stats_interval_seconds = 5.0;
  // Fault recovery (issue 22): lost executors are replaced this many times in a row (a step
  // that completes resets the count) before the requests fail; a step unanswered for
  // execute_timeout_seconds counts as its silent ranks lost.
  int32_t max_executor_restarts = 3;
  double execute_timeout_seconds = 300.0;
  // Injected faults that act on the head (refuse-kv), runtime/faults/fault_spec.hpp.
  std::vector<FaultSpec> faults;
};

/// When a sequence stops, besides the engine's stop strings.
struct StopCriteria {
  int32_t max_tokens = 16;
  int32_t min_tokens = 0;
  std::vector<int32_t> eos_token_ids;   // empty when ignore_eos
  std::vector<int32_t> stop_token_ids;  // finish with stop_reason = the token
};

/// A new sequence as the engine hands it over.
struct SeqSpec {
  uint64_t seq_id = 0;
  std::vector<int32_t> prompt_token_ids;
  SeqSampling sampling;
  StopCriteria stop;
  uint64_t cache_salt = 0;
  // Beam search: this sequence is the root of a beam group (sampling must be greedy, with
  // num_logprobs >= beam->num_candidates); stop.eos_token_ids end hypotheses.
  std::optional<BeamSpec> beam;
};

enum class FinishReason : uint8_t { none, length, stop, abort, error };
const char* to_string(FinishReason r);

/// What one step did to one sequence.
struct SeqUpdate {
  uint64_t seq_id = 0;
  std::vector<int32_t> new_token_ids;  // 0 or 1 tokens today; speculative decoding adds more
  std::vector<PositionLogprobs> logprobs;  // one per new token (top-N only when requested)
  std::vector<PositionLogprobs> prompt_logprobs;  // prompt positions not delivered before
  FinishReason finish = FinishReason::none;
  std::optional<int32_t> stop_token;  // the stop_token_ids entry that ended it
  // Prompt tokens the prefix cache served when the sequence was first admitted (vLLM's
  // num_cached_tokens; a later recompute does not change it); -1 before that.
  int32_t num_cached_tokens = -1;
  // When the plan that first admitted the sequence was made (a recompute after preemption keeps
  // it; unset before), and when this update's step result was applied: RequestMetrics' times.
  std::optional<std::chrono::steady_clock::time_point> first_scheduled;
  std::chrono::steady_clock::time_point time{};
};

/// The tokens each step ran (prompt tokens computed and decode tokens), counted into the buckets
/// of vLLM's vllm:iteration_tokens_total histogram (upper-inclusive, as Prometheus counts).
struct StepTokenHistogram {
  static constexpr std::array<uint64_t, 13> kBounds = {1,   8,   16,   32,   64,   128, 256,
                                                       512, 1024, 2048, 4096, 8192, 16384};
  std::array<uint64_t, kBounds.size()> counts{};  // per bucket, not cumulative
  uint64_t count = 0;  // steps, those above the last bound included
  uint64_t sum = 0;    // tokens
  void observe(uint64_t tokens);
};

struct SchedulerStats {
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  uint64_t num_preemptions = 0;  // by recompute and by swap
  uint64_t steps = 0;
  int32_t num_swapped = 0;     // sequences swapped out now
  uint64_t num_swap_outs = 0;  // sequences swapped out so far
  uint64_t num_swap_ins = 0;   // sequences swapped back in so far
  uint64_t steps_planned_ahead = 0;  // async scheduling: plans made while a step was in flight
  // Host time of the step loop so far, over `timed_steps` steps with a result (filled by the
  // scheduler actor; zero from Scheduler::stats()): planning (propose, the cache manager's
  // grant, apply), the executor round trip (plan sent to result back), the executor's own
  // time inside it, and applying the result (on_result, sending the outputs).
  uint64_t timed_steps = 0;
  double plan_seconds = 0, round_trip_seconds = 0, executor_seconds = 0, apply_seconds = 0;
  // The same steps split by kind: those with prompt tokens (a whole prompt, a chunk of one, or
  // a recompute; decodes may ride along) and decode-only steps, with the time of each kind (a
  // step's from when it was sent, or from when the step before it returned if that is later,
  // so that steps in flight together count once) and the tokens each kind ran.
  uint64_t prompt_steps = 0, prompt_step_tokens = 0, decode_steps = 0, decode_step_tokens = 0;
  double prompt_step_seconds = 0, decode_step_seconds = 0;
  StepTokenHistogram step_tokens;  // every step with a result, by the tokens it ran
  // Faults (filled by the scheduler actor): executor losses seen, recoveries completed,
  // sequences put back to be recomputed by them, and the time from each loss to the new
  // executors' start (summed, and the last one).
  uint64_t faults_seen = 0, recoveries = 0, sequences_recomputed = 0;
  double recovery_seconds = 0, last_recovery_seconds = 0;
  // Ranks moved to another executor with their KV cache (a drained worker; no recompute), the
  // blocks copied and the seconds from the request to steps resuming.
  uint64_t migrations = 0, blocks_migrated = 0, swap_blocks_migrated = 0;
  double migration_seconds = 0;
};

class Scheduler {
 public:
  /// Sequence ids from here up are the scheduler's own (forked beams); the engine's stay below.
  static constexpr uint64_t kFirstBeamSeqId = uint64_t(1) << 62;

  explicit Scheduler(SchedulerConfig config);

  /// Queues a sequence. Throws troupe::Error if the id is in use or the prompt is empty or
  /// longer than max_model_len (the engine checks first; this is the last line).
  void add(SeqSpec spec);
  /// Drops a sequence wherever it is; its blocks and executor state go with the next step.
  /// Returns false if it is unknown (already finished).
  bool abort(uint64_t seq_id);

  [[nodiscard]] bool has_work() const {
    return !running_.empty() || !waiting_.empty() || !swapped_.empty();
  }
  [[nodiscard]] bool has_pending_releases() const {
    return !releases_.empty() || !forget_.empty();
  }

  /// With nothing in flight, or when can_plan_ahead().
  [[nodiscard]] KVAsk propose();
  [[nodiscard]] StepPlan apply(const KVGrant& grant);
  /// Results come in plan order (a plan with no sequences needs none).
  [[nodiscard]] std::vector<SeqUpdate> on_result(const StepResult& result);

  /// The id the next plan will get.
  [[nodiscard]] uint64_t next_step_id() const { return next_step_; }
  /// Steps planned whose results are not in yet (plans with no sequences do not count).
  [[nodiscard]] size_t steps_in_flight() const { return in_flight_.size(); }
  /// Whether the next step may be planned now, before the one in flight returns: async
  /// scheduling is on, one step is in flight, and the last plan made ahead did not run short
  /// of blocks (then the next plan waits, so that it may preempt).
  /// Under pipeline parallelism: fewer than pipeline_parallel_size steps are in flight, the
  /// next one of sequences not in any of them.
  [[nodiscard]] bool can_plan_ahead() const {
    if (config_.pipeline_parallel_size > 1)
      return in_flight_.size() < size_t(config_.pipeline_parallel_size) && !sync_needed_;
    return config_.async_scheduling && in_flight_.size() == 1 && !sync_needed_;
  }

  /// Fails every sequence (the executors are gone): returns one error update per sequence,
  /// and leaves the scheduler empty.
  [[nodiscard]] std::vector<SeqUpdate> fail_all();

  /// The executors were lost and are being replaced (fault recovery): every sequence goes back
  /// to the waiting queue in arrival order, to be recomputed from its tokens so far (prompt and
  /// every output token already applied; the results of steps in flight are dropped), on
  /// executors and a cache manager that know nothing of it. Returns how many sequences were
  /// put back.
  size_t requeue_all();

  /// A rank moved to another executor with its KV cache (actors/executor_group.hpp): the
  /// running sequences are sent again as NewSeqs (their tokens, whole block tables and
  /// computed counts) in the next plan, so the new executor learns them and the others
  /// replace what they hold with the same. Only with no step in flight.
  void reannounce_running();

  [[nodiscard]] SchedulerStats stats() const;

 private:
  struct Seq {
    SeqSpec spec;
    std::vector<int32_t> tokens;  // prompt followed by outputs
    int32_t num_prompt = 0;
    int32_t num_computed = 0;       // tokens whose KV steps that returned computed
    int32_t num_in_flight = 0;      // tokens of it in steps in flight
    int32_t samples_in_flight = 0;  // steps in flight that sample its next token (0 or 1
                                    // when planning; 2 between planning ahead and a result)
    int32_t num_scheduled = 0;      // running or swapped: tokens the last propose() asked for
                                    // (apply() reads it for the granted ones only)
    int32_t prompt_logprobs_sent = 0;  // prompt positions delivered (after position 0)
    // Prompt logprobs the prefix cache served at admission (positions 0 ..), delivered with the
    // sequence's first result; and those its steps computed since the last ask, for the cache
    // manager to keep beside their blocks.
    std::vector<PositionLogprobs> cached_prompt_logprobs;
    KVPromptLogprobs pending_plp;
    std::vector<int32_t> pending_kv;    // sampled tokens the cache manager has not heard of
    std::vector<int32_t> pending_exec;  // sampled tokens the executors have not had confirmed
    int32_t num_cached_tokens = -1;     // SeqUpdate::num_cached_tokens
    std::optional<std::chrono::steady_clock::time_point> first_scheduled;  // SeqUpdate's
    bool known_to_executors = false;
    bool running = false;
    bool swapped = false;  // in swapped_: its KV is in CPU blocks
    uint64_t arrival = 0;  // order of add(): the swapped queue's order
    uint64_t group = 0;    // beam group (its root's id), 0: none
    std::optional<std::vector<LogprobEntry>> candidates;  // a beam's, until its group steps
    [[nodiscard]] int32_t num_outputs() const { return int32_t(tokens.size()) - num_prompt; }
  };

  [[nodiscard]] FinishReason check_stop(const Seq& s, std::optional<int32_t>* stop_token) const;
  void retire(uint64_t seq_id);  // removes from queues, queues release + forget

  /// A beam request: its search and its live beams' sequence ids, in BeamSearch::live() order.
  struct Group {
    BeamSearch search;
    std::vector<uint64_t> live;
  };
  /// Steps group `root` once every live beam has its candidates: forks, or finishes it (its
  /// results into `updates`).
  void step_group(uint64_t root, std::vector<SeqUpdate>& updates);
  void retire_group(uint64_t root);
  /// Proposes waiting beam group members from waiting_[at]: all of them or none.
  bool propose_waiting_group(size_t at, KVAsk& ask, int32_t& budget, int32_t& count,
                             int32_t& in_step, int32_t step_cap, size_t* taken);

  SchedulerConfig config_;
  PreemptionPolicy preemption_;
  std::unordered_map<uint64_t, Seq> seqs_;
  std::vector<uint64_t> running_;  // priority order: admission order
  std::deque<uint64_t> waiting_;
  std::deque<uint64_t> swapped_;  // by arrival
  std::vector<KVRelease> releases_;
  std::vector<uint64_t> forget_;
  std::unordered_map<uint64_t, Group> groups_;  // by root id
  std::vector<KVFork> forks_;                   // for the next ask
  uint64_t next_beam_id_ = kFirstBeamSeqId;
  // Steps in flight, oldest first: what each scheduled, so its result can be applied.
  struct Scheduled {
    uint64_t seq_id = 0;
    int32_t start = 0, count = 0;
    bool samples = false;
  };
  struct InFlight {
    uint64_t step_id = 0;
    std::unordered_map<uint64_t, Scheduled> seqs;
  };
  std::deque<InFlight> in_flight_;
  bool sync_needed_ = false;  // a plan made ahead ran short of blocks
  uint64_t next_step_ = 1;
  uint64_t preemptions_ = 0;
  uint64_t next_arrival_ = 0;
  uint64_t swap_outs_ = 0, swap_ins_ = 0;
  uint64_t planned_ahead_ = 0;
};

}  // namespace troupe
