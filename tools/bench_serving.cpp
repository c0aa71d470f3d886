// troupe bench serving: load on any OpenAI-compatible server, in the manner of
// `vllm bench serve`.
//
//   troupe bench serving --base-url http://127.0.0.1:8000 --dataset-name random
//       --random-input-len 128 --random-output-len 128 --num-prompts 200
//       --request-rate 8 [--max-concurrency 64] [--goodput ttft:500 tpot:50]
//       [--metric-percentiles 50,90,99] [--save-result --result-filename out.json]
//
// Requests stream (/v1/completions, or /v1/chat/completions with --backend openai-chat) with
// stream_options.include_usage, so output tokens are the server's own count. Arrivals are a
// gamma process at --request-rate (burstiness 1: Poisson; inf: all at once), optionally capped
// at --max-concurrency in flight. TTFT is the time to the first streamed text, ITL the gaps
// between later chunks, TPOT (latency - TTFT) / (output tokens - 1), E2EL the whole request;
// goodput counts the requests within every SLO given. A table is printed and, with
// --save-result, the numbers and per-request lists are written as JSON.
//
// Random prompts are token ids (exact lengths, no tokenizer round trip) for completions and
// their decoded text for chat; ShareGPT prompts are the first human turn of each conversation,
// with the first reply's token count as the output length (vLLM's filters: prompt and reply
// at least 4 tokens, prompt at most 1024, both at most 2048).
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include "actors/engine.hpp"
#include "runtime/error.hpp"
#include "runtime/tokenizer/tokenizer.hpp"
#include "tools/commands.hpp"
#include "transport/http/http_client.hpp"

