// generation_config.json: the checkpoint's own sampling defaults and stop tokens.
//
// The file is optional; an absent one gives an empty GenerationConfig. Fields the engine
// does not know are ignored (the file carries many Hugging Face-only settings).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace troupe {

struct GenerationConfig {
  std::vector<int64_t> eos_token_ids;  // eos_token_id: an int or a list
  std::optional<int64_t> bos_token_id, pad_token_id;
  std::optional<double> temperature, top_p, repetition_penalty;
  std::optional<int64_t> top_k, max_new_tokens;
  std::optional<bool> do_sample;
};

/// Reads `dir`/generation_config.json when it exists. Throws troupe::Error naming the path
/// and the field when the file is not JSON or a field has the wrong type or range.
GenerationConfig load_generation_config(const std::filesystem::path& dir);

/// Same, from JSON text; `path` is used in error messages.
GenerationConfig parse_generation_config(const std::string& json_text, const std::string& path);

}  // namespace troupe
