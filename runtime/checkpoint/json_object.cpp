#include "runtime/checkpoint/json_object.hpp"

#include "runtime/error.hpp"

namespace troupe {

nlohmann::json parse_json_object(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e400
    fail("{}: not valid JSON ({})", path, e.what());
  }
  if (!j.is_object())
    fail("{}: expected a JSON object at the top level, got {}", path, j.type_name());
  return j;
}

}  // namespace troupe
