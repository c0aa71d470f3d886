#include "actors/api_server.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "actors/request_sink.hpp"
#include "runtime/chat/chat_template.hpp"
#include "runtime/error.hpp"
#include "runtime/openai/api_error.hpp"
#include "runtime/openai/metrics.hpp"
#include "runtime/openai/responses.hpp"
#include "transport/http/http_server.hpp"

namespace troupe {

namespace {

using Clock = std::chrono::steady_clock;
using ojson = nlohmann::ordered_json;
using openai::ApiError;
using openai::ApiException;

std::string dump(const ojson& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// uuid4().hex's shape: 32 random hex digits.
std::string random_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{:016x}{:016x}", rng(), rng());
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool listed(const std::vector<std::string>& list, const std::string& v) {
  return std::find(list.begin(), list.end(), "*") != list.end() ||
         std::find(list.begin(), list.end(), v) != list.end();
}

}  // namespace

struct ApiServer::Impl : std::enable_shared_from_this<ApiServer::Impl> {
  caf::actor_system& sys;
  Engine& engine;
  engine_actor engine_handle;
  std::shared_ptr<const Tokenizer> tokenizer;
  ApiServerConfig config;
  int64_t max_model_len = 0;
  std::shared_ptr<openai::ServingMetrics> metrics;
  std::unique_ptr<http::Server> http;
  caf::actor watcher;
  std::atomic<bool> ok{true};
  mutable std::mutex mu;
  std::string failure;
  std::set<std::string> logged_fields;  // unknown request fields already logged
  std::shared_ptr<spdlog::logger> access_log;
  std::optional<ChatTemplate> default_template;  // --chat-template, else the tokenizer's
  // The tokenizer's bos_token, eos_token, ...: transformers gives them to every template,
  // also to one passed apart from the tokenizer (--chat-template, a request's chat_template).
  nlohmann::json special_tokens = nlohmann::json::object();

  Impl(caf::actor_system& s, Engine& e, ApiServerConfig c)
      : sys(s),
        engine(e),
        engine_handle(e.handle()),
        tokenizer(e.tokenizer()),
        config(std::move(c)) {
    max_model_len = engine.info().max_model_len;
    metrics =
        std::make_shared<openai::ServingMetrics>(config.served_model_names.front(), max_model_len);
  }

  void mark_failed(const std::string& why) {
    {
      std::lock_guard lock(mu);
      if (!ok) return;
      failure = why;
    }
    ok = false;
    spdlog::error("server: the engine cannot serve any more: {}", why);
  }

  // ---- helpers ----

  void respond_error(const std::shared_ptr<http::Responder>& out, const ApiError& e,
                     const http::Headers& extra) {
    out->respond(e.status, "application/json", openai::error_body(e), extra);
  }

  void respond_json(const std::shared_ptr<http::Responder>& out, const ojson& j,
                    const http::Headers& extra, int status = 200) {
    out->respond(status, "application/json", dump(j), extra);
  }

  void check_model(const std::string& name) const {
    if (name.empty()) return;
    for (const auto& n : config.served_model_names)
      if (n == name) return;
    throw ApiException(
        openai::make_error(404, fmt::format("The model `{}` does not exist.", name), "model"));
  }

  void check_serving() const {
    if (ok) return;
    std::lock_guard lock(mu);
    throw ApiException(openai::make_error(503, "the engine cannot serve: " + failure));
  }

  void note_ignored(const std::vector<std::string>& fields) {
    if (fields.empty()) return;
    std::vector<std::string> fresh;
    {
      std::lock_guard lock(mu);
      for (const auto& f : fields)
        if (logged_fields.insert(f).second) fresh.push_back(f);
    }
    // vLLM accepts and ignores them; said once per field name, not once per request.
    if (!fresh.empty())
      spdlog::warn("The following fields were present in the request but ignored: {}",
                   fmt::join(fresh, ", "));
  }

  const Tokenizer& need_tokenizer(const char* what) const {
    if (!tokenizer)
      openai::bad_request("", fmt::format("{} needs a tokenizer, and this server was started "
                                          "with --skip-tokenizer-init",
                                          what));
    return *tokenizer;
  }

