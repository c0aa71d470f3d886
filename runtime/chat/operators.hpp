// Python's operators as Jinja2's sandbox applies them: arithmetic, comparison, `in`,
// attribute and item access (attribute first for `a.b`, item first for `a[b]`, a missing
// one giving an undefined), slicing, iteration and len(). Each raises what Python raises,
// as a Fault. String formatting (`%`, str.format) is in format.hpp.
#pragma once

#include "runtime/chat/ast.hpp"
#include "runtime/chat/limits.hpp"
#include "runtime/chat/value.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::chat {

/// a op b for + - * / // % ** (not and/or, which short-circuit in the interpreter).
Value binary(ast::BinaryOp op, const Value& a, const Value& b, Budget& budget);
Value negate(const Value& v);
Value unary_plus(const Value& v);
/// One link of a comparison chain (== != < <= > >= in, not in).
bool compare(ast::CompareOp op, const Value& a, const Value& b);
/// Python's a < b (what sorted(), min() and max() use); TypeError for unorderable types.
bool less_than(const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);

/// Jinja2's sandboxed getattr: `obj.name`.
Value get_attr(const Value& obj, std::string_view name);
/// Jinja2's sandboxed getitem: `obj[key]`.
Value get_item(const Value& obj, const Value& key);
/// obj[start:stop:step], each bound undefined when absent.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

/// The items a for loop (or list()) sees; a generator is consumed.
List iterate(const Value& v);
/// Python's len().
std::int64_t length(const Value& v);

/// markupsafe.escape of a string; escape() of a value keeps Markup as it is.
std::string html_escape(std::string_view s);
Value escape(const Value& v);
/// A string result that keeps the Markup flag of `like` (markupsafe wraps str methods so).
Value string_like(const Value& like, std::string s);

/// Python's int(str, base) (base 2..36, or 0 for a literal's prefix) / float(str); nullopt on
/// ValueError.
std::optional<std::int64_t> parse_int(std::string_view s, int base);
std::optional<double> parse_float(std::string_view s);
/// Python's round(x, ndigits) for a float (correctly rounded, ties to even).
double round_half_even(double x, std::int64_t ndigits);

}  // namespace troupe::chat
