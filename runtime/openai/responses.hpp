// RequestOutputs -> the OpenAI-compatible responses, in vLLM's shapes
// (vllm/entrypoints/openai/serving_completion.py and serving_chat.py):
// - /v1/completions: CompletionResponse, or `data: {CompletionStreamResponse}` events with every
//   field present (vLLM dumps them with nulls), then a usage event and `data: [DONE]`;
//   logprobs as {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
// - /v1/chat/completions: ChatCompletionResponse, or chat.completion.chunk events with only the
//   fields vLLM sets (a first chunk per choice with the role, content deltas, a last chunk with
//   finish_reason and stop_reason); logprobs as {content: [{token, logprob, bytes,
//   top_logprobs}]}.
// `system_fingerprint` and `service_tier` are null as in vLLM; logprobs are clamped at -9999
// (JSON has no -inf). Streams take a request's output so far and send what is new: the request
// sink adds up the engine's delta outputs, whose text no stop string can take back any more (the
// output processor holds back what one may still cut, runtime/api/output_processor.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/api/outputs.hpp"
#include "runtime/openai/protocol.hpp"

namespace troupe {
class Tokenizer;
}

namespace troupe::openai {

/// What every response of one request shares.
struct ResponseContext {
  std::string id;                        // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;                   // unix seconds
  std::string model;                     // the served name the client used
  const Tokenizer* tokenizer = nullptr;  // decodes tokens missing from a logprob map
  bool tokens_as_ids = false;            // tokens as "token_id:N" (return_tokens_as_token_ids)
  bool include_usage = false;            // a usage event before [DONE]
  bool continuous_usage = false;         // usage in every event
  bool prompt_tokens_details = false;    // --enable-prompt-tokens-details: cached tokens in usage
  std::string response_role = "assistant";
};

/// `data: <json>\n\n`.
[[nodiscard]] std::string sse_event(const std::string& json_text);
/// `data: [DONE]\n\n`.
[[nodiscard]] std::string sse_done();

/// The whole-response forms. `finals` holds one finished RequestOutput per prompt (in order);
/// `prompt_texts` the text each prompt is echoed as.
[[nodiscard]] nlohmann::ordered_json completion_response(
    const CompletionRequest& req, const ResponseContext& ctx,
    const std::vector<RequestOutput>& finals, const std::vector<std::string>& prompt_texts);
/// `echo_text`: what echo prepends (see ChatStream).
[[nodiscard]] nlohmann::ordered_json chat_response(const ChatRequest& req,
                                                   const ResponseContext& ctx,
                                                   const RequestOutput& final_output,
                                                   const std::string& echo_text);

/// The stream of one completion request (one or several prompts, n choices each).
class CompletionStream {
 public:
  CompletionStream(const CompletionRequest& req, ResponseContext ctx,
                   std::vector<std::string> prompt_texts);
  /// Events for prompt `prompt_index`'s output so far ("" when nothing is new).
  std::string on_output(size_t prompt_index, const RequestOutput& out);
  /// The usage event (when asked for) and [DONE].
  std::string finish();

 private:
  struct Choice {
    size_t text_sent = 0, tokens_sent = 0, chars_sent = 0;
    bool echoed = false, finished = false;
  };
  std::optional<int64_t> logprobs_;
  bool echo_ = false, echo_only_ = false, return_token_ids_ = false;
  ResponseContext ctx_;
  std::vector<std::string> prompt_texts_;
  std::vector<size_t> prompt_tokens_;
  int32_t cached_ = 0;           // the last output's num_cached_tokens
  std::vector<Choice> choices_;  // prompt_index * n + output index
  std::string head_;             // a chunk up to its choice's index
};

/// The stream of one chat request.
class ChatStream {
 public:
  /// `echo_text`: what echo prepends (the last message's content when its role is the
  /// response's), "" without echo.
  ChatStream(const ChatRequest& req, ResponseContext ctx, std::string echo_text);
  std::string on_output(const RequestOutput& out);
  std::string finish();

 private:
  struct Choice {
    size_t text_sent = 0, tokens_sent = 0;
    bool finished = false;
  };
  bool logprobs_ = false, return_token_ids_ = false;
  int64_t top_logprobs_ = 0;
  ResponseContext ctx_;
  std::string echo_text_;
  bool first_ = true;
  size_t prompt_tokens_ = 0;
  int32_t cached_ = 0;  // the last output's num_cached_tokens
  std::vector<Choice> choices_;
  std::string head_;  // a chunk up to its choice's index
};

/// /generate's answer: {"text": [prompt + output text, ...]} (one JSON line when streaming).
[[nodiscard]] nlohmann::ordered_json plain_generate_response(const RequestOutput& out);

}  // namespace troupe::openai
