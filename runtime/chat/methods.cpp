#include "runtime/chat/methods.hpp"

#include "runtime/chat/format.hpp"
#include "runtime/chat/interpreter.hpp"
#include "runtime/chat/operators.hpp"
#include "runtime/chat/unicode.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace troupe::chat {

std::vector<Value> bind(std::string_view function, const CallArgs& args,
                        std::initializer_list<Param> params) {
  const std::vector<Param> ps(params);
  if (args.positional.size() > ps.size())
    fault(FaultKind::type,
          fmt::format("{}() takes at most {} argument{} ({} given)", function, ps.size(),
                      ps.size() == 1 ? "" : "s", args.positional.size()));
  std::vector<std::optional<Value>> bound(ps.size());
  for (std::size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [name, v] : args.keyword) {
    // clang 14 cannot capture a structured binding (C++20 allows it): capture a reference.
    const auto& key = name;
    auto it = std::find_if(ps.begin(), ps.end(), [&](const Param& p) { return key == p.name; });
    if (it == ps.end())
      fault(FaultKind::type,
            fmt::format("{}() got an unexpected keyword argument {}", function, str_repr(name)));
    auto& slot = bound[static_cast<std::size_t>(it - ps.begin())];
    if (slot)
      fault(FaultKind::type,
            fmt::format("{}() got multiple values for argument {}", function, str_repr(name)));
    slot = v;
  }
  std::vector<Value> out;
  out.reserve(ps.size());
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (!bound[i] && !ps[i].default_value)
      fault(FaultKind::type,
            fmt::format("{}() missing required argument {}", function, str_repr(ps[i].name)));
    out.push_back(bound[i] ? *bound[i] : *ps[i].default_value);
  }
  return out;
}

namespace {

using Impl = Function::Impl;

[[noreturn]] void type_error(std::string m) {
  fault(FaultKind::type, std::move(m));
}

const std::string& need_str(const Value& v, std::string_view what) {
  if (!v.is_string()) type_error(fmt::format("{} must be str, not {}", what, type_name(v)));
  return v.str();
}

Value none() {
  return Value::none();
}

// Code-point set for strip(chars): null means whitespace.
bool strip_match(char32_t c, const std::vector<char32_t>* chars) {
  if (!chars) return py_isspace(c);
  return std::find(chars->begin(), chars->end(), c) != chars->end();
}

std::string do_strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<char32_t> set;
  const std::vector<char32_t>* cs = nullptr;
  if (!chars.is_none()) {
    set = utf8_decode(need_str(chars, "strip arg"));
    cs = &set;
  }
  const auto cps = utf8_decode(s);
  std::size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_match(cps[b], cs)) ++b;
  if (right)
    while (e > b && strip_match(cps[e - 1], cs)) --e;
  return utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                           cps.begin() + static_cast<std::ptrdiff_t>(e)));
}

