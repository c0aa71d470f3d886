#include "runtime/api/generate_input.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <utility>

#include "runtime/error.hpp"

namespace troupe {

GenerateInput parse_generate_input_line(std::string_view line, std::string where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
    fail("{}: not JSON ({})", where, e.what());
  }
  if (!j.is_object()) fail("{}: expected a JSON object", where);
  GenerateInput item;
  if (j.contains("prompt_token_ids")) {
    const auto& ids = j["prompt_token_ids"];
    if (!ids.is_array() || ids.empty())
      fail("{}: prompt_token_ids must be a non-empty array of token ids", where);
    for (const auto& v : ids) {
      // In int32 range, checked before the conversion (it would wrap 4294967297 to 1).
      bool fits = false;
      if (v.is_number_unsigned()) {
        fits = v.get<uint64_t>() <= uint64_t(INT32_MAX);
      } else if (v.is_number_integer()) {
        fits = v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
      }
      if (!fits)
        fail("{}: prompt_token_ids holds {}, not a token id (a 32-bit integer)", where, v.dump());
      item.token_ids.push_back(v.get<int32_t>());
    }
    j.erase("prompt_token_ids");
    if (j.contains("prompt") && j["prompt"].is_string()) item.text = j["prompt"].get<std::string>();
    j.erase("prompt");
  } else if (j.contains("prompt")) {
    if (!j["prompt"].is_string()) fail("{}: prompt must be a string", where);
    item.text = j["prompt"].get<std::string>();
    j.erase("prompt");
  } else {
    fail("{}: needs \"prompt\" or \"prompt_token_ids\"", where);
  }
  if (!j.empty()) item.overrides = std::move(j);
  item.where = std::move(where);
  return item;
}

std::vector<GenerateInput> read_generate_input(std::istream& in, const std::string& name) {
  std::vector<GenerateInput> out;
  std::string line;
  for (size_t lineno = 1; std::getline(in, line); ++lineno) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    out.push_back(parse_generate_input_line(line, fmt::format("--input {}:{}", name, lineno)));
  }
  if (in.bad()) fail("--input {}: read error", name);
  return out;
}

SamplingParams input_sampling_params(const GenerateInput& input, const SamplingParams& base) {
  if (input.overrides.is_null()) return base;
  try {
    return sampling_params_from_json(input.overrides, base);
  } catch (const Error& e) {
    fail("{}: {}", input.where, e.what());
  }
}

}  // namespace troupe
