#include "runtime/chat/chat_template.hpp"

#include "runtime/chat/globals.hpp"
#include "runtime/chat/interpreter.hpp"
#include "runtime/chat/parser.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace troupe {

namespace {

ChatTemplateError::Kind to_kind(chat::FaultKind k) {
  switch (k) {
    case chat::FaultKind::syntax:
      return ChatTemplateError::Kind::syntax;
    case chat::FaultKind::undefined:
      return ChatTemplateError::Kind::undefined;
    case chat::FaultKind::type:
      return ChatTemplateError::Kind::type;
    case chat::FaultKind::security:
      return ChatTemplateError::Kind::security;
    case chat::FaultKind::raised:
      return ChatTemplateError::Kind::raised;
    case chat::FaultKind::limit:
      return ChatTemplateError::Kind::limit;
    case chat::FaultKind::unsupported:
      return ChatTemplateError::Kind::unsupported;
  }
  return ChatTemplateError::Kind::type;
}

[[noreturn]] void rethrow(const chat::Fault& f, const std::string& origin) {
  std::string where =
      f.line > 0 ? fmt::format("{} line {}, column {}", origin, f.line, f.column) : origin;
  const char* what = f.kind == chat::FaultKind::raised ? "raised an exception" : "failed";
  throw ChatTemplateError(to_kind(f.kind), f.message,
                          fmt::format("{} {}: {}", where, what, f.message), f.line, f.column);
}

[[noreturn]] void input_error(const std::string& origin, std::string message) {
  throw ChatTemplateError(ChatTemplateError::Kind::input, message,
                          fmt::format("{}: {}", origin, message), 0, 0);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// transformers' special_tokens_map: the attributes that are set, as strings.
nlohmann::ordered_json special_tokens_of(const nlohmann::json& config, const std::string& origin) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  auto token_text = [&](const nlohmann::json& v,
                        const std::string& field) -> std::optional<std::string> {
    if (v.is_null()) return std::nullopt;
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
      return v["content"].get<std::string>();
    input_error(origin,
                fmt::format("{} must be a string or an AddedToken object with \"content\", got {}",
                            field, v.dump()));
  };
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    if (auto t = token_text(config[key], key); t && !t->empty()) out[key] = *t;
  }
  if (config.contains("additional_special_tokens") &&
      !config["additional_special_tokens"].is_null()) {
    const auto& list = config["additional_special_tokens"];
    if (!list.is_array()) input_error(origin, "additional_special_tokens must be a list");
    nlohmann::ordered_json tokens = nlohmann::ordered_json::array();
    for (const auto& t : list)
      if (auto s = token_text(t, "additional_special_tokens item")) tokens.push_back(*s);
    if (!tokens.empty()) out["additional_special_tokens"] = tokens;
  }
  return out;
}

/// tokenizer_config.json as a JSON object ({} when the file does not exist).
nlohmann::json read_tokenizer_config(const std::filesystem::path& path) {
  nlohmann::json config = nlohmann::json::object();
  if (!std::filesystem::exists(path)) return config;
  try {
    config = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    input_error(path.string(), fmt::format("not valid JSON: {}", e.what()));
  }
  if (!config.is_object()) input_error(path.string(), "must hold a JSON object");
  return config;
}

void check_list_of_objects(const nlohmann::ordered_json& v, const char* field,
                           const std::string& origin) {
  if (v.is_null()) return;
  if (!v.is_array())
    input_error(origin, fmt::format("{} must be a list of objects, got {}", field, v.type_name()));
  for (const auto& item : v)
    if (!item.is_object())
      input_error(origin, fmt::format("{} must be a list of objects; an item is {}", field,
                                      item.type_name()));
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, Limits limits)
    : origin_("chat template"), limits_(limits) {
  add("default", std::move(source));
}

void ChatTemplate::add(std::string name, std::string source) {
  try {
    auto body = std::make_shared<const std::vector<chat::ast::Stmt>>(
        chat::parse(source, limits_.max_syntax_depth));
    templates_.push_back(Named{std::move(name), std::move(source), std::move(body)});
  } catch (const chat::Fault& f) {
    rethrow(f, templates_.empty() && name == "default" ? origin_
                                                       : fmt::format("{} '{}'", origin_, name));
  }
}

