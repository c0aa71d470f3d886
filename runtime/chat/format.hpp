// Python's string formatting as templates reach it: `fmt % args` (printf style, also the
// `format` filter), str.format() and format(value, spec), with Python's output for ints,
// floats and strings (widths count code points).
#pragma once

#include "runtime/chat/limits.hpp"
#include "runtime/chat/value.hpp"

#include <string>
#include <string_view>

namespace troupe::chat {

/// Python's `fmt % args`.
std::string percent_format(std::string_view fmt, const Value& args, Budget& budget);
/// Python's fmt.format(*args, **kwargs) (fields, !r/!s/!a, format specs; no nested fields).
std::string str_format(std::string_view fmt, const CallArgs& args, Budget& budget);
/// Python's format(value, spec). Widths and precisions are charged to `budget` first.
std::string format_value(const Value& v, std::string_view spec, Budget& budget);
/// Python's ascii(v): repr with non-ASCII characters escaped.
std::string ascii_repr(const Value& v);

}  // namespace troupe::chat
