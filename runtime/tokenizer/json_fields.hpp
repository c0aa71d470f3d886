// Reading tokenizer.json / tokenizer_config.json fields with errors that name the file and the
// field ("'.../tokenizer.json': pre_tokenizer.pretokenizers[1].type: ...").
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace troupe::tokenizer_detail::tokenizer_json {

using json = nlohmann::json;

/// Where a JSON value sits: the file and the dotted field path inside it.
class Where {
 public:
  Where(std::string file, std::string field) : file_(std::move(file)), field_(std::move(field)) {}
  [[nodiscard]] Where operator/(std::string_view key) const;
  [[nodiscard]] Where operator[](std::size_t index) const;
  [[nodiscard]] const std::string& file() const { return file_; }
  /// "'<file>': <field>" (or just "'<file>'" at the top level).
  [[nodiscard]] std::string str() const;
  /// Throws troupe::Error("<str()>: <message>").
  [[noreturn]] void fail(std::string_view message) const;

 private:
  std::string file_;
  std::string field_;
};

/// The member `key` of object `obj`, or nullptr when it is absent or null.
[[nodiscard]] const json* member(const json& obj, std::string_view key);

/// Checks that `value` is an object.
void require_object(const json& value, const Where& where);

/// Required string member.
[[nodiscard]] std::string string_member(const json& obj, std::string_view key, const Where& where);
/// Optional string member ("" when absent or null).
[[nodiscard]] std::string optional_string(const json& obj, std::string_view key,
                                          const Where& where);
/// Optional boolean member (`fallback` when absent or null).
[[nodiscard]] bool bool_member(const json& obj, std::string_view key, bool fallback,
                               const Where& where);
/// The "type" string of a component object.
[[nodiscard]] std::string type_of(const json& obj, const Where& where);
/// A short description of a JSON value for error messages (its dump, cut to ~60 characters).
[[nodiscard]] std::string brief(const json& value);

}  // namespace troupe::tokenizer_detail::tokenizer_json
