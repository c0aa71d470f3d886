// A reference for beam search that shares no code with the engine's (runtime/sched/
// beam_search.cpp): a transcription of transformers' vectorised _beam_search over the whole
// vocabulary in float64, driven by the model's per-step logprobs (each from a plain greedy
// request for the beam's full sequence), and the fixtures' reference.json "beam" cases
// (transformers' own generate(num_beams=...), tools/make_fixtures.py --beam-only). Used by
// tests/actors/test_beam_search.cpp and test_sampling_gaps.cpp.
#pragma once

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "actors/llm.hpp"

namespace troupe::beam_reference {

inline constexpr double kMasked = -1.0e9;  // transformers' "never choose this"

struct Hyp {
  std::vector<int32_t> tokens;
  double score = 0.0;  // cumulative logprob / length ** length_penalty
};

struct Case {
  std::vector<int32_t> prompt;
  int32_t num_beams = 2;
  int32_t num_return = 1;
  double length_penalty = 1.0;
  std::string early_stopping = "false";  // "true" | "false" | "never"
  std::optional<int32_t> eos;
  int32_t max_new = 12;
  std::vector<Hyp> want;  // transformers' results, when read from reference.json
};

/// Whole-vocabulary logprobs of the next token after each sequence, from greedy requests with
/// logprobs = -1 (the engine's plain path), one per sequence.
inline std::vector<std::vector<double>> next_logprobs(LLM& llm,
                                               const std::vector<std::vector<int32_t>>& seqs,
                                               int32_t vocab) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = 1;
  p.ignore_eos = true;
  p.detokenize = false;
  p.logprobs = -1;
  std::vector<Prompt> prompts;
  for (const auto& s : seqs) prompts.emplace_back(s);
  const auto outs = llm.generate(prompts, p, {.use_tqdm = false});
  std::vector<std::vector<double>> rows;
  for (const auto& o : outs) {
    REQUIRE(o.outputs.size() == 1);
    REQUIRE(o.outputs[0].logprobs);
    const auto& m = o.outputs[0].logprobs->at(0);
    REQUIRE(int32_t(m.size()) == vocab);
    std::vector<double> row(size_t(vocab), kMasked);
    for (const auto& [t, l] : m) row[size_t(t)] = double(l.logprob);
    rows.push_back(std::move(row));
  }
  return rows;
}

/// The `k` largest entries' indices, largest first (ties: lower index first).
inline std::vector<size_t> top_k(const std::vector<double>& v, size_t k) {
  std::vector<size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] > v[b]; });
  idx.resize(std::min(k, idx.size()));
  return idx;
}

/// transformers' _beam_search (generation/utils.py, 4.50+ and 5.x) for one prompt, as tensors
/// of shape [num_beams] and [num_beams * vocab] written out in float64.
inline std::vector<Hyp> reference_beam_search(LLM& llm, const Case& c, int32_t vocab) {
  const auto nb = size_t(c.num_beams);
  const size_t n_eos = c.eos ? 1 : 0;
  const size_t keep = std::max<size_t>(2, 1 + n_eos) * nb;  // beams_to_keep
  std::vector<std::vector<int32_t>> running(nb);
  std::vector<double> running_scores(nb, kMasked);
  running_scores[0] = 0.0;
  std::vector<std::vector<int32_t>> finished(nb);
  std::vector<double> finished_scores(nb, kMasked);
  std::vector<bool> is_finished(nb, false);
  bool unsatisfied = true;
  for (int32_t cur = 0; cur < c.max_new;) {
    // Only live beams need the model; masked ones cannot reach the top (vocab >= keep).
    std::vector<std::vector<int32_t>> seqs;
    std::vector<size_t> which;
    for (size_t b = 0; b < nb; ++b)
      if (running_scores[b] > kMasked / 2) {
        std::vector<int32_t> s = c.prompt;
        s.insert(s.end(), running[b].begin(), running[b].end());
        seqs.push_back(std::move(s));
        which.push_back(b);
      }
    const auto rows = next_logprobs(llm, seqs, vocab);
    std::vector<double> flat(nb * size_t(vocab), 2 * kMasked);
    for (size_t i = 0; i < which.size(); ++i)
      for (int32_t t = 0; t < vocab; ++t)
        flat[which[i] * size_t(vocab) + size_t(t)] = running_scores[which[i]] + rows[i][size_t(t)];
    const std::vector<size_t> top = top_k(flat, keep);
    std::vector<std::vector<int32_t>> cand(keep);
    std::vector<double> cand_scores(keep);
    std::vector<bool> hits(keep);
    for (size_t r = 0; r < keep; ++r) {
      const size_t b = top[r] / size_t(vocab);
      const auto t = int32_t(top[r] % size_t(vocab));
      cand[r] = running[b];
      cand[r].push_back(t);
      cand_scores[r] = flat[top[r]];
      hits[r] = (c.eos && t == *c.eos) || cur + 1 >= c.max_new;
    }
    // e. the next running beams: the best num_beams that did not finish
    std::vector<double> run_scores(keep);
    for (size_t r = 0; r < keep; ++r) run_scores[r] = cand_scores[r] + (hits[r] ? kMasked : 0.0);
    const std::vector<size_t> next = top_k(run_scores, nb);
    // f. finished: the top num_beams candidates that finished, scored with the length penalty
    const double norm = std::pow(double(cur + 1), c.length_penalty);
    const bool full = std::all_of(is_finished.begin(), is_finished.end(), [](bool f) { return f; });
    std::vector<double> merged = finished_scores;
    std::vector<std::vector<int32_t>> merged_seqs = finished;
    std::vector<bool> merged_fin = is_finished;
    for (size_t r = 0; r < keep; ++r) {
      const bool just = hits[r] && r < nb;
      double s = cand_scores[r] / norm;
      if (full && c.early_stopping == "true") s += kMasked;
      if (!unsatisfied) s += kMasked;
      if (!just) s += kMasked;
      merged.push_back(s);
      merged_seqs.push_back(cand[r]);
      merged_fin.push_back(just);
    }
    const std::vector<size_t> best = top_k(merged, nb);
    for (size_t i = 0; i < nb; ++i) {
      finished[i] = merged_seqs[best[i]];
      finished_scores[i] = merged[best[i]];
      is_finished[i] = merged_fin[best[i]];
    }
    for (size_t i = 0; i < nb; ++i) {
      running[i] = cand[next[i]];
      running_scores[i] = run_scores[next[i]];
    }
    ++cur;
    // the early-stop heuristic, then the three stopping conditions
    const int32_t best_len =
        c.early_stopping == "never" && c.length_penalty > 0.0 ? c.max_new : cur;
    const double best_possible = running_scores[0] / std::pow(double(best_len), c.length_penalty);
    const double worst = *std::min_element(finished_scores.begin(), finished_scores.end());
    bool improvable = false;
    for (size_t i = 0; i < nb; ++i)
      if (best_possible > (is_finished[i] ? worst : kMasked)) improvable = true;
    unsatisfied = unsatisfied && improvable;
    const bool all_fin =
        std::all_of(is_finished.begin(), is_finished.end(), [](bool f) { return f; });
    const bool open_beam = !(all_fin && c.early_stopping == "true");
    const bool can_continue = !std::all_of(hits.begin(), hits.end(), [](bool h) { return h; });
    if (!(unsatisfied && open_beam && can_continue)) break;
  }
  std::vector<Hyp> out;
  for (size_t i = 0; i < size_t(c.num_return); ++i)
    out.push_back(Hyp{finished[i], finished_scores[i]});
  return out;
}

