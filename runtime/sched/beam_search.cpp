#include "runtime/sched/beam_search.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/error.hpp"

namespace troupe {

BeamSearch::BeamSearch(BeamSpec spec, int32_t max_new_tokens, std::vector<int32_t> eos_token_ids)
    : spec_(std::move(spec)), max_new_tokens_(max_new_tokens), eos_(std::move(eos_token_ids)) {
  if (spec_.num_beams < 1) fail("beam search: num_beams = {}: must be >= 1", spec_.num_beams);
  if (spec_.num_return < 1 || spec_.num_return > spec_.num_beams)
    fail("beam search: n = {}: must be in [1, num_beams = {}]", spec_.num_return, spec_.num_beams);
  if (spec_.num_candidates < spec_.num_beams)
    fail("beam search: num_candidates = {}: must be >= num_beams = {}", spec_.num_candidates,
         spec_.num_beams);
  if (max_new_tokens_ < 1) fail("beam search: max_new_tokens = {}: must be >= 1", max_new_tokens_);
  live_.emplace_back();  // the prompt: transformers' first beam (the others start at -1e9)
}

std::vector<BeamSearch::Next> BeamSearch::step(
    const std::vector<std::vector<LogprobEntry>>& candidates) {
  if (done_) fail("beam search: step() after the search ended");
  if (candidates.size() != live_.size())
    fail("beam search: {} candidate lists for {} live beams", candidates.size(), live_.size());
  const auto length = int32_t(live_.front().tokens.size()) + 1;  // generated, with the new token
  struct Cand {
    double score;
    size_t beam;
    size_t pos;  // in the beam's list
  };
  std::vector<Cand> all;
  for (size_t b = 0; b < candidates.size(); ++b)
    for (size_t j = 0; j < candidates[b].size() && j < size_t(spec_.num_candidates); ++j)
      all.push_back(Cand{live_[b].cum_logprob + double(candidates[b][j].logprob), b, j});
  std::stable_sort(all.begin(), all.end(),
                   [](const Cand& x, const Cand& y) { return x.score > y.score; });
  if (all.size() > size_t(spec_.num_candidates)) all.resize(size_t(spec_.num_candidates));

  const auto extend = [&](const Cand& c) {
    Beam nb = live_[c.beam];
    const std::vector<LogprobEntry>& list = candidates[c.beam];
    const LogprobEntry& e = list[c.pos];
    nb.tokens.push_back(e.token);
    PositionLogprobs p;
    p.chosen = e;
    if (spec_.num_logprobs_shown > 0)
      p.top.assign(
          list.begin(),
          list.begin() + std::ptrdiff_t(std::min(list.size(), size_t(spec_.num_logprobs_shown))));
    nb.logprobs.push_back(std::move(p));
    nb.cum_logprob = c.score;
    return nb;
  };
  const auto finishes = [&](const Cand& c) {
    const int32_t t = candidates[c.beam][c.pos].token;
    return length >= max_new_tokens_ || std::find(eos_.begin(), eos_.end(), t) != eos_.end();
  };
  const double norm = std::pow(double(length), spec_.length_penalty);

  std::vector<Beam> next_live;
  std::vector<Next> next;
  bool all_finish = true;
  std::vector<Hypothesis> fresh;
  for (size_t r = 0; r < all.size(); ++r) {
    const Cand& c = all[r];
    if (finishes(c)) {
      if (r < size_t(spec_.num_beams)) {
        const int32_t t = candidates[c.beam][c.pos].token;
        const bool eos = std::find(eos_.begin(), eos_.end(), t) != eos_.end();
        fresh.push_back(Hypothesis{extend(c), c.score / norm, eos});
      }
      continue;
    }
    all_finish = false;
    if (next_live.size() < size_t(spec_.num_beams)) {
      next.push_back(Next{c.beam, candidates[c.beam][c.pos].token});
      next_live.push_back(extend(c));
    }
  }
  // Merge: the kept hypotheses first, so that an earlier one wins a tie.
  finished_.insert(finished_.end(), std::make_move_iterator(fresh.begin()),
                   std::make_move_iterator(fresh.end()));
  std::stable_sort(finished_.begin(), finished_.end(),
                   [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
  if (finished_.size() > size_t(spec_.num_beams)) finished_.resize(size_t(spec_.num_beams));

  const bool full = finished_.size() == size_t(spec_.num_beams);
  bool stop = all_finish || next_live.empty();
  if (!stop && full) {
    if (spec_.early_stopping == EarlyStopping::when_full) {
      stop = true;
    } else {
      const int32_t best_length =
          spec_.early_stopping == EarlyStopping::never && spec_.length_penalty > 0.0
              ? max_new_tokens_
              : length;
      const double best_possible =
          next_live.front().cum_logprob / std::pow(double(best_length), spec_.length_penalty);
      stop = !(best_possible > finished_.back().score);
    }
  }
  if (stop) {
    done_ = true;
    live_.clear();
    return {};
  }
  live_ = std::move(next_live);
  return next;
}

std::vector<BeamSearch::Hypothesis> BeamSearch::results() const {
  std::vector<Hypothesis> out(
      finished_.begin(),
      finished_.begin() + std::ptrdiff_t(std::min(finished_.size(), size_t(spec_.num_return))));
  return out;
}

}  // namespace troupe
