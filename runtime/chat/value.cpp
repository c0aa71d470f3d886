#include "runtime/chat/value.hpp"

#include "runtime/chat/unicode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace troupe::chat {

void fault(FaultKind kind, std::string message) {
  throw Fault{kind, std::move(message)};
}

// ---- Value -------------------------------------------------------------------------------
Value Value::undefined(std::string message, FaultKind kind) {
  return Value(Variant(Undef{std::make_shared<const std::string>(std::move(message)), kind}));
}

Value Value::string(std::string s, bool markup) {
  return Value(Variant(Str{std::make_shared<const std::string>(std::move(s)), markup}));
}

Value Value::sequence(List items, SeqKind kind) {
  Seq seq{std::make_shared<const List>(std::move(items)), kind, nullptr};
  if (kind == SeqKind::generator) seq.state = std::make_shared<SeqState>();
  return Value(Variant(std::move(seq)));
}

Value Value::range(std::int64_t start, std::int64_t stop, std::int64_t step) {
  List items;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    items.push_back(integer(i));
  auto state = std::make_shared<SeqState>();
  state->start = start, state->stop = stop, state->step = step;
  return Value(Variant(Seq{std::make_shared<const List>(std::move(items)), SeqKind::range, state}));
}

Value Value::dict(Dict d) {
  return Value(Variant(std::make_shared<const Dict>(std::move(d))));
}

Value Value::object(std::shared_ptr<Object> o) {
  return Value(Variant(Obj{std::move(o)}));
}

std::int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  if (!is_int())
    fault(FaultKind::type,
          fmt::format("'{}' object cannot be interpreted as an integer", type_name(*this)));
  return std::get<std::int64_t>(v_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(v_);
  if (!is_int() && !is_bool())
    fault(FaultKind::type, fmt::format("must be real number, not {}", type_name(*this)));
  return static_cast<double>(as_int());
}

const std::string& Value::undefined_message() const {
  static const std::string generic = "value is undefined";
  const auto& m = std::get<Undef>(v_).message;
  return m ? *m : generic;
}

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::sequence:
      return std::get<Seq>(v_).items == std::get<Seq>(other.v_).items;
    case Kind::dict:
      return std::get<DictPtr>(v_) == std::get<DictPtr>(other.v_);
    case Kind::object:
      return object() == other.object();
    case Kind::string:
      return std::get<Str>(v_).s == std::get<Str>(other.v_).s;
    default:
      return equals(*this, other);
  }
}

// ---- Dict --------------------------------------------------------------------------------
const Value* Dict::find(std::string_view key) const {
  if (items_.size() <= 8) {
    for (const auto& [k, v] : items_)
      if (k == key) return &v;
    return nullptr;
  }
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void Dict::set(const std::string& key, Value v) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(v);
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(key, std::move(v));
}

// ---- Object ------------------------------------------------------------------------------
std::optional<Value> Object::getattr(std::string_view) const {
  return std::nullopt;
}

Value Object::call(Interpreter&, CallArgs&) const {
  fault(FaultKind::type, fmt::format("'{}' object is not callable", type_name()));
}

bool Object::set_attr(const std::string&, Value) {
  return false;
}

// ---- str / repr --------------------------------------------------------------------------
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<std::size_t>(res.ptr - buf));
  const bool negative = sci.front() == '-';
  if (negative) sci.remove_prefix(1);
  const auto e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  const int exponent = std::stoi(std::string(sci.substr(e + 1)));
  const int decpt = exponent + 1;  // digits[0] sits before the decimal point at decpt
  std::string out = negative ? "-" : "";
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
  } else if (static_cast<std::size_t>(decpt) < digits.size()) {
    out += digits.substr(0, static_cast<std::size_t>(decpt)) + "." +
           digits.substr(static_cast<std::size_t>(decpt));
  } else {
    out += digits + std::string(static_cast<std::size_t>(decpt) - digits.size(), '0') + ".0";
  }
  return out;
}

std::string str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (std::size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c >= 0x20 && c != 0x7F && (c < 0x7F || py_isprintable(c))) {
      utf8_append(out, c);
    } else {
      append_escaped(out, c);
    }
  }
  out += quote;
  return out;
}

namespace {

constexpr int max_repr_depth = 64;

void append_repr(std::string& out, const Value& v, int depth);

void append_items(std::string& out, const List& items, int depth) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_repr(out, items[i], depth);
  }
}

