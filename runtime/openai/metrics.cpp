#include "runtime/openai/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace troupe::openai {

namespace {

const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                  0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                  7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {
    0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

void header(std::string& out, const char* name, const char* help, const char* type) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += fmt::format("{}{{{}}} {}\n", name, labels, prom_number(v));
}

void gauge(std::string& out, const char* name, const char* help, const std::string& labels,
           double v) {
  header(out, name, help, "gauge");
  sample(out, name, labels, v);
}

// prometheus_client names a counter's HELP and TYPE lines after its _total sample.
void counter(std::string& out, const char* name, const char* help, const std::string& labels,
             double v) {
  const std::string total = std::string(name) + "_total";
  header(out, total.c_str(), help, "counter");
  sample(out, total, labels, v);
}

/// `model` is the model_name label. prometheus_client writes labels sorted by name, so "le"
/// goes between "engine" and "model_name".
void histogram(std::string& out, const char* name, const char* help, const std::string& model,
               const Histogram& h) {
  header(out, name, help, "histogram");
  const std::string labels = "engine=\"0\"," + model;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    cumulative += h.counts()[i];
    out += fmt::format("{}_bucket{{engine=\"0\",le=\"{}\",{}}} {}\n", name,
                       prom_number(h.bounds()[i]), model, prom_number(double(cumulative)));
  }
  out += fmt::format("{}_bucket{{engine=\"0\",le=\"+Inf\",{}}} {}\n", name, model,
                     prom_number(double(h.count())));
  sample(out, std::string(name) + "_count", labels, double(h.count()));
  sample(out, std::string(name) + "_sum", labels, h.sum());
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}

Histogram::Histogram(std::vector<double> bounds, std::vector<uint64_t> counts, uint64_t count,
                     double sum)
    : bounds_(std::move(bounds)), counts_(std::move(counts)), count_(count), sum_(sum) {
  counts_.resize(bounds_.size(), 0);
}

void Histogram::observe(double v) {
  // Prometheus buckets are upper-inclusive: le="0.1" counts 0.1.
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
  if (it != bounds_.end()) ++counts_[size_t(it - bounds_.begin())];
  ++count_;
  sum_ += v;
}

std::vector<double> buckets_1_2_5(int64_t max_value) {
  std::vector<double> out;
  for (int64_t scale = 1;; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max_value) return out;
      out.push_back(double(m * scale));
    }
  }
}

std::string prom_number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  // Python's repr: integral values keep ".0" below 1e16; otherwise the shortest round trip.
  if (v == std::floor(v) && std::abs(v) < 1e16) return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);
}

ServingMetrics::ServingMetrics(std::string model_name, int64_t max_model_len)
    : model_label_(fmt::format("model_name=\"{}\"", escape_label(model_name))),
      ttft_(kTtftBuckets),
      itl_(kTokenLatencyBuckets),
      tpot_(kTokenLatencyBuckets),
      e2e_(kRequestLatencyBuckets),
      queue_(kRequestLatencyBuckets),
      inference_(kRequestLatencyBuckets),
      prefill_(kRequestLatencyBuckets),
      decode_(kRequestLatencyBuckets),
      request_tpot_(kTokenLatencyBuckets),
      prompt_len_(buckets_1_2_5(max_model_len)),
      generation_len_(buckets_1_2_5(max_model_len)),
      max_generation_(buckets_1_2_5(max_model_len)),
      n_({1, 2, 5, 10, 20}),
      max_tokens_(buckets_1_2_5(max_model_len)) {}

void ServingMetrics::record_first_token(double seconds, int64_t prompt_tokens, int64_t tokens) {
  std::lock_guard lock(mu_);
  ttft_.observe(seconds);
  prompt_tokens_ += uint64_t(prompt_tokens);
  generation_tokens_ += uint64_t(tokens);
}

void ServingMetrics::record_tokens(double gap_seconds, int64_t tokens, int64_t steps) {
  steps = std::max<int64_t>(steps, 1);
  std::lock_guard lock(mu_);
  for (int64_t i = 0; i < steps; ++i) {
    itl_.observe(gap_seconds / double(steps));
    tpot_.observe(gap_seconds / double(steps));
  }
  generation_tokens_ += uint64_t(tokens);
}

void ServingMetrics::record_finished(const FinishedSequence& s) {
  std::lock_guard lock(mu_);
  if (s.finish_reason == "stop")
    ++success_stop_;
  else if (s.finish_reason == "length")
    ++success_length_;
  else if (s.finish_reason == "abort")
    ++success_abort_;
  else
    ++success_error_;
  e2e_.observe(s.e2e_seconds);
  if (s.queue_seconds) queue_.observe(*s.queue_seconds);
  if (s.inference_seconds) inference_.observe(*s.inference_seconds);
  if (s.prefill_seconds) prefill_.observe(*s.prefill_seconds);
  if (s.decode_seconds) decode_.observe(*s.decode_seconds);
  prompt_len_.observe(double(s.prompt_tokens));
  generation_len_.observe(double(s.generation_tokens));
  // vLLM: decode time over the tokens after the first (0 when there is one).
  request_tpot_.observe(s.generation_tokens > 1 && s.decode_seconds
                            ? *s.decode_seconds / double(s.generation_tokens - 1)
                            : 0.0);
  if (s.max_tokens) max_tokens_.observe(double(*s.max_tokens));
}