// Python's str.split / rsplit.
List do_split(const Value& self, const Value& sep, const Value& maxsplit_v, bool from_right) {
  const std::string& s = self.str();
  std::int64_t maxsplit = maxsplit_v.is_none() ? -1 : maxsplit_v.as_int();
  if (maxsplit < 0) maxsplit = INT64_MAX;
  std::vector<std::string> parts;
  if (sep.is_none()) {
    const auto cps = utf8_decode(s);
    std::vector<std::pair<std::size_t, std::size_t>> words;  // [start, end) in code points
    if (!from_right) {
      std::size_t i = 0;
      std::int64_t splits = 0;
      while (i < cps.size()) {
        while (i < cps.size() && py_isspace(cps[i])) ++i;
        if (i == cps.size()) break;
        if (splits == maxsplit) {  // the rest, trailing whitespace kept
          words.emplace_back(i, cps.size());
          break;
        }
        std::size_t j = i;
        while (j < cps.size() && !py_isspace(cps[j])) ++j;
        words.emplace_back(i, j);
        ++splits;
        i = j;
      }
    } else {
      std::size_t i = cps.size();
      std::int64_t splits = 0;
      while (i > 0) {
        while (i > 0 && py_isspace(cps[i - 1])) --i;
        if (i == 0) break;
        if (splits == maxsplit) {  // the rest, leading whitespace kept
          words.emplace_back(0, i);
          break;
        }
        std::size_t j = i;
        while (j > 0 && !py_isspace(cps[j - 1])) --j;
        words.emplace_back(j, i);
        ++splits;
        i = j;
      }
      std::reverse(words.begin(), words.end());
    }
    for (auto [b, e] : words)
      parts.push_back(
          utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                            cps.begin() + static_cast<std::ptrdiff_t>(e))));
  } else {
    const std::string& d = need_str(sep, "sep");
    if (d.empty()) fault(FaultKind::type, "empty separator");
    if (!from_right) {
      std::size_t start = 0;
      std::int64_t splits = 0;
      while (splits < maxsplit) {
        const std::size_t at = s.find(d, start);
        if (at == std::string::npos) break;
        parts.push_back(s.substr(start, at - start));
        start = at + d.size();
        ++splits;
      }
      parts.push_back(s.substr(start));
    } else {
      std::size_t end = s.size();
      std::int64_t splits = 0;
      while (splits < maxsplit && end >= d.size()) {
        const std::size_t at = s.rfind(d, end - d.size());
        if (at == std::string::npos) break;
        parts.push_back(s.substr(at + d.size(), end - at - d.size()));
        end = at;
        ++splits;
      }
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
  }
  List out;
  for (auto& p : parts) out.push_back(string_like(self, std::move(p)));
  return out;
}

// Byte range of s[start:end] with Python's clamping of code-point indices.
std::pair<std::size_t, std::size_t> byte_range(const std::string& s, const Value& start,
                                               const Value& end) {
  const auto n = static_cast<std::int64_t>(utf8_length(s));
  auto clamp = [&](const Value& v, std::int64_t dflt) {
    if (v.is_none()) return dflt;
    if (!v.is_int() && !v.is_bool())
      type_error("slice indices must be integers or None or have an __index__ method");
    std::int64_t i = v.as_int();
    if (i < 0) i = std::max<std::int64_t>(0, i + n);
    return std::min(i, n);
  };
  const std::int64_t b = clamp(start, 0), e = clamp(end, n);
  if (b > e) return {std::string::npos, 0};
  const std::size_t bo = utf8_offset(s, static_cast<std::size_t>(b));
  return {bo, utf8_offset(s, static_cast<std::size_t>(e))};
}

bool affix_match(const std::string& s, const Value& affix, const Value& start, const Value& end,
                 bool prefix, const char* method) {
  // Named copies, not a structured binding: clang 14 cannot capture those in the lambda.
  const auto range = byte_range(s, start, end);
  const std::size_t b = range.first, e = range.second;
  auto check = [&](const Value& a) {
    if (!a.is_string())
      type_error(
          fmt::format("{} first arg must be str or a tuple of str, not {}", method, type_name(a)));
    if (b == std::string::npos) return false;
    const std::string_view view = std::string_view(s).substr(b, e - b);
    const std::string& x = a.str();
    if (x.size() > view.size()) return false;
    return prefix ? view.substr(0, x.size()) == x : view.substr(view.size() - x.size()) == x;
  };
  if (affix.is_tuple()) {
    for (const auto& a : affix.items())
      if (check(a)) return true;
    return false;
  }
  return check(affix);
}

std::int64_t do_find(const std::string& s, const Value& sub_v, const Value& start, const Value& end,
                     bool reverse) {
  const std::string& sub = need_str(sub_v, "substring");
  auto [b, e] = byte_range(s, start, end);
  if (b == std::string::npos) return -1;
  const std::string_view view = std::string_view(s).substr(b, e - b);
  const std::size_t at = reverse ? view.rfind(sub) : view.find(sub);
  if (at == std::string_view::npos) return -1;
  return static_cast<std::int64_t>(utf8_length(std::string_view(s).substr(0, b + at)));
}

