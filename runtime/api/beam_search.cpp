#include "runtime/api/beam_search.hpp"

#include "runtime/error.hpp"

namespace troupe {

SamplingParams to_sampling_params(const BeamSearchParams& p) {
  if (p.beam_width < 2)
    fail("beam_width = {}: allowed: >= 2 (for one beam, generate greedily with temperature 0)",
         p.beam_width);
  if (p.max_tokens < 1) fail("max_tokens = {}: allowed: >= 1", p.max_tokens);
  SamplingParams s;
  s.use_beam_search = true;
  s.n = p.beam_width;
  s.best_of = p.beam_width;
  s.max_tokens = p.max_tokens;
  s.ignore_eos = p.ignore_eos;
  s.temperature = p.temperature;
  s.length_penalty = p.length_penalty;
  s.early_stopping = EarlyStopping::never;
  s.include_stop_str_in_output = p.include_stop_str_in_output;
  s.logprobs = 0;  // each output token's own logprob (vLLM's BeamSearchSequence.logprobs)
  validate(s);
  return s;
}

BeamSearchOutput to_beam_search_output(const RequestOutput& out) {
  if (!out.error.empty()) fail("beam search of request {} failed: {}", out.request_id, out.error);
  BeamSearchOutput b;
  for (const CompletionOutput& c : out.outputs) {
    BeamSearchSequence s;
    s.tokens = out.prompt_token_ids;
    s.tokens.insert(s.tokens.end(), c.token_ids.begin(), c.token_ids.end());
    if (c.logprobs) s.logprobs = *c.logprobs;
    s.cum_logprob = c.cumulative_logprob.value_or(0.0);
    s.text = c.text;
    s.finish_reason = c.finish_reason;
    s.stop_reason = c.stop_reason_token;
    b.sequences.push_back(std::move(s));
  }
  return b;
}

}  // namespace troupe