  std::vector<int32_t> encode(const std::string& text, bool add_special, const char* field) const {
    try {
      return need_tokenizer("a text prompt").encode(text, add_special);
    } catch (const ApiException&) {
      throw;
    } catch (const std::exception& e) {
      openai::bad_request(field, fmt::format("{}: {}", field, e.what()));
    }
  }

  std::string decode(const std::vector<int32_t>& ids, const char* field) const {
    try {
      return need_tokenizer("decoding").decode(ids, false);
    } catch (const ApiException&) {
      throw;
    } catch (const std::exception& e) {
      openai::bad_request(field, fmt::format("{}: {}", field, e.what()));
    }
  }

  http::Headers cors_headers(const http::Request& req) const {
    http::Headers h;
    const std::string origin = req.header("origin");
    if (origin.empty() || !listed(config.args.allowed_origins, origin)) return h;
    const bool any = listed(config.args.allowed_origins, "*") && !config.args.allow_credentials;
    h.emplace_back("access-control-allow-origin", any ? "*" : origin);
    if (config.args.allow_credentials) h.emplace_back("access-control-allow-credentials", "true");
    if (!any) h.emplace_back("vary", "Origin");
    return h;
  }

  void preflight(const http::Request& req, const std::shared_ptr<http::Responder>& out) {
    http::Headers h = cors_headers(req);
    const std::string method = req.header("access-control-request-method");
    if (h.empty() || (!method.empty() && !listed(config.args.allowed_methods, method)))
      return out->respond(400, "text/plain", "Disallowed CORS request", {});
    h.emplace_back("access-control-allow-methods",
                   listed(config.args.allowed_methods, "*")
                       ? std::string("DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT")
                       : fmt::format("{}", fmt::join(config.args.allowed_methods, ", ")));
    const std::string asked = req.header("access-control-request-headers");
    if (!asked.empty()) h.emplace_back("access-control-allow-headers", asked);
    h.emplace_back("access-control-max-age", "600");
    out->respond(200, "text/plain", "OK", h);
  }

  bool authorized(const http::Request& req) const {
    if (config.api_keys.empty() || req.path.rfind("/v1", 0) != 0) return true;
    const std::string auth = req.header("authorization");
    for (const auto& key : config.api_keys)
      if (auth == "Bearer " + key) return true;
    return false;
  }

  // ---- routes ----

  void handle(http::Request req, std::shared_ptr<http::Responder> out) {
    http::Headers extra = cors_headers(req);
    try {
      if (req.method == "OPTIONS" && !req.header("access-control-request-method").empty())
        return preflight(req, out);
      if (!authorized(req))
        throw ApiException(openai::make_error(
            401, "Unauthorized: send a valid API key as \"Authorization: Bearer <key>\""));
      if (int64_t(req.headers.size()) > config.args.h11_max_header_count)
        throw ApiException(openai::make_error(431, "too many request headers"));
      route(req, out, extra);
    } catch (const ApiException& e) {
      respond_error(out, e.error(), extra);
    } catch (const std::exception& e) {
      respond_error(out, openai::make_error(500, fmt::format("internal error: {}", e.what())),
                    extra);
    }
  }