inline SamplingParams beam_params(const Case& c) {
  SamplingParams p;
  p.use_beam_search = true;
  p.temperature = 0.0;
  p.best_of = c.num_beams;
  p.n = c.num_return;
  p.length_penalty = c.length_penalty;
  p.early_stopping = c.early_stopping == "true"    ? EarlyStopping::when_full
                     : c.early_stopping == "never" ? EarlyStopping::never
                                                   : EarlyStopping::heuristic;
  p.max_tokens = c.max_new;
  p.ignore_eos = true;  // the fixtures have no eos: a case's eos is a stop token
  if (c.eos) p.stop_token_ids = {*c.eos};
  p.detokenize = false;
  return p;
}

inline std::string describe(const Case& c) {
  return fmt::format("prompt of {}, {} beams, n {}, length_penalty {}, early_stopping {}, eos {}",
                     c.prompt.size(), c.num_beams, c.num_return, c.length_penalty, c.early_stopping,
                     c.eos ? std::to_string(*c.eos) : "none");
}

/// The engine's results for `c` agree with `want` (tokens exactly, scores to float32 rounding).
inline void check_same(const RequestOutput& got, const Case& c, const std::vector<Hyp>& want) {
  INFO(describe(c));
  REQUIRE(got.error.empty());
  REQUIRE(got.outputs.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("result " << i);
    const CompletionOutput& o = got.outputs[i];
    CHECK(o.index == int32_t(i));
    CHECK(o.token_ids == want[i].tokens);
    REQUIRE(o.cumulative_logprob);
    const double score =
        *o.cumulative_logprob / std::pow(double(o.token_ids.size()), c.length_penalty);
    CHECK(score == Approx(want[i].score).epsilon(1e-4).margin(1e-4));
    const bool by_eos = c.eos && !o.token_ids.empty() && o.token_ids.back() == *c.eos;
    CHECK(o.finish_reason == (by_eos ? "stop" : "length"));
    if (by_eos) CHECK(o.stop_reason_token == *c.eos);
  }
}

/// The "beam" cases of a fixture's reference.json, with transformers' results in `want`.
inline std::vector<Case> json_cases(const nlohmann::json& j) {
  REQUIRE(j.contains("beam"));
  std::vector<Case> out;
  for (const auto& bc : j["beam"]["cases"]) {
    Case c;
    c.prompt = bc["prompt"].get<std::vector<int32_t>>();
    c.num_beams = bc["num_beams"].get<int32_t>();
    c.num_return = bc["num_return_sequences"].get<int32_t>();
    c.length_penalty = bc["length_penalty"].get<double>();
    const auto& es = bc["early_stopping"];
    c.early_stopping =
        es.is_string() ? es.get<std::string>() : (es.get<bool>() ? "true" : "false");
    if (!bc["eos_token_id"].is_null()) c.eos = bc["eos_token_id"].get<int32_t>();
    c.max_new = bc["max_new_tokens"].get<int32_t>();
    for (size_t i = 0; i < bc["sequences"].size(); ++i)
      c.want.push_back(Hyp{bc["sequences"][i].get<std::vector<int32_t>>(),
                           bc["sequence_scores"][i].get<double>()});
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace troupe::beam_reference
