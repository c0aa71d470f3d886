#include "runtime/config/field_codec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "runtime/error.hpp"

namespace troupe::config_detail {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool parse_exact_int(std::string_view s, int64_t& out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

bool parse_exact_double(std::string_view s, double& out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

// Levenshtein distance with adjacent transpositions counted as one edit (optimal string
// alignment), so "prot" is one edit from "port", as a typo is.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> before(b.size() + 1), prev(b.size() + 1), row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      row[j] =
          std::min({prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        row[j] = std::min(row[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, row);
  }
  return prev[b.size()];
}

std::string normalise_key(std::string_view key) {
  while (!key.empty() && key.front() == '-') key.remove_prefix(1);
  std::string out(key);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

const char* json_kind(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "a table/object";
    default:
      return "an unsupported value";
  }
}

template <class I>
I checked_int(int64_t v) {
  if (v < int64_t(std::numeric_limits<I>::min()) || v > int64_t(std::numeric_limits<I>::max())) {
    throw Problem(fmt::format("{} is out of range for a token id", v));
  }
  return I(v);
}

}  // namespace

std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    double d = v.get<double>();
    s = std::isnan(d) ? "nan" : (d > 0 ? "inf" : "-inf");
  }
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string show_tokens(std::span<const std::string> tokens) {
  std::string s;
  for (const auto& t : tokens) {
    if (!s.empty()) s += ' ';
    s += t.empty() ? "\"\"" : t;
  }
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string render_text(const json& v) {
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

void fail_field(std::string_view label, std::string_view value, std::string_view problem) {
  fail("{} = {}: {}", label, value, problem);
}

bool is_none_text(std::string_view s) {
  s = trim(s);
  return s.empty() || s == "None" || s == "none" || s == "null";
}

bool parse_bool_text(std::string_view s) {
  std::string t = lower(trim(s));
  if (t.empty() || t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  throw Problem("expected a boolean (true or false)");
}

int64_t parse_int_text(std::string_view s) {
  s = trim(s);
  int64_t out = 0;
  if (parse_exact_int(s, out)) return out;
  // Human-readable forms, as vLLM's human_readable_int.
  if (s.size() >= 2) {
    char suffix = s.back();
    std::string_view number = s.substr(0, s.size() - 1);
    static constexpr std::string_view kDecimal = "kmgt";
    static constexpr std::string_view kBinary = "KMGT";
    if (auto d = kDecimal.find(suffix); d != std::string_view::npos) {
      double x = 0;
      if (parse_exact_double(number, x)) {
        double scaled = std::round(x * std::pow(1000.0, double(d + 1)));
        if (std::abs(x * std::pow(1000.0, double(d + 1)) - scaled) < 1e-6 &&
            std::abs(scaled) < 9.2e18) {
          return int64_t(scaled);
        }
        throw Problem("expected an integer (1k = 1000 must come out whole)");
      }
    } else if (auto b = kBinary.find(suffix); b != std::string_view::npos) {
      int64_t x = 0;
      if (parse_exact_int(number, x)) {
        int64_t scale = int64_t(1) << (10 * (b + 1));
        if (std::abs(x) <= std::numeric_limits<int64_t>::max() / scale) return x * scale;
      } else {
        throw Problem("expected an integer (decimals only with k, m, g: 1K = 1024 is binary)");
      }
    }
  }
  throw Problem("expected an integer (e.g. 4096, 4k = 4000, 4K = 4096)");
}

double parse_float_text(std::string_view s) {
  s = trim(s);
  double out = 0;
  if (parse_exact_double(s, out)) return out;
  throw Problem("expected a number");
}

json parse_json_text(std::string_view s) {
  try {
    return json::parse(s);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
    throw Problem(fmt::format("expected JSON ({})", e.what()));
  }
}

int64_t decode_int(const json& v) {
  // Unsigned first: is_number_integer() is true for unsigned numbers too, and get<int64_t>()
  // wrapped 18446744073709551615 to -1.
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      throw Problem("integer out of range");
    }
    return v.get<int64_t>();
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.2e18) return int64_t(d);
    throw Problem("expected an integer");
  }
  if (v.is_string()) return parse_int_text(v.get<std::string>());
  throw Problem(fmt::format("expected an integer, got {}", json_kind(v)));
}

double decode_float(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return parse_float_text(v.get<std::string>());
  throw Problem(fmt::format("expected a number, got {}", json_kind(v)));
}

bool decode_bool(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) return parse_bool_text(v.get<std::string>());
  throw Problem(fmt::format("expected a boolean (true or false), got {}", json_kind(v)));
}

std::string decode_string(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  throw Problem(fmt::format("expected a string, got {}", json_kind(v)));
}

const std::string& last(std::span<const std::string> tokens) {
  static const std::string kEmpty;
  return tokens.empty() ? kEmpty : tokens.back();
}

std::string kebab(std::string_view snake) {
  std::string out(snake);
  std::replace(out.begin(), out.end(), '_', '-');
  return out;
}

// ---- list and map codecs ----

std::vector<std::string> Codec<std::vector<std::string>>::decode(const json& v) {
  if (v.is_null()) return {};
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array()) throw Problem(fmt::format("expected a list of strings, got {}", json_kind(v)));
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) {
      throw Problem(fmt::format("expected a list of strings, got {} in it", json_kind(e)));
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

json Codec<std::vector<std::string>>::parse(std::span<const std::string> t) {
  if (t.size() == 1 && trim(t[0]).starts_with('[')) return parse_json_text(t[0]);
  return json(std::vector<std::string>(t.begin(), t.end()));
}

template <class I>
requires std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t> std::vector<I>
Codec<std::vector<I>>::decode(const json& v) {
  if (v.is_null()) return {};
  if (!v.is_array()) return {checked_int<I>(decode_int(v))};
  std::vector<I> out;
  for (const auto& e : v) out.push_back(checked_int<I>(decode_int(e)));
  return out;
}

template <class I>
requires std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t> json
Codec<std::vector<I>>::parse(std::span<const std::string> t) {
  if (t.size() == 1 && trim(t[0]).starts_with('[')) return parse_json_text(t[0]);
  json out = json::array();
  for (const auto& token : t) {
    std::string_view rest = token;
    while (!rest.empty()) {
      size_t cut = rest.find_first_of(", ");
      std::string_view item = trim(rest.substr(0, cut));
      if (!item.empty()) out.push_back(parse_int_text(item));
      if (cut == std::string_view::npos) break;
      rest.remove_prefix(cut + 1);
    }
  }
  return out;
}

template struct Codec<std::vector<int32_t>>;
template struct Codec<std::vector<int64_t>>;

std::map<int32_t, double> Codec<std::map<int32_t, double>>::decode(const json& v) {
  if (v.is_null()) return {};
  if (!v.is_object()) {
    throw Problem(fmt::format("expected a table/object of token id -> bias, got {}", json_kind(v)));
  }
  std::map<int32_t, double> out;
  for (const auto& [key, bias] : v.items()) {
    int64_t id = 0;
    if (!parse_exact_int(trim(key), id)) {
      throw Problem(fmt::format("key \"{}\" is not a token id (an integer)", key));
    }
    out[checked_int<int32_t>(id)] = decode_float(bias);
  }
  return out;
}

json Codec<std::map<int32_t, double>>::encode(const std::map<int32_t, double>& m) {
  json out = json::object();
  for (const auto& [id, bias] : m) out[std::to_string(id)] = bias;
  return out;
}

json Codec<std::map<int32_t, double>>::parse(std::span<const std::string> t) {
  if (t.size() == 1 && trim(t[0]).starts_with('{')) return parse_json_text(t[0]);
  json out = json::object();
  for (const auto& token : t) {
    std::string_view rest = token;
    while (!rest.empty()) {
      size_t cut = rest.find(',');
      std::string_view item = trim(rest.substr(0, cut));
      if (!item.empty()) {
        size_t colon = item.find_last_of(":=");
        if (colon == std::string_view::npos) {
          throw Problem("expected TOKEN_ID:BIAS pairs (e.g. 50256:-100) or a JSON object");
        }
        out[std::string(trim(item.substr(0, colon)))] = parse_float_text(item.substr(colon + 1));
      }
      if (cut == std::string_view::npos) break;
      rest.remove_prefix(cut + 1);
    }
  }
  return out;
}

// ---- rows ----

void finish_row(FieldInfo& f, Spec& spec, Arena& arena) {
  f.help = spec.help;
  f.status = spec.status;
  f.note = spec.note;
  f.text_items = spec.text_items;
  f.flag = spec.flag.empty() ? arena.keep(kebab(spec.name)) : spec.flag;
  if (spec.allowed.empty() && !spec.choices.empty())
    spec.allowed = arena.keep(fmt::format("{}", fmt::join(spec.choices, "|")));
  f.allowed = spec.allowed;
  if (!spec.supported.empty())
    f.supported_values = arena.keep(fmt::format("{}", fmt::join(spec.supported, "|")));

  std::vector<std::string_view> choices = spec.choices;
  std::vector<std::string_view> supported = spec.supported;
  Predicate valid = spec.valid;
  Predicate works = spec.works;
  std::string_view allowed = f.allowed;
  std::string_view supported_now = f.supported_values;
  std::string_view note = f.note;
  if (choices.empty() && !valid && supported.empty() && !works) return;

  f.check = [=](const json& v, std::string_view label) {
    auto in = [](const std::vector<std::string_view>& set, const json& e) {
      return e.is_string() &&
             std::find(set.begin(), set.end(), e.get_ref<const std::string&>()) != set.end();
    };
    if (!choices.empty()) {
      bool ok = v.is_null() || in(choices, v);
      if (v.is_array())
        ok = std::all_of(v.begin(), v.end(), [&](const json& e) { return in(choices, e); });
      if (!ok) fail_field(label, show(v), fmt::format("allowed: {}", allowed));
    }
    if (valid && !v.is_null() && !valid(v)) {
      fail_field(label, show(v), fmt::format("allowed: {}", allowed));
    }
    if (!supported.empty() && v.is_string() && !in(supported, v)) {
      fail_field(label, show(v),
                 note.empty()
                     ? fmt::format("not supported yet in troupe (supported now: {})", supported_now)
                     : fmt::format("not supported yet in troupe (supported now: {}; {})",
                                   supported_now, note));
    }
    if (works && !works(v)) {
      fail_field(label, show(v), fmt::format("not supported yet in troupe ({})", note));
    }
  };
}

// ---- predicates ----

Predicate at_least(double lo) {
  return [lo](const json& v) {
    return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= lo;
  };
}

Predicate in_range(double lo, double hi) {
  return [lo, hi](const json& v) {
    return v.is_number() && v.get<double>() >= lo && v.get<double>() <= hi;
  };
}

Predicate in_half_open(double lo, double hi) {
  return [lo, hi](const json& v) {
    return v.is_number() && v.get<double>() > lo && v.get<double>() <= hi;
  };
}

Predicate equals(json expected) {
  return [expected = std::move(expected)](const json& v) { return v == expected; };
}

// ---- using a table ----

const FieldInfo* find_field(const std::vector<FieldInfo>& table, std::string_view key) {
  std::string k = normalise_key(key);
  for (const auto& f : table) {
    if (f.name == k || normalise_key(f.flag) == k) return &f;
  }
  return nullptr;
}

std::string_view closest_name(std::span<const std::string_view> names, std::string_view key) {
  const std::string k = normalise_key(key);
  // Close means a typo, not a different word: "temprature" -> temperature, but "foo" is not
  // "n" (three edits of three letters), and a key of one or two letters is not a typo of one.
  size_t best_d = k.size() / 3 + 1;
  std::string_view best;
  for (std::string_view name : names) {
    const size_t d = edit_distance(k, normalise_key(name));
    if (d < best_d) best_d = d, best = name;
  }
  return best;
}

std::string suggest(const std::vector<FieldInfo>& table, std::string_view key) {
  std::vector<std::string_view> names;
  names.reserve(table.size());
  for (const auto& f : table) names.push_back(f.name);
  std::string_view best = closest_name(names, key);
  return best.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", best);
}

void check_value(const FieldInfo& f, const json& value, const json& default_value,
                 std::string_view label) {
  if (f.check) f.check(value, label);
  // "" is None for an optional string, as vLLM's optional_type reads it (revision = "").
  const bool unset = value == default_value || (default_value.is_null() && value == "");
  if (f.status == FieldInfo::Status::not_yet && !unset) {
    fail_field(label, show(value), fmt::format("not supported yet in troupe ({})", f.note));
  }
}

void apply_value(const FieldInfo& f, void* target, const json& default_value, const json& value,
                 std::string_view label, std::vector<std::string>* notices) {
  f.set(target, value, label, notices);
  if (f.get) check_value(f, f.get(target), default_value, label);
}

void check_all(const std::vector<FieldInfo>& table, const std::vector<json>& defaults,
               const void* source) {
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].get) check_value(table[i], table[i].get(source), defaults[i], table[i].name);
  }
}

std::vector<json> values_of(const std::vector<FieldInfo>& table, const void* source) {
  std::vector<json> out;
  out.reserve(table.size());
  for (const auto& f : table) out.push_back(f.get ? f.get(source) : json());
  return out;
}

void set_from_text(const std::vector<FieldInfo>& table, const std::vector<json>& defaults,
                   void* target, std::string_view name, std::span<const std::string> tokens,
                   std::vector<std::string>* notices, std::string_view what) {
  const FieldInfo* f = find_field(table, name);
  bool negate = false;
  if (!f) {
    std::string k = normalise_key(name);
    if (k.starts_with("no_")) {
      f = find_field(table, std::string_view(k).substr(3));
      if (f && f->arity != FieldInfo::Arity::flag) f = nullptr;
      negate = f != nullptr;
    }
  }
  if (!f) fail("unknown {} '{}'{}", what, name, suggest(table, name));
  std::string label = fmt::format("--{}{}", negate ? "no-" : "", f->flag);
  json value = f->parse_text(tokens, label);
  if (negate) value = !value.get<bool>();
  size_t index = size_t(f - table.data());
  apply_value(*f, target, defaults[index], value, label, notices);
}

}  // namespace troupe::config_detail
