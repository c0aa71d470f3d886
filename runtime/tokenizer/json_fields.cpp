#include "runtime/tokenizer/json_fields.hpp"

#include "runtime/error.hpp"

namespace troupe::tokenizer_detail::tokenizer_json {

Where Where::operator/(std::string_view key) const {
  return Where(file_, field_.empty() ? std::string(key) : field_ + "." + std::string(key));
}

Where Where::operator[](std::size_t index) const {
  return Where(file_, field_ + "[" + std::to_string(index) + "]");
}

std::string Where::str() const {
  return field_.empty() ? "'" + file_ + "'" : "'" + file_ + "': " + field_;
}

void Where::fail(std::string_view message) const {
  troupe::fail("{}: {}", str(), message);
}

const json* member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

void require_object(const json& value, const Where& where) {
  if (!value.is_object()) where.fail(fmt::format("expected an object, got {}", brief(value)));
}

std::string string_member(const json& obj, std::string_view key, const Where& where) {
  const json* v = member(obj, key);
  if (v == nullptr) (where / key).fail("missing (a string is required)");
  if (!v->is_string()) (where / key).fail(fmt::format("expected a string, got {}", brief(*v)));
  return v->get<std::string>();
}

std::string optional_string(const json& obj, std::string_view key, const Where& where) {
  const json* v = member(obj, key);
  if (v == nullptr) return {};
  if (!v->is_string()) (where / key).fail(fmt::format("expected a string, got {}", brief(*v)));
  return v->get<std::string>();
}

bool bool_member(const json& obj, std::string_view key, bool fallback, const Where& where) {
  const json* v = member(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean())
    (where / key).fail(fmt::format("expected true or false, got {}", brief(*v)));
  return v->get<bool>();
}

std::string type_of(const json& obj, const Where& where) {
  require_object(obj, where);
  return string_member(obj, "type", where);
}

std::string brief(const json& value) {
  std::string s = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

}  // namespace troupe::tokenizer_detail::tokenizer_json
