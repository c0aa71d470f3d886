// A checkpoint's JSON file (config.json, generation_config.json) read as one object, with the
// errors every reader gives: the path and what was wrong.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace troupe {

/// Parses `text` (the contents of `path`) and requires an object at the top level; throws
/// troupe::Error naming `path` otherwise ("not valid JSON (...)", "expected a JSON object at the
/// top level, got array").
[[nodiscard]] nlohmann::json parse_json_object(const std::string& text, const std::string& path);

}  // namespace troupe
