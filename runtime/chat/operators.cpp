#include "runtime/chat/operators.hpp"

#include "runtime/chat/format.hpp"
#include "runtime/chat/methods.hpp"
#include "runtime/chat/unicode.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace troupe::chat {

namespace {

using ast::BinaryOp;
using ast::CompareOp;

[[noreturn]] void type_error(std::string message) {
  fault(FaultKind::type, std::move(message));
}

[[noreturn]] void unsupported_operands(const char* op, const Value& a, const Value& b) {
  type_error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a),
                         type_name(b)));
}

std::int64_t checked(bool overflow, std::int64_t v) {
  if (overflow)
    fault(FaultKind::unsupported, "integer result beyond the 64-bit range troupe's templates use");
  return v;
}

Value repeat(const Value& seq, std::int64_t n, Budget& budget) {
  if (n <= 0) {
    if (seq.is_string()) return string_like(seq, "");
    return Value::sequence({}, seq.seq_kind());
  }
  if (seq.is_string()) {
    const auto size = seq.str().size();
    if (size && static_cast<std::uint64_t>(n) > budget.limits().max_string_bytes / size + 1)
      budget.bytes(budget.limits().max_string_bytes + 1);
    budget.bytes(size * static_cast<std::size_t>(n));
    std::string out;
    out.reserve(size * static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) out += seq.str();
    return string_like(seq, std::move(out));
  }
  const auto size = seq.items().size();
  budget.steps(size * static_cast<std::size_t>(std::min<std::int64_t>(n, 1 << 30)));
  List out;
  for (std::int64_t i = 0; i < n; ++i)
    out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::sequence(std::move(out), seq.seq_kind());
}

bool is_plain_seq(const Value& v) {
  return v.is_sequence() && (v.seq_kind() == SeqKind::list || v.seq_kind() == SeqKind::tuple);
}

double float_floordiv(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) div -= 1.0;
  }
  if (div != 0.0) {
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return floordiv;
  }
  return std::copysign(0.0, vx / wx);
}

double float_mod(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) mod += wx;
  } else {
    mod = std::copysign(0.0, wx);
  }
  return mod;
}

