// RequestOutput as JSON: the line format of `troupe generate --output` (and what the server's
// responses are built from).
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/api/outputs.hpp"

namespace troupe {

/// {"request_id", "prompt", "prompt_token_ids", ["prompt_logprobs"],
///  "outputs": [{"index", "text", "token_ids", "cumulative_logprob" (null without logprobs),
///               ["logprobs"],
///               "finish_reason", "stop_reason"}], "num_cached_tokens",
///  "metrics": {vLLM's RequestMetrics: "arrival_time", "last_token_time", "first_scheduled_time",
///              "first_token_time", "time_in_queue", "finished_time"; null until known},
///  ["error"]}
nlohmann::ordered_json to_json(const RequestOutput& out);
nlohmann::ordered_json to_json(const PositionLogprobMap& position);

}  // namespace troupe