  void route(http::Request& req, const std::shared_ptr<http::Responder>& out,
             http::Headers& extra) {
    const std::string& p = req.path;
    const bool get = req.method == "GET" || req.method == "HEAD";
    const bool post = req.method == "POST";
    auto method_not_allowed = [&] {
      throw ApiException(
          openai::make_error(405, fmt::format("{} {}: method not allowed", req.method, p)));
    };
    if (p == "/health" || p == "/ping") {
      if (!(get || (post && p == "/ping"))) method_not_allowed();
      if (ok) return out->respond(200, "", "", extra);
      std::lock_guard lock(mu);
      return respond_error(out, openai::make_error(503, "the engine cannot serve: " + failure),
                           extra);
    }
    if (p == "/version") {
      if (!get) method_not_allowed();
      return respond_json(out, ojson{{"version", config.version}}, extra);
    }
    if (p == "/metrics") {
      if (!get) method_not_allowed();
      return scrape(out, extra);
    }
    if (p == "/v1/models") {
      if (!get) method_not_allowed();
      return models(out, extra);
    }
    if (p == "/tokenize") {
      if (!post) method_not_allowed();
      return tokenize(req, out, extra);
    }
    if (p == "/detokenize") {
      if (!post) method_not_allowed();
      return detokenize(req, out, extra);
    }
    if (p == "/v1/completions") {
      if (!post) method_not_allowed();
      return completions(req, out, std::move(extra));
    }
    if (p == "/v1/chat/completions") {
      if (!post) method_not_allowed();
      return chat(req, out, std::move(extra));
    }
    if (p == "/generate") {
      if (!post) method_not_allowed();
      return plain_generate(req, out, std::move(extra));
    }
    throw ApiException(openai::make_error(404, fmt::format("Not Found: {}", p)));
  }

  void models(const std::shared_ptr<http::Responder>& out, const http::Headers& extra) {
    ojson data = ojson::array();
    const int64_t created = unix_now();
    for (const auto& name : config.served_model_names) {
      ojson perm;
      perm["id"] = "modelperm-" + random_id();
      perm["object"] = "model_permission";
      perm["created"] = created;
      perm["allow_create_engine"] = false;
      perm["allow_sampling"] = true;
      perm["allow_logprobs"] = true;
      perm["allow_search_indices"] = false;
      perm["allow_view"] = true;
      perm["allow_fine_tuning"] = false;
      perm["organization"] = "*";
      perm["group"] = nullptr;
      perm["is_blocking"] = false;
      ojson card;
      card["id"] = name;
      card["object"] = "model";
      card["created"] = created;
      card["owned_by"] = "troupe";
      card["root"] = config.model_root;
      card["parent"] = nullptr;
      card["max_model_len"] = max_model_len;
      card["permission"] = ojson::array({perm});
      data.push_back(std::move(card));
    }
    respond_json(out, ojson{{"object", "list"}, {"data", std::move(data)}}, extra);
  }

  void scrape(const std::shared_ptr<http::Responder>& out, const http::Headers& extra) {
    auto m = metrics;
    sys.spawn([h = engine_handle, out, m, extra](caf::event_based_actor* self) -> caf::behavior {
      const auto reply = [=](const openai::EngineGauges& g) {
        out->respond(200, "text/plain; version=0.0.4; charset=utf-8", m->render(g), extra);
        self->quit();
      };
      self->request(h, std::chrono::seconds(10), stats_atom::value)
          .then(
              [=](const EngineStats& s) {
                openai::EngineGauges g;
                g.running = s.scheduler.num_running;
                g.waiting = s.scheduler.num_waiting;
                g.swapped = s.scheduler.num_swapped;
                g.kv_usage = s.kv.usage;
                if (s.kv.num_cpu_blocks > 0)
                  g.cpu_kv_usage = 1.0 - double(s.kv.num_free_cpu_blocks) / s.kv.num_cpu_blocks;
                g.prefix_queries = s.kv.prefix_queries;
                g.prefix_hits = s.kv.prefix_hits;
                g.preemptions = s.scheduler.num_preemptions;
                g.faults = s.scheduler.faults_seen;
                g.recoveries = s.scheduler.recoveries;
                g.sequences_recomputed = s.scheduler.sequences_recomputed;
                g.recovery_seconds = s.scheduler.recovery_seconds;
                g.rank_moves = s.scheduler.migrations;
                g.kv_blocks_moved =
                    s.scheduler.blocks_migrated + s.scheduler.swap_blocks_migrated;
                g.rank_move_seconds = s.scheduler.migration_seconds;
                const auto& st = s.scheduler.step_tokens;
                g.step_token_bounds.assign(st.kBounds.begin(), st.kBounds.end());
                g.step_token_counts.assign(st.counts.begin(), st.counts.end());
                g.steps = st.count;
                g.step_tokens = double(st.sum);
                reply(g);
              },
              [=](caf::error&) { reply({}); });
      return {[](caf::unit_t) {}};  // stays up until the reply
    });
  }

