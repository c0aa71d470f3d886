// The values a chat template computes with, modelled on the Python objects Jinja2 hands
// around: undefined, None, bool, int, float, str (with markupsafe's Markup flag), list,
// tuple, the lazy sequences (generators from select/map, range, dict views), insertion-
// ordered dicts and objects (namespace, loop, macros, functions). Data is immutable and
// shared (copying a Value copies a pointer), so `messages` is converted from JSON once per
// render; only a namespace (and a generator's cursor) changes in place, as in Python.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace troupe::chat {

class Value;
class Dict;
class Object;
class Interpreter;
using List = std::vector<Value>;

/// What went wrong, for the caller and the tests (Python's exception class in brackets).
enum class FaultKind {
  syntax,       // TemplateSyntaxError
  undefined,    // UndefinedError
  type,         // TypeError / ValueError / ZeroDivisionError / TemplateRuntimeError
  security,     // SecurityError
  raised,       // raise_exception(msg) in the template
  limit,        // a troupe bound (output size, iterations, depth)
  unsupported,  // Jinja2 has it, troupe refuses it
};

/// Thrown inside the engine; ChatTemplate turns it into a ChatTemplateError with the place.
struct Fault {
  FaultKind kind;
  std::string message;
  int line = 0;  // 0: not known yet; the innermost node that knows adds it
  int column = 0;
};
[[noreturn]] void fault(FaultKind kind, std::string message);

enum class SeqKind : std::uint8_t {
  list,
  tuple,
  generator,  // select/map/reject/unique/reverse results: one pass, no len()
  range,
  dict_keys,
  dict_values,
  dict_items,
};

/// Extra state of a lazy sequence: the read position of a generator, the arguments of range.
struct SeqState {
  std::size_t cursor = 0;
  std::int64_t start = 0, stop = 0, step = 1;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, floating, string, sequence, dict, object };

  Value() : v_(Undef{}) {}
  /// An undefined value; `message` is what an operation on it reports (Jinja2's hint), as a
  /// Fault of `kind` (security for the sandbox's "unsafe" attributes).
  static Value undefined(std::string message, FaultKind kind = FaultKind::undefined);
  static Value none() { return Value(Variant(NoneT{})); }
  static Value boolean(bool b) { return Value(Variant(b)); }
  static Value integer(std::int64_t i) { return Value(Variant(i)); }
  static Value floating(double d) { return Value(Variant(d)); }
  static Value string(std::string s, bool markup = false);
  static Value sequence(List items, SeqKind kind = SeqKind::list);
  static Value range(std::int64_t start, std::int64_t stop, std::int64_t step);
  static Value dict(Dict d);
  static Value object(std::shared_ptr<Object> o);

  [[nodiscard]] Kind kind() const { return static_cast<Kind>(v_.index()); }
  [[nodiscard]] bool is_undefined() const { return kind() == Kind::undefined; }
  [[nodiscard]] bool is_none() const { return kind() == Kind::none; }
  [[nodiscard]] bool is_bool() const { return kind() == Kind::boolean; }
  [[nodiscard]] bool is_int() const { return kind() == Kind::integer; }
  [[nodiscard]] bool is_float() const { return kind() == Kind::floating; }
  /// int, float or bool (Python's bool is an int).
  [[nodiscard]] bool is_number() const { return is_int() || is_float() || is_bool(); }
  [[nodiscard]] bool is_string() const { return kind() == Kind::string; }
  [[nodiscard]] bool is_sequence() const { return kind() == Kind::sequence; }
  [[nodiscard]] bool is_dict() const { return kind() == Kind::dict; }
  [[nodiscard]] bool is_object() const { return kind() == Kind::object; }

  [[nodiscard]] bool as_bool() const { return std::get<bool>(v_); }
  /// An int or bool as a Python int; anything else is a TypeError (a Fault).
  [[nodiscard]] std::int64_t as_int() const;
  /// An int, bool or float as a Python float; anything else is a TypeError (a Fault).
  [[nodiscard]] double as_double() const;
  [[nodiscard]] const std::string& str() const { return *std::get<Str>(v_).s; }
  [[nodiscard]] bool is_markup() const { return is_string() && std::get<Str>(v_).markup; }
  [[nodiscard]] SeqKind seq_kind() const { return std::get<Seq>(v_).kind; }
  [[nodiscard]] bool is_list() const { return is_sequence() && seq_kind() == SeqKind::list; }
  [[nodiscard]] bool is_tuple() const { return is_sequence() && seq_kind() == SeqKind::tuple; }
  [[nodiscard]] bool is_generator() const {
    return is_sequence() && seq_kind() == SeqKind::generator;
  }
  /// The items of a sequence (for a generator: all of them, read or not; see take_rest).
  [[nodiscard]] const List& items() const { return *std::get<Seq>(v_).items; }
  [[nodiscard]] SeqState& seq_state() const { return *std::get<Seq>(v_).state; }
  [[nodiscard]] const Dict& dict() const { return *std::get<DictPtr>(v_); }
  [[nodiscard]] const std::shared_ptr<Object>& object() const { return std::get<Obj>(v_).o; }
  [[nodiscard]] const std::string& undefined_message() const;
  [[nodiscard]] FaultKind undefined_kind() const { return std::get<Undef>(v_).kind; }

  /// Same object (Python's `is`), for sameas and generator equality.
  [[nodiscard]] bool same_object(const Value& other) const;

 private:
  struct Undef {
    std::shared_ptr<const std::string> message;
    FaultKind kind = FaultKind::undefined;
  };
  struct NoneT {};
  struct Str {
    std::shared_ptr<const std::string> s;
    bool markup = false;
  };
  struct Seq {
    std::shared_ptr<const List> items;
    SeqKind kind = SeqKind::list;
    std::shared_ptr<SeqState> state;  // generators and ranges only
  };
  using DictPtr = std::shared_ptr<const Dict>;
  struct Obj {
    std::shared_ptr<Object> o;
  };
  using Variant = std::variant<Undef, NoneT, bool, std::int64_t, double, Str, Seq, DictPtr, Obj>;
  explicit Value(Variant v) : v_(std::move(v)) {}

  Variant v_;
};

