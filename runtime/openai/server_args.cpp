// The ServerArgs table. Allowed values follow vLLM v0.11's FrontendArgs; help texts are
// troupe's own.
#include "runtime/openai/server_args.hpp"

#include "runtime/config/field_codec.hpp"
#include "runtime/error.hpp"

namespace troupe::openai {

namespace {

using namespace config_detail;
using S = ServerArgs;
constexpr FieldInfo::Status kNotYet = FieldInfo::Status::not_yet;
constexpr std::string_view kNoTls =
    "troupe serves plain HTTP; put a TLS-terminating proxy in front for now";
constexpr std::string_view kNoTools = "tool calls need a tool-call parser, not implemented yet";

std::vector<FieldInfo> build_table(Arena& a) {
  std::vector<FieldInfo> t;
  auto add = [&](FieldInfo f) { t.push_back(std::move(f)); };
  // clang-format off
  add(member(a, &S::host, {.name = "host", .help = "Address to listen on. Default: every interface (0.0.0.0)."}));
  add(member(a, &S::port, {.name = "port", .help = "Port to listen on (0: one the system picks, printed at start).", .allowed = "0..65535", .valid = in_range(0, 65535)}));
  add(member(a, &S::uds, {.name = "uds", .help = "Unix domain socket to listen on instead of host:port.", .status = kNotYet, .note = "troupe listens on TCP only"}));
  add(member(a, &S::uvicorn_log_level, {.name = "uvicorn_log_level", .help = "Log level of the HTTP server (its access log is at info).", .choices = {"critical", "error", "warning", "info", "debug", "trace"}}));
  add(member(a, &S::disable_uvicorn_access_log, {.name = "disable_uvicorn_access_log", .help = "No access-log line per request."}));
  add(member(a, &S::allow_credentials, {.name = "allow_credentials", .help = "CORS: allow credentials."}));
  add(member(a, &S::allowed_origins, {.name = "allowed_origins", .help = "CORS: origins allowed (\"*\": any)."}));
  add(member(a, &S::allowed_methods, {.name = "allowed_methods", .help = "CORS: methods allowed (\"*\": any)."}));
  add(member(a, &S::allowed_headers, {.name = "allowed_headers", .help = "CORS: request headers allowed (\"*\": any)."}));
  add(member(a, &S::api_key, {.name = "api_key", .help = "Require one of these keys as \"Authorization: Bearer KEY\" on /v1 endpoints (VLLM_API_KEY also sets one)."}));
  add(member(a, &S::lora_modules, {.name = "lora_modules", .help = "LoRA adapters to serve (name=path or JSON).", .status = kNotYet, .note = "LoRA adapters are not implemented yet"}));
  add(member(a, &S::chat_template, {.name = "chat_template", .help = "Chat template: a file, or the template text itself. Default: the tokenizer's."}));
  add(member(a, &S::chat_template_content_format, {.name = "chat_template_content_format", .help = "How message content reaches the template: string (text parts joined) or openai (a list of parts); auto picks string.", .choices = {"auto", "string", "openai"}, .supported = {"auto", "string"}, .note = "content is rendered as a string"}));
  add(member(a, &S::trust_request_chat_template, {.name = "trust_request_chat_template", .help = "Accept a chat_template given in a request (refused otherwise)."}));
  add(member(a, &S::default_chat_template_kwargs, {.name = "default_chat_template_kwargs", .help = "Template variables for every chat request (JSON object); a request's chat_template_kwargs win.", .allowed = "a JSON object", .valid = [](const json& v) { return v.is_object(); }}));
  add(member(a, &S::response_role, {.name = "response_role", .help = "Role of the generated message when add_generation_prompt is true."}));
  add(member(a, &S::ssl_keyfile, {.name = "ssl_keyfile", .help = "TLS key file.", .status = kNotYet, .note = kNoTls}));
  add(member(a, &S::ssl_certfile, {.name = "ssl_certfile", .help = "TLS certificate file.", .status = kNotYet, .note = kNoTls}));
  add(member(a, &S::ssl_ca_certs, {.name = "ssl_ca_certs", .help = "TLS CA certificates file.", .status = kNotYet, .note = kNoTls}));
  add(member(a, &S::enable_ssl_refresh, {.name = "enable_ssl_refresh", .help = "Reload TLS files when they change.", .status = kNotYet, .note = kNoTls}));
  add(member(a, &S::ssl_cert_reqs, {.name = "ssl_cert_reqs", .help = "Whether client certificates are required.", .status = kNotYet, .note = kNoTls}));
  add(member(a, &S::root_path, {.name = "root_path", .help = "Path prefix when behind a path-routing proxy.", .status = kNotYet, .note = "routes are served at the root"}));
  add(member(a, &S::middleware, {.name = "middleware", .help = "ASGI middleware to add.", .status = kNotYet, .note = "no Python runs in troupe"}));
  add(member(a, &S::return_tokens_as_token_ids, {.name = "return_tokens_as_token_ids", .help = "Write logprob tokens as \"token_id:N\" (a request may override it)."}));
  add(member(a, &S::enable_request_id_headers, {.name = "enable_request_id_headers", .help = "Add an X-Request-Id header to responses."}));
  add(member(a, &S::enable_auto_tool_choice, {.name = "enable_auto_tool_choice", .help = "Let the model choose tools (tool_choice auto).", .status = kNotYet, .note = kNoTools}));
  add(member(a, &S::exclude_tools_when_tool_choice_none, {.name = "exclude_tools_when_tool_choice_none", .help = "Leave tool definitions out of the prompt when tool_choice is none."}));
  add(member(a, &S::tool_call_parser, {.name = "tool_call_parser", .help = "Parser of the model's tool calls.", .status = kNotYet, .note = kNoTools}));
  add(member(a, &S::tool_parser_plugin, {.name = "tool_parser_plugin", .help = "Python plugin with a tool parser.", .status = kNotYet, .note = "no Python runs in troupe"}));
  add(member(a, &S::tool_server, {.name = "tool_server", .help = "Tool servers for the Responses API.", .status = kNotYet, .note = "no Responses API yet"}));
  add(member(a, &S::log_config_file, {.name = "log_config_file", .help = "Python logging config file.", .status = kNotYet, .note = "troupe logs with spdlog: use --log-level and --uvicorn-log-level"}));
  add(member(a, &S::enable_prompt_tokens_details, {.name = "enable_prompt_tokens_details", .help = "Add prompt_tokens_details (the prompt tokens the prefix cache served) to usage when there are any."}));
  add(member(a, &S::enable_server_load_tracking, {.name = "enable_server_load_tracking", .help = "Track server load for /load.", .status = kNotYet, .note = "no /load endpoint yet"}));
  add(member(a, &S::enable_force_include_usage, {.name = "enable_force_include_usage", .help = "Send usage at the end of every stream, asked for or not."}));
  add(member(a, &S::enable_tokenizer_info_endpoint, {.name = "enable_tokenizer_info_endpoint", .help = "Serve /tokenizer_info.", .status = kNotYet, .note = "no /tokenizer_info endpoint yet"}));
  add(member(a, &S::enable_log_outputs, {.name = "enable_log_outputs", .help = "Log each finished response's text (with --enable-log-requests)."}));
  add(member(a, &S::h11_max_incomplete_event_size, {.name = "h11_max_incomplete_event_size", .help = "Largest request header block in bytes (larger: 431).", .allowed = ">= 1024", .valid = at_least(1024)}));
  add(member(a, &S::h11_max_header_count, {.name = "h11_max_header_count", .help = "Most request headers (more: 431).", .allowed = ">= 1", .valid = at_least(1)}));
  add(member(a, &S::api_server_count, {.name = "api_server_count", .help = "API server processes.", .allowed = ">= 1", .valid = at_least(1), .works = equals(1), .note = "one server process; it serves every connection from --http-threads threads"}));
  add(member(a, &S::http_threads, {.name = "http_threads", .help = "troupe: threads of the HTTP server (every connection shares them).", .allowed = "1..64", .valid = in_range(1, 64)}));
  add(member(a, &S::max_request_body_bytes, {.name = "max_request_body_bytes", .help = "troupe: largest request body in bytes (larger: 413).", .allowed = ">= 1024", .valid = at_least(1024)}));
  add(member(a, &S::shutdown_timeout, {.name = "shutdown_timeout", .help = "troupe: seconds in-flight requests may take to finish after SIGINT/SIGTERM.", .allowed = ">= 0", .valid = at_least(0)}));
  // ---- accepted, without effect here ----
  add(legacy<S, bool>(a, {.name = "disable_frontend_multiprocessing", .help = "vLLM: run the API server in the engine's process.", .note = "troupe's server always runs in the engine's process"}, "false",
      [](S&, const bool&) { return std::string("--disable-frontend-multiprocessing: troupe's server always runs in the engine's process; ignored"); }));
  add(legacy<S, bool>(a, {.name = "disable_fastapi_docs", .help = "vLLM: no OpenAPI docs pages.", .note = "troupe serves no docs pages"}, "false",
      [](S&, const bool&) { return std::string("--disable-fastapi-docs: troupe serves no docs pages; ignored"); }));
  add(legacy<S, bool>(a, {.name = "log_error_stack", .help = "vLLM: log the Python stack of error responses.", .note = "errors are logged as one line"}, "false",
      [](S&, const bool&) { return std::string("--log-error-stack: troupe logs each error response as one line; ignored"); }));
  // clang-format on
  return t;
}

const FieldTable<ServerArgs, build_table>& table() {
  return FieldTable<ServerArgs, build_table>::get();
}

}  // namespace

const std::vector<FieldInfo>& server_arg_fields() {
  return table().fields;
}

void validate(const ServerArgs& a) {
  check_all(table().fields, table().defaults, &a);
}

namespace detail {
void apply_server_value(ServerArgs& a, const FieldInfo& f, const nlohmann::json& value,
                        std::string_view label, std::vector<std::string>* notices) {
  const auto& fields = table().fields;
  apply_value(f, &a, table().defaults[size_t(&f - fields.data())], value, label, notices);
}
}  // namespace detail

}  // namespace troupe::openai