Value arithmetic(BinaryOp op, const Value& a, const Value& b) {
  const char* sym = op == BinaryOp::add        ? "+"
                    : op == BinaryOp::sub      ? "-"
                    : op == BinaryOp::mul      ? "*"
                    : op == BinaryOp::div      ? "/"
                    : op == BinaryOp::floordiv ? "//"
                    : op == BinaryOp::mod      ? "%"
                                               : "** or pow()";
  if (!a.is_number() || !b.is_number()) unsupported_operands(sym, a, b);
  const bool floats = a.is_float() || b.is_float();
  if (op == BinaryOp::div) {
    if (b.as_double() == 0.0)
      fault(FaultKind::type, floats ? "float division by zero" : "division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (floats) {
    const double x = a.as_double(), y = b.as_double();
    switch (op) {
      case BinaryOp::add:
        return Value::floating(x + y);
      case BinaryOp::sub:
        return Value::floating(x - y);
      case BinaryOp::mul:
        return Value::floating(x * y);
      case BinaryOp::floordiv:
        if (y == 0.0) fault(FaultKind::type, "float floor division by zero");
        return Value::floating(float_floordiv(x, y));
      case BinaryOp::mod:
        if (y == 0.0) fault(FaultKind::type, "float modulo");
        return Value::floating(float_mod(x, y));
      case BinaryOp::pow: {
        if (x == 0.0 && y < 0) fault(FaultKind::type, "0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y))
          fault(FaultKind::unsupported,
                "a negative number to a fractional power is complex; "
                "troupe's templates have no complex numbers");
        const double r = std::pow(x, y);
        if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
          fault(FaultKind::type, "(34, 'Numerical result out of range')");
        return Value::floating(r);
      }
      default:
        break;
    }
  }
  const std::int64_t x = a.as_int(), y = b.as_int();
  std::int64_t r = 0;
  switch (op) {
    case BinaryOp::add:
      checked(__builtin_add_overflow(x, y, &r), 0);
      return Value::integer(r);
    case BinaryOp::sub:
      checked(__builtin_sub_overflow(x, y, &r), 0);
      return Value::integer(r);
    case BinaryOp::mul:
      checked(__builtin_mul_overflow(x, y, &r), 0);
      return Value::integer(r);
    case BinaryOp::floordiv: {
      if (y == 0) fault(FaultKind::type, "integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) checked(true, 0);
      std::int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return Value::integer(q);
    }
    case BinaryOp::mod: {
      if (y == 0) fault(FaultKind::type, "integer modulo by zero");
      if (y == -1) return Value::integer(0);
      std::int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value::integer(m);
    }
    case BinaryOp::pow: {
      if (y < 0) {
        if (x == 0) fault(FaultKind::type, "0.0 cannot be raised to a negative power");
        return Value::floating(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      std::int64_t result = 1, base = x, e = y;
      while (e > 0) {
        if (e & 1) checked(__builtin_mul_overflow(result, base, &result), 0);
        e >>= 1;
        if (e) checked(__builtin_mul_overflow(base, base, &base), 0);
      }
      return Value::integer(result);
    }
    default:
      break;
  }
  return Value::none();
}

const char* compare_symbol(CompareOp op) {
  switch (op) {
    case CompareOp::lt:
      return "<";
    case CompareOp::le:
      return "<=";
    case CompareOp::gt:
      return ">";
    case CompareOp::ge:
      return ">=";
    default:
      return "==";
  }
}

template <class T>
bool apply_order(CompareOp op, const T& x, const T& y) {
  switch (op) {
    case CompareOp::lt:
      return x < y;
    case CompareOp::le:
      return x <= y;
    case CompareOp::gt:
      return x > y;
    case CompareOp::ge:
      return x >= y;
    default:
      return false;
  }
}

bool order(CompareOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return apply_order(op, a.as_double(), b.as_double());
    return apply_order(op, a.as_int(), b.as_int());
  }
  if (a.is_string() && b.is_string()) return apply_order(op, a.str(), b.str());
  if (is_plain_seq(a) && is_plain_seq(b) && a.seq_kind() == b.seq_kind()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals(x[i], y[i])) return order(op, x[i], y[i]);
    return apply_order(op, x.size(), y.size());
  }
  type_error(fmt::format("'{}' not supported between instances of '{}' and '{}'",
                         compare_symbol(op), type_name(a), type_name(b)));
}

// Python's slice.indices(): normalised start/stop for a given step and length.
void slice_indices(std::int64_t len, std::int64_t step, const Value& start, const Value& stop,
                   std::int64_t& lo, std::int64_t& hi) {
  auto adjust = [&](const Value& v, bool is_start) {
    if (v.is_none() || v.is_undefined()) {
      if (is_start) return step < 0 ? len - 1 : 0;
      return step < 0 ? std::int64_t{-1} : len;
    }
    std::int64_t i = v.as_int();
    if (i < 0) {
      i += len;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= len) {
      i = step < 0 ? len - 1 : len;
    }
    return i;
  };
  lo = adjust(start, true);
  hi = adjust(stop, false);
}

}  // namespace

// ---- arithmetic --------------------------------------------------------------------------
Value binary(BinaryOp op, const Value& a, const Value& b, Budget& budget) {
  // str % anything formats before Undefined's __rmod__ is consulted (str's slot runs first).
  if (op == BinaryOp::mod && a.is_string()) {
    if (a.is_markup())
      fault(FaultKind::unsupported, "% formatting of Markup strings is not supported");
    return Value::string(percent_format(a.str(), b, budget));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (op == BinaryOp::add) {
    if (a.is_string() && b.is_string()) {
      const bool markup = a.is_markup() || b.is_markup();
      const std::string left = markup && !a.is_markup() ? html_escape(a.str()) : a.str();
      const std::string right = markup && !b.is_markup() ? html_escape(b.str()) : b.str();
      budget.bytes(left.size() + right.size());
      return Value::string(left + right, markup);
    }
    if (a.is_string())
      type_error(fmt::format("can only concatenate str (not \"{}\") to str", type_name(b)));
    if (is_plain_seq(a) && is_plain_seq(b) && a.seq_kind() == b.seq_kind()) {
      budget.steps(a.items().size() + b.items().size());
      List out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::sequence(std::move(out), a.seq_kind());
    }
    if (is_plain_seq(a))
      type_error(
          fmt::format("can only concatenate {0} (not \"{1}\") to {0}", type_name(a), type_name(b)));
  }
  if (op == BinaryOp::mul) {
    const bool a_seq = a.is_string() || is_plain_seq(a);
    const bool b_seq = b.is_string() || is_plain_seq(b);
    if (a_seq && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), budget);
    if (b_seq && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), budget);
    if (a_seq && b.is_number())
      type_error(fmt::format("can't multiply sequence by non-int of type '{}'", type_name(b)));
    if (b_seq && a.is_number())
      type_error(fmt::format("can't multiply sequence by non-int of type '{}'", type_name(a)));
  }
  return arithmetic(op, a, b);
}

Value negate(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return Value::floating(-v.as_double());
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) checked(true, 0);
    return Value::integer(-v.as_int());
  }
  type_error(fmt::format("bad operand type for unary -: '{}'", type_name(v)));
}

