// vLLM's newer beam-search entry point, LLM.beam_search(prompts, BeamSearchParams): its
// parameters and its output shape (BeamSearchOutput of BeamSearchSequences), as plain types.
//
// troupe runs it with the engine's beam search (runtime/sched/beam_search.hpp): beam_width
// beams, all beam_width returned best first, early_stopping "never" (vLLM's loop runs to
// max_tokens and keeps every finished beam, as "never" does). Scores follow transformers, not
// vLLM's helper: vLLM divides by the length of prompt and output (less an eos token), troupe by
// the output's length with its eos token; with length_penalty 0 both rank by cumulative logprob.
// vLLM samples each step's token at `temperature` but ranks by logprobs; troupe accepts only
// temperature 0 (beam search is deterministic here) and refuses others by name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/api/outputs.hpp"
#include "runtime/config/sampling_params.hpp"

namespace troupe {

struct BeamSearchParams {
  int64_t beam_width = 0;  // >= 2: beams kept, and results returned
  int64_t max_tokens = 0;  // >= 1: new tokens per beam at most
  bool ignore_eos = false;
  double temperature = 0.0;  // 0 only (see above)
  double length_penalty = 1.0;
  bool include_stop_str_in_output = false;  // vLLM's; no stop strings here, so it changes nothing
};

/// One result: the prompt's tokens followed by the beam's (vLLM: "the tokens include the
/// prompt"), its logprobs per output token, and the text of its output.
struct BeamSearchSequence {
  std::vector<int32_t> tokens;
  std::vector<PositionLogprobMap> logprobs;
  double cum_logprob = 0.0;
  std::string text;
  std::string finish_reason;  // "stop" (eos) or "length"
  int32_t stop_reason = -1;
};

struct BeamSearchOutput {
  std::vector<BeamSearchSequence> sequences;  // best first
};

/// The SamplingParams that run `p` (use_beam_search, best_of = n = beam_width, "never").
/// Throws troupe::Error naming the BeamSearchParams field.
[[nodiscard]] SamplingParams to_sampling_params(const BeamSearchParams& p);
/// A finished RequestOutput of such a request as vLLM's BeamSearchOutput.
[[nodiscard]] BeamSearchOutput to_beam_search_output(const RequestOutput& out);

}  // namespace troupe