namespace troupe::cli {

namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

struct ServingOptions {
  std::string backend = "openai";  // openai (/v1/completions) | openai-chat
  std::string base_url;            // http://host:port; else --host and --port
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint;   // default by backend
  std::string model;      // default: the server's first model
  std::string tokenizer;  // sharegpt lengths, chat prompts, vocabulary; default: embedded model
  std::string dataset_name = "random";
  std::string dataset_path;
  int num_prompts = 1000;
  int random_input_len = 1024;
  int random_output_len = 128;
  double random_range_ratio = 0.0;
  int random_prefix_len = 0;
  int sharegpt_output_len = 0;  // 0: the dataset's
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  int max_concurrency = 0;  // 0: no cap
  int num_warmups = 0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  double temperature = 0.0;
  std::string percentile_metrics = "ttft,tpot,itl";
  std::string metric_percentiles = "99";
  std::vector<std::string> goodput;
  bool save_result = false;
  std::string result_dir;
  std::string result_filename;
  double request_timeout_s = 21600;
};

struct Sample {
  json prompt;  // text or token ids
  int prompt_len = 0;
  int output_len = 0;
};

struct Result {
  bool success = false;
  std::string error;
  double ttft = 0, latency = 0;
  std::vector<double> itl;
  int output_tokens = 0;
  int prompt_len = 0;
};

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

double stdev(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / double(v.size()));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// ---- datasets ----

std::vector<Sample> random_dataset(const ServingOptions& o, const Tokenizer* tok, bool text) {
  std::mt19937_64 rng(o.seed);
  const int32_t vocab = tok ? tok->vocab_size() : 4096;
  // Ordinary tokens from the lower part of the vocabulary (past the usual special ids).
  std::uniform_int_distribution<int32_t> id(10, std::max<int32_t>(11, std::min(vocab - 1, 30000)));
  auto range = [&](int len) {
    const int lo = std::max(1, int(std::floor(len * (1.0 - o.random_range_ratio))));
    const int hi = std::max(lo, int(std::ceil(len * (1.0 + o.random_range_ratio))));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::vector<int32_t> prefix(size_t(o.random_prefix_len));
  for (auto& t : prefix) t = id(rng);
  std::vector<Sample> out;
  for (int i = 0; i < o.num_prompts; ++i) {
    std::vector<int32_t> ids = prefix;
    const int len = range(o.random_input_len);
    for (int k = 0; k < len; ++k) ids.push_back(id(rng));
    Sample s;
    s.prompt_len = int(ids.size());
    s.output_len = range(o.random_output_len);
    if (text) {
      if (!tok) fail("--backend openai-chat: random prompts need a tokenizer (--tokenizer DIR)");
      s.prompt = tok->decode(ids, true);
    } else {
      s.prompt = ids;
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Sample> sharegpt_dataset(const ServingOptions& o, const Tokenizer& tok) {
  if (o.dataset_path.empty())
    fail("--dataset-name sharegpt: give the JSON file with --dataset-path");
  std::ifstream in(o.dataset_path);
  if (!in) fail("--dataset-path {}: cannot open the file", o.dataset_path);
  json data;
  try {
    data = json::parse(in);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
    fail("--dataset-path {}: not JSON ({})", o.dataset_path, e.what());
  }
  if (!data.is_array())
    fail("--dataset-path {}: expected a JSON list of conversations", o.dataset_path);
  std::vector<const json*> convs;
  for (const auto& d : data)
    if (d.is_object() && d.contains("conversations") && d["conversations"].is_array() &&
        d["conversations"].size() >= 2)
      convs.push_back(&d);
  std::mt19937_64 rng(o.seed);
  std::shuffle(convs.begin(), convs.end(), rng);
  std::vector<Sample> out;
  for (const json* d : convs) {
    if (int(out.size()) >= o.num_prompts) break;
    const auto& c = (*d)["conversations"];
    if (!c[0].contains("value") || !c[1].contains("value") || !c[0]["value"].is_string() ||
        !c[1]["value"].is_string())
      continue;
    const std::string prompt = c[0]["value"].get<std::string>();
    const auto prompt_ids = tok.encode(prompt);
    const int reply_len = int(tok.encode(c[1]["value"].get<std::string>()).size());
    const int output_len = o.sharegpt_output_len > 0 ? o.sharegpt_output_len : reply_len;
    const int plen = int(prompt_ids.size());
    if (plen < 4 || (o.sharegpt_output_len == 0 && output_len < 4)) continue;
    if (plen > 1024 || plen + output_len > 2048) continue;
    out.push_back(Sample{prompt, plen, output_len});
  }
  if (out.empty()) fail("--dataset-path {}: no usable conversation", o.dataset_path);
  if (int(out.size()) < o.num_prompts)
    spdlog::warn("bench serving: {} prompts asked for, the dataset gives {}", o.num_prompts,
                 out.size());
  return out;
}

// ---- the load ----

/// The client's threads (each an http::Client): request i goes to thread i % threads. With one,
/// a burst of 500 requests reached the server over ~150 ms of connecting and writing them one
/// after another (2026-12-06, H100 hosts: server / offline 0.970-0.976 at 500 prompts with
/// one, 0.986-1.001 with four), a delay the server was charged for.
int client_threads() {
  return int(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
}

struct Run {
  std::vector<std::unique_ptr<http::Client>> clients;
  const ServingOptions& o;
  std::string model;
  std::vector<Sample> samples;
  std::vector<Result> results;  // results[i] is written by request i's client thread alone
  // Guarded by mu (the client threads all take arrivals and completions):
  std::deque<size_t> queue;  // arrived, waiting for a concurrency slot
  int in_flight = 0;
  size_t done = 0;
  std::mutex mu;
  std::condition_variable cv;
  Clock::time_point start;

  Run(const ServingOptions& opts, const std::string& host, uint16_t port) : o(opts) {
    for (int t = 0; t < client_threads(); ++t)
      clients.push_back(std::make_unique<http::Client>(host, port));
  }
  // The client threads end before the state their handlers touch.
  ~Run() { clients.clear(); }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  std::string body(const Sample& s) const {
    json b;
    b["model"] = model;
    if (o.backend == "openai-chat") {
      b["messages"] = json::array({json{{"role", "user"}, {"content", s.prompt}}});
      b["max_completion_tokens"] = s.output_len;
    } else {
      b["prompt"] = s.prompt;
      b["max_tokens"] = s.output_len;
    }
    b["temperature"] = o.temperature;
    b["stream"] = true;
    b["stream_options"] = json{{"include_usage", true}};
    if (o.ignore_eos) b["ignore_eos"] = true;
    // Prompts of token ids may go to a server with no tokenizer (--skip-tokenizer-init), whose
    // chunks carry no text: their token ids then say when each token came.
    if (s.prompt.is_array()) b["return_token_ids"] = true;
    return b.dump();
  }

  /// Sends sample `i` on its client thread (mu held).
  void send(size_t i) {
    ++in_flight;
    struct State {
      Clock::time_point sent;
      std::optional<Clock::time_point> last;
      std::string pending;  // a partial SSE line
      Result r;
    };
    auto st = std::make_shared<State>();
    st->sent = Clock::now();
    st->r.prompt_len = samples[i].prompt_len;
    http::ClientRequest req;
    req.target = o.endpoint;
    req.body = body(samples[i]);
    req.timeout = std::chrono::milliseconds(int64_t(o.request_timeout_s * 1000));
    const bool chat = o.backend == "openai-chat";
    http::ClientEvents ev;
    ev.on_data = [st, chat](std::string_view data) {
      st->pending.append(data);
      size_t pos;
      while ((pos = st->pending.find("\n\n")) != std::string::npos) {
        const std::string event = st->pending.substr(0, pos);
        st->pending.erase(0, pos + 2);
        if (event.rfind("data: ", 0) != 0) continue;
        const std::string payload = event.substr(6);
        if (payload == "[DONE]") continue;
        const auto now = Clock::now();
        json j = json::parse(payload, nullptr, false);
        if (j.is_discarded()) continue;
        if (j.contains("error")) {
          st->r.error = j["error"].value("message", std::string("error event"));
          continue;
        }
        if (j.contains("usage") && j["usage"].is_object())
          st->r.output_tokens = j["usage"].value("completion_tokens", 0);
        if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) continue;
        const auto& c = j["choices"][0];
        std::string text;
        if (chat && c.contains("delta") && c["delta"].contains("content") &&
            c["delta"]["content"].is_string())
          text = c["delta"]["content"].get<std::string>();
        else if (!chat && c.contains("text") && c["text"].is_string())
          text = c["text"].get<std::string>();
        const bool ids = c.contains("token_ids") && c["token_ids"].is_array() &&
                         !c["token_ids"].empty();
        if (text.empty() && !ids) continue;
        const double t = std::chrono::duration<double>(now - st->sent).count();
        if (!st->last)
          st->r.ttft = t;
        else
          st->r.itl.push_back(std::chrono::duration<double>(now - *st->last).count());
        st->last = now;
      }
    };
    ev.on_done = [this, st, i](int status, const std::string& error) {
      st->r.latency = std::chrono::duration<double>(Clock::now() - st->sent).count();
      if (!error.empty())
        st->r.error = error;
      else if (status != 200 && st->r.error.empty())
        st->r.error = "HTTP " + std::to_string(status);
      if (st->r.error.empty() && !st->last) st->r.error = "no text (or token ids) streamed";
      st->r.success = st->r.error.empty();
      results[i] = std::move(st->r);
      finished_one();
    };
    clients[i % clients.size()]->send(std::move(req), std::move(ev));
  }

  void finished_one() {
    std::lock_guard lock(mu);
    ++done;
    --in_flight;
    pump();
    cv.notify_all();  // under mu: the waiter cannot return (and destroy the Run) before we leave
  }

  /// Starts queued requests while a concurrency slot is free (mu held).
  void pump() {
    while (!queue.empty() && (o.max_concurrency <= 0 || in_flight < o.max_concurrency)) {
      const size_t i = queue.front();
      queue.pop_front();
      send(i);
    }
  }

  /// Runs every sample with the arrival process; returns the duration in seconds.
  double go() {
    results.assign(samples.size(), Result{});
    std::mt19937_64 rng(o.seed);
    std::vector<double> offsets(samples.size(), 0.0);
    if (std::isfinite(o.request_rate)) {
      // vLLM: gamma intervals with shape = burstiness, mean 1 / rate.
      std::gamma_distribution<double> gap(o.burstiness, 1.0 / (o.request_rate * o.burstiness));
      double t = 0;
      for (size_t i = 0; i < samples.size(); ++i) {
        offsets[i] = t;
        t += gap(rng);
      }
    }
    start = Clock::now();
    for (size_t i = 0; i < samples.size(); ++i) {
      clients[i % clients.size()]->post_after(std::chrono::nanoseconds(int64_t(offsets[i] * 1e9)),
                                              [this, i] {
                                                std::lock_guard lock(mu);
                                                queue.push_back(i);
                                                pump();
                                              });
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done == samples.size(); });
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
};

std::pair<std::string, uint16_t> server_address(const ServingOptions& o) {
  if (o.base_url.empty()) return {o.host, uint16_t(o.port)};
  std::string u = o.base_url;
  if (u.rfind("http://", 0) == 0)
    u = u.substr(7);
  else if (u.find("://") != std::string::npos)
    fail("--base-url {}: only http:// is supported", o.base_url);
  u = u.substr(0, u.find('/'));
  const auto colon = u.rfind(':');
  if (colon == std::string::npos) return {u, 80};
  return {u.substr(0, colon), uint16_t(std::stoi(u.substr(colon + 1)))};
}

/// GET /v1/models' first id.
std::string first_model(http::Client& client) {
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::string body, err;
  int code = 0;
  http::ClientRequest req;
  req.method = "GET";
  req.target = "/v1/models";
  req.timeout = std::chrono::seconds(30);
  http::ClientEvents ev;
  ev.on_data = [&](std::string_view d) { body.append(d); };
  ev.on_done = [&](int status, const std::string& e) {
    std::lock_guard lock(mu);
    code = status;
    err = e;
    finished = true;
    cv.notify_all();
  };
  client.send(std::move(req), std::move(ev));
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return finished; });
  if (!err.empty() || code != 200)
    fail("GET /v1/models: {}", err.empty() ? "HTTP " + std::to_string(code) : err);
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || j["data"].empty())
    fail("GET /v1/models: no model in the answer");
  return j["data"][0].value("id", std::string());
}

int run_serving(const ServingOptions& o0) {
  ServingOptions o = o0;
  if (o.backend != "openai" && o.backend != "openai-chat")
    fail("--backend {}: allowed: openai (completions) or openai-chat", o.backend);
  if (o.endpoint.empty())
    o.endpoint = o.backend == "openai" ? "/v1/completions" : "/v1/chat/completions";
  std::shared_ptr<const Tokenizer> tok;
  const std::string tok_dir = o.tokenizer.empty() ? default_model_dir() : o.tokenizer;
  try {
    tok = Tokenizer::load(tok_dir);
  } catch (const std::exception& e) {
    if (o.dataset_name == "sharegpt" || o.backend == "openai-chat" || !o.tokenizer.empty()) throw;
    spdlog::warn("bench serving: no tokenizer at {} ({}); random token ids < 4096", tok_dir,
                 e.what());
  }
  std::vector<Sample> samples;
  if (o.dataset_name == "random")
    samples = random_dataset(o, tok.get(), o.backend == "openai-chat");
  else if (o.dataset_name == "sharegpt")
    samples = sharegpt_dataset(o, *tok);
  else
    fail("--dataset-name {}: allowed: random or sharegpt", o.dataset_name);

  auto [host, port] = server_address(o);
  Run run(o, host, port);
  run.model = o.model.empty() ? first_model(*run.clients.front()) : o.model;
  if (o.num_warmups > 0) {
    ServingOptions w = o;
    w.request_rate = std::numeric_limits<double>::infinity();
    Run warm(w, host, port);
    warm.model = run.model;
    for (int i = 0; i < o.num_warmups; ++i)
      warm.samples.push_back(samples[size_t(i) % samples.size()]);
    (void)warm.go();
  }
  run.samples = samples;
  std::printf(
      "bench serving: %zu requests to %s:%u%s, model %s, request rate %s, burstiness %.1f, "
      "max concurrency %s\n",
      samples.size(), host.c_str(), unsigned(port), o.endpoint.c_str(), run.model.c_str(),
      std::isfinite(o.request_rate) ? std::to_string(o.request_rate).c_str() : "inf", o.burstiness,
      o.max_concurrency > 0 ? std::to_string(o.max_concurrency).c_str() : "none");
  std::fflush(stdout);
  const double duration = run.go();

  // ---- metrics ----
  std::vector<double> ttfts, tpots, itls, e2els;
  size_t completed = 0, in_tokens = 0, out_tokens = 0, good = 0;
  std::vector<std::string> errors;
  std::map<std::string, double> slo;  // ms
  for (const auto& g : o.goodput) {
    const auto colon = g.find(':');
    if (colon == std::string::npos) fail("--goodput {}: expected METRIC:MS (ttft, tpot, e2el)", g);
    const std::string m = g.substr(0, colon);
    if (m != "ttft" && m != "tpot" && m != "e2el")
      fail("--goodput {}: metric must be ttft, tpot or e2el", g);
    slo[m] = std::stod(g.substr(colon + 1));
  }
  for (const auto& r : run.results) {
    errors.push_back(r.error);
    if (!r.success) continue;
    ++completed;
    in_tokens += size_t(r.prompt_len);
    out_tokens += size_t(r.output_tokens);
    ttfts.push_back(r.ttft);
    e2els.push_back(r.latency);
    const double tpot = r.output_tokens > 1 ? (r.latency - r.ttft) / (r.output_tokens - 1) : 0.0;
    if (r.output_tokens > 1) tpots.push_back(tpot);
    itls.insert(itls.end(), r.itl.begin(), r.itl.end());
    bool ok = true;
    if (slo.contains("ttft") && r.ttft * 1e3 > slo["ttft"]) ok = false;
    if (slo.contains("tpot") && tpot * 1e3 > slo["tpot"]) ok = false;
    if (slo.contains("e2el") && r.latency * 1e3 > slo["e2el"]) ok = false;
    good += ok;
  }
  const auto metrics = split(o.percentile_metrics, ',');
  std::vector<double> pcts;
  for (const auto& p : split(o.metric_percentiles, ',')) pcts.push_back(std::stod(p));

  ojson j;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", std::localtime(&now));
  j["date"] = date;
  j["backend"] = o.backend;
  j["model_id"] = run.model;
  j["tokenizer_id"] = tok_dir;
  j["num_prompts"] = samples.size();
  j["request_rate"] = std::isfinite(o.request_rate) ? ojson(o.request_rate) : ojson("inf");
  j["burstiness"] = o.burstiness;
  j["max_concurrency"] = o.max_concurrency > 0 ? ojson(o.max_concurrency) : ojson(nullptr);
  j["duration"] = duration;
  j["completed"] = completed;
  j["failed"] = samples.size() - completed;
  j["total_input_tokens"] = in_tokens;
  j["total_output_tokens"] = out_tokens;
  j["request_throughput"] = double(completed) / duration;
  j["request_goodput"] = slo.empty() ? ojson(nullptr) : ojson(double(good) / duration);
  j["output_throughput"] = double(out_tokens) / duration;
  j["total_token_throughput"] = double(in_tokens + out_tokens) / duration;

  std::printf("============ Serving Benchmark Result ============\n");
  std::printf("%-40s %-10zu\n", "Successful requests:", completed);
  std::printf("%-40s %-10zu\n", "Failed requests:", samples.size() - completed);
  std::printf("%-40s %-10.2f\n", "Benchmark duration (s):", duration);
  std::printf("%-40s %-10zu\n", "Total input tokens:", in_tokens);
  std::printf("%-40s %-10zu\n", "Total generated tokens:", out_tokens);
  std::printf("%-40s %-10.2f\n", "Request throughput (req/s):", double(completed) / duration);
  if (!slo.empty())
    std::printf("%-40s %-10.2f\n", "Request goodput (req/s):", double(good) / duration);
  std::printf("%-40s %-10.2f\n", "Output token throughput (tok/s):", double(out_tokens) / duration);
  std::printf("%-40s %-10.2f\n",
              "Total Token throughput (tok/s):", double(in_tokens + out_tokens) / duration);
  const auto section = [&](const std::string& key, const char* title, const char* label,
                           const std::vector<double>& values) {
    if (std::find(metrics.begin(), metrics.end(), key) == metrics.end()) return;
    std::printf("%s\n", title);
    std::printf("%-40s %-10.2f\n", ("Mean " + std::string(label) + " (ms):").c_str(),
                mean(values) * 1e3);
    std::printf("%-40s %-10.2f\n", ("Median " + std::string(label) + " (ms):").c_str(),
                percentile(values, 50) * 1e3);
    j["mean_" + key + "_ms"] = mean(values) * 1e3;
    j["median_" + key + "_ms"] = percentile(values, 50) * 1e3;
    j["std_" + key + "_ms"] = stdev(values) * 1e3;
    for (double p : pcts) {
      std::string name = p == std::floor(p) ? std::to_string(int(p)) : std::to_string(p);
      std::printf("%-40s %-10.2f\n", ("P" + name + " " + label + " (ms):").c_str(),
                  percentile(values, p) * 1e3);
      j["p" + name + "_" + key + "_ms"] = percentile(values, p) * 1e3;
    }
  };
  section("ttft", "---------------Time to First Token----------------", "TTFT", ttfts);
  section("tpot", "-----Time per Output Token (excl. 1st token)------", "TPOT", tpots);
  section("itl", "---------------Inter-token Latency----------------", "ITL", itls);
  section("e2el", "----------------End-to-end Latency----------------", "E2EL", e2els);
  std::printf("==================================================\n");

  ojson input_lens = ojson::array(), output_lens = ojson::array(), ttft_list = ojson::array(),
        itl_list = ojson::array();
  for (const auto& r : run.results) {
    input_lens.push_back(r.prompt_len);
    output_lens.push_back(r.output_tokens);
    ttft_list.push_back(r.ttft);
    itl_list.push_back(r.itl);
  }
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::move(output_lens);
  j["ttfts"] = std::move(ttft_list);
  j["itls"] = std::move(itl_list);
  j["errors"] = errors;
  if (o.save_result) {
    std::string file = o.result_filename;
    if (file.empty())
      file = fmt::format("{}-{}qps-{}.json", o.backend, j["request_rate"].dump(), date);
    if (!o.result_dir.empty()) file = o.result_dir + "/" + file;
    std::ofstream out(file);
    if (!out) fail("--result-filename {}: cannot open the file for writing", file);
    out << j.dump(2) << "\n";
  }
  for (const auto& e : errors)
    if (!e.empty()) {
      spdlog::warn("bench serving: {} requests failed; the first: {}", samples.size() - completed,
                   e);
      break;
    }
  return completed == samples.size() ? 0 : 1;
}

}  // namespace

Runner add_bench_serving(CLI::App& sub) {
  auto o = std::make_shared<ServingOptions>();
  const char* g = "Benchmark";
  sub.add_option("--backend", o->backend,
                 "openai (/v1/completions) or openai-chat (/v1/chat/completions)")
      ->capture_default_str()
      ->group(g);
  sub.add_option("--base-url", o->base_url,
                 "the server, http://HOST:PORT (instead of --host and --port)")
      ->group(g);
  sub.add_option("--host", o->host, "server host")->capture_default_str()->group(g);
  sub.add_option("--port", o->port, "server port")->capture_default_str()->group(g);
  sub.add_option("--endpoint", o->endpoint, "API path; default by --backend")->group(g);
  sub.add_option("--model", o->model, "model name in the requests; default: the server's first")
      ->group(g);
  sub.add_option(
         "--tokenizer", o->tokenizer,
         "tokenizer directory (sharegpt lengths, chat prompts); default: the embedded model")
      ->group(g);
  sub.add_option("--dataset-name", o->dataset_name, "random or sharegpt")
      ->capture_default_str()
      ->group(g);
  sub.add_option("--dataset-path", o->dataset_path, "the ShareGPT JSON file")->group(g);
  sub.add_option("--num-prompts", o->num_prompts, "requests")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(g);
  sub.add_option("--random-input-len", o->random_input_len, "random: prompt tokens")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(g);
  sub.add_option("--random-output-len", o->random_output_len, "random: output tokens")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(g);
  sub.add_option("--random-range-ratio", o->random_range_ratio,
                 "random: lengths vary by this fraction either way")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str()
      ->group(g);
  sub.add_option("--random-prefix-len", o->random_prefix_len,
                 "random: tokens of a prefix every prompt shares")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(g);
  sub.add_option("--sharegpt-output-len", o->sharegpt_output_len,
                 "sharegpt: output tokens instead of the reply's")
      ->check(CLI::NonNegativeNumber)
      ->group(g);
  sub.add_option("--request-rate", o->request_rate, "requests per second (inf: all at once)")
      ->capture_default_str()
      ->group(g);
  sub.add_option("--burstiness", o->burstiness, "gamma shape of the arrivals (1: Poisson)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(g);
  sub.add_option("--max-concurrency", o->max_concurrency, "most requests in flight (0: no cap)")
      ->check(CLI::NonNegativeNumber)
      ->group(g);
  sub.add_option("--num-warmups", o->num_warmups, "untimed requests first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str()
      ->group(g);
  sub.add_option("--seed", o->seed, "seed of the prompts and arrivals")
      ->capture_default_str()
      ->group(g);
  sub.add_flag("--ignore-eos", o->ignore_eos, "generate every requested token")->group(g);
  sub.add_option("--temperature", o->temperature, "sampling temperature of the requests")
      ->capture_default_str()
      ->group(g);
  sub.add_option("--percentile-metrics", o->percentile_metrics,
                 "metrics with percentiles: ttft, tpot, itl, e2el")
      ->capture_default_str()
      ->group(g);
  sub.add_option("--metric-percentiles", o->metric_percentiles, "percentiles, e.g. 50,90,99")
      ->capture_default_str()
      ->group(g);
  sub.add_option("--goodput", o->goodput, "SLOs METRIC:MS (ttft, tpot, e2el), several allowed")
      ->group(g);
  sub.add_flag("--save-result", o->save_result, "write the results as JSON")->group(g);
  sub.add_option("--result-dir", o->result_dir, "directory of the JSON")->group(g);
  sub.add_option("--result-filename", o->result_filename, "file name of the JSON")->group(g);
  sub.add_option("--request-timeout", o->request_timeout_s, "seconds one request may take")
      ->capture_default_str()
      ->group(g);
  return [o] { return run_serving(*o); };
}

}  // namespace troupe::cli
