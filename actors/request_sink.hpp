// The request sink: one actor per generation request of the HTTP server. It submits the
// request's engine requests (one per prompt) to the engine like any other client, receives
// their delta RequestOutputs (what each step added) and adds them up, and answers the HTTP
// client through its Responder: a stream of Server-Sent Events (or /generate's JSON lines) as
// tokens arrive, or one JSON response at the end. It also feeds the server's metrics (time to first token, inter-token
// latency, ...) and aborts its engine requests when the client goes away, so their KV blocks
// come back at once.
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/engine_actor.hpp"
#include "runtime/openai/metrics.hpp"
#include "runtime/openai/protocol.hpp"
#include "runtime/openai/responses.hpp"
#include "transport/http/http_server.hpp"

namespace troupe {

struct SinkPlan {
  enum class Kind { completion, chat, generate };
  Kind kind = Kind::completion;
  std::shared_ptr<const openai::CompletionRequest> completion;  // kind completion
  std::shared_ptr<const openai::ChatRequest> chat;              // kind chat
  bool stream = false;
  std::vector<EngineRequest> requests;    // one per prompt, ids set, in prompt order
  std::vector<std::string> prompt_texts;  // what echo shows of each prompt
  openai::ResponseContext ctx;
  std::string echo_text;  // chat: what echo prepends
  std::chrono::steady_clock::time_point arrival;
  std::optional<int64_t> max_tokens_param;  // for vllm:request_params_max_tokens
  http::Headers extra_headers;              // X-Request-Id, CORS
  bool log_outputs = false;
};

/// Spawns the sink; it submits at once and lives until every engine request finished (or was
/// aborted) and the answer went out. Send it (abort_atom) when the client disconnects.
caf::actor spawn_request_sink(caf::actor_system& sys, engine_actor engine, SinkPlan plan,
                              std::shared_ptr<http::Responder> out,
                              std::shared_ptr<openai::ServingMetrics> metrics);

}  // namespace troupe