void append_repr(std::string& out, const Value& v, int depth) {
  if (depth > max_repr_depth) fault(FaultKind::limit, "value nested too deeply to print");
  switch (v.kind()) {
    case Value::Kind::undefined:
      out += "Undefined";
      return;
    case Value::Kind::string:
      if (v.is_markup()) {
        out += "Markup(" + str_repr(v.str()) + ")";
      } else {
        out += str_repr(v.str());
      }
      return;
    case Value::Kind::sequence:
      switch (v.seq_kind()) {
        case SeqKind::list:
          out += '[';
          append_items(out, v.items(), depth + 1);
          out += ']';
          return;
        case SeqKind::tuple:
          out += '(';
          append_items(out, v.items(), depth + 1);
          if (v.items().size() == 1) out += ',';
          out += ')';
          return;
        case SeqKind::range: {
          const auto& st = v.seq_state();
          out += st.step == 1 ? fmt::format("range({}, {})", st.start, st.stop)
                              : fmt::format("range({}, {}, {})", st.start, st.stop, st.step);
          return;
        }
        case SeqKind::dict_keys:
        case SeqKind::dict_values:
        case SeqKind::dict_items:
          out += type_name(v) + "([";
          append_items(out, v.items(), depth + 1);
          out += "])";
          return;
        case SeqKind::generator:
          fault(FaultKind::unsupported,
                "cannot print a generator (Jinja2 prints its memory address); apply |list "
                "or |join first");
      }
      return;
    case Value::Kind::dict: {
      out += '{';
      bool first = true;
      for (const auto& [k, item] : v.dict().items()) {
        if (!first) out += ", ";
        first = false;
        out += str_repr(k) + ": ";
        append_repr(out, item, depth + 1);
      }
      out += '}';
      return;
    }
    case Value::Kind::object: {
      auto r = v.object()->repr();
      if (!r)
        fault(FaultKind::unsupported, fmt::format("cannot print a {} (Jinja2 prints its memory "
                                                  "address)",
                                                  v.object()->type_name()));
      out += *r;
      return;
    }
    default:
      out += to_str(v);
  }
}

}  // namespace

std::string repr(const Value& v) {
  std::string out;
  append_repr(out, v, 0);
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::none:
      return "None";
    case Value::Kind::boolean:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::integer:
      return std::to_string(v.as_int());
    case Value::Kind::floating:
      return float_repr(v.as_double());
    case Value::Kind::string:
      return v.str();
    default:
      return repr(v);
  }
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return false;
    case Value::Kind::boolean:
      return v.as_bool();
    case Value::Kind::integer:
      return v.as_int() != 0;
    case Value::Kind::floating:
      return v.as_double() != 0.0;
    case Value::Kind::string:
      return !v.str().empty();
    case Value::Kind::sequence:
      return v.seq_kind() == SeqKind::generator || !v.items().empty();
    case Value::Kind::dict:
      return !v.dict().empty();
    case Value::Kind::object:
      return true;
  }
  return false;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return true;
    case Value::Kind::string:
      return a.str() == b.str();
    case Value::Kind::sequence: {
      const auto ka = a.seq_kind(), kb = b.seq_kind();
      if (ka == SeqKind::generator || kb == SeqKind::generator) return a.same_object(b);
      if (ka != kb) return false;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      if (ka == SeqKind::dict_keys || ka == SeqKind::dict_items) {
        // Set-like views compare regardless of order.
        for (const auto& item : x)
          if (std::none_of(y.begin(), y.end(), [&](const Value& o) { return equals(item, o); }))
            return false;
        return true;
      }
      if (ka == SeqKind::dict_values) return a.same_object(b);
      for (std::size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::dict: {
      const auto& x = a.dict();
      const auto& y = b.dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* o = y.find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::object:
      return a.object() == b.object();
    default:
      return false;
  }
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::undefined:
      return "Undefined";
    case Value::Kind::none:
      return "NoneType";
    case Value::Kind::boolean:
      return "bool";
    case Value::Kind::integer:
      return "int";
    case Value::Kind::floating:
      return "float";
    case Value::Kind::string:
      return v.is_markup() ? "Markup" : "str";
    case Value::Kind::sequence:
      switch (v.seq_kind()) {
        case SeqKind::list:
          return "list";
        case SeqKind::tuple:
          return "tuple";
        case SeqKind::generator:
          return "generator";
        case SeqKind::range:
          return "range";
        case SeqKind::dict_keys:
          return "dict_keys";
        case SeqKind::dict_values:
          return "dict_values";
        case SeqKind::dict_items:
          return "dict_items";
      }
      return "list";
    case Value::Kind::dict:
      return "dict";
    case Value::Kind::object:
      return v.object()->type_name();
  }
  return "object";
}

