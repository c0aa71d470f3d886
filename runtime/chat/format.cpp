#include "runtime/chat/format.hpp"

#include "runtime/chat/operators.hpp"
#include "runtime/chat/unicode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace troupe::chat {

namespace {

[[noreturn]] void type_error(std::string m) {
  fault(FaultKind::type, std::move(m));
}

std::string pad(std::string body, std::size_t width, char align, const std::string& fill,
                std::size_t sign_len = 0) {
  const std::size_t len = utf8_length(body);
  if (len >= width) return body;
  const std::size_t n = width - len;
  auto fills = [&](std::size_t k) {
    std::string out;
    for (std::size_t i = 0; i < k; ++i) out += fill;
    return out;
  };
  switch (align) {
    case '<':
      return body + fills(n);
    case '^':
      return fills(n / 2) + body + fills(n - n / 2);
    case '=':
      return body.substr(0, sign_len) + fills(n) + body.substr(sign_len);
    default:
      return fills(n) + body;
  }
}

std::string to_base(std::uint64_t u, int base, bool upper) {
  if (u == 0) return "0";
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  while (u) {
    out.insert(out.begin(), digits[u % static_cast<unsigned>(base)]);
    u /= static_cast<unsigned>(base);
  }
  return out;
}

std::uint64_t magnitude(std::int64_t v) {
  return v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
}

std::string group_digits(const std::string& digits, char sep, std::size_t every) {
  std::string out;
  const std::size_t n = digits.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (i && (n - i) % every == 0) out += sep;
    out += digits[i];
  }
  return out;
}

// C's printf for one float conversion (Python's %-formatting of floats matches it).
std::string c_float(double d, char type, int precision, bool alt) {
  char spec[16];
  std::snprintf(spec, sizeof spec, "%%%s.%d%c", alt ? "#" : "", precision, type);
  char buf[512];
  const int n = std::snprintf(buf, sizeof buf, spec, d);
  if (n < 0 || n >= static_cast<int>(sizeof buf)) {
    std::vector<char> big(static_cast<std::size_t>(n) + 1);
    std::snprintf(big.data(), big.size(), spec, d);
    return big.data();
  }
  return buf;
}

}  // namespace

std::string ascii_repr(const Value& v) {
  const std::string r = repr(v);
  std::string out;
  for (std::size_t i = 0; i < r.size();) {
    const char32_t c = utf8_next(r, i);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else {
      append_escaped(out, c);
    }
  }
  return out;
}

