// troupe bench latency|throughput: vLLM's offline benchmarks, on random token-id prompts
// (`troupe bench serving`, the online one, is in bench_serving.cpp).
//
//   troupe bench latency    --input-len 32 --output-len 128 --batch-size 8 [engine flags]
//   troupe bench throughput --input-len 1000 --output-len 1000 --num-prompts 1000 [engine flags]
//   troupe bench throughput --prefix-len 512 --input-len 32 --output-len 1 --num-prompts 64
//       --prompt-logprobs 0     (a scoring workload: a shared prefix, prompt logprobs on)
//
// Both print a table and, with --output-json FILE, write the numbers as JSON. Prompts are
// random token ids (so --load-format dummy checkpoints without a tokenizer work), generation
// ignores EOS so every request produces exactly --output-len tokens, and sampling is plain
// (temperature 1, no top-k/top-p), as in vLLM's benchmarks.
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "actors/engine.hpp"
#include "actors/llm.hpp"
#include "runtime/checkpoint/model_config.hpp"
#include "runtime/error.hpp"
#include "runtime/exec/memory_fit.hpp"
#include "tools/cli_args.hpp"
#include "tools/commands.hpp"

namespace troupe::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  int input_len = 32;
  int output_len = 128;
  int batch_size = 8;     // latency
  int num_prompts = 1000; // throughput
  int prefix_len = 0;     // throughput: random tokens every prompt starts with (vLLM's)
  int prompt_logprobs = -1;  // throughput: prompt_logprobs of every request (-1: none)
  int num_iters_warmup = 2;
  int num_iters = 5;
  uint64_t seed = 0;
  std::string output_json;
  bool disable_detokenize = false;  // vLLM's --disable-detokenize: outputs stay token ids
};

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// The step loop's host-side time per step between two scheduler snapshots: printed, and
/// returned as JSON (milliseconds per step). A step's wall time is its round trip plus the
/// scheduler's planning and bookkeeping; the executor's own time includes waiting for the GPU.
nlohmann::ordered_json step_breakdown(const SchedulerStats& a, const SchedulerStats& b) {
  nlohmann::ordered_json j;
  const auto steps = b.timed_steps - a.timed_steps;
  j["steps"] = steps;
  if (steps == 0) return j;
  const double ms = 1e3 / double(steps);
  j["planning_ms"] = (b.plan_seconds - a.plan_seconds) * ms;
  j["executor_round_trip_ms"] = (b.round_trip_seconds - a.round_trip_seconds) * ms;
  j["inside_executor_ms"] = (b.executor_seconds - a.executor_seconds) * ms;
  j["applying_results_ms"] = (b.apply_seconds - a.apply_seconds) * ms;
  j["steps_planned_ahead"] = b.steps_planned_ahead - a.steps_planned_ahead;
  std::printf("  %-34s %10llu\n", "steps", static_cast<unsigned long long>(steps));
  std::printf("  %-34s %10.3f ms\n", "per step: planning", j["planning_ms"].get<double>());
  std::printf("  %-34s %10.3f ms\n", "per step: executor round trip",
              j["executor_round_trip_ms"].get<double>());
  std::printf("  %-34s %10.3f ms\n", "per step: inside the executor",
              j["inside_executor_ms"].get<double>());
  std::printf("  %-34s %10.3f ms\n", "per step: applying results",
              j["applying_results_ms"].get<double>());
  std::printf("  %-34s %10llu\n", "steps planned ahead (async)",
              static_cast<unsigned long long>(j["steps_planned_ahead"].get<uint64_t>()));
  // Where the time goes by kind of step: each step from when it was sent, or from when the
  // step before it returned if that is later (steps in flight together, as with async
  // scheduling or a step of releases only, are not counted twice): the GPU's time plus the
  // messages.
  const auto kind = [&](const char* name, uint64_t n, uint64_t tokens, double secs) {
    nlohmann::ordered_json k;
    k["steps"] = n;
    k["seconds"] = secs;
    k["tokens_per_step"] = n == 0 ? 0.0 : double(tokens) / double(n);
    k["ms_per_step"] = n == 0 ? 0.0 : 1e3 * secs / double(n);
    std::printf("  %-34s %10llu steps, %8.3f s, %8.1f tokens and %7.3f ms per step\n", name,
                static_cast<unsigned long long>(n), secs, k["tokens_per_step"].get<double>(),
                k["ms_per_step"].get<double>());
    return k;
  };
  j["prompt_steps"] = kind("steps with prompt tokens", b.prompt_steps - a.prompt_steps,
                           b.prompt_step_tokens - a.prompt_step_tokens,
                           b.prompt_step_seconds - a.prompt_step_seconds);
  j["decode_steps"] = kind("decode-only steps", b.decode_steps - a.decode_steps,
                           b.decode_step_tokens - a.decode_step_tokens,
                           b.decode_step_seconds - a.decode_step_seconds);
  return j;
}