std::string type_repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::none:
      return "None";
    case Value::Kind::undefined:
      return "jinja2.runtime.Undefined object";
    case Value::Kind::string:
      return v.is_markup() ? "markupsafe.Markup object" : "str object";
    case Value::Kind::object:
      return v.object()->type_repr();
    default:
      return type_name(v) + " object";
  }
}

Value missing_attribute(const Value& owner, std::string_view name) {
  return Value::undefined(
      fmt::format("{} has no attribute {}", str_repr(type_repr(owner)), str_repr(name)));
}

Value missing_item(const Value& owner, const Value& key) {
  if (key.is_string()) return missing_attribute(owner, key.str());
  return Value::undefined(fmt::format("{} has no element {}", type_repr(owner), repr(key)));
}

void fail_undefined(const Value& v) {
  fault(v.undefined_kind(), v.undefined_message());
}

// ---- JSON in -----------------------------------------------------------------------------
namespace {

template <class Json>
Value convert(const Json& j, int depth) {
  if (depth > 512) fault(FaultKind::limit, "input JSON nested deeper than 512 levels");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX))
        fault(FaultKind::unsupported,
              fmt::format("input integer {} is beyond the 64-bit range troupe's templates use", u));
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::floating(j.template get<double>());
    case nlohmann::json::value_t::string: {
      const auto& s = j.template get_ref<const std::string&>();
      if (!utf8_valid(s)) fault(FaultKind::type, "input string is not valid UTF-8");
      return Value::string(s);
    }
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(convert(item, depth + 1));
      return Value::sequence(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!utf8_valid(it.key())) fault(FaultKind::type, "input key is not valid UTF-8");
        d.set(it.key(), convert(it.value(), depth + 1));
      }
      return Value::dict(std::move(d));
    }
    case nlohmann::json::value_t::binary:
      fault(FaultKind::type, "binary JSON values cannot be given to a chat template");
  }
  return Value::none();
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
  return convert(j, 0);
}
Value from_json(const nlohmann::json& j) {
  return convert(j, 0);
}

// ---- JSON out (Python's json.dumps) ------------------------------------------------------
namespace {

void dump_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t start = i;
    const char32_t c = utf8_next(s, i);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c > 0xFFFF) {
        const char32_t v = c - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      }
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += '"';
}

struct JsonWriter {
  const JsonStyle& style;
  std::string item_sep, key_sep;
  std::string out;

  void newline(int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) out += *style.indent;
  }

  void write(const Value& v, int level) {
    if (level > max_repr_depth * 8) fault(FaultKind::limit, "value nested too deeply for tojson");
    switch (v.kind()) {
      case Value::Kind::none:
        out += "null";
        return;
      case Value::Kind::boolean:
        out += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::integer:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::floating: {
        const double d = v.as_double();
        if (std::isnan(d)) {
          out += "NaN";
        } else if (std::isinf(d)) {
          out += d > 0 ? "Infinity" : "-Infinity";
        } else {
          out += float_repr(d);
        }
        return;
      }
      case Value::Kind::string:
        dump_string(out, v.str(), style.ensure_ascii);
        return;
      case Value::Kind::sequence:
        if (v.seq_kind() == SeqKind::list || v.seq_kind() == SeqKind::tuple) {
          write_list(v.items(), level);
          return;
        }
        break;
      case Value::Kind::dict:
        write_dict(v.dict(), level);
        return;
      default:
        break;
    }
    fault(FaultKind::type, fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }

  void write_list(const List& items, int level) {
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    if (style.indent) newline(level + 1);
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i) {
        out += item_sep;
        if (style.indent) newline(level + 1);
      }
      write(items[i], level + 1);
    }
    if (style.indent) newline(level);
    out += ']';
  }

  void write_dict(const Dict& d, int level) {
    if (d.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& e : d.items()) entries.push_back(&e);
    // Python sorts str keys by code point, which is the byte order of UTF-8.
    if (style.sort_keys)
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    out += '{';
    if (style.indent) newline(level + 1);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i) {
        out += item_sep;
        if (style.indent) newline(level + 1);
      }
      dump_string(out, entries[i]->first, style.ensure_ascii);
      out += key_sep;
      write(entries[i]->second, level + 1);
    }
    if (style.indent) newline(level);
    out += '}';
  }
};

}  // namespace

std::string dump_json(const Value& v, const JsonStyle& style) {
  JsonWriter w{style, "", "", ""};
  if (style.separators) {
    w.item_sep = style.separators->first;
    w.key_sep = style.separators->second;
  } else {
    w.item_sep = style.indent ? "," : ", ";
    w.key_sep = ": ";
  }
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace troupe::chat