  /// The prompt's ids after truncate_prompt_tokens (-1: max_model_len).
  void truncate(std::vector<int32_t>& ids, std::optional<int64_t> keep) const {
    if (!keep) return;
    const auto k = size_t(*keep == -1 ? max_model_len : *keep);
    if (ids.size() > k) ids.erase(ids.begin(), ids.end() - long(k));
  }

  /// Checks and the per-prompt max_tokens of one engine request.
  EngineRequest engine_request(const openai::GenerationRequest& r, std::string id,
                               std::string prompt, std::vector<int32_t> ids) const {
    if (ids.empty()) openai::bad_request("prompt", "prompt: empty (at least one token is needed)");
    EngineRequest e;
    e.request_id = std::move(id);
    e.prompt = std::move(prompt);
    e.params = r.params;
    // The request's max_tokens (completions' echo with max_tokens 0 samples one, shown never).
    std::optional<int64_t> asked = r.params.max_tokens;
    e.params.max_tokens = openai::resolve_max_tokens(asked, int64_t(ids.size()), max_model_len,
                                                     config.sampling_defaults.max_tokens);
    e.prompt_token_ids = std::move(ids);
    e.stream = true;  // the sink follows every step (streams, metrics)
    e.output_kind = OutputKind::delta;  // and adds each step's news up itself
    try {
      validate(e.params);
    } catch (const Error& err) {
      throw ApiException(openai::error_from_message(err.what()));
    }
    return e;
  }

  void check_n(const SamplingParams& p) const {
    if (p.n > config.max_num_seqs)
      openai::bad_request("n", fmt::format("n = {}: allowed: <= max_num_seqs ({}) of this server",
                                           p.n, config.max_num_seqs));
    if (p.best_of && *p.best_of > config.max_num_seqs)
      openai::bad_request("best_of",
                          fmt::format("best_of = {}: allowed: <= max_num_seqs ({}) of this server",
                                      *p.best_of, config.max_num_seqs));
  }

  openai::ResponseContext context(const openai::GenerationRequest& r, std::string id) const {
    openai::ResponseContext ctx;
    ctx.id = std::move(id);
    ctx.created = unix_now();
    ctx.model = config.served_model_names.front();
    ctx.tokenizer = tokenizer.get();
    ctx.tokens_as_ids =
        r.return_tokens_as_token_ids.value_or(config.args.return_tokens_as_token_ids);
    // vLLM's should_include_usage.
    if (r.has_stream_options) {
      ctx.include_usage = r.include_usage || config.args.enable_force_include_usage;
      ctx.continuous_usage = ctx.include_usage && r.continuous_usage;
    } else {
      ctx.include_usage = config.args.enable_force_include_usage;
    }
    ctx.response_role = config.args.response_role;
    ctx.prompt_tokens_details = config.args.enable_prompt_tokens_details;
    return ctx;
  }

  void launch(SinkPlan plan, const std::shared_ptr<http::Responder>& out) {
    auto sink = spawn_request_sink(sys, engine_handle, std::move(plan), out, metrics);
    out->on_disconnect([sink] { caf::anon_send(sink, abort_atom::value); });
  }

  void completions(const http::Request& req, const std::shared_ptr<http::Responder>& out,
                   http::Headers extra) {
    auto r = std::make_shared<openai::CompletionRequest>(
        openai::parse_completion_request(openai::parse_body(req.body), config.sampling_defaults));
    check_model(r->model);
    note_ignored(r->ignored_fields);
    check_serving();
    check_n(r->params);
    const std::string base = "cmpl-" + (r->request_id.empty() ? random_id() : r->request_id);
    SinkPlan plan;
    plan.kind = SinkPlan::Kind::completion;
    plan.stream = r->stream;
    plan.arrival = Clock::now();
    plan.max_tokens_param = r->max_tokens;
    for (size_t i = 0; i < r->prompts.size(); ++i) {
      const auto& p = r->prompts[i];
      std::vector<int32_t> ids =
          p.is_tokens ? p.token_ids : encode(p.text, r->add_special_tokens, "prompt");
      truncate(ids, r->truncate_prompt_tokens);
      std::string text = p.is_tokens ? (r->echo ? decode(ids, "prompt") : std::string()) : p.text;
      plan.prompt_texts.push_back(text);
      plan.requests.push_back(
          engine_request(*r, fmt::format("{}-{}", base, i), std::move(text), std::move(ids)));
    }
    plan.ctx = context(*r, base);
    if (config.args.enable_request_id_headers) extra.emplace_back("x-request-id", base);
    plan.extra_headers = std::move(extra);
    plan.log_outputs = config.args.enable_log_outputs && config.log_requests;
    plan.completion = r;
    launch(std::move(plan), out);
  }

