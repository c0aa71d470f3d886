// The server's Prometheus metrics (runtime/openai/metrics): vLLM's names, labels and buckets,
// in the text format prometheus_client writes (the byte-for-byte comparison with
// prometheus_client itself is tests/server/metrics_reference.py, run by the server tests).
#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>

#include "runtime/openai/metrics.hpp"
#include "runtime/sched/scheduler.hpp"

using namespace troupe::openai;
using troupe::StepTokenHistogram;

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

TEST_CASE("metrics: tokens of several steps that arrive together count one latency per step",
          "[openai]") {
  // stream_interval 3: three steps' tokens in one output 0.375 s after the last; vLLM observes
  // each step (0.125 s each), not the output.
  ServingMetrics m("my-model", 512);
  m.record_tokens(0.375, 3, 3);
  const std::string text = m.render(EngineGauges{});
  const std::string l = R"(engine="0",model_name="my-model")";
  for (const std::string name : {"inter_token_latency", "time_per_output_token"}) {
    INFO(name);
    CHECK(has_line(text, "vllm:" + name + "_seconds_count{" + l + "} 3.0"));
    CHECK(has_line(text, "vllm:" + name + "_seconds_sum{" + l + "} " + prom_number(0.375)));
    CHECK(has_line(text, "vllm:" + name +
                             R"(_seconds_bucket{engine="0",le="0.1",model_name="my-model"} 0.0)"));
    CHECK(has_line(text, "vllm:" + name +
                             R"(_seconds_bucket{engine="0",le="0.15",model_name="my-model"} 3.0)"));
  }
  CHECK(has_line(text, "vllm:generation_tokens_total{" + l + "} 3.0"));
}

TEST_CASE("metrics: the exposition has vLLM's names, labels and buckets", "[openai]") {
  ServingMetrics m("my-model", 512);
  m.record_first_token(0.03, 7, 1);
  m.record_tokens(0.02, 1, 1);
  m.record_tokens(0.2, 2, 1);
  FinishedSequence f;
  f.finish_reason = "length";
  f.prompt_tokens = 7;
  f.generation_tokens = 4;
  f.e2e_seconds = 0.4;
  // Queued at 100.0, first scheduled at 100.05, first token at 100.08, last at 100.30.
  set_phases(f, 100.0, 100.05, 100.08, 100.30);
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
  CHECK(has_line(text, "vllm:request_time_per_output_token_seconds_sum{" + l + "} " +
                           prom_number((100.30 - 100.08) / 3)));
  // The phases: vLLM's help texts and request-latency buckets, one observation each.
  const std::vector<std::pair<std::string, std::string>> phases = {
      {"request_queue_time", "WAITING"},
      {"request_inference_time", "RUNNING"},
      {"request_prefill_time", "PREFILL"},
      {"request_decode_time", "DECODE"}};
  for (const auto& [phase, what] : phases) {
    const std::string name = "vllm:" + phase + "_seconds";
    INFO(name);
    CHECK(has_line(
        text, "# HELP " + name + " Histogram of time spent in " + what + " phase for request."));
    CHECK(has_line(text, "# TYPE " + name + " histogram"));
    for (const char* le : {"0.3",   "0.5",   "0.8",   "1.0",    "1.5",    "2.0",  "2.5",  "5.0",
                           "10.0",  "15.0",  "20.0",  "30.0",   "40.0",   "50.0", "60.0", "120.0",
                           "240.0", "480.0", "960.0", "1920.0", "7680.0", "+Inf"})
      CHECK(has_line(text, bucket(name, le) + " 1.0"));
    CHECK(has_line(text, name + "_count{" + l + "} 1.0"));
  }
  CHECK(has_line(text,
                 "vllm:request_queue_time_seconds_sum{" + l + "} " + prom_number(100.05 - 100.0)));
  CHECK(has_line(
      text, "vllm:request_prefill_time_seconds_sum{" + l + "} " + prom_number(100.08 - 100.05)));
  CHECK(has_line(
      text, "vllm:request_decode_time_seconds_sum{" + l + "} " + prom_number(100.30 - 100.08)));
  CHECK(has_line(
      text, "vllm:request_inference_time_seconds_sum{" + l + "} " + prom_number(100.30 - 100.05)));
  // In vLLM's order: e2e, queue, inference, prefill, decode.
  std::vector<size_t> at;
  for (const char* n : {"e2e_request_latency", "request_queue_time", "request_inference_time",
                        "request_prefill_time", "request_decode_time"})
    at.push_back(text.find(std::string("# HELP vllm:") + n + "_seconds "));
  CHECK(std::is_sorted(at.begin(), at.end()));
  CHECK(at.back() != std::string::npos);
}