/// Parameters (for FLOP counts): every weight the model holds (memory_fit's count: embeddings,
/// attention, MLP, norms, biases, Qwen3's head norms).
double parameter_count(const ModelConfig& c) {
  return double(model_parameter_count(c, ParallelRank{}));
}

/// Matrix FLOPs of one forward token at context length `ctx`: 2 per weight (the embedding
/// lookup is free, the lm_head is not) plus attention's QK^T and PV.
double flops_per_token(const ModelConfig& c, double ctx) {
  const double embed = double(c.vocab_size) * double(c.hidden_size);
  const double weights = parameter_count(c) - (c.tie_word_embeddings ? 0.0 : embed);
  const double attn = 4.0 * double(c.num_hidden_layers) * double(c.num_attention_heads) *
                      double(c.head_dim) * ctx;
  return 2.0 * weights + attn;
}

std::vector<Prompt> random_prompts(int count, int len, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  // Ids from the lower part of the vocabulary: ordinary tokens in real tokenizers.
  std::uniform_int_distribution<int32_t> tok(10, std::max<int32_t>(11, std::min(vocab - 1, 30000)));
  std::vector<Prompt> out;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> ids(static_cast<size_t>(len));
    for (auto& t : ids) t = tok(rng);
    out.emplace_back(std::move(ids));
  }
  return out;
}

SamplingParams bench_params(int output_len, bool detokenize, int prompt_logprobs = -1) {
  SamplingParams p;
  if (prompt_logprobs >= 0) p.prompt_logprobs = prompt_logprobs;
  p.temperature = 1.0;
  p.top_p = 1.0;
  p.ignore_eos = true;
  p.max_tokens = output_len;
  p.detokenize = detokenize;
  return p;
}

EngineArgs bench_engine_args(const CLI::App& app) {
  std::vector<std::string> notices;
  EngineArgs args = engine_args_from_cli(app, &notices);
  for (const auto& n : notices) spdlog::warn("{}", n);
  if (args.model.empty()) args.model = default_model_dir();
  // Token-id prompts need no tokenizer: a dummy preset directory has none.
  const auto tok_dir = args.tokenizer ? std::filesystem::path(*args.tokenizer)
                                      : std::filesystem::path(args.model);
  if (!std::filesystem::exists(tok_dir / "tokenizer.json")) args.skip_tokenizer_init = true;
  return args;
}

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  if (path.empty()) return;
  std::ofstream out(path);
  if (!out) fail("--output-json {}: cannot open the file for writing", path);
  out << j.dump(2) << "\n";
}

/// As vLLM's benchmarks: the outputs are detokenized (their cost is in the times) unless
/// --disable-detokenize, or there is no tokenizer (a dummy preset's directory has none).
bool detokenizes(const EngineArgs& args, const BenchOptions& o) {
  return !o.disable_detokenize && !args.skip_tokenizer_init;
}

nlohmann::ordered_json common_json(const LLM& llm, const EngineArgs& args, const ModelConfig& c,
                                   const BenchOptions& o) {
  nlohmann::ordered_json j;
  j["model"] = args.model;
  j["architecture"] = c.architecture;
  j["load_format"] = args.load_format;
  j["backend"] = llm.backend();
  j["parameters"] = parameter_count(c);
  j["input_len"] = o.input_len;
  j["output_len"] = o.output_len;
  j["detokenize"] = detokenizes(args, o);
  return j;
}