  void plain_generate(const http::Request& req, const std::shared_ptr<http::Responder>& out,
                      http::Headers extra) {
    auto r = openai::parse_plain_generate_request(openai::parse_body(req.body));
    check_serving();
    check_n(r.params);
    openai::GenerationRequest g;
    g.params = r.params;
    SinkPlan plan;
    plan.kind = SinkPlan::Kind::generate;
    plan.stream = r.stream;
    plan.arrival = Clock::now();
    plan.max_tokens_param = r.params.max_tokens;
    auto ids = encode(r.prompt, true, "prompt");
    plan.prompt_texts.push_back(r.prompt);
    // /generate keeps SamplingParams' own max_tokens (None: up to max_model_len).
    EngineRequest e;
    e.request_id = random_id();
    e.prompt = r.prompt;
    e.params = r.params;
    e.params.max_tokens = openai::resolve_max_tokens(r.params.max_tokens, int64_t(ids.size()),
                                                     max_model_len, std::nullopt);
    e.prompt_token_ids = std::move(ids);
    e.stream = true;
    e.output_kind = OutputKind::delta;
    plan.requests.push_back(std::move(e));
    plan.ctx = context(g, plan.requests.front().request_id);
    plan.extra_headers = std::move(extra);
    launch(std::move(plan), out);
  }

  /// The chat prompt: the template rendered over the messages.
  std::string render_chat(const openai::ChatRequest& r) {
    nlohmann::json context = special_tokens;
    if (config.args.default_chat_template_kwargs.is_object())
      for (const auto& [k, v] : config.args.default_chat_template_kwargs.items()) context[k] = v;
    for (const auto& [k, v] : r.template_context.items()) context[k] = v;
    if (context.contains("tools") && config.args.exclude_tools_when_tool_choice_none)
      context.erase("tools");
    std::string text;
    try {
      if (r.chat_template) {
        if (!config.args.trust_request_chat_template)
          openai::bad_request("chat_template",
                              "Chat template is passed with request, but "
                              "--trust-request-chat-template is not set. Refused request with "
                              "untrusted chat template.");
        text = ChatTemplate(*r.chat_template).render(r.messages, r.add_generation_prompt, context);
      } else {
        // vLLM's answer when the tokenizer has no template and --chat-template was not given.
        if (!default_template)
          throw ApiException(openai::make_error(
              400,
              "As of transformers v4.44, default chat template is no longer allowed, so you "
              "must provide a chat template if the tokenizer does not define one."));
        text = default_template->render(r.messages, r.add_generation_prompt, context);
      }
    } catch (const ApiException&) {
      throw;
    } catch (const std::exception& e) {
      openai::bad_request("messages", fmt::format("chat template: {}", e.what()));
    }
    if (r.continue_final_message) {
      // transformers' rule: cut after the last occurrence of the final message's content.
      std::string final_content = r.messages.back().value("content", std::string());
      while (!final_content.empty() &&
             std::isspace(static_cast<unsigned char>(final_content.back())))
        final_content.pop_back();
      const size_t at = text.rfind(final_content);
      if (final_content.empty() || at == std::string::npos)
        openai::bad_request("continue_final_message",
                            "continue_final_message is set but the final message does not appear "
                            "in the chat after applying the chat template");
      text.resize(at + final_content.size());
    }
    return text;
  }

