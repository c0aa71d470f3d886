// Hugging Face chat templates, rendered byte for byte as transformers' apply_chat_template
// renders them with Python's Jinja2 (ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True, extensions=[loopcontrols, AssistantTracker]) with transformers' tojson,
// raise_exception and strftime_now). troupe implements the Jinja subset that chat templates
// use, in plain C++ (runtime/chat/), and refuses the rest with an error that names it.
//
// Supported
//   Syntax: {{ }}, {% %}, {# #}, whitespace control ({%- -%} {{- -}} {#- -#}, and + to keep
//     it), trim_blocks / lstrip_blocks / keep_trailing_newline=False as transformers sets
//     them, {% raw %}, \r\n normalised to \n.
//   Statements: if / elif / else; for (loop.index, index0, revindex, revindex0, first, last,
//     length, depth, previtem, nextitem, cycle(), changed(); {% else %}; `for x in xs if c`;
//     tuple unpacking; break / continue); set (`a, b = ...`, `ns.attr = ...`, block set with
//     filters); macro (defaults, varargs, kwargs, caller); call blocks; filter blocks; with;
//     print; generation (transformers' AssistantTracker tag: renders its body).
//   Expressions: string (Python escapes), int (0x/0o/0b, _), float, list, tuple, dict
//     literals; true/false/none/True/False/None; .attr / [key] / [a:b:c] with Jinja2's
//     sandboxed lookup (a missing one is undefined); calls with keyword arguments; + - * / //
//     % ** ~ (Python semantics, str % args and str * n included); == != < <= > >= chains;
//     in / not in; and / or / not; `a if c else b`; filters; `is [not] test`.
//   Undefined: Jinja2's default Undefined (prints "", falsy, iterates empty, length 0, `is
//     defined`; arithmetic, attribute access or a call on it raises UndefinedError).
//   Filters: abs attr capitalize center count d default dictsort e escape first float
//     forceescape format indent int items join last length list lower map max min reject
//     rejectattr replace reverse round safe select selectattr sort string sum title tojson
//     (transformers' json.dumps: ensure_ascii, indent, separators, sort_keys) trim truncate
//     unique upper. select/reject/map/unique/items/reverse give one-pass generators, as in
//     Jinja2 (printing one, or len() of one, is an error there too).
//   Tests: all of Jinja2's (defined undefined none boolean true false integer float number
//     string mapping iterable sequence callable sameas escaped in odd even divisibleby lower
//     upper filter test eq/==/equalto ne/!= lt/</lessthan le/<= gt/>/greaterthan ge/>=).
//   Methods: str (strip lstrip rstrip split rsplit splitlines startswith endswith upper
//     lower title capitalize replace find rfind index rindex count join center ljust rjust
//     zfill partition rpartition removeprefix removesuffix format isalnum isalpha isascii
//     isdecimal isdigit islower isnumeric isspace isupper), dict (get items keys values
//     copy), list and tuple (count index copy). Case mapping, whitespace and repr() follow
//     Python's Unicode tables (see runtime/chat/unicode_tables.cpp).
//   Globals: range (the sandbox's 100000 cap), dict, namespace, cycler, joiner,
//     raise_exception(msg) (a ChatTemplateError of kind raised whose message() is msg),
//     strftime_now(fmt) (local time, set_clock() for tests).
//   Values print as Python's str(): None, True, 1.0, 1e+16, ['a', 1], {'k': 'v'}.
//
// Refused, with a ChatTemplateError naming the feature (kind unsupported, or syntax where
// Jinja2 itself refuses at compile time):
//   {% extends / block / include / import / from %} (no loader), {% autoescape %},
//   {% do %} (not enabled by transformers), recursive for loops, nested tuple targets,
//   *args / **kwargs in calls, the filters batch filesizeformat groupby pprint random slice
//   striptags urlencode urlize wordcount wordwrap xmlattr, lipsum(), list.pop/clear (the
//   immutable sandbox would let them mutate; troupe's lists are immutable), str methods
//   casefold encode expandtabs format_map isidentifier isprintable istitle maketrans
//   swapcase translate, int/float attributes, \N{...} escapes, non-string dict keys,
//   integers beyond 64 bits, complex results, printing a function, macro or generator
//   (Python prints a memory address). Unknown filters and tests are syntax errors at load
//   (Jinja2 defers them only inside an {% if %}); the list.append/dict.update family raises
//   SecurityError as in the sandbox.
//
// Bounds (ChatTemplate::Limits): the size of any string and of the output, all bytes built,
// loop iterations + calls + filtered items, macro nesting and syntax nesting; exceeding one
// is a ChatTemplateError of kind limit, never a crash.
#pragma once