int run_latency(const CLI::App& app, const BenchOptions& o) {
  const EngineArgs args = bench_engine_args(app);
  const ModelConfig config = load_model_config(args.model);
  LLM llm(args);
  const auto prompts = random_prompts(o.batch_size, o.input_len, int32_t(config.vocab_size), o.seed);
  auto timed = [&](int output_len) {
    const auto t0 = Clock::now();
    (void)llm.generate(prompts, bench_params(output_len, detokenizes(args, o)),
                       {.use_tqdm = false});
    return seconds(t0, Clock::now());
  };
  for (int i = 0; i < o.num_iters_warmup; ++i) (void)timed(o.output_len);
  std::vector<double> full, prefill;
  const SchedulerStats before = llm.scheduler_stats();
  for (int i = 0; i < o.num_iters; ++i) full.push_back(timed(o.output_len));
  const SchedulerStats after = llm.scheduler_stats();
  for (int i = 0; i < o.num_iters; ++i) prefill.push_back(timed(1));
  const double avg = std::accumulate(full.begin(), full.end(), 0.0) / double(full.size());
  const double avg_prefill =
      std::accumulate(prefill.begin(), prefill.end(), 0.0) / double(prefill.size());
  // Decode time per output token: the difference between a full run and a prefill-only run,
  // over the tokens generated after the first.
  const double tpot = o.output_len > 1 ? (avg - avg_prefill) / double(o.output_len - 1) : 0.0;

  std::printf("bench latency: %s on %s, batch %d, input %d, output %d tokens\n",
              config.architecture.c_str(), llm.backend().c_str(), o.batch_size, o.input_len,
              o.output_len);
  std::printf("  %-34s %10.3f s\n", "avg latency", avg);
  for (double p : {10.0, 25.0, 50.0, 75.0, 90.0, 99.0})
    std::printf("  %-34s %10.3f s\n", ("p" + std::to_string(int(p)) + " latency").c_str(),
                percentile(full, p));
  std::printf("  %-34s %10.3f ms\n", "avg prefill + first token", 1e3 * avg_prefill);
  std::printf("  %-34s %10.3f ms\n", "decode time per output token", 1e3 * tpot);
  const nlohmann::ordered_json per_step = step_breakdown(before, after);

  nlohmann::ordered_json j = common_json(llm, args, config, o);
  j["bench"] = "latency";
  j["batch_size"] = o.batch_size;
  j["avg_latency_s"] = avg;
  j["latencies_s"] = full;
  for (double p : {10.0, 25.0, 50.0, 75.0, 90.0, 99.0})
    j["percentiles_s"][std::to_string(int(p))] = percentile(full, p);
  j["avg_prefill_s"] = avg_prefill;
  j["decode_s_per_token"] = tpot;
  j["per_step"] = per_step;
  write_json(o.output_json, j);
  return 0;
}

int run_throughput(const CLI::App& app, const BenchOptions& o) {
  const EngineArgs args = bench_engine_args(app);
  const ModelConfig config = load_model_config(args.model);
  LLM llm(args);
  const auto vocab = int32_t(config.vocab_size);
  auto prompts = random_prompts(o.num_prompts, o.input_len, vocab, o.seed);
  if (o.prefix_len > 0) {
    // One shared prefix (its own random tokens) before each prompt's random ones.
    const auto prefix = random_prompts(1, o.prefix_len, vocab, o.seed + 1).front().token_ids;
    for (auto& p : prompts) p.token_ids.insert(p.token_ids.begin(), prefix.begin(), prefix.end());
  }
  // A short warm-up so one-time costs (kernel loading, first allocations) stay out; with a
  // shared prefix, on a prompt without it, so that the timed run computes the prefix itself.
  const Prompt warm_up = o.prefix_len > 0
                             ? random_prompts(1, o.input_len, vocab, o.seed + 2).front()
                             : prompts.front();
  (void)llm.generate({warm_up}, bench_params(4, detokenizes(args, o)), {.use_tqdm = false});
  const SchedulerStats before = llm.scheduler_stats();
  const KVStats kv_before = llm.kv_stats();
  const auto t0 = Clock::now();
  const auto outs =
      llm.generate(prompts, bench_params(o.output_len, detokenizes(args, o), o.prompt_logprobs),
                   {.use_tqdm = true});
  const double elapsed = seconds(t0, Clock::now());
  const SchedulerStats after = llm.scheduler_stats();
  const KVStats kv_after = llm.kv_stats();
  // vLLM's prefix cache counters over the timed run: prompt tokens looked up and found.
  const uint64_t queries = kv_after.prefix_queries - kv_before.prefix_queries;
  const uint64_t hits = kv_after.prefix_hits - kv_before.prefix_hits;
  const double hit_rate = queries == 0 ? 0.0 : double(hits) / double(queries);
  uint64_t cached_tokens = 0;
  for (const auto& r : outs) cached_tokens += uint64_t(std::max(r.num_cached_tokens, 0));
  size_t out_tokens = 0, in_tokens = 0;
  for (const auto& r : outs) {
    in_tokens += r.prompt_token_ids.size();
    for (const auto& c : r.outputs) out_tokens += c.token_ids.size();
  }
  // Model FLOPs of all the tokens processed, attention at each token's own context length.
  const double prompt_len = double(o.prefix_len + o.input_len);
  const double avg_ctx_prompt = prompt_len / 2.0;
  const double avg_ctx_output = prompt_len + double(o.output_len) / 2.0;
  const double flops = double(in_tokens) * flops_per_token(config, avg_ctx_prompt) +
                       double(out_tokens) * flops_per_token(config, avg_ctx_output);

  std::printf(
      "bench throughput: %s on %s, %d prompts, input %d (shared prefix %d), output %d "
      "tokens, prompt_logprobs %d, prefix caching %s\n",
      config.architecture.c_str(), llm.backend().c_str(), o.num_prompts, o.prefix_len + o.input_len,
      o.prefix_len, o.output_len, o.prompt_logprobs, args.enable_prefix_caching ? "on" : "off");
  std::printf("  %-34s %10.3f s\n", "elapsed", elapsed);
  std::printf("  %-34s %10.2f\n", "requests/s", double(outs.size()) / elapsed);
  std::printf("  %-34s %10.1f\n", "output tokens/s", double(out_tokens) / elapsed);
  std::printf("  %-34s %10.1f\n", "total tokens/s", double(in_tokens + out_tokens) / elapsed);
  std::printf("  %-34s %10.2f\n", "model TFLOP/s", flops / elapsed / 1e12);
  std::printf("  %-34s %10.4f (%llu of %llu tokens)\n", "prefix cache hit rate", hit_rate,
              static_cast<unsigned long long>(hits), static_cast<unsigned long long>(queries));
  std::printf("  %-34s %10llu\n", "num_cached_tokens (sum)",
              static_cast<unsigned long long>(cached_tokens));
  const nlohmann::ordered_json per_step = step_breakdown(before, after);

  nlohmann::ordered_json j = common_json(llm, args, config, o);
  j["bench"] = "throughput";
  j["num_prompts"] = o.num_prompts;
  j["prefix_len"] = o.prefix_len;
  j["prompt_logprobs"] = o.prompt_logprobs;
  j["enable_prefix_caching"] = args.enable_prefix_caching;
  j["prefix_cache_queries"] = queries;
  j["prefix_cache_hits"] = hits;
  j["prefix_cache_hit_rate"] = hit_rate;
  j["num_cached_tokens"] = cached_tokens;
  j["prompt_logprob_cache_bytes"] = kv_after.prompt_logprob_bytes;
  j["elapsed_s"] = elapsed;
  j["requests_per_s"] = double(outs.size()) / elapsed;
  j["output_tokens_per_s"] = double(out_tokens) / elapsed;
  j["total_tokens_per_s"] = double(in_tokens + out_tokens) / elapsed;
  j["prompt_tokens"] = in_tokens;
  j["output_tokens"] = out_tokens;
  j["model_tflops_per_s"] = flops / elapsed / 1e12;
  j["per_step"] = per_step;
  write_json(o.output_json, j);
  return 0;
}