void set_phases(FinishedSequence& f, double arrival, const std::optional<double>& first_scheduled,
                const std::optional<double>& first_token, const std::optional<double>& last_token) {
  if (!first_scheduled) return;
  f.queue_seconds = *first_scheduled - arrival;
  if (!first_token || !last_token) return;
  f.prefill_seconds = *first_token - *first_scheduled;
  f.decode_seconds = *last_token - *first_token;
  f.inference_seconds = *last_token - *first_scheduled;
}

void ServingMetrics::record_request(int64_t n, int64_t max_generation_tokens) {
  std::lock_guard lock(mu_);
  n_.observe(double(n));
  max_generation_.observe(double(max_generation_tokens));
}

std::string ServingMetrics::render(const EngineGauges& g) const {
  std::lock_guard lock(mu_);
  std::string out;
  // Labels sorted by name, as prometheus_client writes them.
  const std::string l = "engine=\"0\"," + model_label_;
  const std::string& m = model_label_;
  gauge(out, "vllm:num_requests_running", "Number of requests in model execution batches.", l,
        double(g.running));
  gauge(out, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", l,
        double(g.waiting));
  gauge(out, "vllm:num_requests_swapped", "Number of requests swapped to CPU.", l,
        double(g.swapped));
  gauge(out, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l,
        g.kv_usage);
  gauge(out, "vllm:gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc "
        "instead.",
        l, g.kv_usage);
  gauge(out, "vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", l,
        g.cpu_kv_usage);
  counter(out, "vllm:prefix_cache_queries",
          "Prefix cache queries, in terms of number of queried tokens.", l,
          double(g.prefix_queries));
  counter(out, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
          l, double(g.prefix_hits));
  counter(out, "vllm:gpu_prefix_cache_queries",
          "GPU prefix cache queries, in terms of number of queriedtokens. DEPRECATED: Use "
          "vllm:prefix_cache_queries instead.",
          l, double(g.prefix_queries));
  counter(out, "vllm:gpu_prefix_cache_hits",
          "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use "
          "vllm:prefix_cache_hits instead.",
          l, double(g.prefix_hits));
  counter(out, "vllm:num_preemptions", "Cumulative number of preemption from the engine.", l,
          double(g.preemptions));
  // troupe's own (vLLM has no fault recovery): docs/faults.md.
  counter(out, "troupe:executor_faults", "Executors lost (dead, frozen or failing a step).", l,
          double(g.faults));
  counter(out, "troupe:executor_recoveries", "Losses recovered from by replacing the executors.",
          l, double(g.recoveries));
  counter(out, "troupe:sequences_recomputed",
          "Sequences put back in the waiting queue to be recomputed after an executor loss.", l,
          double(g.sequences_recomputed));
  counter(out, "troupe:recovery_seconds",
          "Seconds from executor losses to their replacements' start.", l, g.recovery_seconds);
  counter(out, "troupe:rank_moves",
          "Ranks moved to another worker with their KV cache (a worker that left).", l,
          double(g.rank_moves));
  counter(out, "troupe:kv_blocks_moved",
          "KV blocks (cache and swap space) copied to the workers that took moved ranks.", l,
          double(g.kv_blocks_moved));
  counter(out, "troupe:rank_move_seconds",
          "Seconds from asking a rank to move to steps resuming on its new worker.", l,
          g.rank_move_seconds);
  counter(out, "vllm:prompt_tokens", "Number of prefill tokens processed.", l,
          double(prompt_tokens_));
  counter(out, "vllm:generation_tokens", "Number of generation tokens processed.", l,
          double(generation_tokens_));
  header(out, "vllm:request_success_total", "Count of successfully processed requests.", "counter");
  for (const auto& [reason, count] : {std::pair<const char*, uint64_t>{"stop", success_stop_},
                                      {"length", success_length_},
                                      {"abort", success_abort_},
                                      {"error", success_error_}})
    sample(out, "vllm:request_success_total",
           fmt::format("engine=\"0\",finished_reason=\"{}\",{}", reason, m), double(count));
  histogram(out, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", m,
            prompt_len_);
  histogram(out, "vllm:request_generation_tokens", "Number of generation tokens processed.", m,
            generation_len_);
  histogram(out, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
            m, Histogram(g.step_token_bounds, g.step_token_counts, g.steps, g.step_tokens));
  histogram(out, "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.", m, max_generation_);
  histogram(out, "vllm:request_params_n", "Histogram of the n request parameter.", m, n_);
  histogram(out, "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
            m, max_tokens_);
  histogram(out, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            m, ttft_);
  histogram(out, "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.DEPRECATED: Use "
            "vllm:inter_token_latency_seconds instead.",
            m, tpot_);
  histogram(out, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            m, itl_);
  histogram(out, "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.", m, request_tpot_);
  histogram(out, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            m, e2e_);
  histogram(out, "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.", m, queue_);
  histogram(out, "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.", m, inference_);
  histogram(out, "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.", m, prefill_);
  histogram(out, "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.", m, decode_);
  return out;
}

}  // namespace troupe::openai
