// The --input JSON lines of `troupe generate`: one request per line, {"prompt": "..."} or
// {"prompt_token_ids": [...]} (a "prompt" string beside the ids is kept as the prompt's text),
// plus optional SamplingParams fields applied over the command line's sampling settings. Blank
// lines are skipped but counted, so a line number in an error is the line an editor shows.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/sampling_params.hpp"

namespace troupe {

/// One request of the input.
struct GenerateInput {
  std::string text;                // the prompt's text
  std::vector<int32_t> token_ids;  // the prompt's ids, when the line gives them
  nlohmann::json overrides;        // the line's SamplingParams fields (an object), or null
  std::string where;               // "--input FILE:LINE" (or "prompt N"), for errors
};

/// One line that is not blank; `where` starts each error. Throws troupe::Error for a line that
/// is not a JSON object with a string "prompt" or a non-empty array of integer
/// "prompt_token_ids". The other keys are not checked here (input_sampling_params does).
[[nodiscard]] GenerateInput parse_generate_input_line(std::string_view line, std::string where);

/// Every request of `in`; `name` is the file's name in errors ("--input NAME:LINE: ...").
[[nodiscard]] std::vector<GenerateInput> read_generate_input(std::istream& in,
                                                             const std::string& name);

/// `base` with the request's own fields over it, validated. Throws troupe::Error starting with
/// its `where`.
[[nodiscard]] SamplingParams input_sampling_params(const GenerateInput& input,
                                                   const SamplingParams& base);

}  // namespace troupe
