// ServerArgs: the flags of `troupe serve` beyond the engine's, with vLLM's names and defaults
// (FrontendArgs in vllm/entrypoints/openai/cli_args.py, v0.11), declared once in a field table
// (server_args.cpp) that feeds the command line, --help and validation like EngineArgs'.
// Flags troupe cannot honour yet (TLS, Unix sockets, LoRA modules, tool parsers, ...) are
// refused by name when set; --served-model-name and --max-log-len are engine flags
// (EngineArgs) as in vLLM's parser.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config/field_info.hpp"

namespace troupe::openai {

struct ServerArgs {
  std::optional<std::string> host;  // None: every interface
  int64_t port = 8000;
  std::optional<std::string> uds;
  std::string uvicorn_log_level = "info";
  bool disable_uvicorn_access_log = false;
  bool allow_credentials = false;
  std::vector<std::string> allowed_origins = {"*"};
  std::vector<std::string> allowed_methods = {"*"};
  std::vector<std::string> allowed_headers = {"*"};
  std::vector<std::string>
      api_key;  // any of these as "Authorization: Bearer <key>"; also VLLM_API_KEY
  std::vector<std::string> lora_modules;
  std::optional<std::string> chat_template;  // a file, or the template itself
  std::string chat_template_content_format = "auto";
  bool trust_request_chat_template = false;
  nlohmann::json default_chat_template_kwargs;  // null or an object
  std::string response_role = "assistant";
  std::optional<std::string> ssl_keyfile, ssl_certfile, ssl_ca_certs;
  bool enable_ssl_refresh = false;
  int64_t ssl_cert_reqs = 0;
  std::optional<std::string> root_path;
  std::vector<std::string> middleware;
  bool return_tokens_as_token_ids = false;
  bool enable_request_id_headers = false;
  bool enable_auto_tool_choice = false;
  bool exclude_tools_when_tool_choice_none = false;
  std::optional<std::string> tool_call_parser;
  std::string tool_parser_plugin;
  std::optional<std::string> tool_server;
  std::optional<std::string> log_config_file;
  bool enable_prompt_tokens_details = false;
  bool enable_server_load_tracking = false;
  bool enable_force_include_usage = false;
  bool enable_tokenizer_info_endpoint = false;
  bool enable_log_outputs = false;
  int64_t h11_max_incomplete_event_size = 4194304;  // bytes of request headers
  int64_t h11_max_header_count = 256;
  int64_t api_server_count = 1;
  // ---- troupe ----
  int64_t http_threads = 2;                     // threads serving every connection
  int64_t max_request_body_bytes = 16ll << 20;  // larger bodies: 413
  double shutdown_timeout = 10.0;               // seconds in-flight requests get on SIGTERM

  bool operator==(const ServerArgs&) const = default;
};

/// One row per ServerArgs field, then the accepted-but-inert legacy flags.
const std::vector<FieldInfo>& server_arg_fields();

/// Range, enum and not-yet checks. Throws troupe::Error naming the flag and value.
void validate(const ServerArgs& a);

namespace detail {
/// One value onto one field of the table (for the command line), with its notices.
void apply_server_value(ServerArgs& a, const FieldInfo& f, const nlohmann::json& value,
                        std::string_view label, std::vector<std::string>* notices);
}  // namespace detail

}  // namespace troupe::openai
