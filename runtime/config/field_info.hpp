// One row of the table that describes a configuration struct (EngineArgs or SamplingParams).
//
// The same table feeds the TOML loader, the command line (tools/cli_args), validation and
// --help, so a field is declared once (in engine_args.cpp / sampling_params.cpp) and every
// front end agrees on its name, type, default and allowed values.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

struct FieldInfo {
  enum class Status {
    supported,  // troupe implements it (some may still refuse some values: see `note`)
    not_yet,    // vLLM has it, troupe does not yet: any value but the default is refused
    legacy,     // an old flag: accepted, mapped (or ignored) with a one-line notice
  };
  /// How the command line takes the field.
  enum class Arity {
    flag,  // bool: `--x` / `--no-x`
    one,   // one value: `--x 16`
    many,  // one or more values, repeatable: `--x 1 2 --x 3`
  };

  std::string_view name;          // snake_case: the C++ member, the TOML and JSON key
  std::string_view flag;          // kebab-case command-line name, without the leading "--"
  std::string_view type;          // "int", "int|None", "float", "bool", "str", "list[int]", ...
  std::string_view default_text;  // the default as the command line writes it ("16", "None")
  std::string_view help;          // one or two sentences
  std::string_view allowed;       // "" when every value of the type is allowed
  /// The allowed values troupe implements ("auto|safetensors|dummy"), when only some are;
  /// "" when every allowed value works.
  std::string_view supported_values;
  Status status = Status::supported;
  /// not_yet: why / what is missing. legacy: what it means in troupe. supported: which
  /// values are not supported yet, if any.
  std::string_view note;
  Arity arity = Arity::one;
  /// A list of free text (stop strings, bad words) whose items may hold commas: the command
  /// line takes one item per occurrence. Other lists also split each value at commas.
  bool text_items = false;

  // Hooks. `target` / `source` point at the struct the table describes (EngineArgs for
  // engine_arg_fields(), SamplingParams for sampling_param_fields()). `label` is how errors
  // name the field: the snake name, "--flag", or a TOML key. Every hook throws troupe::Error
  // with one line "<label> = <value>: <what is allowed>". Prefer set_engine_arg /
  // set_sampling_param / the TOML and JSON loaders, which also refuse not-yet values.

  /// Command-line tokens (one per occurrence / value) -> the JSON form `set` takes.
  std::function<nlohmann::json(std::span<const std::string> tokens, std::string_view label)>
      parse_text;
  /// Stores `value` (type-checked, converted) into `target`; legacy fields map it onto
  /// their replacement and append a notice to `notices` (when not null).
  std::function<void(void* target, const nlohmann::json& value, std::string_view label,
                     std::vector<std::string>* notices)>
      set;
  /// The current value as JSON (null for None). Empty for legacy fields without a member.
  std::function<nlohmann::json(const void* source)> get;
  /// Range / enum check of one value as `get` returns it; empty when there is none.
  std::function<void(const nlohmann::json& value, std::string_view label)> check;
};

}  // namespace troupe