ChatTemplate ChatTemplate::from_tokenizer_dir(const std::filesystem::path& dir, Limits limits) {
  ChatTemplate t;
  t.limits_ = limits;
  const auto config_path = dir / "tokenizer_config.json";
  const auto jinja_path = dir / "chat_template.jinja";
  // A sorted json: Gemma's config has thousands of added tokens, which an ordered_json
  // would insert in quadratic time; the order of its keys does not reach the template.
  const nlohmann::json config = read_tokenizer_config(config_path);
  if (std::filesystem::exists(config_path)) {
    t.special_tokens_ = special_tokens_of(config, config_path.string());
  } else if (!std::filesystem::exists(jinja_path)) {
    fail("no tokenizer_config.json or chat_template.jinja in {}", dir.string());
  }
  // transformers (4.47 and later) prefers chat_template.jinja over the config's field.
  if (std::filesystem::exists(jinja_path)) {
    t.origin_ = jinja_path.string();
    t.add("default", read_file(jinja_path));
    return t;
  }
  t.origin_ = config_path.string() + " chat_template";
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null())
    input_error(
        config_path.string(),
        "chat_template is not set (transformers: \"Cannot use chat template functions because "
        "tokenizer.chat_template is not set\"); pass a template with --chat-template");
  if (it->is_string()) {
    t.add("default", it->get<std::string>());
  } else if (it->is_array()) {
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
          !entry.contains("template") || !entry["template"].is_string())
        input_error(config_path.string(),
                    "chat_template list items must be {\"name\": str, \"template\": str}");
      t.add(entry["name"].get<std::string>(), entry["template"].get<std::string>());
    }
    if (t.templates_.empty()) input_error(config_path.string(), "chat_template is an empty list");
  } else {
    input_error(config_path.string(),
                fmt::format("chat_template must be a string or a list, got {}", it->type_name()));
  }
  return t;
}

nlohmann::ordered_json ChatTemplate::special_tokens_of_dir(const std::filesystem::path& dir) {
  const auto config_path = dir / "tokenizer_config.json";
  return special_tokens_of(read_tokenizer_config(config_path), config_path.string());
}

const std::string& ChatTemplate::source() const {
  for (const auto& n : templates_)
    if (n.name == "default") return n.source;
  return templates_.front().source;
}

// transformers' get_chat_template: "tool_use" when tools are given and it exists, else
// "default".
const ChatTemplate::Named& ChatTemplate::pick(bool tools_given) const {
  if (templates_.size() == 1) return templates_.front();
  const char* wanted = tools_given ? "tool_use" : "default";
  for (const auto& n : templates_)
    if (n.name == wanted) return n;
  for (const auto& n : templates_)
    if (n.name == "default") return n;
  std::vector<std::string> names;
  for (const auto& n : templates_) names.push_back(n.name);
  std::sort(names.begin(), names.end());
  input_error(origin_,
              fmt::format("This model has multiple chat templates with no default specified! "
                          "Available template names are {}.",
                          fmt::join(names, ", ")));
}

std::string ChatTemplate::run(const Named& chosen, const std::string& origin,
                              const Variables& variables) const {
  try {
    auto globals = std::make_shared<chat::Scope>();
    chat::add_globals(*globals);
    auto context = std::make_shared<chat::Scope>(globals);
    for (auto it = special_tokens_.begin(); it != special_tokens_.end(); ++it)
      context->set(it.key(), chat::from_json(it.value()));
    for (const auto& [name, value] : variables) context->set(name, chat::from_json(*value));
    chat::Interpreter interpreter(
        limits_, clock_ ? clock_ : Clock([] { return std::chrono::system_clock::now(); }));
    return interpreter.render(*chosen.body, context);
  } catch (const chat::Fault& f) {
    rethrow(f, origin);
  }
}

std::string ChatTemplate::render_with(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object())
    input_error(origin_, fmt::format("variables must be an object, got {}", variables.type_name()));
  Variables vars;
  for (auto it = variables.begin(); it != variables.end(); ++it)
    vars.emplace_back(it.key(), &it.value());
  return run(pick(false), origin_, vars);
}

std::string ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                 const nlohmann::json& extra_context) const {
  return render(nlohmann::ordered_json(messages), add_generation_prompt,
                nlohmann::ordered_json(extra_context));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra_context) const {
  if (!messages.is_array())
    input_error(origin_, fmt::format("messages must be a list, got {}", messages.type_name()));
  if (!extra_context.is_null() && !extra_context.is_object())
    input_error(origin_,
                fmt::format("extra_context must be an object, got {}", extra_context.type_name()));
  static const nlohmann::ordered_json none;
  auto extra = [&](const char* key) -> const nlohmann::ordered_json& {
    return extra_context.is_object() && extra_context.contains(key) ? extra_context[key] : none;
  };
  for (const char* reserved : {"messages", "add_generation_prompt"})
    if (extra_context.is_object() && extra_context.contains(reserved))
      input_error(
          origin_,
          fmt::format("extra_context may not set '{}' (it is an argument of render())", reserved));
  const auto& tools = extra("tools");
  const auto& documents = extra("documents");
  check_list_of_objects(tools, "tools", origin_);
  check_list_of_objects(documents, "documents", origin_);
  const Named& chosen = pick(!tools.is_null());
  // apply_chat_template's keyword arguments override the special tokens; messages, tools,
  // documents and add_generation_prompt are its own arguments.
  Variables vars;
  if (extra_context.is_object())
    for (auto it = extra_context.begin(); it != extra_context.end(); ++it)
      if (it.key() != "tools" && it.key() != "documents") vars.emplace_back(it.key(), &it.value());
  const nlohmann::ordered_json agp = add_generation_prompt;
  vars.emplace_back("messages", &messages);
  vars.emplace_back("tools", &tools);
  vars.emplace_back("documents", &documents);
  vars.emplace_back("add_generation_prompt", &agp);
  return run(chosen,
             templates_.size() == 1 ? origin_ : fmt::format("{} '{}'", origin_, chosen.name), vars);
}

}  // namespace troupe
