// The server's Prometheus metrics (runtime/openai/metrics): vLLM's names, labels and buckets,
// in the text format prometheus_client writes (the byte-for-byte comparison with
// prometheus_client itself is tests/server/metrics_reference.py, run by the server tests).
#include <catch2/catch.hpp>

#include <sstream>

#include "runtime/openai/metrics.hpp"

using namespace troupe::openai;

namespace {
bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l))
    if (l == line) return true;
  return false;
}
}  // namespace

TEST_CASE("metrics: numbers as Python floats", "[openai]") {
  CHECK(prom_number(0) == "0.0");
  CHECK(prom_number(3) == "3.0");
  CHECK(prom_number(0.001) == "0.001");
  CHECK(prom_number(2560) == "2560.0");
  CHECK(prom_number(1e-05) == "1e-05");
  CHECK(prom_number(0.1 + 0.2) == "0.30000000000000004");
  CHECK(prom_number(1.0 / 0.0) == "+Inf");
}

TEST_CASE("metrics: vLLM's 1-2-5 buckets", "[openai]") {
  CHECK(buckets_1_2_5(100) == std::vector<double>{1, 2, 5, 10, 20, 50, 100});
  CHECK(buckets_1_2_5(512) == std::vector<double>{1, 2, 5, 10, 20, 50, 100, 200, 500});
}

TEST_CASE("metrics: histograms are cumulative and upper-inclusive", "[openai]") {
  Histogram h({0.1, 1.0});
  for (double v : {0.05, 0.1, 0.5, 2.0}) h.observe(v);
  CHECK(h.counts() == std::vector<uint64_t>{2, 1});
  CHECK(h.count() == 4);
  CHECK(h.sum() == Approx(2.65));
}

TEST_CASE("metrics: the exposition has vLLM's names, labels and buckets", "[openai]") {
  ServingMetrics m("my-model", 512);
  m.record_first_token(0.03, 7, 1);
  m.record_tokens(0.02, 1);
  m.record_tokens(0.2, 2);
  FinishedSequence f;
  f.finish_reason = "length";
  f.prompt_tokens = 7;
  f.generation_tokens = 4;
  f.e2e_seconds = 0.4;
  f.decode_seconds = 0.22;
  f.max_tokens = 4;
  m.record_finished(f);
  m.record_request(1, 4);
  EngineGauges g;
  g.running = 3;
  g.waiting = 1;
  g.kv_usage = 0.25;
  g.prefix_queries = 100;
  g.prefix_hits = 40;
  g.preemptions = 2;
  const std::string text = m.render(g);
  // Labels sorted by name, as prometheus_client writes them (le between engine and model_name).
  const std::string l = R"(engine="0",model_name="my-model")";
  const auto bucket = [](const std::string& name, const std::string& le) {
    return name + R"(_bucket{engine="0",le=")" + le + R"(",model_name="my-model"})";
  };
  CHECK(has_line(text, "# TYPE vllm:num_requests_running gauge"));
  CHECK(has_line(text, "vllm:num_requests_running{" + l + "} 3.0"));
  CHECK(has_line(text, "vllm:num_requests_waiting{" + l + "} 1.0"));
  CHECK(has_line(text, "vllm:kv_cache_usage_perc{" + l + "} 0.25"));
  CHECK(has_line(text, "vllm:gpu_cache_usage_perc{" + l + "} 0.25"));
  CHECK(has_line(text, "# TYPE vllm:prefix_cache_queries_total counter"));
  CHECK(has_line(text, "vllm:prefix_cache_queries_total{" + l + "} 100.0"));
  CHECK(has_line(text, "vllm:prefix_cache_hits_total{" + l + "} 40.0"));
  CHECK(has_line(text, "vllm:num_preemptions_total{" + l + "} 2.0"));
  CHECK(has_line(text, "vllm:prompt_tokens_total{" + l + "} 7.0"));
  CHECK(has_line(text, "vllm:generation_tokens_total{" + l + "} 4.0"));
  CHECK(has_line(
      text,
      R"(vllm:request_success_total{engine="0",finished_reason="length",model_name="my-model"} 1.0)"));
  CHECK(has_line(
      text,
      R"(vllm:request_success_total{engine="0",finished_reason="stop",model_name="my-model"} 0.0)"));
  // TTFT: vLLM's 22 buckets, 0.03 falls in le=0.04.
  CHECK(has_line(text, "# TYPE vllm:time_to_first_token_seconds histogram"));
  CHECK(has_line(text, bucket("vllm:time_to_first_token_seconds", "0.02") + " 0.0"));
  CHECK(has_line(text, bucket("vllm:time_to_first_token_seconds", "0.04") + " 1.0"));
  CHECK(has_line(text, bucket("vllm:time_to_first_token_seconds", "2560.0") + " 1.0"));
  CHECK(has_line(text, bucket("vllm:time_to_first_token_seconds", "+Inf") + " 1.0"));
  CHECK(has_line(text, "vllm:time_to_first_token_seconds_count{" + l + "} 1.0"));
  CHECK(has_line(text, "vllm:time_to_first_token_seconds_sum{" + l + "} 0.03"));
  // Inter-token latency: one observation per arrival of new tokens.
  CHECK(has_line(text, bucket("vllm:inter_token_latency_seconds", "0.025") + " 1.0"));
  CHECK(has_line(text, bucket("vllm:inter_token_latency_seconds", "0.2") + " 2.0"));
  CHECK(has_line(text, "vllm:inter_token_latency_seconds_count{" + l + "} 2.0"));
  CHECK(has_line(text, "vllm:time_per_output_token_seconds_count{" + l + "} 2.0"));
  CHECK(has_line(text, bucket("vllm:e2e_request_latency_seconds", "0.3") + " 0.0"));
  CHECK(has_line(text, bucket("vllm:e2e_request_latency_seconds", "0.5") + " 1.0"));
  // Token counts: 1-2-5 buckets up to max_model_len.
  CHECK(has_line(text, bucket("vllm:request_prompt_tokens", "5.0") + " 0.0"));
  CHECK(has_line(text, bucket("vllm:request_prompt_tokens", "10.0") + " 1.0"));
  CHECK(has_line(text, bucket("vllm:request_prompt_tokens", "500.0") + " 1.0"));
  CHECK(has_line(text, bucket("vllm:request_params_n", "1.0") + " 1.0"));
  CHECK(has_line(text, "vllm:request_params_max_tokens_sum{" + l + "} 4.0"));
  // decode time / (tokens - 1)
  CHECK(has_line(text,
                 "vllm:request_time_per_output_token_seconds_sum{" + l + "} 0.07333333333333333"));
}

TEST_CASE("metrics: fault recovery counters (troupe's own names)", "[openai][faults]") {
  ServingMetrics m("my-model", 512);
  EngineGauges g;
  g.faults = 3;
  g.recoveries = 2;
  g.sequences_recomputed = 40;
  g.recovery_seconds = 1.25;
  const std::string text = m.render(g);
  const std::string l = R"(engine="0",model_name="my-model")";
  CHECK(has_line(text, "# TYPE troupe:executor_faults_total counter"));
  CHECK(has_line(text, "troupe:executor_faults_total{" + l + "} 3.0"));
  CHECK(has_line(text, "troupe:executor_recoveries_total{" + l + "} 2.0"));
  CHECK(has_line(text, "troupe:sequences_recomputed_total{" + l + "} 40.0"));
  CHECK(has_line(text, "troupe:recovery_seconds_total{" + l + "} 1.25"));
}
