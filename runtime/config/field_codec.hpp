// Internal to runtime/config: how a C++ member type reads from JSON and command-line text and
// writes back to JSON, and the builder that turns one member into a FieldInfo row.
//
// One conversion path serves every front end: command-line text is first turned into JSON
// (parse_text), TOML nodes are converted to JSON by the loader, and JSON is decoded into the
// member (set). A JSON string given for a non-string field is read as command-line text, so
// `max_model_len = "32k"` in TOML and `"n": "2"` in a request both work, as they do in vLLM.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/field_info.hpp"

namespace troupe {
struct EngineArgs;
struct SamplingParams;
}  // namespace troupe

namespace troupe::config_detail {

using json = nlohmann::json;

/// What is wrong with a value: the text after "<label> = <value>: ". The hooks catch it and
/// throw troupe::Error with the label and value in front.
class Problem : public std::runtime_error {
 public:
  explicit Problem(const std::string& what) : std::runtime_error(what) {}
};

/// A value for an error message: JSON, cut to ~80 characters.
[[nodiscard]] std::string show(const json& v);
/// Command-line tokens for an error message, space-separated.
[[nodiscard]] std::string show_tokens(std::span<const std::string> tokens);
/// A default as the command line writes it: None, true, 16, auto, [], {}.
[[nodiscard]] std::string render_text(const json& v);
/// throw troupe::Error("<label> = <value>: <problem>").
[[noreturn]] void fail_field(std::string_view label, std::string_view value,
                             std::string_view problem);

/// "None", "null" or "": no value, as vLLM's optional_type reads it.
[[nodiscard]] bool is_none_text(std::string_view s);
/// true/false, 1/0, yes/no, on/off (any case); "" (a bare flag) is true.
[[nodiscard]] bool parse_bool_text(std::string_view s);
/// An integer, optionally human-readable as vLLM's human_readable_int: 1k = 1000,
/// 1K = 1024, 25.6k = 25600 (decimals only with the decimal suffixes k, m, g, t).
[[nodiscard]] int64_t parse_int_text(std::string_view s);
[[nodiscard]] double parse_float_text(std::string_view s);
/// JSON text; a Problem naming the parse error otherwise.
[[nodiscard]] json parse_json_text(std::string_view s);

[[nodiscard]] int64_t decode_int(const json& v);
[[nodiscard]] double decode_float(const json& v);
[[nodiscard]] bool decode_bool(const json& v);
[[nodiscard]] std::string decode_string(const json& v);
[[nodiscard]] const std::string& last(std::span<const std::string> tokens);

/// snake_case -> kebab-case.
[[nodiscard]] std::string kebab(std::string_view snake);

// ---- codecs: one per member type ----

template <class T>
struct Codec;

template <>
struct Codec<bool> {
  static constexpr std::string_view type = "bool";
  static constexpr FieldInfo::Arity arity = FieldInfo::Arity::flag;
  static bool decode(const json& v) { return decode_bool(v); }
  static json encode(bool b) { return b; }
  static json parse(std::span<const std::string> t) { return parse_bool_text(last(t)); }
};

template <>
struct Codec<int64_t> {
  static constexpr std::string_view type = "int";
  static constexpr FieldInfo::Arity arity = FieldInfo::Arity::one;
  static int64_t decode(const json& v) { return decode_int(v); }
  static json encode(int64_t i) { return i; }
  static json parse(std::span<const std::string> t) { return parse_int_text(last(t)); }
};

template <>
struct Codec<double> {
  static constexpr std::string_view type = "float";
  static constexpr FieldInfo::Arity arity = FieldInfo::Arity::one;
  static double decode(const json& v) { return decode_float(v); }
  static json encode(double d) { return d; }
  static json parse(std::span<const std::string> t) { return parse_float_text(last(t)); }
};

template <>
struct Codec<std::string> {
  static constexpr std::string_view type = "str";
  static constexpr FieldInfo::Arity arity = FieldInfo::Arity::one;
  static std::string decode(const json& v) { return decode_string(v); }
  static json encode(const std::string& s) { return s; }
  static json parse(std::span<const std::string> t) { return last(t); }
};

/// Optional scalars: None on the command line, null in JSON.
template <class T>
struct Codec<std::optional<T>> {
  static constexpr std::string_view type = Codec<T>::type == "int"     ? "int|None"
                                           : Codec<T>::type == "float" ? "float|None"
                                           : Codec<T>::type == "bool"  ? "bool|None"
                                                                       : "str|None";
  static constexpr FieldInfo::Arity arity = Codec<T>::arity;
  static std::optional<T> decode(const json& v) {
    if (v.is_null()) return std::nullopt;
    return Codec<T>::decode(v);
  }
  static json encode(const std::optional<T>& o) { return o ? Codec<T>::encode(*o) : json(); }
  static json parse(std::span<const std::string> t) {
    if (is_none_text(last(t))) return json();
    return Codec<T>::parse(t);
  }
};

/// list[str]: one element per token; one token "[...]" is read as a JSON array, and a
/// single JSON string is a one-element list (vLLM's `str | list[str]`). Empty = None.
template <>
struct Codec<std::vector<std::string>> {
  static constexpr std::string_view type = "list[str]";
  static constexpr FieldInfo::Arity arity = FieldInfo::Arity::many;
  static std::vector<std::string> decode(const json& v);
  static json encode(const std::vector<std::string>& v) { return v; }
  static json parse(std::span<const std::string> t);
};

/// list[int]: tokens may hold several numbers separated by commas or spaces.
template <class I>
requires std::is_same_v<I, int32_t> || std::is_same_v<I, int64_t>
struct Codec<std::vector<I>> {
  static constexpr std::string_view type = "list[int]";
  static constexpr FieldInfo::Arity arity = FieldInfo::Arity::many;
  static std::vector<I> decode(const json& v);
  static json encode(const std::vector<I>& v) { return v; }
  static json parse(std::span<const std::string> t);
};

/// dict[int, float] (logit_bias): a JSON object {"50256": -100}, or tokens "50256:-100".
template <>
struct Codec<std::map<int32_t, double>> {
  static constexpr std::string_view type = "dict[int,float]";
  static constexpr FieldInfo::Arity arity = FieldInfo::Arity::many;
  static std::map<int32_t, double> decode(const json& v);
  static json encode(const std::map<int32_t, double>& m);
  static json parse(std::span<const std::string> t);
};

/// Free-form dicts (compilation_config, hf_overrides, ...) stay JSON: troupe does not
/// interpret them yet, it only compares them with the default.
template <>
struct Codec<json> {
  static constexpr std::string_view type = "json";
  static constexpr FieldInfo::Arity arity = FieldInfo::Arity::one;
  static json decode(const json& v) { return v; }
  static json encode(const json& v) { return v; }
  static json parse(std::span<const std::string> t) {
    if (is_none_text(last(t))) return json();
    return parse_json_text(last(t));
  }
};

// ---- table rows ----

using Predicate = std::function<bool(const json&)>;

/// How one member is described. Predicates see the value as `get` returns it; null (None)
/// passes every predicate unless the predicate says otherwise.
struct Spec {
  std::string_view name;
  std::string_view help;
  /// What `valid` accepts, in words ("a power of two in 1..256"); generated from `choices`
  /// when empty.
  std::string_view allowed;
  /// Enum-like strings (vLLM's Literal values); a string (or each list element) must be one.
  std::vector<std::string_view> choices;
  /// The subset of `choices` troupe implements; others are refused as not supported yet.
  std::vector<std::string_view> supported;
  Predicate valid;  // false -> "allowed: <allowed>"
  Predicate works;  // false -> "not supported yet in troupe (<note>)"
  FieldInfo::Status status = FieldInfo::Status::supported;
  std::string_view note;
  std::string_view flag;  // when the kebab form of `name` is not the flag
  bool text_items = false;  // FieldInfo::text_items
};

/// Keeps generated strings (flags, default texts) alive for the string_views of a table.
class Arena {
 public:
  std::string_view keep(std::string s) { return strings_.emplace_back(std::move(s)); }

