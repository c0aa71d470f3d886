// transformers' early_stopping for beam search: true, false or "never" (beam_search.hpp says
// what each does). Its own header so that SamplingParams and the scheduler's BeamSearch share it.
#pragma once

#include <cstdint>
#include <string_view>

namespace troupe {

enum class EarlyStopping : uint8_t {
  heuristic,  // false: stop when the best live beam, at its length, cannot beat the worst kept
  when_full,  // true: stop once num_beams hypotheses are kept
  never,      // "never": the exact bound (length_penalty > 0: at max_tokens)
};

[[nodiscard]] inline std::string_view to_string(EarlyStopping e) {
  switch (e) {
    case EarlyStopping::heuristic:
      return "false";
    case EarlyStopping::when_full:
      return "true";
    case EarlyStopping::never:
      return "never";
  }
  return "?";
}

}  // namespace troupe