  void chat(const http::Request& req, const std::shared_ptr<http::Responder>& out,
            http::Headers extra) {
    auto r = std::make_shared<openai::ChatRequest>(
        openai::parse_chat_request(openai::parse_body(req.body), config.sampling_defaults));
    check_model(r->model);
    note_ignored(r->ignored_fields);
    check_serving();
    check_n(r->params);
    const std::string prompt = render_chat(*r);
    std::vector<int32_t> ids = encode(prompt, r->add_special_tokens, "messages");
    truncate(ids, r->truncate_prompt_tokens);
    const std::string base = "chatcmpl-" + (r->request_id.empty() ? random_id() : r->request_id);
    SinkPlan plan;
    plan.kind = SinkPlan::Kind::chat;
    plan.stream = r->stream;
    plan.arrival = Clock::now();
    plan.max_tokens_param = r->max_tokens;
    plan.requests.push_back(engine_request(*r, base, prompt, std::move(ids)));
    plan.ctx = context(*r, base);
    const std::string role = r->add_generation_prompt
                                 ? config.args.response_role
                                 : r->messages.back().value("role", std::string("assistant"));
    if (r->echo && r->messages.back().value("role", std::string()) == role)
      plan.echo_text = r->messages.back().value("content", std::string());
    if (config.args.enable_request_id_headers) extra.emplace_back("x-request-id", base);
    plan.extra_headers = std::move(extra);
    plan.log_outputs = config.args.enable_log_outputs && config.log_requests;
    plan.chat = r;
    launch(std::move(plan), out);
  }

  void tokenize(const http::Request& req, const std::shared_ptr<http::Responder>& out,
                const http::Headers& extra) {
    const auto r = openai::parse_tokenize_request(openai::parse_body(req.body));
    check_model(r.model);
    note_ignored(r.ignored_fields);
    std::vector<int32_t> ids = r.chat
                                   ? encode(render_chat(*r.chat), r.add_special_tokens, "messages")
                                   : encode(*r.prompt, r.add_special_tokens, "prompt");
    ojson j;
    j["count"] = ids.size();
    j["max_model_len"] = max_model_len;
    j["tokens"] = ids;
    if (r.return_token_strs) {
      ojson strs = ojson::array();
      for (int32_t id : ids) strs.push_back(tokenizer->id_to_token(id));
      j["token_strs"] = std::move(strs);
    } else {
      j["token_strs"] = nullptr;
    }
    respond_json(out, j, extra);
  }