 private:
  std::deque<std::string> strings_;
};

/// Fills the parts of a row that do not depend on the member: flag, allowed, check.
void finish_row(FieldInfo& f, Spec& spec, Arena& arena);

/// A row's parse_text for values of type T.
template <class T>
json parse_text_as(std::span<const std::string> tokens, std::string_view label) {
  try {
    return Codec<T>::parse(tokens);
  } catch (const Problem& p) {
    fail_field(label, show_tokens(tokens), p.what());
  }
}

/// A T decoded from `v`, or troupe::Error naming `label`.
template <class T>
T decode_as(const json& v, std::string_view label) {
  try {
    return Codec<T>::decode(v);
  } catch (const Problem& p) {
    fail_field(label, show(v), p.what());
  }
}

template <class S, class T>
FieldInfo member(Arena& arena, T S::*m, Spec spec) {
  FieldInfo f;
  f.name = spec.name;
  f.type = Codec<T>::type;
  f.arity = Codec<T>::arity;
  f.default_text = arena.keep(render_text(Codec<T>::encode(S{}.*m)));
  f.parse_text = parse_text_as<T>;
  f.set = [m](void* target, const json& v, std::string_view label, std::vector<std::string>*) {
    static_cast<S*>(target)->*m = decode_as<T>(v, label);
  };
  f.get = [m](const void* source) { return Codec<T>::encode(static_cast<const S*>(source)->*m); };
  finish_row(f, spec, arena);
  return f;
}

/// A legacy field with no member of its own: `map` stores what it means (if anything) and
/// returns the one-line notice.
template <class S, class T>
FieldInfo legacy(Arena& arena, Spec spec, std::string_view default_text,
                 std::function<std::string(S&, const T&)> map) {
  FieldInfo f;
  f.name = spec.name;
  f.type = Codec<T>::type;
  f.arity = Codec<T>::arity;
  f.default_text = default_text;
  f.parse_text = parse_text_as<T>;
  f.set = [map](void* target, const json& v, std::string_view label,
                std::vector<std::string>* notices) {
    const T value = decode_as<T>(v, label);
    std::string notice;
    try {
      notice = map(*static_cast<S*>(target), value);  // may refuse the value (a Problem)
    } catch (const Problem& p) {
      fail_field(label, show(v), p.what());
    }
    if (notices && !notice.empty()) notices->push_back(std::move(notice));
  };
  spec.status = FieldInfo::Status::legacy;
  finish_row(f, spec, arena);
  return f;
}

/// A vLLM field troupe cannot honour yet and keeps no member for: null (None: not given) and
/// `neutral`, the value that asks for nothing (nullopt: none does), are accepted and change
/// nothing; any other value is refused by set() as not supported yet, with `spec.note` as the
/// reason.
template <class T>
FieldInfo refused(Arena& arena, Spec spec, std::optional<T> neutral) {
  FieldInfo f;
  f.name = spec.name;
  f.type = Codec<T>::type;
  f.arity = Codec<T>::arity;
  f.default_text = neutral ? arena.keep(render_text(Codec<T>::encode(*neutral))) : "None";
  f.parse_text = parse_text_as<T>;
  f.set = [neutral, note = spec.note](void*, const json& v, std::string_view label,
                                      std::vector<std::string>*) {
    if (v.is_null()) return;
    if (!neutral || !(decode_as<T>(v, label) == *neutral))
      fail_field(label, show(v), "not supported yet in troupe (" + std::string(note) + ")");
  };
  spec.status = FieldInfo::Status::not_yet;
  finish_row(f, spec, arena);
  return f;
}

// ---- predicates ----

[[nodiscard]] Predicate at_least(double lo);                 // finite, >= lo
[[nodiscard]] Predicate in_range(double lo, double hi);      // finite, lo <= v <= hi
[[nodiscard]] Predicate in_half_open(double lo, double hi);  // finite, lo < v <= hi
[[nodiscard]] Predicate equals(json expected);

// ---- using a table ----

/// The row named `key`: snake or kebab name, with or without a leading "--". Null if none.
[[nodiscard]] const FieldInfo* find_field(const std::vector<FieldInfo>& table,
                                          std::string_view key);
/// The name in `names` closest to `key` (leading dashes dropped, '-' read as '_' on both
/// sides) when it is close: at most one edit per three characters of `key`; "" when none is.
[[nodiscard]] std::string_view closest_name(std::span<const std::string_view> names,
                                            std::string_view key);
/// " (did you mean 'top_p'?)" for the closest name within a small edit distance, else "".
[[nodiscard]] std::string suggest(const std::vector<FieldInfo>& table, std::string_view key);

/// The checks of one value: `check`, then the not-yet refusal of a non-default value.
void check_value(const FieldInfo& f, const json& value, const json& default_value,
                 std::string_view label);
/// set + check_value. `target` may be left changed when this throws: callers use a copy.
void apply_value(const FieldInfo& f, void* target, const json& default_value, const json& value,
                 std::string_view label, std::vector<std::string>* notices);
/// check_value on every row that has a member; `defaults` holds get() of the default struct.
void check_all(const std::vector<FieldInfo>& table, const std::vector<json>& defaults,
               const void* source);
/// get() of each row on `source` (null for rows without a member), in table order.
[[nodiscard]] std::vector<json> values_of(const std::vector<FieldInfo>& table, const void* source);

/// The field table of T: its rows (made by `Build` on first use, so other translation units may
/// use it from their own statics), the strings they point into, and the default T's values.
template <class T, std::vector<FieldInfo> (*Build)(Arena&)>
struct FieldTable {
  [[nodiscard]] static const FieldTable& get() {
    static const FieldTable t;
    return t;
  }
  T default_value;
  Arena arena;
  std::vector<FieldInfo> fields = Build(arena);
  std::vector<json> defaults = values_of(fields, &default_value);
};

/// Sets one field from text the way the command line gives it (`name` in snake, kebab or
/// --flag form, or "no-<flag>" for a bool). Errors name the --flag.
void set_from_text(const std::vector<FieldInfo>& table, const std::vector<json>& defaults,
                   void* target, std::string_view name, std::span<const std::string> tokens,
                   std::vector<std::string>* notices, std::string_view what);

/// One value onto one field (`f` must be a row of that struct's table): set, checks, not-yet
/// refusal, and for EngineArgs the notices some values deserve. For the TOML loader and the
/// command line.
void apply_engine_value(EngineArgs& a, const FieldInfo& f, const json& value,
                        std::string_view label, std::vector<std::string>* notices);
void apply_sampling_value(SamplingParams& p, const FieldInfo& f, const json& value,
                          std::string_view label);

}  // namespace troupe::config_detail
