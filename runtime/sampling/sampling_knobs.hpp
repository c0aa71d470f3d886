// The per-token sampling knobs, defined once. SeqSampling (what a sequence carries to the
// executors, runtime/protocol/step.hpp) and SamplingRow (what a backend samples one row with,
// sampling_row.hpp) both inherit them, so a knob added here travels end to end: the engine
// fills it from SamplingParams (sampling_knobs() in runtime/config/sampling_params.hpp),
// actors/messages.hpp serialises it for remote executors through with_knobs(), and the
// executor copies the knobs whole into each row. tests/actors/test_sampling_knobs.cpp sets
// every knob through SamplingParams and checks it arrives in the SamplingRow a backend gets.
#pragma once

#include <concepts>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace troupe {

struct SamplingKnobs {
  float temperature = 1.0f;         // >= 0; below kGreedyTemperature (sampling_row.hpp): greedy
  int32_t top_k = 0;                // 0 or -1: no limit
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float presence_penalty = 0.0f;    // subtracted once from every token already output
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the output
  float repetition_penalty = 1.0f;  // > 0; 1: off (prompt and output tokens)
  uint64_t seed = 0;                // the Philox key of this sequence's draws (philox.hpp)

  bool operator==(const SamplingKnobs&) const = default;
};

/// Calls f(knob...) with every knob, in declaration order: the one list that serialisation and
/// the end-to-end test walk. The structured binding stops compiling when a knob is added to
/// SamplingKnobs but not here.
template <class Knobs, class F>
requires std::same_as<std::remove_const_t<Knobs>, SamplingKnobs>
decltype(auto) with_knobs(Knobs& k, F&& f) {
  auto& [temperature, top_k, top_p, min_p, presence_penalty, frequency_penalty, repetition_penalty,
         seed] = k;
  return std::forward<F>(f)(temperature, top_k, top_p, min_p, presence_penalty, frequency_penalty,
                            repetition_penalty, seed);
}

}  // namespace troupe