// ---- printf style ------------------------------------------------------------------------
std::string percent_format(std::string_view fmt, const Value& args, Budget& budget) {
  List positional;
  const Value* mapping = nullptr;
  if (args.is_tuple()) {
    positional = args.items();
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args;
  }
  std::size_t next_arg = 0;
  auto take = [&]() -> const Value& {
    if (next_arg >= positional.size()) type_error("not enough arguments for format string");
    return positional[next_arg++];
  };
  std::string out;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fault(FaultKind::type, "incomplete format");
    if (fmt[i] == '%') {
      out += '%';
      continue;
    }
    const Value* value = nullptr;
    Value keyed;
    if (fmt[i] == '(') {
      if (!mapping) type_error("format requires a mapping");
      int depth = 1;
      const std::size_t start = ++i;
      while (i < fmt.size() && depth) {
        if (fmt[i] == '(') ++depth;
        if (fmt[i] == ')') --depth;
        ++i;
      }
      if (depth) fault(FaultKind::type, "incomplete format key");
      const std::string key(fmt.substr(start, i - 1 - start));
      const Value* found = mapping->dict().find(key);
      if (!found) fault(FaultKind::type, str_repr(key));
      keyed = *found;
      value = &keyed;
    }
    bool left = false, plus = false, space = false, alt = false, zero = false;
    for (; i < fmt.size(); ++i) {
      const char c = fmt[i];
      if (c == '-') {
        left = true;
      } else if (c == '+') {
        plus = true;
      } else if (c == ' ') {
        space = true;
      } else if (c == '#') {
        alt = true;
      } else if (c == '0') {
        zero = true;
      } else {
        break;
      }
    }
    auto number = [&](bool allow_star) -> std::int64_t {
      if (allow_star && i < fmt.size() && fmt[i] == '*') {
        ++i;
        const Value& w = take();
        if (!w.is_int() && !w.is_bool()) type_error("* wants int");
        return w.as_int();
      }
      std::int64_t n = 0;
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') n = n * 10 + (fmt[i++] - '0');
      return n;
    };
    std::int64_t width = number(true);
    if (width < 0) {
      left = true;
      width = -width;
    }
    std::int64_t precision = -1;
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      precision = number(true);
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) fault(FaultKind::type, "incomplete format");
    const char type = fmt[i];
    budget.bytes(static_cast<std::size_t>(width));
    budget.bytes(static_cast<std::size_t>(std::max<std::int64_t>(precision, 0)));
    const Value& v = value ? *value : take();
    std::string body;
    std::size_t sign_len = 0;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        body = type == 's' ? to_str(v) : type == 'r' ? repr(v) : ascii_repr(v);
        if (precision >= 0)
          body = body.substr(0, utf8_offset(body, static_cast<std::size_t>(precision)));
        zero = false;
        break;
      }
      case 'c': {
        if (v.is_string() && utf8_length(v.str()) == 1) {
          body = v.str();
        } else if (v.is_int() || v.is_bool()) {
          const auto cp = v.as_int();
          if (cp < 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
            fault(FaultKind::type, "%c arg not in range(0x110000)");
          utf8_append(body, static_cast<char32_t>(cp));
        } else {
          type_error("%c requires int or char");
        }
        zero = false;
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'o':
      case 'x':
      case 'X': {
        std::int64_t n;
        const bool int_only = type == 'o' || type == 'x' || type == 'X';
        if (v.is_int() || v.is_bool()) {
          n = v.as_int();
        } else if (v.is_float() && !int_only) {
          const double d = v.as_double();
          if (!std::isfinite(d))
            fault(FaultKind::type, "cannot convert float infinity or NaN to integer");
          n = static_cast<std::int64_t>(std::trunc(d));
        } else {
          type_error(fmt::format("%{} format: {} is required, not {}", type,
                                 int_only ? "an integer" : "a real number", type_name(v)));
        }
        const int base = type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
        std::string digits = to_base(magnitude(n), base, type == 'X');
        if (precision > static_cast<std::int64_t>(digits.size()))
          digits.insert(0, static_cast<std::size_t>(precision) - digits.size(), '0');
        std::string prefix = n < 0 ? "-" : plus ? "+" : space ? " " : "";
        if (alt && base == 8) prefix += "0o";
        if (alt && base == 16) prefix += type == 'X' ? "0X" : "0x";
        body = prefix + digits;
        sign_len = prefix.size();
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (!v.is_number()) type_error(fmt::format("must be real number, not {}", type_name(v)));
        const double d = v.as_double();
        body = c_float(std::fabs(d), type, precision < 0 ? 6 : static_cast<int>(precision), alt);
        std::string prefix = std::signbit(d) && !std::isnan(d) ? "-"
                             : plus                            ? "+"
                             : space                           ? " "
                                                               : "";
        body = prefix + body;
        sign_len = prefix.size();
        if (!std::isfinite(d)) zero = false;
        break;
      }
      default:
        fault(FaultKind::type,
              fmt::format("unsupported format character {} (0x{:x}) at index {}",
                          str_repr(std::string(1, type)), static_cast<unsigned char>(type), i));
    }
    const auto w = static_cast<std::size_t>(width);
    if (left) {
      body = pad(std::move(body), w, '<', " ");
    } else if (zero) {
      body = pad(std::move(body), w, '=', "0", sign_len);
    } else {
      body = pad(std::move(body), w, '>', " ");
    }
    budget.bytes(out.size() + body.size());
    out += body;
  }
  if (!mapping && next_arg < positional.size())
    type_error("not all arguments converted during string formatting");
  return out;
}

// ---- format(value, spec) -----------------------------------------------------------------
namespace {

struct Spec {
  std::string fill = " ";
  char align = 0;
  char sign = '-';
  bool alt = false;
  std::size_t width = 0;
  char grouping = 0;
  int precision = -1;
  char type = 0;
};

Spec parse_spec(std::string_view spec, const Value& v) {
  Spec s;
  std::size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '=' || c == '^'; };
  // fill may be any code point followed by an align character
  std::size_t after_first = 0;
  if (!spec.empty()) utf8_next(spec, after_first);
  if (after_first < spec.size() && is_align(spec[after_first])) {
    s.fill = std::string(spec.substr(0, after_first));
    s.align = spec[after_first];
    i = after_first + 1;
  } else if (!spec.empty() && is_align(spec[0])) {
    s.align = spec[0];
    i = 1;
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) s.sign = spec[i++];
  if (i < spec.size() && spec[i] == 'z')
    fault(FaultKind::unsupported, "the 'z' format option is not supported");
  if (i < spec.size() && spec[i] == '#') {
    s.alt = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    if (!s.align) {
      s.fill = "0";
      s.align = '=';
    }
    ++i;
  }
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9')
    s.width = s.width * 10 + static_cast<std::size_t>(spec[i++] - '0');
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) s.grouping = spec[i++];
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    if (i >= spec.size() || spec[i] < '0' || spec[i] > '9')
      fault(FaultKind::type, "Format specifier missing precision");
    s.precision = 0;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9')
      s.precision = s.precision * 10 + (spec[i++] - '0');
  }
  if (i < spec.size()) s.type = spec[i++];
  if (i != spec.size())
    fault(FaultKind::type,
          fmt::format("Invalid format specifier '{}' for object of type '{}'", spec, type_name(v)));
  return s;
}

