// The server's Prometheus metrics with vLLM's names, help texts, labels (model_name, engine)
// and histogram buckets (vllm/v1/metrics/loggers.py, v0.11), so vLLM's dashboards and
// autoscalers read troupe unchanged. Rendered in the Prometheus text format (0.0.4) the way
// prometheus_client writes it: counters as <name>_total, histograms as _bucket{le=...}, _count
// and _sum, numbers as Python floats ("1.0", "0.001", "+Inf").
//
// Two sources: the engine's own counts, read when /metrics is scraped (EngineGauges: running and
// waiting requests, KV usage, prefix-cache queries and hits, preemptions), and what the server
// sees of each request (ServingMetrics::record_*: tokens, time to first token, inter-token
// latency, end-to-end latency, finish reasons) with the engine's own times of each sequence
// (CompletionOutput::times) for the phase histograms, as vLLM's IterationStats defines them:
// queue = first scheduled - arrival (queued for the scheduler), prefill = first token - first
// scheduled, decode = last token - first token, inference = last token - first scheduled. As in
// vLLM's later RequestTiming, a sequence never scheduled is in none of them, and one scheduled
// but without a token only in the queue time (v0.11 observed zeros, or a negative queue time,
// for those).
//
// vllm:iteration_tokens_total is the engine's too: the tokens each step ran (prompt tokens
// computed and decode tokens), counted by the scheduler actor (SchedulerStats::step_tokens).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace troupe::openai {

/// A cumulative Prometheus histogram (not thread-safe: ServingMetrics locks).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  /// One counted elsewhere: `counts` per bucket (not cumulative, one per bound), `count`
  /// observations in all (those above the last bound included), their `sum`.
  Histogram(std::vector<double> bounds, std::vector<uint64_t> counts, uint64_t count, double sum);
  void observe(double v);
  [[nodiscard]] const std::vector<double>& bounds() const { return bounds_; }
  [[nodiscard]] const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket
  [[nodiscard]] uint64_t count() const { return count_; }
  [[nodiscard]] double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // non-cumulative, one per bound (+Inf is count_)
  uint64_t count_ = 0;
  double sum_ = 0;
};

/// vLLM's build_1_2_5_buckets: 1, 2, 5, 10, 20, 50, ... up to max_value.
[[nodiscard]] std::vector<double> buckets_1_2_5(int64_t max_value);

/// A number as prometheus_client prints it (Python's float repr: 3.0, 0.25, 1e-05, +Inf).
[[nodiscard]] std::string prom_number(double v);

/// The engine's state at scrape time.
struct EngineGauges {
  int64_t running = 0, waiting = 0, swapped = 0;
  double kv_usage = 0, cpu_kv_usage = 0;         // fractions, 1 = full
  uint64_t prefix_queries = 0, prefix_hits = 0;  // tokens
  uint64_t preemptions = 0;
  // Fault recovery (troupe's own, docs/faults.md): executor losses, recoveries, sequences put
  // back to be recomputed, seconds from losses to the replacements' start.
  uint64_t faults = 0, recoveries = 0, sequences_recomputed = 0;
  double recovery_seconds = 0;
  // Ranks moved to another worker with their KV cache (a worker that left), the blocks copied
  // (KV cache and swap space) and the seconds the moves took.
  uint64_t rank_moves = 0, kv_blocks_moved = 0;
  double rank_move_seconds = 0;
  // Tokens per engine step (vllm:iteration_tokens_total): vLLM's bucket bounds (the
  // scheduler's StepTokenHistogram::kBounds), per-bucket counts, steps, tokens.
  std::vector<double> step_token_bounds;
  std::vector<uint64_t> step_token_counts;
  uint64_t steps = 0;
  double step_tokens = 0;
};

/// What one finished sequence (one choice) looked like from the server.
struct FinishedSequence {
  std::string finish_reason;  // stop, length, abort, error
  int64_t prompt_tokens = 0, generation_tokens = 0;
  double e2e_seconds = 0;
  // The phases (see the header), as far as the sequence got: queue once it was scheduled, the
  // others once it had a token.
  std::optional<double> queue_seconds, prefill_seconds, decode_seconds, inference_seconds;
  std::optional<int64_t> max_tokens;  // the request's max_tokens parameter
};

/// The phases of one sequence from the engine's times: arrival is when its request was queued
/// for the scheduler (RequestMetrics::arrival_time).
void set_phases(FinishedSequence& f, double arrival, const std::optional<double>& first_scheduled,
                const std::optional<double>& first_token, const std::optional<double>& last_token);

class ServingMetrics {
 public:
  ServingMetrics(std::string model_name, int64_t max_model_len);

  /// A sequence's first `tokens` tokens arrived `seconds` after the request did; its prompt is
  /// `prompt_tokens` long (counted once per sequence, as vLLM counts each child request).
  void record_first_token(double seconds, int64_t prompt_tokens, int64_t tokens);
  /// `tokens` new tokens of a sequence arrived `gap_seconds` after its previous ones, made by
  /// `steps` engine steps: vLLM observes one inter-token latency per step, so the gap counts
  /// as `steps` equal ones (several steps arrive together under stream_interval > 1).
  void record_tokens(double gap_seconds, int64_t tokens, int64_t steps);
  void record_finished(const FinishedSequence& s);
  /// A whole request (all n sequences) finished; the longest produced `max_generation_tokens`.
  void record_request(int64_t n, int64_t max_generation_tokens);

  [[nodiscard]] std::string render(const EngineGauges& g) const;

 private:
  mutable std::mutex mu_;
  std::string model_label_;  // model_name="..."
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  uint64_t success_stop_ = 0, success_length_ = 0, success_abort_ = 0, success_error_ = 0;
  Histogram ttft_, itl_, tpot_, e2e_, queue_, inference_, prefill_, decode_, request_tpot_;
  Histogram prompt_len_, generation_len_, max_generation_, n_, max_tokens_;
};

}  // namespace troupe::openai