  void detokenize(const http::Request& req, const std::shared_ptr<http::Responder>& out,
                  const http::Headers& extra) {
    const auto r = openai::parse_detokenize_request(openai::parse_body(req.body));
    check_model(r.model);
    note_ignored(r.ignored_fields);
    respond_json(out, ojson{{"prompt", decode(r.tokens, "tokens")}}, extra);
  }
};

ApiServer::ApiServer(caf::actor_system& sys, Engine& engine, ApiServerConfig config)
    : impl_(std::make_shared<Impl>(sys, engine, std::move(config))) {
  Impl& m = *impl_;
  if (m.config.served_model_names.empty())
    m.config.served_model_names.push_back(m.config.model_root);
  // The template a chat request renders: --chat-template's, else the tokenizer directory's
  // (chat_template.jinja or tokenizer_config.json); none is fine until a chat request comes.
  try {
    if (m.tokenizer)
      m.special_tokens = ChatTemplate::special_tokens_of_dir(engine.info().tokenizer_dir);
    if (!m.config.chat_template.empty())
      m.default_template.emplace(m.config.chat_template);
    else if (m.tokenizer && !m.tokenizer->chat_template().empty())
      m.default_template.emplace(ChatTemplate::from_tokenizer_dir(engine.info().tokenizer_dir));
  } catch (const std::exception& e) {
    throw Error(fmt::format("chat template: {}", e.what()));
  }
  // The access log: one line per response, as uvicorn writes them.
  m.access_log = spdlog::default_logger()->clone("http");
  const std::string& level = m.config.args.uvicorn_log_level;
  m.access_log->set_level(level == "trace"      ? spdlog::level::trace
                          : level == "debug"    ? spdlog::level::debug
                          : level == "warning"  ? spdlog::level::warn
                          : level == "error"    ? spdlog::level::err
                          : level == "critical" ? spdlog::level::critical
                                                : spdlog::level::info);

  http::ServerOptions o;
  o.host = m.config.args.host.value_or("0.0.0.0");
  o.port = uint16_t(m.config.args.port);
  o.threads = int(m.config.args.http_threads);
  o.max_body_bytes = size_t(m.config.args.max_request_body_bytes);
  o.max_header_bytes = size_t(m.config.args.h11_max_incomplete_event_size);
  if (const char* ka = std::getenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE"); ka && *ka)
    o.keep_alive_timeout = std::chrono::milliseconds(int64_t(std::atof(ka) * 1000));
  o.error_body = [](int status, const std::string& message) {
    return std::make_pair(std::string("application/json"),
                          openai::error_body(openai::make_error(status, message)));
  };
  if (!m.config.args.disable_uvicorn_access_log) {
    auto log = m.access_log;
    o.on_response = [log](const http::Request& r, int status) {
      log->info("{} - \"{} {} HTTP/{}.{}\" {} {}", r.remote, r.method, r.target, r.version / 10,
                r.version % 10, status, http::reason_phrase(status));
    };
  }
  std::weak_ptr<Impl> weak = impl_;
  m.http = std::make_unique<http::Server>(
      std::move(o), [weak](http::Request req, std::shared_ptr<http::Responder> out) {
        if (auto self = weak.lock())
          self->handle(std::move(req), std::move(out));
        else
          out->respond(503, "text/plain", "shutting down", {});
      });

  // vLLM prints its address twice, through its own logger and through uvicorn's: it shows
  // unless both --log-level and --uvicorn-log-level are above info. The same here, once.
  spdlog::logger& start_log = spdlog::default_logger()->should_log(spdlog::level::info)
                                  ? *spdlog::default_logger()
                                  : *m.access_log;
  start_log.info("troupe API server on http://{}:{} serving {} (max_model_len {})",
                 m.config.args.host.value_or("0.0.0.0"), m.http->port(),
                 m.config.served_model_names.front(), m.max_model_len);

  m.watcher = sys.spawn([weak, h = m.engine_handle](caf::event_based_actor* self) -> caf::behavior {
    self->monitor(h);
    self->set_down_handler([=](caf::down_msg& dm) {
      if (auto s = weak.lock())
        s->mark_failed("the engine actor stopped (" + caf::to_string(dm.reason) + ")");
      self->quit();
    });
    self->send(h, watch_atom::value, caf::actor_cast<caf::actor>(self));
    return {[=](failed_atom, const std::string& why, bool) {
      if (auto s = weak.lock()) s->mark_failed(why);
    }};
  });
}

ApiServer::~ApiServer() {
  stop(std::chrono::milliseconds(0));
  caf::anon_send_exit(impl_->watcher, caf::exit_reason::user_shutdown);
}

uint16_t ApiServer::port() const {
  return impl_->http->port();
}
bool ApiServer::healthy() const {
  return impl_->ok;
}

std::string ApiServer::failure() const {
  std::lock_guard lock(impl_->mu);
  return impl_->failure;
}

void ApiServer::wait(const std::atomic<bool>& stop_requested,
                     std::chrono::milliseconds tick) const {
  while (!stop_requested && impl_->ok) std::this_thread::sleep_for(tick);
}

void ApiServer::stop(std::chrono::milliseconds grace) {
  if (impl_->http) impl_->http->stop(grace);
}

std::string load_chat_template_arg(const std::string& arg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(arg, ec)) {
    std::ifstream in(arg, std::ios::binary);
    if (!in) fail("--chat-template {}: cannot read the file", arg);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // vLLM: an argument with none of Jinja's markers that looks like a path is a missing file.
  if (arg.find("{{") == std::string::npos && arg.find("{%") == std::string::npos)
    fail("--chat-template {}: no such file (give a template file or the template text itself)",
         arg);
  return arg;
}

}  // namespace troupe
