// Jinja2's built-in filters and tests over Values, with transformers' tojson (json.dumps'
// options) in place of Jinja2's HTML-safe one. The global functions are in globals.hpp.
#pragma once

#include "runtime/chat/interpreter.hpp"
#include "runtime/chat/value.hpp"

#include <string_view>

namespace troupe::chat {

enum class Availability {
  supported,
  unsupported,  // Jinja2 has it, troupe refuses it (named in the error)
  unknown,      // Jinja2 has no such filter/test either
};
Availability filter_availability(std::string_view name);
Availability test_availability(std::string_view name);

Value call_filter(Interpreter& in, std::string_view name, const Value& v, CallArgs& args);
bool call_test(Interpreter& in, std::string_view name, const Value& v, CallArgs& args);

}  // namespace troupe::chat
