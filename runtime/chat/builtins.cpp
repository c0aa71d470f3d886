#include "runtime/chat/builtins.hpp"

#include "runtime/chat/format.hpp"
#include "runtime/chat/methods.hpp"
#include "runtime/chat/operators.hpp"
#include "runtime/chat/unicode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <ctime>

namespace troupe::chat {

namespace {

using FilterFn = Value (*)(Interpreter& in, const Value& v, CallArgs& args);
using TestFn = bool (*)(Interpreter& in, const Value& v, CallArgs& args);

[[noreturn]] void type_error(std::string m) {
  fault(FaultKind::type, std::move(m));
}
Value none() {
  return Value::none();
}
Value str(std::string s) {
  return Value::string(std::move(s));
}

// soft_str: str() that keeps Markup.
Value soft_str(const Value& v) {
  return v.is_string() ? v : Value::string(to_str(v));
}

std::string need_name(const Value& v) {
  if (!v.is_string())
    type_error(fmt::format("attribute name must be string, not '{}'", type_name(v)));
  return v.str();
}

Value ignore_case(const Value& v) {
  return v.is_string() ? Value::string(py_lower(v.str())) : v;
}

// Jinja2's make_attrgetter: "a.b.0" walks getitem with int parts for digit strings.
Value walk_attribute(const Value& item, const Value& attribute,
                     const std::optional<Value>& dflt = std::nullopt) {
  if (attribute.is_none()) return item;
  std::vector<Value> parts;
  if (attribute.is_string()) {
    const std::string& a = attribute.str();
    std::size_t start = 0;
    while (true) {
      const std::size_t dot = a.find('.', start);
      const std::string part =
          a.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                       [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits ? Value::integer(std::stoll(part)) : Value::string(part));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  } else {
    parts.push_back(attribute);
  }
  Value cur = item;
  for (const auto& p : parts) {
    cur = get_item(cur, p);
    if (dflt && cur.is_undefined()) cur = *dflt;
  }
  return cur;
}

// make_multi_attrgetter: a list of keys, one per comma-separated attribute.
Value multi_key(const Value& item, const Value& attribute, bool case_sensitive) {
  List keys;
  if (attribute.is_string()) {
    const std::string& a = attribute.str();
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = a.find(',', start);
      const Value part = Value::string(
          a.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      Value k = walk_attribute(item, part);
      keys.push_back(case_sensitive ? k : ignore_case(k));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    Value k = walk_attribute(item, attribute);
    keys.push_back(case_sensitive ? k : ignore_case(k));
  }
  return Value::sequence(std::move(keys));
}

// Python's sorted(): stable, only `<`, reverse keeps equal items in order.
List sorted_by(List items, const std::vector<Value>& keys, bool reverse) {
  std::vector<std::size_t> order(items.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return reverse ? less_than(keys[b], keys[a]) : less_than(keys[a], keys[b]);
  });
  List out;
  out.reserve(items.size());
  for (auto i : order) out.push_back(std::move(items[i]));
  return out;
}

void check_hashable(const Value& v) {
  if ((v.is_sequence() && !v.is_tuple() && v.seq_kind() != SeqKind::range) || v.is_dict() ||
      (v.is_object() && v.object()->type_name() == "Namespace"))
    type_error(fmt::format("unhashable type: '{}'", type_name(v)));
}

// ---- filters -----------------------------------------------------------------------------
#define TROUPE_FILTER(name) \
  Value name([[maybe_unused]] Interpreter& in, const Value& v, CallArgs& args)

TROUPE_FILTER(f_abs) {
  bind("abs", args, {});
  if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) fault(FaultKind::unsupported, "integer result beyond 64 bits");
    return Value::integer(std::llabs(v.as_int()));
  }
  type_error(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}
TROUPE_FILTER(f_attr) {
  // Python's getattr only: unlike `obj.name`, no fallback to obj['name'].
  auto a = bind("attr", args, {{"name", std::nullopt}});
  const std::string name = need_name(a[0]);
  if (v.is_undefined()) fail_undefined(v);
  std::optional<Value> attr =
      v.is_object() ? v.object()->getattr(name) : builtin_attribute(v, name);
  return attr ? *attr : missing_attribute(v, name);
}
TROUPE_FILTER(f_capitalize) {
  bind("capitalize", args, {});
  const Value s = soft_str(v);
  return string_like(s, py_capitalize(s.str()));
}
TROUPE_FILTER(f_center) {
  auto a = bind("center", args, {{"width", Value::integer(80)}});
  const std::string s = to_str(v);
  const auto len = static_cast<std::int64_t>(utf8_length(s));
  const std::int64_t width = a[0].as_int();
  if (width <= len) return str(s);
  const std::int64_t marg = width - len;
  in.budget().bytes(static_cast<std::size_t>(width));
  const std::int64_t left = marg / 2 + (marg & width & 1);
  return str(std::string(static_cast<std::size_t>(left), ' ') + s +
             std::string(static_cast<std::size_t>(marg - left), ' '));
}
TROUPE_FILTER(f_default) {
  auto a = bind("default", args, {{"default_value", str("")}, {"boolean", Value::boolean(false)}});
  if (v.is_undefined() || (truthy(a[1]) && !truthy(v))) return a[0];
  return v;
}
TROUPE_FILTER(f_dictsort) {
  auto a = bind("dictsort", args,
                {{"case_sensitive", Value::boolean(false)},
                 {"by", str("key")},
                 {"reverse", Value::boolean(false)}});
  std::size_t pos;
  if (a[1].is_string() && a[1].str() == "key") {
    pos = 0;
  } else if (a[1].is_string() && a[1].str() == "value") {
    pos = 1;
  } else {
    type_error("You can only sort by either \"key\" or \"value\"");
  }
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_dict()) type_error(fmt::format("'{}' object has no attribute 'items'", type_name(v)));
  List items;
  std::vector<Value> keys;
  for (const auto& [k, x] : v.dict().items()) {
    items.push_back(Value::sequence({str(k), x}, SeqKind::tuple));
    const Value key = pos == 0 ? str(k) : x;
    keys.push_back(truthy(a[0]) ? key : ignore_case(key));
  }
  return Value::sequence(sorted_by(std::move(items), keys, truthy(a[2])));
}
TROUPE_FILTER(f_escape) {
  bind("escape", args, {});
  return escape(v);
}
TROUPE_FILTER(f_forceescape) {
  bind("forceescape", args, {});
  return Value::string(html_escape(to_str(v)), true);
}
TROUPE_FILTER(f_first) {
  bind("first", args, {});
  if (v.is_generator()) {
    auto& st = v.seq_state();
    if (st.cursor < v.items().size()) return v.items()[st.cursor++];
  } else {
    const List items = iterate(v);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}
TROUPE_FILTER(f_last) {
  bind("last", args, {});
  if (v.is_generator()) type_error("'generator' object is not reversible");
  if (v.is_sequence() && v.seq_kind() != SeqKind::list && v.seq_kind() != SeqKind::tuple &&
      v.seq_kind() != SeqKind::range && v.seq_kind() != SeqKind::dict_keys &&
      v.seq_kind() != SeqKind::dict_values && v.seq_kind() != SeqKind::dict_items)
    type_error(fmt::format("'{}' object is not reversible", type_name(v)));
  if (!v.is_string() && !v.is_sequence() && !v.is_dict() && !v.is_undefined())
    type_error(fmt::format("'{}' object is not reversible", type_name(v)));
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}
TROUPE_FILTER(f_float) {
  auto a = bind("float", args, {{"default", Value::floating(0.0)}});
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value::floating(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.str())) return Value::floating(*d);
  }
  return a[0];
}
TROUPE_FILTER(f_format) {
  if (!args.positional.empty() && !args.keyword.empty())
    type_error("can't handle positional and keyword arguments at the same time");
  Value fmt_args;
  if (!args.keyword.empty()) {
    Dict d;
    for (auto& [k, x] : args.keyword) d.set(k, x);
    fmt_args = Value::dict(std::move(d));
  } else {
    fmt_args = Value::sequence(args.positional, SeqKind::tuple);
  }
  const Value s = soft_str(v);
  return binary(ast::BinaryOp::mod, s, fmt_args, in.budget());
}
TROUPE_FILTER(f_indent) {
  auto a = bind("indent", args,
                {{"width", Value::integer(4)},
                 {"first", Value::boolean(false)},
                 {"blank", Value::boolean(false)}});
  const std::string indention =
      a[0].is_string()
          ? a[0].str()
          : std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, a[0].as_int())), ' ');
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string())
    type_error(fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v)));
  // s += "\n"; then splitlines (Python's line boundaries).
  CallArgs none_args;
  auto split = builtin_attribute(Value::string(v.str() + "\n", v.is_markup()), "splitlines");
  const List lines = in.call(*split, none_args).items();
  std::string rv;
  if (truthy(a[2])) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + indention;
      rv += lines[i].str();
    }
  } else {
    rv = lines.empty() ? "" : lines[0].str();
    for (std::size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].str().empty()) rv += indention;
      rv += lines[i].str();
    }
  }
  if (truthy(a[1])) rv = indention + rv;
  in.budget().bytes(rv.size());
  return string_like(v, std::move(rv));
}
TROUPE_FILTER(f_int) {
  auto a = bind("int", args, {{"default", Value::integer(0)}, {"base", Value::integer(10)}});
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (std::isnan(d)) return a[0];
    if (std::isinf(d)) type_error("cannot convert float infinity to integer");
    if (std::fabs(d) >= 9.2e18)
      fault(FaultKind::unsupported, "integer beyond the 64-bit range troupe's templates use");
    return Value::integer(static_cast<std::int64_t>(std::trunc(d)));
  }
  if (v.is_string()) {
    // int(value, base) first; a TypeError or ValueError there (a float base, a base outside
    // 2..36, bad digits) falls back to int(float(value)), as do_int does.
    const bool base_ok =
        (a[1].is_int() || a[1].is_bool()) && a[1].as_int() >= 2 && a[1].as_int() <= 36;
    if (base_ok) {
      if (auto i = parse_int(v.str(), static_cast<int>(a[1].as_int()))) return Value::integer(*i);
    } else if ((a[1].is_int() || a[1].is_bool()) && a[1].as_int() == 0) {
      if (auto i = parse_int(v.str(), 0)) return Value::integer(*i);
    }
    if (auto d = parse_float(v.str())) {
      if (std::isnan(*d)) return a[0];
      if (std::isinf(*d)) type_error("cannot convert float infinity to integer");
      return Value::integer(static_cast<std::int64_t>(std::trunc(*d)));
    }
  }
  return a[0];
}
TROUPE_FILTER(f_items) {
  bind("items", args, {});
  if (v.is_undefined()) return Value::sequence({}, SeqKind::generator);
  if (!v.is_dict()) type_error("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, x] : v.dict().items())
    out.push_back(Value::sequence({str(k), x}, SeqKind::tuple));
  return Value::sequence(std::move(out), SeqKind::generator);
}
TROUPE_FILTER(f_join) {
  auto a = bind("join", args, {{"d", str("")}, {"attribute", none()}});
  const List items = iterate(v);
  const std::string sep = to_str(a[0]);
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    in.budget().steps();
    if (i) out += sep;
    out += to_str(walk_attribute(items[i], a[1]));
    in.budget().bytes(out.size());
  }
  return str(std::move(out));
}
TROUPE_FILTER(f_length) {
  bind("length", args, {});
  return Value::integer(length(v));
}
TROUPE_FILTER(f_list) {
  bind("list", args, {});
  return Value::sequence(iterate(v));
}
TROUPE_FILTER(f_lower) {
  bind("lower", args, {});
  const Value s = soft_str(v);
  return string_like(s, py_lower(s.str()));
}
TROUPE_FILTER(f_upper) {
  bind("upper", args, {});
  const Value s = soft_str(v);
  return string_like(s, py_upper(s.str()));
}
TROUPE_FILTER(f_map) {
  const List items = truthy(v) || v.is_generator() ? iterate(v) : List{};
  List out;
  if (args.positional.empty()) {
    std::optional<Value> attribute, dflt;
    for (const auto& [k, x] : args.keyword) {
      if (k == "attribute") {
        attribute = x;
      } else if (k == "default") {
        dflt = x;
      } else {
        type_error(fmt::format("Unexpected keyword argument {}", str_repr(k)));
      }
    }
    if (!attribute) type_error("map requires a filter argument");
    for (const auto& item : items) {
      in.budget().steps();
      out.push_back(
          walk_attribute(item, *attribute, dflt && !dflt->is_none() ? dflt : std::nullopt));
    }
  } else {
    const Value name = args.positional[0];
    CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
    for (const auto& item : items) {
      in.budget().steps();
      CallArgs each = rest;
      out.push_back(call_filter(in, to_str(name), item, each));
    }
  }
  return Value::sequence(std::move(out), SeqKind::generator);
}
Value min_max(Interpreter& in, const Value& v, CallArgs& args, bool want_max) {
  auto a = bind(want_max ? "max" : "min", args,
                {{"case_sensitive", Value::boolean(false)}, {"attribute", none()}});
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  std::size_t best = 0;
  Value best_key;
  for (std::size_t i = 0; i < items.size(); ++i) {
    in.budget().steps();
    Value key = walk_attribute(items[i], a[1]);
    if (!truthy(a[0])) key = ignore_case(key);
    if (i == 0 || (want_max ? less_than(best_key, key) : less_than(key, best_key))) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}
TROUPE_FILTER(f_max) {
  return min_max(in, v, args, true);
}
TROUPE_FILTER(f_min) {
  return min_max(in, v, args, false);
}

// select / reject / selectattr / rejectattr
Value select_like(Interpreter& in, const Value& v, CallArgs& args, bool lookup_attr, bool keep) {
  std::size_t off = 0;
  Value attribute;
  if (lookup_attr) {
    if (args.positional.empty()) type_error("Missing parameter for attribute name");
    attribute = args.positional[0];
    off = 1;
  }
  const bool has_test = args.positional.size() > off;
  std::string test_name = has_test ? to_str(args.positional[off]) : "";
  CallArgs test_args{
      {args.positional.begin() + static_cast<std::ptrdiff_t>(has_test ? off + 1 : off),
       args.positional.end()},
      args.keyword};
  const List items = truthy(v) || v.is_generator() ? iterate(v) : List{};
  List out;
  for (const auto& item : items) {
    in.budget().steps();
    const Value x = lookup_attr ? walk_attribute(item, attribute) : item;
    bool ok;
    if (has_test) {
      CallArgs each = test_args;
      ok = call_test(in, test_name, x, each);
    } else {
      ok = truthy(x);
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::sequence(std::move(out), SeqKind::generator);
}
TROUPE_FILTER(f_select) {
  return select_like(in, v, args, false, true);
}
TROUPE_FILTER(f_reject) {
  return select_like(in, v, args, false, false);
}
TROUPE_FILTER(f_selectattr) {
  return select_like(in, v, args, true, true);
}
TROUPE_FILTER(f_rejectattr) {
  return select_like(in, v, args, true, false);
}

TROUPE_FILTER(f_replace) {
  auto a = bind("replace", args, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", none()}});
  CallArgs m{{Value::string(to_str(a[0])), Value::string(to_str(a[1])),
              a[2].is_none() ? Value::integer(-1) : a[2]},
             {}};
  auto method = builtin_attribute(Value::string(to_str(v)), "replace");
  return in.call(*method, m);
}
TROUPE_FILTER(f_reverse) {
  bind("reverse", args, {});
  if (v.is_string()) {
    auto cps = utf8_decode(v.str());
    std::reverse(cps.begin(), cps.end());
    return string_like(v, utf8_encode(cps));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  // reversed() is an iterator for sequences; a generator is listed and reversed.
  return Value::sequence(std::move(items), v.is_generator() ? SeqKind::list : SeqKind::generator);
}
TROUPE_FILTER(f_round) {
  auto a = bind("round", args, {{"precision", Value::integer(0)}, {"method", str("common")}});
  const std::string method = to_str(a[1]);
  if (method != "common" && method != "ceil" && method != "floor")
    type_error("method must be common, ceil or floor");
  if (v.is_undefined()) type_error("type Undefined doesn't define __round__ method");
  if (!v.is_number())
    type_error(fmt::format("type {} doesn't define __round__ method", type_name(v)));
  const std::int64_t precision = a[0].as_int();
  if (method == "common") {
    if (v.is_float()) return Value::floating(round_half_even(v.as_double(), precision));
    // round(int, n): unchanged for n >= 0, else to a multiple of 10^-n, ties to even.
    std::int64_t x = v.as_int();
    if (precision >= 0) return Value::integer(x);
    if (precision < -18) return Value::integer(0);
    std::int64_t p = 1;
    for (std::int64_t i = 0; i < -precision; ++i) p *= 10;
    std::int64_t q = x / p, r = x % p;
    if (r < 0) {
      r += p;
      --q;
    }
    if (2 * r > p || (2 * r == p && (q & 1))) ++q;
    return Value::integer(q * p);
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}
TROUPE_FILTER(f_safe) {
  bind("safe", args, {});
  return Value::string(to_str(v), true);
}
TROUPE_FILTER(f_sort) {
  auto a = bind("sort", args,
                {{"reverse", Value::boolean(false)},
                 {"case_sensitive", Value::boolean(false)},
                 {"attribute", none()}});
  List items = iterate(v);
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const auto& item : items) {
    in.budget().steps();
    keys.push_back(multi_key(item, a[2], truthy(a[1])));
  }
  return Value::sequence(sorted_by(std::move(items), keys, truthy(a[0])));
}
TROUPE_FILTER(f_string) {
  bind("string", args, {});
  return soft_str(v);
}
TROUPE_FILTER(f_sum) {
  auto a = bind("sum", args, {{"attribute", none()}, {"start", Value::integer(0)}});
  if (a[1].is_string()) type_error("sum() can't sum strings [use ''.join(seq) instead]");
  Value total = a[1];
  for (const auto& item : iterate(v)) {
    in.budget().steps();
    total = binary(ast::BinaryOp::add, total, walk_attribute(item, a[0]), in.budget());
  }
  return total;
}
TROUPE_FILTER(f_title) {
  bind("title", args, {});
  // Jinja2's own title: words split at runs of [-\s({\[<], first character upper-cased.
  const auto cps = utf8_decode(to_str(v));
  std::string out;
  bool word_start = true;
  auto is_sep = [](char32_t c) {
    return py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  for (char32_t c : cps) {
    std::string one;
    utf8_append(one, c);
    if (is_sep(c)) {
      out += one;
      word_start = true;
    } else if (word_start) {
      out += py_upper(one);
      word_start = false;
    } else {
      out += py_lower(one);
    }
  }
  return str(std::move(out));
}
TROUPE_FILTER(f_tojson) {
  // transformers: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
  // sort_keys=sort_keys), not Jinja2's HTML-safe tojson.
  auto a = bind("tojson", args,
                {{"ensure_ascii", Value::boolean(false)},
                 {"indent", none()},
                 {"separators", none()},
                 {"sort_keys", Value::boolean(false)}});
  JsonStyle style;
  style.ensure_ascii = truthy(a[0]);
  if (a[1].is_string()) {
    style.indent = a[1].str();
  } else if (a[1].is_int() || a[1].is_bool()) {
    style.indent =
        std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, a[1].as_int())), ' ');
  } else if (!a[1].is_none()) {
    type_error(fmt::format("indent must be None, an int or a str, not {}", type_name(a[1])));
  }
  if (!a[2].is_none()) {
    const List seps = iterate(a[2]);
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      type_error("separators must be a pair of strings");
    style.separators = std::make_pair(seps[0].str(), seps[1].str());
  }
  style.sort_keys = truthy(a[3]);
  std::string out = dump_json(v, style);
  in.budget().bytes(out.size());
  return str(std::move(out));
}
TROUPE_FILTER(f_trim) {
  auto a = bind("trim", args, {{"chars", none()}});
  const Value s = soft_str(v);
  CallArgs m{{a[0]}, {}};
  return in.call(*builtin_attribute(s, "strip"), m);
}
TROUPE_FILTER(f_truncate) {
  auto a = bind("truncate", args,
                {{"length", Value::integer(255)},
                 {"killwords", Value::boolean(false)},
                 {"end", str("...")},
                 {"leeway", Value::integer(5)}});
  const std::string s = to_str(v);
  const std::string end = to_str(a[2]);
  const std::int64_t len = a[0].as_int(), leeway = a[3].as_int();
  const auto end_len = static_cast<std::int64_t>(utf8_length(end));
  if (len < end_len) type_error(fmt::format("expected length >= {}, got {}", end_len, len));
  if (leeway < 0) type_error(fmt::format("expected leeway >= 0, got {}", leeway));
  if (static_cast<std::int64_t>(utf8_length(s)) <= len + leeway) return str(s);
  std::string head = s.substr(0, utf8_offset(s, static_cast<std::size_t>(len - end_len)));
  if (truthy(a[1])) return str(head + end);
  const std::size_t space = head.rfind(' ');
  if (space != std::string::npos) head.resize(space);
  return str(head + end);
}
TROUPE_FILTER(f_unique) {
  auto a = bind("unique", args, {{"case_sensitive", Value::boolean(false)}, {"attribute", none()}});
  List out, seen;
  for (const auto& item : iterate(v)) {
    in.budget().steps(1 + seen.size());
    Value key = walk_attribute(item, a[1]);
    if (!truthy(a[0])) key = ignore_case(key);
    check_hashable(key);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::sequence(std::move(out), SeqKind::generator);
}

#undef TROUPE_FILTER

// ---- tests -------------------------------------------------------------------------------
#define TROUPE_TEST(name) \
  bool name([[maybe_unused]] Interpreter& in, const Value& v, CallArgs& args)

Value arg1(std::string_view test, CallArgs& args) {
  return bind(test, args, {{"other", std::nullopt}})[0];
}

TROUPE_TEST(t_defined) {
  return bind("defined", args, {}), !v.is_undefined();
}
TROUPE_TEST(t_undefined) {
  return bind("undefined", args, {}), v.is_undefined();
}
TROUPE_TEST(t_none) {
  return bind("none", args, {}), v.is_none();
}
TROUPE_TEST(t_boolean) {
  return bind("boolean", args, {}), v.is_bool();
}
TROUPE_TEST(t_false) {
  return bind("false", args, {}), v.is_bool() && !v.as_bool();
}
TROUPE_TEST(t_true) {
  return bind("true", args, {}), v.is_bool() && v.as_bool();
}
TROUPE_TEST(t_integer) {
  return bind("integer", args, {}), v.is_int();
}
TROUPE_TEST(t_float) {
  return bind("float", args, {}), v.is_float();
}
TROUPE_TEST(t_number) {
  return bind("number", args, {}), v.is_number();
}
TROUPE_TEST(t_string) {
  return bind("string", args, {}), v.is_string();
}
TROUPE_TEST(t_mapping) {
  return bind("mapping", args, {}), v.is_dict();
}
TROUPE_TEST(t_iterable) {
  bind("iterable", args, {});
  return v.is_undefined() || v.is_string() || v.is_sequence() || v.is_dict() ||
         (v.is_object() && v.object()->type_name() == "LoopContext");
}
TROUPE_TEST(t_sequence) {
  bind("sequence", args, {});
  if (v.is_undefined() || v.is_string() || v.is_dict()) return true;
  return v.is_sequence() && (v.seq_kind() == SeqKind::list || v.seq_kind() == SeqKind::tuple ||
                             v.seq_kind() == SeqKind::range);
}
TROUPE_TEST(t_callable) {
  bind("callable", args, {});
  return v.is_undefined() || (v.is_object() && v.object()->callable());
}
TROUPE_TEST(t_escaped) {
  return bind("escaped", args, {}), v.is_markup();
}
TROUPE_TEST(t_lower) {
  return bind("lower", args, {}), py_islower(to_str(v));
}
TROUPE_TEST(t_upper) {
  return bind("upper", args, {}), py_isupper(to_str(v));
}
TROUPE_TEST(t_odd) {
  bind("odd", args, {});
  return equals(binary(ast::BinaryOp::mod, v, Value::integer(2), in.budget()), Value::integer(1));
}
TROUPE_TEST(t_even) {
  bind("even", args, {});
  return equals(binary(ast::BinaryOp::mod, v, Value::integer(2), in.budget()), Value::integer(0));
}
TROUPE_TEST(t_divisibleby) {
  const Value n = bind("divisibleby", args, {{"num", std::nullopt}})[0];
  return equals(binary(ast::BinaryOp::mod, v, n, in.budget()), Value::integer(0));
}
TROUPE_TEST(t_eq) {
  return equals(v, arg1("eq", args));
}
TROUPE_TEST(t_ne) {
  return !equals(v, arg1("ne", args));
}
TROUPE_TEST(t_lt) {
  return compare(ast::CompareOp::lt, v, arg1("lt", args));
}
TROUPE_TEST(t_le) {
  return compare(ast::CompareOp::le, v, arg1("le", args));
}
TROUPE_TEST(t_gt) {
  return compare(ast::CompareOp::gt, v, arg1("gt", args));
}
TROUPE_TEST(t_ge) {
  return compare(ast::CompareOp::ge, v, arg1("ge", args));
}
TROUPE_TEST(t_in) {
  return contains(bind("in", args, {{"seq", std::nullopt}})[0], v);
}
TROUPE_TEST(t_sameas) {
  const Value other = arg1("sameas", args);
  // Python's `is`: None and bools are singletons, small ints are cached, containers and
  // objects are compared by identity.
  if (v.is_none() || other.is_none()) return v.is_none() && other.is_none();
  if (v.is_bool() || other.is_bool())
    return v.is_bool() && other.is_bool() && v.as_bool() == other.as_bool();
  if (v.is_int() && other.is_int())
    return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
  return v.same_object(other);
}
TROUPE_TEST(t_filter) {
  bind("filter", args, {});
  return v.is_string() && filter_availability(v.str()) != Availability::unknown;
}
TROUPE_TEST(t_test) {
  bind("test", args, {});
  return v.is_string() && test_availability(v.str()) != Availability::unknown;
}

#undef TROUPE_TEST

struct FilterEntry {
  std::string_view name;
  FilterFn fn;  // null: unsupported
};
struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr std::array filters{
    FilterEntry{"abs", f_abs},
    FilterEntry{"attr", f_attr},
    FilterEntry{"batch", nullptr},
    FilterEntry{"capitalize", f_capitalize},
    FilterEntry{"center", f_center},
    FilterEntry{"count", f_length},
    FilterEntry{"d", f_default},
    FilterEntry{"default", f_default},
    FilterEntry{"dictsort", f_dictsort},
    FilterEntry{"e", f_escape},
    FilterEntry{"escape", f_escape},
    FilterEntry{"filesizeformat", nullptr},
    FilterEntry{"first", f_first},
    FilterEntry{"float", f_float},
    FilterEntry{"forceescape", f_forceescape},
    FilterEntry{"format", f_format},
    FilterEntry{"groupby", nullptr},
    FilterEntry{"indent", f_indent},
    FilterEntry{"int", f_int},
    FilterEntry{"items", f_items},
    FilterEntry{"join", f_join},
    FilterEntry{"last", f_last},
    FilterEntry{"length", f_length},
    FilterEntry{"list", f_list},
    FilterEntry{"lower", f_lower},
    FilterEntry{"map", f_map},
    FilterEntry{"max", f_max},
    FilterEntry{"min", f_min},
    FilterEntry{"pprint", nullptr},
    FilterEntry{"random", nullptr},
    FilterEntry{"reject", f_reject},
    FilterEntry{"rejectattr", f_rejectattr},
    FilterEntry{"replace", f_replace},
    FilterEntry{"reverse", f_reverse},
    FilterEntry{"round", f_round},
    FilterEntry{"safe", f_safe},
    FilterEntry{"select", f_select},
    FilterEntry{"selectattr", f_selectattr},
    FilterEntry{"slice", nullptr},
    FilterEntry{"sort", f_sort},
    FilterEntry{"string", f_string},
    FilterEntry{"striptags", nullptr},
    FilterEntry{"sum", f_sum},
    FilterEntry{"title", f_title},
    FilterEntry{"tojson", f_tojson},
    FilterEntry{"trim", f_trim},
    FilterEntry{"truncate", f_truncate},
    FilterEntry{"unique", f_unique},
    FilterEntry{"upper", f_upper},
    FilterEntry{"urlencode", nullptr},
    FilterEntry{"urlize", nullptr},
    FilterEntry{"wordcount", nullptr},
    FilterEntry{"wordwrap", nullptr},
    FilterEntry{"xmlattr", nullptr},
};

constexpr std::array tests{
    TestEntry{"odd", t_odd},
    TestEntry{"even", t_even},
    TestEntry{"divisibleby", t_divisibleby},
    TestEntry{"defined", t_defined},
    TestEntry{"undefined", t_undefined},
    TestEntry{"filter", t_filter},
    TestEntry{"test", t_test},
    TestEntry{"none", t_none},
    TestEntry{"boolean", t_boolean},
    TestEntry{"false", t_false},
    TestEntry{"true", t_true},
    TestEntry{"integer", t_integer},
    TestEntry{"float", t_float},
    TestEntry{"lower", t_lower},
    TestEntry{"upper", t_upper},
    TestEntry{"string", t_string},
    TestEntry{"mapping", t_mapping},
    TestEntry{"number", t_number},
    TestEntry{"sequence", t_sequence},
    TestEntry{"iterable", t_iterable},
    TestEntry{"callable", t_callable},
    TestEntry{"sameas", t_sameas},
    TestEntry{"escaped", t_escaped},
    TestEntry{"in", t_in},
    TestEntry{"==", t_eq},
    TestEntry{"eq", t_eq},
    TestEntry{"equalto", t_eq},
    TestEntry{"!=", t_ne},
    TestEntry{"ne", t_ne},
    TestEntry{">", t_gt},
    TestEntry{"gt", t_gt},
    TestEntry{"greaterthan", t_gt},
    TestEntry{"ge", t_ge},
    TestEntry{">=", t_ge},
    TestEntry{"<", t_lt},
    TestEntry{"lt", t_lt},
    TestEntry{"lessthan", t_lt},
    TestEntry{"<=", t_le},
    TestEntry{"le", t_le},
};

}  // namespace

Availability filter_availability(std::string_view name) {
  for (const auto& f : filters)
    if (f.name == name) return f.fn ? Availability::supported : Availability::unsupported;
  return Availability::unknown;
}

Availability test_availability(std::string_view name) {
  for (const auto& t : tests)
    if (t.name == name) return Availability::supported;
  return Availability::unknown;
}

Value call_filter(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
  in.budget().steps();
  for (const auto& f : filters) {
    if (f.name != name) continue;
    if (!f.fn)
      fault(
          FaultKind::unsupported,
          fmt::format("the filter {} is not supported in troupe's chat templates", str_repr(name)));
    return f.fn(in, v, args);
  }
  fault(FaultKind::type, fmt::format("No filter named {} found.", str_repr(name)));
}

bool call_test(Interpreter& in, std::string_view name, const Value& v, CallArgs& args) {
  in.budget().steps();
  for (const auto& t : tests)
    if (t.name == name) return t.fn(in, v, args);
  fault(FaultKind::type, fmt::format("No test named {} found.", str_repr(name)));
}

}  // namespace troupe::chat