Value unary_plus(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  type_error(fmt::format("bad operand type for unary +: '{}'", type_name(v)));
}

// ---- comparison --------------------------------------------------------------------------
bool less_than(const Value& a, const Value& b) {
  return order(CompareOp::lt, a, b);
}

bool compare(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::eq:
      return equals(a, b);
    case CompareOp::ne:
      return !equals(a, b);
    case CompareOp::in:
      return contains(b, a);
    case CompareOp::not_in:
      return !contains(b, a);
    default:
      return order(op, a, b);
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::undefined:
      return false;  // Undefined iterates as empty
    case Value::Kind::string:
      if (!item.is_string())
        type_error(
            fmt::format("'in <string>' requires string as left operand, not {}", type_name(item)));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::sequence: {
      if (container.is_generator()) {
        auto& st = container.seq_state();
        const auto& items = container.items();
        while (st.cursor < items.size())
          if (equals(items[st.cursor++], item)) return true;
        return false;
      }
      for (const auto& x : container.items())
        if (equals(x, item)) return true;
      return false;
    }
    case Value::Kind::dict:
      if (item.is_sequence() && item.seq_kind() != SeqKind::tuple)
        type_error(fmt::format("unhashable type: '{}'", type_name(item)));
      if (item.is_dict()) type_error("unhashable type: 'dict'");
      return item.is_string() && container.dict().find(item.str()) != nullptr;
    default:
      type_error(fmt::format("argument of type '{}' is not iterable", type_name(container)));
  }
}

// ---- attributes and items ----------------------------------------------------------------
namespace {

bool is_dunder(std::string_view name) {
  return name.size() > 4 && name.substr(0, 2) == "__" && name.substr(name.size() - 2) == "__";
}

Value unsafe(const Value& obj, std::string_view name) {
  return Value::undefined(fmt::format("access to attribute {} of {} object is unsafe.",
                                      str_repr(name), str_repr(type_name(obj))),
                          FaultKind::security);
}

// getattr(obj, name) without the item fallback: Python attributes only.
std::optional<Value> python_attribute(const Value& obj, std::string_view name) {
  if (is_dunder(name)) return unsafe(obj, name);
  if (obj.is_object()) return obj.object()->getattr(name);
  return builtin_attribute(obj, name);
}

}  // namespace

