#include "runtime/checkpoint/generation_config.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "runtime/checkpoint/json_object.hpp"
#include "runtime/error.hpp"

namespace troupe {

namespace {

using nlohmann::json;

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::optional<int64_t> opt_int(const json& j, const char* key, const std::string& path,
                               int64_t min) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() || v->get<int64_t>() < min)
    fail("{}: field '{}' is {}; it must be an integer >= {}", path, key, v->dump(), min);
  return v->get<int64_t>();
}

std::optional<double> opt_number(const json& j, const char* key, const std::string& path) {
  const json* v = field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_number() || v->get<double>() < 0.0)
    fail("{}: field '{}' is {}; it must be a number >= 0", path, key, v->dump());
  return v->get<double>();
}

}  // namespace

GenerationConfig parse_generation_config(const std::string& json_text, const std::string& path) {
  const json j = parse_json_object(json_text, path);

  GenerationConfig g;
  if (const json* eos = field(j, "eos_token_id")) {
    if (eos->is_number_integer()) {
      g.eos_token_ids.push_back(eos->get<int64_t>());
    } else if (eos->is_array()) {
      for (const auto& e : *eos) {
        if (!e.is_number_integer())
          fail("{}: field 'eos_token_id' is {}; it must be an integer or a list of integers", path,
               eos->dump());
        g.eos_token_ids.push_back(e.get<int64_t>());
      }
    } else {
      fail("{}: field 'eos_token_id' is {}; it must be an integer or a list of integers", path,
           eos->dump());
    }
  }
  g.bos_token_id = opt_int(j, "bos_token_id", path, 0);
  g.pad_token_id = opt_int(j, "pad_token_id", path, 0);
  g.temperature = opt_number(j, "temperature", path);
  g.top_p = opt_number(j, "top_p", path);
  g.repetition_penalty = opt_number(j, "repetition_penalty", path);
  g.top_k = opt_int(j, "top_k", path, 0);
  g.max_new_tokens = opt_int(j, "max_new_tokens", path, 1);
  if (const json* v = field(j, "do_sample")) {
    if (!v->is_boolean())
      fail("{}: field 'do_sample' is {}; it must be true or false", path, v->dump());
    g.do_sample = v->get<bool>();
  }
  if (g.top_p && *g.top_p > 1.0)
    fail("{}: field 'top_p' is {}; it must be in (0, 1]", path, *g.top_p);
  return g;
}

GenerationConfig load_generation_config(const std::filesystem::path& dir) {
  const auto path = dir / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("'{}' cannot be opened for reading", path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return parse_generation_config(s.str(), path.string());
}

}  // namespace troupe