void add_common(CLI::App& sub, BenchOptions& o) {
  add_engine_args(sub);
  sub.add_option("--input-len", o.input_len, "prompt tokens per request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group("Benchmark");
  sub.add_option("--output-len", o.output_len, "generated tokens per request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group("Benchmark");
  sub.add_option("--bench-seed", o.seed, "seed of the random prompts")
      ->capture_default_str()
      ->group("Benchmark");
  sub.add_option("--output-json", o.output_json, "write the results here as JSON")
      ->group("Benchmark");
  sub.add_flag("--disable-detokenize", o.disable_detokenize,
               "leave the outputs as token ids (vLLM's flag; detokenizing is timed by default)")
      ->group("Benchmark");
}

}  // namespace

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  // numpy's default (linear interpolation), which vLLM's benchmark uses.
  const double idx = p / 100.0 * double(v.size() - 1);
  const auto lo = size_t(idx);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

Runner add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  app.require_subcommand(1);
  auto* lat = app.add_subcommand("latency", "end-to-end latency of one batch");
  add_common(*lat, *o);
  lat->add_option("--batch-size", o->batch_size, "requests in the batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group("Benchmark");
  lat->add_option("--num-iters-warmup", o->num_iters_warmup, "untimed runs first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group("Benchmark");
  lat->add_option("--num-iters", o->num_iters, "timed runs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group("Benchmark");
  auto* thr = app.add_subcommand("throughput", "offline throughput of many requests");
  add_common(*thr, *o);
  thr->add_option("--num-prompts", o->num_prompts, "requests")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group("Benchmark");
  thr->add_option("--prefix-len", o->prefix_len,
                  "random tokens shared by every prompt, before its --input-len own ones")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group("Benchmark");
  thr->add_option("--prompt-logprobs", o->prompt_logprobs,
                  "prompt_logprobs of every request (top-N per prompt token; -1: none)")
      ->check(CLI::Range(-1, 1 << 20))
      ->capture_default_str()
      ->group("Benchmark");
  auto* serving =
      app.add_subcommand("serving", "online serving: load on an OpenAI-compatible server");
  Runner run_serving = add_bench_serving(*serving);
  return [o, lat, thr, serving, run_serving] {
    if (lat->parsed()) return run_latency(*lat, *o);
    if (serving->parsed()) return run_serving();
    return run_throughput(*thr, *o);
  };
}

}  // namespace troupe::cli