/// A dict with string keys in insertion order (Python's dict, as json.loads builds it).
class Dict {
 public:
  [[nodiscard]] const Value* find(std::string_view key) const;
  /// Inserts, or replaces in place (keeping the key's position), as Python does.
  void set(const std::string& key, Value v);
  [[nodiscard]] std::size_t size() const { return items_.size(); }
  [[nodiscard]] bool empty() const { return items_.empty(); }
  [[nodiscard]] const std::vector<std::pair<std::string, Value>>& items() const { return items_; }

 private:
  std::vector<std::pair<std::string, Value>> items_;
  std::unordered_map<std::string, std::size_t> index_;
};

/// Values that are not data: namespaces, loop contexts, macros, functions, bound methods.
class Object {
 public:
  virtual ~Object() = default;
  /// Python's type name, for TypeError messages ("Namespace", "function").
  [[nodiscard]] virtual std::string type_name() const = 0;
  /// Jinja2's object_type_repr, for undefined messages ("jinja2.utils.Namespace object").
  [[nodiscard]] virtual std::string type_repr() const { return type_name() + " object"; }
  /// The attribute, or nullopt when there is none (the caller makes the undefined).
  [[nodiscard]] virtual std::optional<Value> getattr(std::string_view name) const;
  [[nodiscard]] virtual bool callable() const { return false; }
  virtual Value call(Interpreter& in, CallArgs& args) const;
  /// What str() gives; nullopt where Python prints a memory address (refused).
  [[nodiscard]] virtual std::optional<std::string> repr() const { return std::nullopt; }
  /// namespace only: `{% set ns.attr = value %}`.
  virtual bool set_attr(const std::string& name, Value v);
  /// Drops what this object holds, at the end of a render: namespaces, macros and loop
  /// state are the mutable objects through which values can refer to themselves, and a
  /// reference cycle of shared pointers would never be freed (see Interpreter::own).
  virtual void release() {}
};

// ---- Python semantics of plain values ----------------------------------------------------
bool truthy(const Value& v);
/// Python's str(v) as Jinja2 prints it: undefined -> "", None -> "None", 1.0 -> "1.0".
std::string to_str(const Value& v);
std::string repr(const Value& v);
/// Python's float.__repr__ (shortest round-trip digits, 1e+16 / 1e-05 switch-over).
std::string float_repr(double d);
std::string str_repr(std::string_view s);
/// Python's ==: numbers by value (True == 1), str by content, list/tuple/dict deeply.
bool equals(const Value& a, const Value& b);
/// Python's type(v).__name__ ("NoneType", "str", "dict", "Undefined").
std::string type_name(const Value& v);
/// Jinja2's object_type_repr ("None", "dict object", "str object").
std::string type_repr(const Value& v);
/// Undefined for `owner.name` / `owner[name]` missing, with Jinja2's message.
Value missing_attribute(const Value& owner, std::string_view name);
Value missing_item(const Value& owner, const Value& key);
[[noreturn]] void fail_undefined(const Value& v);

/// Converts JSON input (ordered keeps the caller's key order, as Python's json.loads does).
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

/// json.dumps(v, ensure_ascii=..., indent=..., separators=..., sort_keys=...): transformers'
/// tojson filter. indent: nullopt for none, else the indent string per level.
struct JsonStyle {
  bool ensure_ascii = false;
  std::optional<std::string> indent;
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
std::string dump_json(const Value& v, const JsonStyle& style);

}  // namespace troupe::chat
