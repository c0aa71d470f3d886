#include "runtime/config/toml_source.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/error.hpp"

namespace troupe::config_detail {

std::string where(std::string_view source, const toml::source_region& r) {
  return fmt::format("{}:{}:{}", source, r.begin.line, r.begin.column);
}

std::vector<std::pair<const toml::key*, const toml::node*>> in_file_order(const toml::table& t) {
  std::vector<std::pair<const toml::key*, const toml::node*>> out;
  for (const auto& [k, v] : t) out.emplace_back(&k, &v);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const auto& x = a.first->source().begin;
    const auto& y = b.first->source().begin;
    return x.line != y.line ? x.line < y.line : x.column < y.column;
  });
  return out;
}

toml::table parse_toml(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    fail("{}: TOML parse error: {}", where(source, e.source()), e.description());
  }
}

std::string read_text_file(const std::filesystem::path& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the {}", path.string(), what);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace troupe::config_detail