Value get_attr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (auto attr = python_attribute(obj, name)) return *attr;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  }
  return missing_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  const bool int_key = key.is_int() || key.is_bool();
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict().find(key.str())) return *v;
  } else if (int_key &&
             (obj.is_string() ||
              (obj.is_sequence() && (is_plain_seq(obj) || obj.seq_kind() == SeqKind::range)))) {
    const std::int64_t n = length(obj);
    std::int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (!obj.is_string()) return obj.items()[static_cast<std::size_t>(i)];
      const auto& s = obj.str();
      std::size_t at = utf8_offset(s, static_cast<std::size_t>(i));
      std::size_t end = at;
      utf8_next(s, end);
      return string_like(obj, s.substr(at, end - at));
    }
    return missing_item(obj, key);
  }
  if (key.is_string()) {
    if (auto attr = python_attribute(obj, key.str())) return *attr;
  }
  return missing_item(obj, key);
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto index_like = [](const Value& v) {
    return v.is_undefined() || v.is_none() || v.is_int() || v.is_bool();
  };
  const bool sliceable =
      obj.is_string() ||
      (obj.is_sequence() && (is_plain_seq(obj) || obj.seq_kind() == SeqKind::range));
  // Jinja2 compiles slices to Python's own obj[a:b:c], so failures raise (no undefined).
  if (!sliceable) {
    if (obj.is_dict()) fault(FaultKind::type, "unhashable type: 'slice'");
    fault(FaultKind::type, fmt::format("'{}' object is not subscriptable", type_name(obj)));
  }
  if (!index_like(start) || !index_like(stop) || !index_like(step))
    fault(FaultKind::type, "slice indices must be integers or None or have an __index__ method");
  const std::int64_t st = step.is_undefined() || step.is_none() ? 1 : step.as_int();
  if (st == 0) fault(FaultKind::type, "slice step cannot be zero");
  std::vector<char32_t> cps;
  if (obj.is_string()) cps = utf8_decode(obj.str());
  const std::int64_t len = obj.is_string() ? static_cast<std::int64_t>(cps.size())
                                           : static_cast<std::int64_t>(obj.items().size());
  std::int64_t lo, hi;
  slice_indices(len, st, start, stop, lo, hi);
  std::vector<std::int64_t> picked;
  for (std::int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) picked.push_back(i);
  if (obj.is_string()) {
    std::string out;
    for (auto i : picked) utf8_append(out, cps[static_cast<std::size_t>(i)]);
    return string_like(obj, std::move(out));
  }
  if (obj.seq_kind() == SeqKind::range) {
    // Python's range slicing: range(start + lo*step, start + hi*step, step*st).
    const auto& r = obj.seq_state();
    return Value::range(r.start + lo * r.step, r.start + hi * r.step, r.step * st);
  }
  List out;
  out.reserve(picked.size());
  for (auto i : picked) out.push_back(obj.items()[static_cast<std::size_t>(i)]);
  return Value::sequence(std::move(out), obj.seq_kind());
}

// ---- iteration ---------------------------------------------------------------------------
List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return {};
    case Value::Kind::string: {
      List out;
      const auto& s = v.str();
      for (std::size_t i = 0; i < s.size();) {
        const std::size_t start = i;
        utf8_next(s, i);
        out.push_back(string_like(v, s.substr(start, i - start)));
      }
      return out;
    }
    case Value::Kind::sequence: {
      if (!v.is_generator()) return v.items();
      auto& st = v.seq_state();
      List out(v.items().begin() + static_cast<std::ptrdiff_t>(st.cursor), v.items().end());
      st.cursor = v.items().size();
      return out;
    }
    case Value::Kind::dict: {
      List out;
      out.reserve(v.dict().size());
      for (const auto& [k, item] : v.dict().items()) out.push_back(Value::string(k));
      return out;
    }
    default:
      type_error(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

std::int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return 0;
    case Value::Kind::string:
      return static_cast<std::int64_t>(utf8_length(v.str()));
    case Value::Kind::sequence:
      if (v.is_generator()) type_error("object of type 'generator' has no len()");
      return static_cast<std::int64_t>(v.items().size());
    case Value::Kind::dict:
      return static_cast<std::int64_t>(v.dict().size());
    default:
      type_error(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

// ---- markup ------------------------------------------------------------------------------
std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value escape(const Value& v) {
  if (v.is_markup()) return v;
  return Value::string(html_escape(to_str(v)), true);
}

Value string_like(const Value& like, std::string s) {
  return Value::string(std::move(s), like.is_markup());
}

// ---- number parsing ----------------------------------------------------------------------
namespace {

std::string_view py_strip(std::string_view s) {
  std::size_t begin = 0, end = 0;
  bool seen = false;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t at = i;
    if (!py_isspace(utf8_next(s, i))) {
      if (!seen) begin = at;
      seen = true;
      end = i;
    }
  }
  return seen ? s.substr(begin, end - begin) : std::string_view();
}

// Digits with single underscores between them (Python's numeric literal rule).
std::optional<std::string> strip_digit_underscores(std::string_view s, int base) {
  std::string out;
  bool prev_digit = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (!prev_digit || i + 1 == s.size()) return std::nullopt;
      prev_digit = false;
      continue;
    }
    int d = c >= '0' && c <= '9'                     ? c - '0'
            : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10
                                                     : 99;
    if (d >= base) return std::nullopt;
    out += c;
    prev_digit = true;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace

std::optional<std::int64_t> parse_int(std::string_view text, int base) {
  std::string_view s = py_strip(text);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.size() > 2 && s[0] == '0') {
    const char p = static_cast<char>(s[1] | 0x20);
    const int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefixed && (base == prefixed || base == 0)) {
      base = prefixed;
      s.remove_prefix(2);
      if (!s.empty() && s[0] == '_') s.remove_prefix(1);
    }
  }
  if (base == 0) {
    // Base 0 reads a literal: no prefix means decimal, and a leading zero only for zero.
    base = 10;
    if (s.size() > 1 && s[0] == '0' && s.find_first_not_of("0_") != std::string_view::npos)
      return std::nullopt;
  }
  auto digits = strip_digit_underscores(s, base);
  if (!digits) return std::nullopt;
  errno = 0;
  const unsigned long long u = std::strtoull(digits->c_str(), nullptr, base);
  if (errno == ERANGE || u > static_cast<unsigned long long>(INT64_MAX) + (negative ? 1 : 0))
    fault(FaultKind::unsupported,
          fmt::format("integer {} is beyond the 64-bit range troupe's templates use", text));
  if (negative) return static_cast<std::int64_t>(0 - u);
  return static_cast<std::int64_t>(u);
}

