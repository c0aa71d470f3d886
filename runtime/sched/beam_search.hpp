// Beam search over one request: transformers' `generate(num_beams=...)` (its vectorised
// `_beam_search`, transformers >= 4.50 and 5.x), one step at a time, as plain logic with no
// model and no cache. The scheduler (scheduler.hpp) runs the beams as sequences, feeds each
// step's candidates here, and forks or drops the sequences as this says.
//
// One step, with L the number of tokens each live beam has generated after it:
//   - every live beam proposes its top K tokens by raw logprob (K = num_candidates =
//     max(2, 1 + number of eos tokens) * num_beams, transformers' beams_to_keep); a candidate's
//     score is the beam's cumulative logprob plus the token's; the best K over all beams are kept
//     (ties: the earlier beam, then the likelier token);
//   - a kept candidate "finishes" when its token is an eos token or L reaches max_new_tokens;
//   - the next live beams are the best num_beams candidates that do not finish;
//   - a candidate among the best num_beams that finishes becomes a hypothesis scored
//     cumulative logprob / L ** length_penalty (L counts the eos token); the best num_beams
//     hypotheses are kept (an earlier one wins a tie);
//   - the search ends when every kept candidate finished (max_new_tokens), or when num_beams
//     hypotheses are kept and either early_stopping is true or no live beam can beat the worst
//     of them: the best live beam's cumulative logprob divided by L ** length_penalty (false), or
//     by max_new_tokens ** length_penalty when early_stopping is "never" and length_penalty > 0
//     (the exact bound; with length_penalty <= 0 transformers uses L there too).
// The result is the best n hypotheses, best first (transformers' sequences[:num_return_sequences]
// and sequence_scores).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/protocol/step.hpp"
#include "runtime/sampling/early_stopping.hpp"

namespace troupe {

/// What a beam request asks for, as the scheduler receives it with its root sequence.
struct BeamSpec {
  int32_t num_beams = 2;   // best_of
  int32_t num_return = 1;  // n <= num_beams
  double length_penalty = 1.0;
  EarlyStopping early_stopping = EarlyStopping::heuristic;
  int32_t num_candidates = 4;       // K above; the executors return this many top logprobs per beam
  int32_t num_logprobs_shown = -1;  // SamplingParams.logprobs: top-N kept per output token
  // The request's n output sequences, in result order; the first is the root sequence's id.
  std::vector<uint64_t> output_seq_ids;
};

class BeamSearch {
 public:
  /// One beam so far: its generated tokens and their logprobs (the chosen token's, plus the
  /// top num_logprobs_shown when asked).
  struct Beam {
    std::vector<int32_t> tokens;
    std::vector<PositionLogprobs> logprobs;
    double cum_logprob = 0.0;
  };
  struct Hypothesis {
    Beam beam;
    double score = 0.0;         // cum_logprob / length ** length_penalty
    bool ended_by_eos = false;  // else by length
  };
  /// A live beam of the next step: the live beam it extends (an index into live() before the
  /// step) and its token.
  struct Next {
    size_t parent = 0;
    int32_t token = 0;
  };

  /// `max_new_tokens` >= 1: the most tokens a hypothesis may have. Throws troupe::Error for a
  /// spec out of range.
  BeamSearch(BeamSpec spec, int32_t max_new_tokens, std::vector<int32_t> eos_token_ids);

  /// Applies one step. `candidates[b]`: live beam b's top tokens, likeliest first (at least
  /// num_candidates of them unless the vocabulary is smaller). Returns the next live beams, best
  /// first (empty once done()); live() holds them afterwards.
  std::vector<Next> step(const std::vector<std::vector<LogprobEntry>>& candidates);

  [[nodiscard]] bool done() const { return done_; }
  [[nodiscard]] const std::vector<Beam>& live() const { return live_; }
  [[nodiscard]] const BeamSpec& spec() const { return spec_; }
  /// The best num_return hypotheses, best first (when done()).
  [[nodiscard]] std::vector<Hypothesis> results() const;

 private:
  BeamSpec spec_;
  int32_t max_new_tokens_;
  std::vector<int32_t> eos_;
  std::vector<Beam> live_;
  std::vector<Hypothesis> finished_;  // best first, at most num_beams
  bool done_ = false;
};

}  // namespace troupe
