#include "tools/cli_args.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
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

/// The default as --help states it: what applies when the flag is not given.
std::string default_text(const FieldInfo& f) {
  if (f.help.find("Default:") != std::string_view::npos) return "";  // the help says it
  if (f.default_text == "[]" || f.default_text == "{}") return "";
  const std::string value = f.default_text == "None" ? "none" : std::string(f.default_text);
  if (const std::string_view key = generation_config_key(f.name); !key.empty())
    return fmt::format(" Default: the model's generation_config.json {}, else {}.", key, value);
  return fmt::format(" Default: {}.", value);
}

std::string description(const FieldInfo& f) {
  std::string d(f.help);
  if (!f.supported_values.empty())
    d += fmt::format(" Allowed: {} (vLLM's other values are not supported yet).",
                     f.supported_values);
  else if (!f.allowed.empty())
    d += fmt::format(" Allowed: {}.", f.allowed);
  // Values a supported field refuses, named by its note.
  if (f.supported_values.empty() && !f.note.empty())
    d += fmt::format(" Not supported yet: other values ({}).", f.note);
  if (f.arity == FieldInfo::Arity::many)
    d += f.text_items ? " Several: repeat the flag." : " Several: repeat the flag or use commas.";
  d += default_text(f);
  return d;
}

/// "  --a --b --c ..." wrapped at ~96 columns.
std::string wrapped(const std::vector<std::string>& flags) {
  std::string out, line = " ";
  for (const auto& f : flags) {
    if (line.size() + f.size() + 1 > 96) {
      out += line + "\n";
      line = " ";
    }
    line += " " + f;
  }
  return out + line + "\n";
}

void add_fields(CLI::App& app, const std::vector<FieldInfo>& fields, const std::string& group) {
  std::vector<std::string> not_yet, legacy;
  for (const auto& f : fields) {
    std::string flag = fmt::format("--{}", f.flag);
    CLI::Option* opt = nullptr;
    if (f.arity == FieldInfo::Arity::flag) {
      opt = app.add_flag(fmt::format("{},!--no-{}", flag, f.flag));
    } else {
      // One value per occurrence, so a flag never takes the prompts after it; a repeated
      // single-value flag keeps its last value (argparse), a list flag all of them.
      opt = app.add_option(flag);
      opt->type_name(type_name(f.type));
      opt->multi_option_policy(f.arity == FieldInfo::Arity::many
                                   ? CLI::MultiOptionPolicy::TakeAll
                                   : CLI::MultiOptionPolicy::TakeLast);
    }
    switch (f.status) {
      case FieldInfo::Status::supported:
        opt->description(description(f));
        opt->group(group);
        break;
      case FieldInfo::Status::not_yet:  // hidden; listed in the footer, refused when given
        not_yet.push_back(flag);
        opt->group("");
        break;
      case FieldInfo::Status::legacy:
        legacy.push_back(flag);
        opt->group("");
        break;
    }
  }
  std::string footer = app.get_footer();
  if (!not_yet.empty())
    footer += fmt::format(
        "\n{} flags of vLLM not supported yet (refused, with the reason, when given):\n{}", group,
        wrapped(not_yet));
  if (!legacy.empty())
    footer += fmt::format(
        "\nOld vLLM flags accepted for compatibility (each prints what it means here):\n{}",
        wrapped(legacy));
  app.footer(footer);
}

/// The values given for `f` on the command line, one item each; empty when the flag was not
/// given (or the app did not register it). List values split at commas unless the list holds
/// free text (stop strings) or the value is a JSON array.
std::vector<std::string> given(const CLI::App& app, const FieldInfo& f) {
  const CLI::Option* opt = app.get_option_no_throw(fmt::format("--{}", f.flag));
  if (!opt || opt->count() == 0) return {};
  std::vector<std::string> tokens = opt->results();
  if (f.type != "list[str]" || f.text_items) return tokens;
  std::vector<std::string> items;
  for (const auto& t : tokens) {
    if (t.starts_with('[')) {
      items.push_back(t);
      continue;
    }
    std::stringstream in(t);
    for (std::string item; std::getline(in, item, ',');) items.push_back(item);
  }
  return items;
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
  for (const auto& f : beam_search_fields()) {
    auto tokens = given(app, f);
    if (tokens.empty()) continue;
    std::string label = fmt::format("--{}", f.flag);
    apply_beam_search_field(f, f.parse_text(tokens, label), label);
  }
  return out;
}

/// The sampling flags: SamplingParams' fields, then beam search's (refused, listed as not
/// supported yet).
const std::vector<FieldInfo>& sampling_flag_rows() {
  static const std::vector<FieldInfo> rows = [] {
    std::vector<FieldInfo> r = sampling_param_fields();
    r.insert(r.end(), beam_search_fields().begin(), beam_search_fields().end());
    return r;
  }();
  return rows;
}

/// `app` and every subcommand below it.
void each_app(const CLI::App& app, const std::function<void(const CLI::App&)>& visit) {
  visit(app);
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    each_app(*sub, visit);
}

// Words only: digits after a flag are data (`tokenize --decode 0 45 472`).
bool is_boolean_word(std::string_view s) {
  std::string t(s);
  for (char& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
  static const std::set<std::string> kWords = {"true", "false", "yes", "no", "on", "off"};
  return kWords.contains(t);
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
  add_fields(app, sampling_flag_rows(), "Sampling");
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

std::vector<std::string> join_boolean_values(std::vector<std::string> args) {
  // The boolean fields' flags, not their --no- forms: `--no-x false` stays two arguments (the
  // "false" is a prompt), as a double negative is no one's meaning.
  std::set<std::string> flags;
  for (const auto* table : {&engine_arg_fields(), &sampling_flag_rows()})
    for (const auto& f : *table)
      if (f.arity == FieldInfo::Arity::flag) flags.insert(fmt::format("--{}", f.flag));
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      out.insert(out.end(), args.begin() + std::ptrdiff_t(i), args.end());
      break;
    }
    if (flags.contains(args[i]) && i + 1 < args.size() && is_boolean_word(args[i + 1])) {
      out.push_back(args[i] + "=" + args[i + 1]);
      ++i;
      continue;
    }
    out.push_back(args[i]);
  }
  return out;
}

std::string suggest_option(const CLI::App& app, std::string_view unknown) {
  std::vector<std::string> names;
  each_app(app, [&](const CLI::App& a) {
    for (const CLI::Option* opt : a.get_options())
      for (const auto& name : opt->get_lnames()) names.push_back(name);
  });
  std::string_view key = unknown.substr(0, unknown.find('='));
  while (key.starts_with('-')) key.remove_prefix(1);
  if (key.empty() || std::find(names.begin(), names.end(), key) != names.end())
    return "";  // "--", or a known option
  const std::vector<std::string_view> views(names.begin(), names.end());
  const std::string_view best = config_detail::closest_name(views, key);
  return best.empty() ? std::string() : fmt::format(" (did you mean --{}?)", best);
}

}  // namespace troupe