std::string format_float(double d, const Spec& s) {
  std::string body;
  char type = s.type;
  const double a = std::fabs(d);
  bool percent = false;
  if (type == '%') {
    percent = true;
    type = 'f';
  }
  if (!std::isfinite(d)) {
    body = std::isnan(d) ? "nan" : "inf";
    if (type == 'E' || type == 'F' || type == 'G') body = std::isnan(d) ? "NAN" : "INF";
    if (percent) body += '%';
  } else if (type == 0 && s.precision < 0) {
    body = float_repr(a);
  } else if (type == 0) {
    // Like 'g' with at least one digit after the point, switching to exponent at p - 1.
    const int p = s.precision == 0 ? 1 : s.precision;
    const std::string e = c_float(a, 'e', p - 1, false);
    const int exp = std::stoi(e.substr(e.find('e') + 1));
    if (exp >= -4 && exp < p - 1) {
      body = c_float(a, 'f', p - 1 - exp, false);
      if (body.find('.') != std::string::npos) {
        while (body.back() == '0') body.pop_back();
        if (body.back() == '.') body += '0';
      } else {
        body += ".0";
      }
    } else {
      body = c_float(a, 'e', p - 1, false);
      const std::size_t e = body.find('e');
      std::string mantissa = body.substr(0, e);
      if (mantissa.find('.') != std::string::npos) {
        while (mantissa.back() == '0') mantissa.pop_back();
        if (mantissa.back() == '.') mantissa.pop_back();
      }
      body = mantissa + body.substr(e);
    }
  } else if (type == 'e' || type == 'E' || type == 'f' || type == 'F' || type == 'g' ||
             type == 'G') {
    body = c_float(percent ? a * 100 : a, type, s.precision < 0 ? 6 : s.precision, s.alt);
    if (percent) body += '%';
  } else {
    fault(FaultKind::type,
          fmt::format("Unknown format code '{}' for object of type 'float'", type));
  }
  if (s.grouping && std::isfinite(d)) {
    std::size_t end = body.find_first_of(".eE%");
    if (end == std::string::npos) end = body.size();
    body = group_digits(body.substr(0, end), s.grouping, 3) + body.substr(end);
  }
  std::string sign = std::signbit(d) && !std::isnan(d) ? "-"
                     : s.sign == '+'                   ? "+"
                     : s.sign == ' '                   ? " "
                                                       : "";
  return pad(sign + body, s.width, s.align ? s.align : '>', s.fill, sign.size());
}

std::string format_int(std::int64_t n, const Spec& s) {
  char type = s.type ? s.type : 'd';
  if (type == 'e' || type == 'E' || type == 'f' || type == 'F' || type == 'g' || type == 'G' ||
      type == '%')
    return format_float(static_cast<double>(n), s);
  if (s.precision >= 0) fault(FaultKind::type, "Precision not allowed in integer format specifier");
  std::string digits;
  std::string prefix;
  switch (type) {
    case 'd':
    case 'n':
      digits = to_base(magnitude(n), 10, false);
      if (s.grouping) digits = group_digits(digits, s.grouping, 3);
      break;
    case 'b':
    case 'o':
    case 'x':
    case 'X': {
      const int base = type == 'b' ? 2 : type == 'o' ? 8 : 16;
      digits = to_base(magnitude(n), base, type == 'X');
      if (s.grouping == '_') digits = group_digits(digits, '_', 4);
      if (s.grouping == ',')
        fault(FaultKind::type, fmt::format("Cannot specify ',' with '{}'.", type));
      if (s.alt) prefix = type == 'b' ? "0b" : type == 'o' ? "0o" : type == 'x' ? "0x" : "0X";
      break;
    }
    case 'c': {
      if (n < 0 || n > 0x10FFFF) fault(FaultKind::type, "%c arg not in range(0x110000)");
      utf8_append(digits, static_cast<char32_t>(n));
      break;
    }
    default:
      fault(FaultKind::type,
            fmt::format("Unknown format code '{}' for object of type 'int'", type));
  }
  const std::string sign = n < 0 ? "-" : s.sign == '+' ? "+" : s.sign == ' ' ? " " : "";
  return pad(sign + prefix + digits, s.width, s.align ? s.align : '>', s.fill,
             sign.size() + prefix.size());
}

}  // namespace

