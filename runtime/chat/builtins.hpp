// Jinja2's built-in filters, tests and global functions, plus transformers' additions
// (tojson with json.dumps' options, raise_exception, strftime_now), over Values.
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

/// range, dict, namespace, cycler, joiner, raise_exception, strftime_now.
void add_globals(Scope& scope);

}  // namespace troupe::chat
