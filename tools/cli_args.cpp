#include "tools/cli_args.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "runtime/config/field_codec.hpp"
#include "runtime/error.hpp"

namespace troupe {

namespace {

std::string type_name(std::string_view type) {
  if (type.starts_with("int")) return "INT";
  if (type.starts_with("float")) return "FLOAT";
  if (type == "list[int]") return "INT";
  if (type == "list[str]") return "TEXT";
  if (type == "dict[int,float]") return "ID:BIAS";
  if (type == "json") return "JSON";
  return "TEXT";
}

std::string description(const FieldInfo& f) {
  std::string d(f.help);
  if (!f.allowed.empty()) d += fmt::format(" Allowed: {}.", f.allowed);
  switch (f.status) {
    case FieldInfo::Status::not_yet:
      d += fmt::format(" (not supported yet: {})", f.note);
      break;
    case FieldInfo::Status::legacy:
      d += fmt::format(" (legacy: {})", f.note);
      break;
    case FieldInfo::Status::supported:
      if (!f.note.empty()) d += fmt::format(" (not supported yet: other values; {})", f.note);
      break;
  }
  // CLI11 prints a flag's negation as "{false}", which reads badly next to "=default".
  if (f.arity == FieldInfo::Arity::flag) d += fmt::format(" Default: {}.", f.default_text);
  return d;
}

void add_fields(CLI::App& app, const std::vector<FieldInfo>& fields, const std::string& group) {
  for (const auto& f : fields) {
    std::string flag = fmt::format("--{}", f.flag);
    CLI::Option* opt = nullptr;
    if (f.arity == FieldInfo::Arity::flag) {
      opt = app.add_flag(fmt::format("{},!--no-{}", flag, f.flag));
    } else {
      opt = app.add_option(flag);
      opt->type_name(type_name(f.type));
      // argparse semantics: a repeated single-value flag keeps its last value.
      opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
      if (f.arity == FieldInfo::Arity::many) {
        opt->expected(1, -1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
        opt->allow_extra_args();
      }
    }
    opt->description(description(f));
    // Empty lists and dicts print as nothing rather than "=[] ...".
    if (f.arity == FieldInfo::Arity::one ||
        (f.arity == FieldInfo::Arity::many && f.default_text != "[]" && f.default_text != "{}")) {
      opt->default_str(std::string(f.default_text));
    }
    opt->group(group);
  }
}

/// The tokens given for `f` on the command line; empty when the flag was not given (or the
/// app did not register it).
std::vector<std::string> given(const CLI::App& app, const FieldInfo& f) {
  const CLI::Option* opt = app.get_option_no_throw(fmt::format("--{}", f.flag));
  if (!opt || opt->count() == 0) return {};
  return opt->results();
}

EngineConfigFile from_cli(const CLI::App& app, const EngineArgs& base,
                          const SamplingParams& sbase) {
  EngineConfigFile out{base, sbase, {}};
  if (const CLI::Option* config = app.get_option_no_throw("--config");
      config && config->count() > 0) {
    const std::string& path = config->results().back();
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("--config {}: cannot open the engine config file", path);
    std::ostringstream text;
    text << in.rdbuf();
    // Validated below, after the flags: a flag may fix what the file set.
    out = parse_engine_toml(text.str(), path, base, sbase, /*validate_result=*/false);
  }
  for (const auto& f : engine_arg_fields()) {
    auto tokens = given(app, f);
    if (tokens.empty()) continue;
    std::string label = fmt::format("--{}", f.flag);
    config_detail::apply_engine_value(out.engine, f, f.parse_text(tokens, label), label,
                                      &out.notices);
  }
  for (const auto& f : sampling_param_fields()) {
    auto tokens = given(app, f);
    if (tokens.empty()) continue;
    std::string label = fmt::format("--{}", f.flag);
    config_detail::apply_sampling_value(out.sampling, f, f.parse_text(tokens, label), label);
  }
  return out;
}

}  // namespace

void add_engine_args(CLI::App& app) {
  app.add_option("--config",
                 "Engine TOML: EngineArgs keys at the top, SamplingParams defaults in "
                 "[sampling]. Flags given on the command line override it.")
      ->type_name("FILE")
      ->group("Engine");
  add_fields(app, engine_arg_fields(), "Engine");
}

void add_sampling_args(CLI::App& app) {
  add_fields(app, sampling_param_fields(), "Sampling");
}

void add_server_args(CLI::App& app) {
  add_fields(app, openai::server_arg_fields(), "Server");
}

openai::ServerArgs server_args_from_cli(const CLI::App& app, std::vector<std::string>* notices) {
  openai::ServerArgs a;
  for (const auto& f : openai::server_arg_fields()) {
    auto tokens = given(app, f);
    if (tokens.empty()) continue;
    std::string label = fmt::format("--{}", f.flag);
    openai::detail::apply_server_value(a, f, f.parse_text(tokens, label), label, notices);
  }
  openai::validate(a);
  return a;
}

EngineArgs engine_args_from_cli(const CLI::App& app, std::vector<std::string>* notices,
                                const EngineArgs& base) {
  EngineConfigFile c = from_cli(app, base, {});
  validate(c.engine);
  if (notices) notices->insert(notices->end(), c.notices.begin(), c.notices.end());
  return c.engine;
}

SamplingParams sampling_params_from_cli(const CLI::App& app, const SamplingParams& base) {
  EngineConfigFile c = from_cli(app, {}, base);
  validate(c.sampling);
  return c.sampling;
}

EngineConfigFile config_from_cli(const CLI::App& app, const EngineArgs& base,
                                 const SamplingParams& sbase) {
  EngineConfigFile c = from_cli(app, base, sbase);
  validate(c.engine);
  validate(c.sampling);
  return c;
}

}  // namespace troupe