TEST_CASE("metrics: a phase is observed only when the sequence got that far", "[openai]") {
  ServingMetrics m("m", 64);
  const auto count = [&](const std::string& phase) {
    const std::string text = m.render({});
    const std::string key = "vllm:" + phase + R"(_seconds_count{engine="0",model_name="m"} )";
    const size_t at = text.find(key);
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(at + key.size()));
  };
  // Aborted while waiting: never scheduled, so in no phase (e2e and the finish reason only).
  FinishedSequence waiting;
  waiting.finish_reason = "abort";
  set_phases(waiting, 10.0, std::nullopt, std::nullopt, std::nullopt);
  m.record_finished(waiting);
  CHECK(count("request_queue_time") == 0);
  CHECK(count("e2e_request_latency") == 1);
  // Aborted during its prefill: it waited, and nothing else.
  FinishedSequence prefilling;
  prefilling.finish_reason = "abort";
  set_phases(prefilling, 10.0, 10.5, std::nullopt, std::nullopt);
  CHECK(prefilling.queue_seconds == Approx(0.5));
  CHECK(!prefilling.prefill_seconds);
  m.record_finished(prefilling);
  CHECK(count("request_queue_time") == 1);
  for (const char* phase :
       {"request_prefill_time", "request_decode_time", "request_inference_time"})
    CHECK(count(phase) == 0);
  // One token: prefill only, a decode of 0 (first token = last token).
  FinishedSequence one;
  one.finish_reason = "length";
  one.generation_tokens = 1;
  set_phases(one, 10.0, 10.5, 11.0, 11.0);
  CHECK(*one.decode_seconds == 0.0);
  CHECK(*one.inference_seconds == Approx(0.5));
  m.record_finished(one);
  for (const char* phase : {"request_queue_time", "request_prefill_time", "request_decode_time",
                            "request_inference_time"})
    CHECK(count(phase) == (std::string(phase) == "request_queue_time" ? 2 : 1));
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

TEST_CASE("metrics: tokens per engine step, vLLM's iteration_tokens_total buckets",
          "[openai][sched]") {
  // The scheduler counts each step into the bounds vLLM's logger declares.
  StepTokenHistogram h;
  CHECK(std::vector<uint64_t>(h.kBounds.begin(), h.kBounds.end()) ==
        std::vector<uint64_t>{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384});
  for (uint64_t tokens : {1, 8, 9, 16, 300, 16384, 20000}) h.observe(tokens);
  CHECK(h.count == 7);
  CHECK(h.sum == 1 + 8 + 9 + 16 + 300 + 16384 + 20000);
  CHECK(h.counts[0] == 1);   // le=1: 1
  CHECK(h.counts[1] == 1);   // le=8: 8 (upper-inclusive)
  CHECK(h.counts[2] == 2);   // le=16: 9, 16
  CHECK(h.counts[7] == 1);   // le=512: 300
  CHECK(h.counts[12] == 1);  // le=16384; 20000 only in the count (+Inf)

  ServingMetrics m("my-model", 512);
  EngineGauges g;
  g.step_token_bounds.assign(h.kBounds.begin(), h.kBounds.end());
  g.step_token_counts.assign(h.counts.begin(), h.counts.end());
  g.steps = h.count;
  g.step_tokens = double(h.sum);
  const std::string text = m.render(g);
  const auto bucket = [](const std::string& le) {
    return R"(vllm:iteration_tokens_total_bucket{engine="0",le=")" + le +
           R"(",model_name="my-model"})";
  };
  const std::string l = R"(engine="0",model_name="my-model")";
  CHECK(has_line(text, "# TYPE vllm:iteration_tokens_total histogram"));
  CHECK(has_line(text, bucket("1.0") + " 1.0"));
  CHECK(has_line(text, bucket("8.0") + " 2.0"));
  CHECK(has_line(text, bucket("16.0") + " 4.0"));
  CHECK(has_line(text, bucket("256.0") + " 4.0"));
  CHECK(has_line(text, bucket("512.0") + " 5.0"));
  CHECK(has_line(text, bucket("16384.0") + " 6.0"));
  CHECK(has_line(text, bucket("+Inf") + " 7.0"));
  CHECK(has_line(text, "vllm:iteration_tokens_total_count{" + l + "} 7.0"));
  CHECK(has_line(text, "vllm:iteration_tokens_total_sum{" + l + "} 36718.0"));
}