std::string justify(const std::string& s, std::int64_t width, const Value& fill_v, char how,
                    Budget& budget) {
  budget.bytes(static_cast<std::size_t>(std::max<std::int64_t>(width, 0)) * 4);
  const std::string& fill = need_str(fill_v, "fillchar");
  if (utf8_length(fill) != 1) type_error("The fill character must be exactly one character long");
  const auto len = static_cast<std::int64_t>(utf8_length(s));
  if (width <= len) return s;
  const std::int64_t marg = width - len;
  std::int64_t left = how == '<' ? 0 : how == '>' ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (std::int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (std::int64_t i = 0; i < marg - left; ++i) out += fill;
  return out;
}

#define TROUPE_METHOD(name) \
  Value name([[maybe_unused]] Interpreter& in, const Value& self, CallArgs& args)

// ---- str ---------------------------------------------------------------------------------
TROUPE_METHOD(str_strip) {
  auto a = bind("strip", args, {{"chars", none()}});
  return string_like(self, do_strip(self.str(), a[0], true, true));
}
TROUPE_METHOD(str_lstrip) {
  auto a = bind("lstrip", args, {{"chars", none()}});
  return string_like(self, do_strip(self.str(), a[0], true, false));
}
TROUPE_METHOD(str_rstrip) {
  auto a = bind("rstrip", args, {{"chars", none()}});
  return string_like(self, do_strip(self.str(), a[0], false, true));
}
TROUPE_METHOD(str_split) {
  auto a = bind("split", args, {{"sep", none()}, {"maxsplit", Value::integer(-1)}});
  return Value::sequence(do_split(self, a[0], a[1], false));
}
TROUPE_METHOD(str_rsplit) {
  auto a = bind("rsplit", args, {{"sep", none()}, {"maxsplit", Value::integer(-1)}});
  return Value::sequence(do_split(self, a[0], a[1], true));
}
TROUPE_METHOD(str_splitlines) {
  auto a = bind("splitlines", args, {{"keepends", Value::boolean(false)}});
  const bool keep = truthy(a[0]);
  const auto cps = utf8_decode(self.str());
  List out;
  std::size_t start = 0;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                     c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    std::size_t end = i + 1;
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') end = i + 2;
    const std::size_t stop = keep ? end : i;
    out.push_back(string_like(
        self, utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(start),
                                                cps.begin() + static_cast<std::ptrdiff_t>(stop)))));
    start = end;
    i = end - 1;
  }
  if (start < cps.size())
    out.push_back(
        string_like(self, utf8_encode(std::vector<char32_t>(
                              cps.begin() + static_cast<std::ptrdiff_t>(start), cps.end()))));
  return Value::sequence(std::move(out));
}
TROUPE_METHOD(str_startswith) {
  auto a = bind("startswith", args, {{"prefix", std::nullopt}, {"start", none()}, {"end", none()}});
  return Value::boolean(affix_match(self.str(), a[0], a[1], a[2], true, "startswith"));
}
TROUPE_METHOD(str_endswith) {
  auto a = bind("endswith", args, {{"suffix", std::nullopt}, {"start", none()}, {"end", none()}});
  return Value::boolean(affix_match(self.str(), a[0], a[1], a[2], false, "endswith"));
}
TROUPE_METHOD(str_upper) {
  bind("upper", args, {});
  return string_like(self, py_upper(self.str()));
}
TROUPE_METHOD(str_lower) {
  bind("lower", args, {});
  return string_like(self, py_lower(self.str()));
}
TROUPE_METHOD(str_title) {
  bind("title", args, {});
  return string_like(self, py_title(self.str()));
}
TROUPE_METHOD(str_capitalize) {
  bind("capitalize", args, {});
  return string_like(self, py_capitalize(self.str()));
}
TROUPE_METHOD(str_replace) {
  auto a = bind("replace", args,
                {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::integer(-1)}});
  std::string old_s = need_str(a[0], "replace() argument 1");
  std::string new_s = need_str(a[1], "replace() argument 2");
  if (self.is_markup()) {
    old_s = a[0].is_markup() ? old_s : html_escape(old_s);
    new_s = a[1].is_markup() ? new_s : html_escape(new_s);
  }
  std::int64_t count = a[2].as_int();
  if (count < 0) count = INT64_MAX;
  const std::string& s = self.str();
  std::string out;
  if (old_s.empty()) {
    // Python inserts `new` before every code point and at the end.
    std::int64_t done = 0;
    for (std::size_t i = 0; i < s.size();) {
      if (done < count) {
        out += new_s;
        ++done;
      }
      const std::size_t start = i;
      utf8_next(s, i);
      out.append(s, start, i - start);
    }
    if (done < count) out += new_s;
  } else {
    std::size_t start = 0;
    for (std::int64_t done = 0; done < count; ++done) {
      const std::size_t at = s.find(old_s, start);
      if (at == std::string::npos) break;
      out.append(s, start, at - start);
      out += new_s;
      start = at + old_s.size();
      in.budget().bytes(out.size());
    }
    out.append(s, start);
  }
  in.budget().bytes(out.size());
  return string_like(self, std::move(out));
}
TROUPE_METHOD(str_find) {
  auto a = bind("find", args, {{"sub", std::nullopt}, {"start", none()}, {"end", none()}});
  return Value::integer(do_find(self.str(), a[0], a[1], a[2], false));
}
TROUPE_METHOD(str_rfind) {
  auto a = bind("rfind", args, {{"sub", std::nullopt}, {"start", none()}, {"end", none()}});
  return Value::integer(do_find(self.str(), a[0], a[1], a[2], true));
}
TROUPE_METHOD(str_index) {
  auto a = bind("index", args, {{"sub", std::nullopt}, {"start", none()}, {"end", none()}});
  const auto r = do_find(self.str(), a[0], a[1], a[2], false);
  if (r < 0) fault(FaultKind::type, "substring not found");
  return Value::integer(r);
}
TROUPE_METHOD(str_rindex) {
  auto a = bind("rindex", args, {{"sub", std::nullopt}, {"start", none()}, {"end", none()}});
  const auto r = do_find(self.str(), a[0], a[1], a[2], true);
  if (r < 0) fault(FaultKind::type, "substring not found");
  return Value::integer(r);
}
TROUPE_METHOD(str_count) {
  auto a = bind("count", args, {{"sub", std::nullopt}, {"start", none()}, {"end", none()}});
  const std::string& sub = need_str(a[0], "substring");
  auto [b, e] = byte_range(self.str(), a[1], a[2]);
  if (b == std::string::npos) return Value::integer(0);
  const std::string_view view = std::string_view(self.str()).substr(b, e - b);
  if (sub.empty()) return Value::integer(static_cast<std::int64_t>(utf8_length(view)) + 1);
  std::int64_t n = 0;
  for (std::size_t at = view.find(sub); at != std::string_view::npos;
       at = view.find(sub, at + sub.size()))
    ++n;
  return Value::integer(n);
}
TROUPE_METHOD(str_join) {
  auto a = bind("join", args, {{"iterable", std::nullopt}});
  const List items = iterate(a[0]);
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string())
      type_error(
          fmt::format("sequence item {}: expected str instance, {} found", i, type_name(items[i])));
    if (i) out += self.str();
    out += self.is_markup() && !items[i].is_markup() ? html_escape(items[i].str()) : items[i].str();
    in.budget().bytes(out.size());
  }
  return string_like(self, std::move(out));
}
TROUPE_METHOD(str_center) {
  auto a = bind("center", args, {{"width", std::nullopt}, {"fillchar", Value::string(" ")}});
  return string_like(self, justify(self.str(), a[0].as_int(), a[1], '^', in.budget()));
}
TROUPE_METHOD(str_ljust) {
  auto a = bind("ljust", args, {{"width", std::nullopt}, {"fillchar", Value::string(" ")}});
  return string_like(self, justify(self.str(), a[0].as_int(), a[1], '<', in.budget()));
}
TROUPE_METHOD(str_rjust) {
  auto a = bind("rjust", args, {{"width", std::nullopt}, {"fillchar", Value::string(" ")}});
  return string_like(self, justify(self.str(), a[0].as_int(), a[1], '>', in.budget()));
}
TROUPE_METHOD(str_zfill) {
  auto a = bind("zfill", args, {{"width", std::nullopt}});
  const std::string& s = self.str();
  const auto len = static_cast<std::int64_t>(utf8_length(s));
  const std::int64_t width = a[0].as_int();
  if (width <= len) return self;
  in.budget().bytes(static_cast<std::size_t>(width));
  std::string zeros(static_cast<std::size_t>(width - len), '0');
  if (!s.empty() && (s[0] == '+' || s[0] == '-'))
    return string_like(self, s.substr(0, 1) + zeros + s.substr(1));
  return string_like(self, zeros + s);
}
TROUPE_METHOD(str_partition) {
  auto a = bind("partition", args, {{"sep", std::nullopt}});
  const std::string& sep = need_str(a[0], "sep");
  if (sep.empty()) fault(FaultKind::type, "empty separator");
  const std::string& s = self.str();
  const std::size_t at = s.find(sep);
  if (at == std::string::npos)
    return Value::sequence({self, string_like(self, ""), string_like(self, "")}, SeqKind::tuple);
  return Value::sequence(
      {string_like(self, s.substr(0, at)), a[0], string_like(self, s.substr(at + sep.size()))},
      SeqKind::tuple);
}
TROUPE_METHOD(str_rpartition) {
  auto a = bind("rpartition", args, {{"sep", std::nullopt}});
  const std::string& sep = need_str(a[0], "sep");
  if (sep.empty()) fault(FaultKind::type, "empty separator");
  const std::string& s = self.str();
  const std::size_t at = s.rfind(sep);
  if (at == std::string::npos)
    return Value::sequence({string_like(self, ""), string_like(self, ""), self}, SeqKind::tuple);
  return Value::sequence(
      {string_like(self, s.substr(0, at)), a[0], string_like(self, s.substr(at + sep.size()))},
      SeqKind::tuple);
}
TROUPE_METHOD(str_removeprefix) {
  auto a = bind("removeprefix", args, {{"prefix", std::nullopt}});
  const std::string& p = need_str(a[0], "removeprefix() argument");
  const std::string& s = self.str();
  return s.compare(0, p.size(), p) == 0 ? string_like(self, s.substr(p.size())) : self;
}
TROUPE_METHOD(str_removesuffix) {
  auto a = bind("removesuffix", args, {{"suffix", std::nullopt}});
  const std::string& p = need_str(a[0], "removesuffix() argument");
  const std::string& s = self.str();
  if (!p.empty() && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
    return string_like(self, s.substr(0, s.size() - p.size()));
  return self;
}
TROUPE_METHOD(str_format) {
  if (self.is_markup()) fault(FaultKind::unsupported, "Markup.format() is not supported");
  return Value::string(str_format(self.str(), args, in.budget()));
}

template <bool (*Pred)(char32_t)>
TROUPE_METHOD(str_all) {
  bind("is...", args, {});
  const auto& s = self.str();
  if (s.empty()) return Value::boolean(false);
  for (std::size_t i = 0; i < s.size();)
    if (!Pred(utf8_next(s, i))) return Value::boolean(false);
  return Value::boolean(true);
}
bool is_alnum(char32_t c) {
  return py_isalpha(c) || py_isdecimal(c) || py_isdigit(c) || py_isnumeric(c);
}
TROUPE_METHOD(str_isascii) {
  bind("isascii", args, {});
  for (char c : self.str())
    if (static_cast<unsigned char>(c) >= 0x80) return Value::boolean(false);
  return Value::boolean(true);
}
TROUPE_METHOD(str_swapcase) {
  bind("swapcase", args, {});
  return string_like(self, py_swapcase(self.str()));
}
TROUPE_METHOD(str_istitle) {
  bind("istitle", args, {});
  return Value::boolean(py_istitle(self.str()));
}
TROUPE_METHOD(str_isprintable) {
  bind("isprintable", args, {});
  const auto& s = self.str();
  for (std::size_t i = 0; i < s.size();)
    if (!py_isprintable(utf8_next(s, i))) return Value::boolean(false);
  return Value::boolean(true);
}
TROUPE_METHOD(str_islower) {
  bind("islower", args, {});
  return Value::boolean(py_islower(self.str()));
}
TROUPE_METHOD(str_isupper) {
  bind("isupper", args, {});
  return Value::boolean(py_isupper(self.str()));
}

// ---- list / tuple ------------------------------------------------------------------------
TROUPE_METHOD(seq_count) {
  auto a = bind("count", args, {{"value", std::nullopt}});
  return Value::integer(std::count_if(self.items().begin(), self.items().end(),
                                      [&](const Value& x) { return equals(x, a[0]); }));
}
TROUPE_METHOD(seq_index) {
  auto a = bind(
      "index", args,
      {{"value", std::nullopt}, {"start", Value::integer(0)}, {"stop", Value::integer(INT64_MAX)}});
  const auto n = static_cast<std::int64_t>(self.items().size());
  auto norm = [&](std::int64_t i) {
    return i < 0 ? std::max<std::int64_t>(0, i + n) : std::min(i, n);
  };
  for (std::int64_t i = norm(a[1].as_int()); i < norm(a[2].as_int()); ++i)
    if (equals(self.items()[static_cast<std::size_t>(i)], a[0])) return Value::integer(i);
  fault(FaultKind::type, fmt::format("{} is not in {}", repr(a[0]), type_name(self)));
}
TROUPE_METHOD(list_copy) {
  bind("copy", args, {});
  return Value::sequence(self.items(), SeqKind::list);
}

// ---- dict --------------------------------------------------------------------------------
TROUPE_METHOD(dict_get) {
  auto a = bind("get", args, {{"key", std::nullopt}, {"default", none()}});
  if (a[0].is_string())
    if (const Value* v = self.dict().find(a[0].str())) return *v;
  if (a[0].is_sequence() && !a[0].is_tuple())
    type_error(fmt::format("unhashable type: '{}'", type_name(a[0])));
  return a[1];
}
TROUPE_METHOD(dict_items) {
  bind("items", args, {});
  List out;
  for (const auto& [k, v] : self.dict().items())
    out.push_back(Value::sequence({Value::string(k), v}, SeqKind::tuple));
  return Value::sequence(std::move(out), SeqKind::dict_items);
}
TROUPE_METHOD(dict_keys) {
  bind("keys", args, {});
  List out;
  for (const auto& [k, v] : self.dict().items()) out.push_back(Value::string(k));
  return Value::sequence(std::move(out), SeqKind::dict_keys);
}
TROUPE_METHOD(dict_values) {
  bind("values", args, {});
  List out;
  for (const auto& [k, v] : self.dict().items()) out.push_back(v);
  return Value::sequence(std::move(out), SeqKind::dict_values);
}
TROUPE_METHOD(dict_copy) {
  bind("copy", args, {});
  return Value::dict(self.dict());
}

#undef TROUPE_METHOD

struct MethodEntry {
  std::string_view name;
  Impl impl;  // null: Python has it, troupe does not
};

constexpr std::array str_methods{
    MethodEntry{"capitalize", str_capitalize},
    MethodEntry{"casefold", nullptr},
    MethodEntry{"center", str_center},
    MethodEntry{"count", str_count},
    MethodEntry{"encode", nullptr},
    MethodEntry{"endswith", str_endswith},
    MethodEntry{"expandtabs", nullptr},
    MethodEntry{"find", str_find},
    MethodEntry{"format", str_format},
    MethodEntry{"format_map", nullptr},
    MethodEntry{"index", str_index},
    MethodEntry{"isalnum", str_all<is_alnum>},
    MethodEntry{"isalpha", str_all<py_isalpha>},
    MethodEntry{"isascii", str_isascii},
    MethodEntry{"isdecimal", str_all<py_isdecimal>},
    MethodEntry{"isdigit", str_all<py_isdigit>},
    MethodEntry{"isidentifier", nullptr},
    MethodEntry{"islower", str_islower},
    MethodEntry{"isnumeric", str_all<py_isnumeric>},
    MethodEntry{"isprintable", str_isprintable},
    MethodEntry{"isspace", str_all<py_isspace>},
    MethodEntry{"istitle", str_istitle},
    MethodEntry{"isupper", str_isupper},
    MethodEntry{"join", str_join},
    MethodEntry{"ljust", str_ljust},
    MethodEntry{"lower", str_lower},
    MethodEntry{"lstrip", str_lstrip},
    MethodEntry{"maketrans", nullptr},
    MethodEntry{"partition", str_partition},
    MethodEntry{"removeprefix", str_removeprefix},
    MethodEntry{"removesuffix", str_removesuffix},
    MethodEntry{"replace", str_replace},
    MethodEntry{"rfind", str_rfind},
    MethodEntry{"rindex", str_rindex},
    MethodEntry{"rjust", str_rjust},
    MethodEntry{"rpartition", str_rpartition},
    MethodEntry{"rsplit", str_rsplit},
    MethodEntry{"rstrip", str_rstrip},
    MethodEntry{"split", str_split},
    MethodEntry{"splitlines", str_splitlines},
    MethodEntry{"startswith", str_startswith},
    MethodEntry{"strip", str_strip},
    MethodEntry{"swapcase", str_swapcase},
    MethodEntry{"title", str_title},
    MethodEntry{"translate", nullptr},
    MethodEntry{"upper", str_upper},
    MethodEntry{"zfill", str_zfill},
};
constexpr std::array list_methods{
    MethodEntry{"clear", nullptr},   MethodEntry{"copy", list_copy},
    MethodEntry{"count", seq_count}, MethodEntry{"index", seq_index},
    MethodEntry{"pop", nullptr},
};
constexpr std::array tuple_methods{MethodEntry{"count", seq_count},
                                   MethodEntry{"index", seq_index}};
constexpr std::array dict_methods{
    MethodEntry{"copy", dict_copy}, MethodEntry{"fromkeys", nullptr},
    MethodEntry{"get", dict_get},   MethodEntry{"items", dict_items},
    MethodEntry{"keys", dict_keys}, MethodEntry{"values", dict_values},
};
// What ImmutableSandboxedEnvironment refuses to call (modifies_known_mutable).
constexpr std::array<std::string_view, 6> list_unsafe{"append", "reverse", "insert",
                                                      "sort",   "extend",  "remove"};
constexpr std::array<std::string_view, 5> dict_unsafe{"clear", "pop", "popitem", "setdefault",
                                                      "update"};
constexpr std::array<std::string_view, 9> int_attributes{
    "as_integer_ratio", "bit_count", "bit_length", "conjugate", "denominator", "imag",
    "numerator",        "real",      "to_bytes"};
constexpr std::array<std::string_view, 7> float_attributes{
    "as_integer_ratio", "conjugate", "fromhex", "hex", "imag", "is_integer", "real"};

template <std::size_t N>
std::optional<Value> lookup(const std::array<MethodEntry, N>& table, const Value& self,
                            std::string_view name) {
  for (const auto& m : table) {
    if (m.name != name) continue;
    if (!m.impl)
      fault(FaultKind::unsupported,
            fmt::format("the {} method {}() is not supported in troupe's chat templates",
                        type_name(self), name));
    return Value::object(std::make_shared<Function>(std::string(name), self, m.impl));
  }
  return std::nullopt;
}

template <std::size_t N>
bool listed(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Value unsafe_method(const Value& self, std::string_view name) {
  return Value::undefined(fmt::format("access to attribute {} of {} object is unsafe.",
                                      str_repr(name), str_repr(type_name(self))),
                          FaultKind::security);
}

}  // namespace

std::optional<Value> builtin_attribute(const Value& self, std::string_view name) {
  switch (self.kind()) {
    case Value::Kind::string:
      return lookup(str_methods, self, name);
    case Value::Kind::dict:
      if (listed(dict_unsafe, name)) return unsafe_method(self, name);
      return lookup(dict_methods, self, name);
    case Value::Kind::sequence:
      switch (self.seq_kind()) {
        case SeqKind::list:
          if (listed(list_unsafe, name)) return unsafe_method(self, name);
          return lookup(list_methods, self, name);
        case SeqKind::tuple:
          return lookup(tuple_methods, self, name);
        case SeqKind::range: {
          const auto& st = self.seq_state();
          if (name == "start") return Value::integer(st.start);
          if (name == "stop") return Value::integer(st.stop);
          if (name == "step") return Value::integer(st.step);
          return lookup(tuple_methods, self, name);
        }
        default:
          return std::nullopt;
      }
    case Value::Kind::integer:
    case Value::Kind::boolean:
      if (listed(int_attributes, name))
        fault(
            FaultKind::unsupported,
            fmt::format("the int attribute {} is not supported in troupe's chat templates", name));
      return std::nullopt;
    case Value::Kind::floating:
      if (listed(float_attributes, name))
        fault(FaultKind::unsupported,
              fmt::format("the float attribute {} is not supported in troupe's chat templates",
                          name));
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace troupe::chat