#include "runtime/chat/limits.hpp"
#include "runtime/error.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace troupe {

namespace chat::ast {
struct Stmt;
}

/// Any failure of a chat template: what() reads "chat template <where> line L, column C:
/// <message>"; message() is the bare message (for raise_exception: the template's text).
class ChatTemplateError : public Error {
 public:
  enum class Kind {
    syntax,       // the source does not parse (Jinja2: TemplateSyntaxError)
    undefined,    // an operation on an undefined value (Jinja2: UndefinedError)
    type,         // a Python TypeError / ValueError / ZeroDivisionError or similar
    security,     // the sandbox refused an attribute or call (Jinja2: SecurityError)
    raised,       // the template called raise_exception(message)
    limit,        // a troupe bound was exceeded
    unsupported,  // valid Jinja2 that troupe does not implement
    input,        // bad arguments to render() or a bad tokenizer_config.json
  };
  ChatTemplateError(Kind kind, std::string message, std::string what, int line, int column)
      : Error(what), kind_(kind), message_(std::move(message)), line_(line), column_(column) {}
  [[nodiscard]] Kind kind() const { return kind_; }
  [[nodiscard]] const std::string& message() const { return message_; }
  /// 1-based line and column in the template source; 0 when not tied to a place.
  [[nodiscard]] int line() const { return line_; }
  [[nodiscard]] int column() const { return column_; }

 private:
  Kind kind_;
  std::string message_;
  int line_, column_;
};

class ChatTemplate {
 public:
  using Limits = chat::Limits;
  using Clock = std::function<std::chrono::system_clock::time_point()>;

  /// Parses `source` (a Jinja template). Throws ChatTemplateError (syntax / unsupported).
  explicit ChatTemplate(std::string source, Limits limits = {});

  /// What transformers loads from a tokenizer directory: chat_template.jinja if present,
  /// else tokenizer_config.json's "chat_template" (a string, or a list of {name, template}:
  /// "tool_use" is used when tools are given and it exists, else "default"); and the special
  /// tokens bos/eos/unk/sep/pad/cls/mask_token (strings or AddedToken dicts; null ones are
  /// left out, as transformers' special_tokens_map does) and additional_special_tokens.
  static ChatTemplate from_tokenizer_dir(const std::filesystem::path& dir, Limits limits = {});

  /// The special tokens of `dir`'s tokenizer_config.json as from_tokenizer_dir reads them
  /// ({} when there is no such file): what transformers gives a template passed apart from the
  /// tokenizer (apply_chat_template(chat_template=...)); pass them in render's extra_context.
  static nlohmann::ordered_json special_tokens_of_dir(const std::filesystem::path& dir);

  /// apply_chat_template(messages, tokenize=False, add_generation_prompt=...): the template
  /// sees messages, add_generation_prompt, tools and documents (none unless extra_context has
  /// them; each must be a list of objects), the special tokens, and every other key of
  /// extra_context (which override special tokens, as transformers' kwargs do).
  /// ordered_json keeps the caller's key order, which `tojson` prints (Python does too).
  [[nodiscard]] std::string render(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const nlohmann::ordered_json& extra_context = nlohmann::ordered_json::object()) const;
  /// The same for nlohmann::json, whose objects are sorted by key.
  [[nodiscard]] std::string render(
      const nlohmann::json& messages, bool add_generation_prompt,
      const nlohmann::json& extra_context = nlohmann::json::object()) const;

  /// The default template rendered with exactly `variables` (plus the globals and the
  /// special tokens): what Jinja2's Template.render(**variables) gives. For tests and for
  /// callers that build the context themselves.
  [[nodiscard]] std::string render_with(const nlohmann::ordered_json& variables) const;

  /// The default template's source.
  [[nodiscard]] const std::string& source() const;
  /// The special tokens the template sees (name -> string, additional_special_tokens -> list).
  [[nodiscard]] const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }
  /// What strftime_now() reads; the system clock unless set (tests fix it).
  void set_clock(Clock clock) { clock_ = std::move(clock); }

 private:
  struct Named {
    std::string name;  // "default", "tool_use", ...
    std::string source;
    std::shared_ptr<const std::vector<chat::ast::Stmt>> body;
  };
  using Variables = std::vector<std::pair<std::string, const nlohmann::ordered_json*>>;
  ChatTemplate() = default;
  void add(std::string name, std::string source);
  [[nodiscard]] const Named& pick(bool tools_given) const;
  [[nodiscard]] std::string run(const Named& chosen, const std::string& origin,
                                const Variables& variables) const;

  std::vector<Named> templates_;
  std::string origin_;  // where the template came from, for messages
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
  Limits limits_;
  Clock clock_;
};

}  // namespace troupe
