// What a generation request gives back: vLLM's RequestOutput / CompletionOutput.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace troupe {

/// One position's logprobs, vLLM style: token id -> (logprob, rank, decoded token). The chosen
/// token is always present, then the top-N.
struct Logprob {
  float logprob = 0.0f;
  int32_t rank = 0;
  std::string decoded_token;
};
using PositionLogprobMap = std::map<int32_t, Logprob>;

// Times below are seconds since the Unix epoch (vLLM's time.time()), all read from one monotonic
// clock, so that the differences between them are exact and never negative.

/// When one sequence went through its phases; nullopt until it happens.
struct SequenceTimes {
  std::optional<double> first_scheduled_time;  // a step first ran it (kept through a recompute)
  std::optional<double> first_token_time;      // the step that sampled its first token returned
  std::optional<double> last_token_time;       // ... its latest token
};

/// vLLM's RequestMetrics (RequestOutput.metrics), over all of a request's sequences.
struct RequestMetrics {
  /// When the engine queued the request for the scheduler (its prompt tokenized).
  double arrival_time = 0;
  std::optional<double> last_token_time;       // the latest token of any sequence
  std::optional<double> first_scheduled_time;  // the first of its sequences to be scheduled
  std::optional<double> first_token_time;      // the first token of any sequence
  std::optional<double> time_in_queue;         // first_scheduled_time - arrival_time (seconds)
  std::optional<double> finished_time;         // when its last sequence finished
};

struct CompletionOutput {
  int32_t index = 0;
  std::string text;
  std::vector<int32_t> token_ids;
  // Sum of the sampled tokens' logprobs; as in vLLM V1, only when SamplingParams.logprobs is
  // set (None otherwise: no logprob is computed then).
  std::optional<double> cumulative_logprob;
  std::optional<std::vector<PositionLogprobMap>> logprobs;  // when SamplingParams.logprobs set
  std::string finish_reason;  // "" while running, then "length", "stop", "abort" or "error"
  /// The stop string or stop token id that ended the sequence ("" / -1 when none).
  std::string stop_reason_text;
  int32_t stop_reason_token = -1;
  /// Its own phase times (C++ only: vLLM keeps no times per sequence); the server's per-sequence
  /// histograms read them, as vLLM observes each of n child requests.
  SequenceTimes times;
  [[nodiscard]] bool finished() const { return !finish_reason.empty(); }
};

/// What a request's streamed RequestOutputs hold (vLLM's RequestOutputKind). `cumulative`
/// (the default, and the C++ LLM API's): each output is the whole request so far. `delta`: each
/// output holds only what is new since the one before: the prompt and its token ids in the
/// first output alone, prompt logprobs as they arrive, and per sequence (only those with
/// something new, by `index`) the new text, token ids and logprobs; cumulative_logprob, the
/// finish, times, metrics, num_cached_tokens, finished and error are current values.
/// append_output() adds a delta to what came before, giving the cumulative output. Requests that
/// stream nothing (their one output is final) are the same either way.
enum class OutputKind { cumulative, delta };

struct RequestOutput {
  std::string request_id;
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;
  /// One entry per prompt token; the first is empty (nothing predicts it).
  std::optional<std::vector<PositionLogprobMap>> prompt_logprobs;
  std::vector<CompletionOutput> outputs;
  /// Prompt tokens served from the prefix cache (vLLM's num_cached_tokens): the cache hit of
  /// the request's first admitted sequence; 0 until it is known.
  int32_t num_cached_tokens = 0;
  RequestMetrics metrics;
  bool finished = false;
  std::string error;  // set when the request failed after it was accepted
};

/// Adds a delta output (OutputKind::delta) to `acc`, the request's outputs so far (empty before
/// the first), so that `acc` is what the cumulative output would be. Costs what the delta holds.
void append_output(RequestOutput& acc, RequestOutput&& delta);

}  // namespace troupe
