// The OpenAI-compatible requests troupe serves, as vLLM's server reads them
// (vllm/entrypoints/openai/protocol.py): /v1/completions, /v1/chat/completions, /tokenize,
// /detokenize and the plain /generate of vLLM's api_server. Plain C++: JSON in, a checked
// request (or an ApiException naming the field, the value and what is allowed) out.
//
// Field rules, as vLLM's pydantic models apply them:
// - Fields troupe does not know are accepted and listed in `ignored_fields` (the server logs
//   each name once), never a 400.
// - use_beam_search, length_penalty and early_stopping are vLLM V0's beam search (best_of
//   beams, n returned; temperature must be 0). A streamed beam request, as in vLLM, gets its
//   whole result at the end (the best beams are only known then).
// - Fields troupe knows but cannot honour yet (beam_width, guided decoding,
//   response_format json_object/json_schema, prompt_embeds, suffix, tool choice, cache_salt,
//   ...) are refused with a 400 naming them when set to anything but their default.
//   logits_processors are names of the server's plug-in processors (the engine checks them).
// - Numbers and booleans are read leniently, as pydantic's lax mode does ("2" is 2, 2.0 is an
//   integer, "true" is true); strings must be strings. null means "not given".
// - Sampling fields left unset take the model's generation_config.json defaults
//   (SamplingDefaults), then vLLM's.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/config/sampling_params.hpp"
#include "runtime/openai/api_error.hpp"

namespace troupe::openai {

/// The sampling defaults a model's generation_config.json sets (vLLM's
/// ModelConfig.get_diff_sampling_param): only what the file gives.
struct SamplingDefaults {
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k, max_tokens;
};

/// One prompt of a completion request: text, or token ids.
struct PromptInput {
  std::string text;
  std::vector<int32_t> token_ids;
  bool is_tokens = false;
};

/// What the two generation endpoints share.
struct GenerationRequest {
  std::string model;       // "" = the first served name
  std::string request_id;  // the client's request_id field, or ""
  SamplingParams params;   // checked; max_tokens resolved per prompt by resolve_max_tokens
  std::optional<int64_t> max_tokens;  // as the request gives it (completions: 16 when absent)
  bool stream = false;
  bool has_stream_options = false;  // stream_options given (vLLM's should_include_usage)
  bool include_usage = true;        // stream_options.include_usage
  bool continuous_usage = false;    // stream_options.continuous_usage_stats (with include_usage)
  bool echo = false;
  bool add_special_tokens = true;
  std::optional<bool>
      return_tokens_as_token_ids;  // unset: the server's --return-tokens-as-token-ids
  bool return_token_ids = false;
  std::optional<int64_t>
      truncate_prompt_tokens;               // keep the last k prompt tokens; -1 = max_model_len
  std::vector<std::string> ignored_fields;  // unknown keys, sorted
};

struct CompletionRequest : GenerationRequest {
  std::vector<PromptInput> prompts;  // one engine request each
  std::optional<int64_t> logprobs;   // top-N per position (0: the chosen token only)
};

struct ChatRequest : GenerationRequest {
  /// The messages as the chat template sees them: each an object with "role" and "content"
  /// (a string, or null for an assistant message with tool calls); text parts of list
  /// contents joined with "\n" (vLLM's "string" content format); other keys kept.
  nlohmann::json messages = nlohmann::json::array();
  bool logprobs = false;
  int64_t top_logprobs = 0;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::optional<std::string> chat_template;  // the request's own template
  /// Extra variables for the template: tools, documents, chat_template_kwargs' keys.
  nlohmann::json template_context = nlohmann::json::object();
};

struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;  // completion form
  std::optional<ChatRequest> chat;    // chat form (messages)
  bool add_special_tokens = true;
  bool return_token_strs = false;
  std::vector<std::string> ignored_fields;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
  std::vector<std::string> ignored_fields;
};

/// vLLM's api_server /generate: {"prompt": ..., "stream": ..., <SamplingParams fields>}.
struct PlainGenerateRequest {
  std::string prompt;
  bool stream = false;
  SamplingParams params;
};

/// Parse JSON text; a 400 naming the position of a syntax error, or "expected a JSON object".
[[nodiscard]] nlohmann::json parse_body(std::string_view bytes);

[[nodiscard]] CompletionRequest parse_completion_request(const nlohmann::json& body,
                                                         const SamplingDefaults& defaults = {});
[[nodiscard]] ChatRequest parse_chat_request(const nlohmann::json& body,
                                             const SamplingDefaults& defaults = {});
[[nodiscard]] TokenizeRequest parse_tokenize_request(const nlohmann::json& body);
[[nodiscard]] DetokenizeRequest parse_detokenize_request(const nlohmann::json& body);
[[nodiscard]] PlainGenerateRequest parse_plain_generate_request(const nlohmann::json& body);

/// The endpoints a body can be parsed for (parse_request).
enum class Endpoint { completions, chat_completions, tokenize, detokenize, generate };

using ParsedRequest = std::variant<CompletionRequest, ChatRequest, TokenizeRequest,
                                   DetokenizeRequest, PlainGenerateRequest, ApiError>;

/// Bytes in, the checked request or the error the server would answer: the entry point for a
/// fuzz target. Bad input of any kind is an ApiError, never an exception or a crash (an
/// exception escaping from here is a bug).
[[nodiscard]] ParsedRequest parse_request(Endpoint endpoint, std::string_view bytes);

/// max_tokens for one prompt of `prompt_len` tokens, as vLLM's get_max_tokens and
/// _validate_input decide it: the request's (or, when absent, what is left of max_model_len),
/// capped by the model's default. A 400 when the prompt leaves no room or the request asks for
/// more than max_model_len allows.
[[nodiscard]] int64_t resolve_max_tokens(std::optional<int64_t> requested, int64_t prompt_len,
                                         int64_t max_model_len,
                                         std::optional<int64_t> default_max_tokens);

/// A troupe::Error from SamplingParams or engine checks as a 400: the field is the text
/// before " = " (or ":"), when that is one word.
[[nodiscard]] ApiError error_from_message(const std::string& message);

}  // namespace troupe::openai