std::optional<double> parse_float(std::string_view text) {
  std::string_view s = py_strip(text);
  std::string t(s);
  std::string sign;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    sign = t.substr(0, 1);
    t.erase(0, 1);
  }
  std::string lower;
  for (char c : t) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c | 0x20 : c);
  if (lower == "inf" || lower == "infinity")
    return sign == "-" ? -std::numeric_limits<double>::infinity()
                       : std::numeric_limits<double>::infinity();
  if (lower == "nan") return std::numeric_limits<double>::quiet_NaN();
  // digits [. digits] [e [sign] digits], or . digits ...; underscores only between digits.
  std::string clean;
  std::size_t i = 0;
  auto digits = [&](bool required) {
    const std::size_t start = clean.size();
    bool prev_digit = false;
    while (i < t.size()) {
      if (t[i] >= '0' && t[i] <= '9') {
        clean += t[i++];
        prev_digit = true;
      } else if (t[i] == '_' && prev_digit && i + 1 < t.size() && t[i + 1] >= '0' &&
                 t[i + 1] <= '9') {
        ++i;
        prev_digit = false;
      } else {
        break;
      }
    }
    return !required || clean.size() > start;
  };
  const bool int_part = digits(false) && !clean.empty();
  bool frac_part = false;
  if (i < t.size() && t[i] == '.') {
    clean += t[i++];
    const std::size_t before = clean.size();
    digits(false);
    frac_part = clean.size() > before;
  }
  if (!int_part && !frac_part) return std::nullopt;
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    clean += t[i++];
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) clean += t[i++];
    if (!digits(true)) return std::nullopt;
  }
  if (i != t.size()) return std::nullopt;
  return std::strtod((sign + clean).c_str(), nullptr);
}

double round_half_even(double x, std::int64_t ndigits) {
  if (!std::isfinite(x) || x == 0.0) return x;
  if (ndigits > 323) return x;
  if (ndigits >= 0) {
    // glibc prints the exact binary value rounded to nearest, ties to even: CPython's
    // round() does the same through its correctly rounded dtoa.
    std::vector<char> buf(static_cast<std::size_t>(ndigits) + 400);
    std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf.data(), nullptr);
  }
  if (ndigits < -308) return std::copysign(0.0, x);
  // Negative ndigits: round the exact decimal expansion at 10^-ndigits, ties to even.
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.60f", std::fabs(x));
  std::string s(buf);
  const std::size_t dot = s.find('.');
  std::string int_digits = s.substr(0, dot);
  const std::string frac = s.substr(dot + 1);
  const std::size_t keep_len = static_cast<std::size_t>(-ndigits);
  if (int_digits.size() < keep_len) int_digits.insert(0, keep_len - int_digits.size(), '0');
  std::string head = int_digits.substr(0, int_digits.size() - keep_len);
  const std::string tail = int_digits.substr(int_digits.size() - keep_len) + frac;
  // Compare the tail against one half (5 followed by zeros).
  int cmp = tail[0] > '5' ? 1 : tail[0] < '5' ? -1 : 0;
  if (cmp == 0 && tail.find_first_not_of('0', 1) != std::string::npos) cmp = 1;
  const int last = head.empty() ? 0 : head.back() - '0';
  bool up = cmp > 0 || (cmp == 0 && last % 2 == 1);
  double h = head.empty() ? 0.0 : std::strtod(head.c_str(), nullptr);
  if (up) h += 1.0;
  const double r = h * std::pow(10.0, static_cast<double>(keep_len));
  return std::copysign(r, x);
}

}  // namespace troupe::chat