std::string format_value(const Value& v, std::string_view spec, Budget& budget) {
  if (spec.empty()) return to_str(v);
  const Spec s = parse_spec(spec, v);
  budget.bytes(s.width);
  budget.bytes(static_cast<std::size_t>(std::max(s.precision, 0)));
  if (v.is_string()) {
    if (s.type && s.type != 's')
      fault(FaultKind::type,
            fmt::format("Unknown format code '{}' for object of type 'str'", s.type));
    if (s.sign != '-') fault(FaultKind::type, "Sign not allowed in string format specifier");
    if (s.align == '=')
      fault(FaultKind::type, "'=' alignment not allowed in string format specifier");
    std::string body = v.str();
    if (s.precision >= 0)
      body = body.substr(0, utf8_offset(body, static_cast<std::size_t>(s.precision)));
    return pad(std::move(body), s.width, s.align ? s.align : '<', s.fill);
  }
  if (v.is_float()) return format_float(v.as_double(), s);
  if (v.is_int() || v.is_bool()) return format_int(v.as_int(), s);
  type_error(fmt::format("unsupported format string passed to {}.__format__", type_name(v)));
}

// ---- str.format --------------------------------------------------------------------------
std::string str_format(std::string_view f, const CallArgs& args, Budget& budget) {
  std::string out;
  int auto_index = 0;
  bool manual = false, automatic = false;
  for (std::size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      fault(FaultKind::type, "Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    // Find the matching '}', allowing brackets in the field name.
    std::size_t j = i + 1;
    int depth = 1;
    bool in_bracket = false;
    for (; j < f.size(); ++j) {
      if (in_bracket) {
        if (f[j] == ']') in_bracket = false;
        continue;
      }
      if (f[j] == '[') in_bracket = true;
      if (f[j] == '{') ++depth;
      if (f[j] == '}' && --depth == 0) break;
    }
    if (j >= f.size()) fault(FaultKind::type, "expected '}' before end of string");
    std::string_view field = f.substr(i + 1, j - i - 1);
    i = j;
    // field_name [!conversion] [:spec]
    std::size_t k = 0;
    while (k < field.size() && field[k] != '.' && field[k] != '[' && field[k] != '!' &&
           field[k] != ':')
      ++k;
    const std::string_view name = field.substr(0, k);
    Value v;
    if (name.empty()) {
      if (manual)
        fault(FaultKind::type,
              "cannot switch from manual field specification to automatic field numbering");
      automatic = true;
      const auto idx = static_cast<std::size_t>(auto_index++);
      if (idx >= args.positional.size())
        fault(FaultKind::type,
              fmt::format("Replacement index {} out of range for positional args tuple", idx));
      v = args.positional[idx];
    } else if (name.find_first_not_of("0123456789") == std::string_view::npos) {
      if (automatic)
        fault(FaultKind::type,
              "cannot switch from automatic field numbering to manual field specification");
      manual = true;
      const auto idx = static_cast<std::size_t>(std::stoull(std::string(name)));
      if (idx >= args.positional.size())
        fault(FaultKind::type,
              fmt::format("Replacement index {} out of range for positional args tuple", idx));
      v = args.positional[idx];
    } else {
      bool found = false;
      for (const auto& [kname, kv] : args.keyword)
        if (kname == name) {
          v = kv;
          found = true;
        }
      if (!found) fault(FaultKind::type, str_repr(name));
    }
    while (k < field.size() && (field[k] == '.' || field[k] == '[')) {
      if (field[k] == '.') {
        std::size_t e = ++k;
        while (e < field.size() && field[e] != '.' && field[e] != '[' && field[e] != '!' &&
               field[e] != ':')
          ++e;
        v = get_attr(v, field.substr(k, e - k));
        k = e;
      } else {
        const std::size_t e = field.find(']', k);
        const std::string key(field.substr(k + 1, e - k - 1));
        if (!key.empty() && key.find_first_not_of("0123456789") == std::string::npos) {
          v = get_item(v, Value::integer(std::stoll(key)));
        } else {
          v = get_item(v, Value::string(key));
        }
        k = e + 1;
      }
    }
    if (k < field.size() && field[k] == '!') {
      const char conv = k + 1 < field.size() ? field[k + 1] : 0;
      if (conv == 'r') {
        v = Value::string(repr(v));
      } else if (conv == 's') {
        v = Value::string(to_str(v));
      } else if (conv == 'a') {
        v = Value::string(ascii_repr(v));
      } else {
        fault(FaultKind::type, "Unknown conversion specifier");
      }
      k += 2;
    }
    std::string_view spec;
    if (k < field.size()) {
      if (field[k] != ':') fault(FaultKind::type, "expected ':' after conversion specifier");
      spec = field.substr(k + 1);
    }
    if (spec.find('{') != std::string_view::npos)
      fault(FaultKind::unsupported, "nested replacement fields in format specs are not supported");
    const std::string piece = format_value(v, spec, budget);
    budget.bytes(out.size() + piece.size());
    out += piece;
  }
  return out;
}

}  // namespace troupe::chat
