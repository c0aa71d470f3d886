#include "runtime/openai/protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <set>

#include "runtime/error.hpp"

namespace troupe::openai {

namespace {

using json = nlohmann::json;

/// A value for an error message: its JSON, cut to ~80 characters, never throwing on bad UTF-8.
std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

[[noreturn]] void wrong(std::string_view key, const json& v, std::string_view expected) {
  bad_request(std::string(key), fmt::format("{} = {}: expected {}", key, show(v), expected));
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool parse_int_text(std::string_view s, int64_t& out) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

/// The keys of one JSON object, read by type; every key asked for is remembered, so the ones
/// never asked for are the unknown fields. null counts as absent (vLLM's Optional).
class Fields {
 public:
  explicit Fields(const json& obj) : obj_(obj) {}

  const json* raw(std::string_view key) {
    asked_.emplace(key);
    auto it = obj_.find(std::string(key));
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  [[nodiscard]] bool has(std::string_view key) const {
    auto it = obj_.find(std::string(key));
    return it != obj_.end() && !it->is_null();
  }

  std::optional<int64_t> opt_int(std::string_view key) {
    const json* v = raw(key);
    if (!v) return std::nullopt;
    return to_int(key, *v);
  }
  std::optional<double> opt_float(std::string_view key) {
    const json* v = raw(key);
    if (!v) return std::nullopt;
    if (v->is_number()) return v->get<double>();
    if (v->is_string()) {
      const std::string& s = v->get_ref<const std::string&>();
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end == s.c_str() + s.size()) return d;
    }
    wrong(key, *v, "a number");
  }
  std::optional<bool> opt_bool(std::string_view key) {
    const json* v = raw(key);
    if (!v) return std::nullopt;
    if (v->is_boolean()) return v->get<bool>();
    if (v->is_number_integer() || v->is_number_unsigned()) {
      const auto i = v->get<int64_t>();
      if (i == 0 || i == 1) return i == 1;
    }
    if (v->is_string()) {
      const std::string s = lower(v->get<std::string>());
      for (const char* t : {"true", "1", "yes", "on", "t", "y"})
        if (s == t) return true;
      for (const char* f : {"false", "0", "no", "off", "f", "n"})
        if (s == f) return false;
    }
    wrong(key, *v, "a boolean (true or false)");
  }
  std::optional<std::string> opt_string(std::string_view key) {
    const json* v = raw(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong(key, *v, "a string");
    return v->get<std::string>();
  }
  /// str | list[str]: a single string is a one-element list.
  std::vector<std::string> string_list(std::string_view key) {
    const json* v = raw(key);
    if (!v) return {};
    if (v->is_string()) return {v->get<std::string>()};
    if (!v->is_array()) wrong(key, *v, "a string or a list of strings");
    std::vector<std::string> out;
    for (const auto& e : *v) {
      if (!e.is_string()) wrong(key, *v, "a string or a list of strings");
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  std::vector<int32_t> int_list(std::string_view key) {
    const json* v = raw(key);
    if (!v) return {};
    if (!v->is_array()) wrong(key, *v, "a list of integers");
    std::vector<int32_t> out;
    for (const auto& e : *v) out.push_back(to_token(key, e, *v));
    return out;
  }

  /// Keys present (null or not) that were never asked for, sorted.
  [[nodiscard]] std::vector<std::string> unknown() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : obj_.items()) {
      (void)v;
      if (!asked_.contains(k)) out.push_back(k);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  static int64_t to_int(std::string_view key, const json& v) {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()))
        return v.get<int64_t>();
      wrong(key, v, "an integer within 64 bits");
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.2e18) return int64_t(d);
    }
    if (v.is_string()) {
      int64_t out = 0;
      if (parse_int_text(v.get_ref<const std::string&>(), out)) return out;
    }
    wrong(key, v, "an integer");
  }
  /// A token id: an integer in int32 range (the engine checks it against the vocabulary).
  static int32_t to_token(std::string_view key, const json& e, const json& whole) {
    if (!(e.is_number_integer() || e.is_number_unsigned())) wrong(key, whole, "a list of integers");
    const int64_t i = to_int(key, e);
    if (i < std::numeric_limits<int32_t>::min() || i > std::numeric_limits<int32_t>::max())
      bad_request(std::string(key),
                  fmt::format("{} = {}: {} is not a token id", key, show(whole), i));
    return int32_t(i);
  }

 private:
  const json& obj_;
  std::set<std::string, std::less<>> asked_;
};

[[noreturn]] void not_yet(std::string_view key, const json& v, std::string_view why) {
  bad_request(std::string(key),
              fmt::format("{} = {}: not supported yet in troupe ({})", key, show(v), why));
}

/// Refuses a known field troupe cannot honour when it is present and not null.
void refuse_if_set(Fields& f, std::string_view key, std::string_view why) {
  if (const json* v = f.raw(key)) not_yet(key, *v, why);
}

/// Beam search's fields that requests do not take (beam_search_fields(): beam_width), read as
/// the server reads its other fields and refused by name.
void refuse_beam_search(Fields& f) {
  for (const FieldInfo& row : beam_search_fields()) {
    const json* raw = f.raw(row.name);
    if (!raw) continue;
    json value = *raw;
    if (row.type == "bool") value = *f.opt_bool(row.name);
    if (row.type == "float") value = *f.opt_float(row.name);
    try {
      apply_beam_search_field(row, value, row.name);
    } catch (const Error& e) {
      bad_request(std::string(row.name), e.what());
    }
  }
}

constexpr std::string_view kNoStructured =
    "structured outputs / guided decoding need a grammar engine";

/// The fields both generation endpoints share (sampling, streaming, vLLM's extras) and the
/// not-yet refusals. `logprobs` / `prompt_logprobs` are set by the caller.
void read_common(Fields& f, GenerationRequest& r, const SamplingDefaults& d) {
  r.model = f.opt_string("model").value_or("");
  r.request_id = f.opt_string("request_id").value_or("");
  SamplingParams& p = r.params;
  p.n = f.opt_int("n").value_or(1);
  p.best_of = f.opt_int("best_of");
  p.presence_penalty = f.opt_float("presence_penalty").value_or(0.0);
  p.frequency_penalty = f.opt_float("frequency_penalty").value_or(0.0);
  p.repetition_penalty =
      f.opt_float("repetition_penalty").value_or(d.repetition_penalty.value_or(1.0));
  p.temperature = f.opt_float("temperature").value_or(d.temperature.value_or(1.0));
  p.top_p = f.opt_float("top_p").value_or(d.top_p.value_or(1.0));
  p.top_k = f.opt_int("top_k").value_or(d.top_k.value_or(0));
  p.min_p = f.opt_float("min_p").value_or(d.min_p.value_or(0.0));
  p.seed = f.opt_int("seed");
  // vLLM V0's beam search fields: best_of beams (unset: n), the n best returned.
  p.use_beam_search = f.opt_bool("use_beam_search").value_or(false);
  p.length_penalty = f.opt_float("length_penalty").value_or(1.0);
  if (const json* es = f.raw("early_stopping"); es && !es->is_null()) {
    try {
      for (const FieldInfo& row : sampling_param_fields())
        if (row.name == "early_stopping") row.set(&p, *es, "early_stopping", nullptr);
    } catch (const Error& e) {
      bad_request("early_stopping", e.what());
    }
  }
  p.stop = f.string_list("stop");
  p.stop_token_ids = f.int_list("stop_token_ids");
  p.include_stop_str_in_output = f.opt_bool("include_stop_str_in_output").value_or(false);
  p.ignore_eos = f.opt_bool("ignore_eos").value_or(false);
  p.min_tokens = f.opt_int("min_tokens").value_or(0);
  p.skip_special_tokens = f.opt_bool("skip_special_tokens").value_or(true);
  p.spaces_between_special_tokens = f.opt_bool("spaces_between_special_tokens").value_or(true);
  if (const json* lb = f.raw("logit_bias")) {
    if (!lb->is_object()) wrong("logit_bias", *lb, "an object of token id -> bias");
    for (const auto& [k, v] : lb->items()) {
      int64_t id = 0;
      if (!parse_int_text(k, id) || id < 0 || id > std::numeric_limits<int32_t>::max())
        bad_request("logit_bias", fmt::format("logit_bias: key \"{}\" is not a token id", k));
      if (!v.is_number()) wrong("logit_bias", *lb, "numeric biases");
      // Clamped to [-100, 100] as the OpenAI API specifies (vLLM does the same).
      p.logit_bias[int32_t(id)] = std::clamp(v.get<double>(), -100.0, 100.0);
    }
  }
  r.stream = f.opt_bool("stream").value_or(false);
  if (const json* so = f.raw("stream_options")) {
    if (!so->is_object()) wrong("stream_options", *so, "an object");
    Fields sf(*so);
    r.has_stream_options = true;
    r.include_usage = sf.opt_bool("include_usage").value_or(true);
    r.continuous_usage = sf.opt_bool("continuous_usage_stats").value_or(false);
    if (!so->empty() && !r.stream)
      bad_request("stream_options", "Stream options can only be defined when `stream=True`.");
  }
  r.echo = f.opt_bool("echo").value_or(false);
  r.return_tokens_as_token_ids = f.opt_bool("return_tokens_as_token_ids");
  r.return_token_ids = f.opt_bool("return_token_ids").value_or(false);
  r.truncate_prompt_tokens = f.opt_int("truncate_prompt_tokens");
  if (r.truncate_prompt_tokens && *r.truncate_prompt_tokens < 1 && *r.truncate_prompt_tokens != -1)
    bad_request("truncate_prompt_tokens",
                fmt::format("truncate_prompt_tokens = {}: allowed: -1 (max_model_len) or >= 1",
                            *r.truncate_prompt_tokens));

  // Known, accepted, and without effect here, as in vLLM: an end-user id; "text" is the default
  // output format.
  (void)f.raw("user");
  if (const json* rf = f.raw("response_format")) {
    if (!rf->is_object() || !rf->contains("type"))
      wrong("response_format", *rf, "an object with a type");
    if ((*rf)["type"] != "text") not_yet("response_format", *rf, kNoStructured);
  }
  refuse_beam_search(f);
  if (auto prio = f.opt_int("priority"); prio && *prio != 0)
    not_yet("priority", *prio, "the scheduler is first come first served (scheduling_policy fcfs)");
  for (const char* k :
       {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend",
        "guided_whitespace_pattern", "structural_tag", "structured_outputs"})
    refuse_if_set(f, k, kNoStructured);
  // Names of processors from the server's --logits-processor-plugin libraries (the engine
  // checks them); vLLM's {qualname, args} objects name Python classes, which troupe has none of.
  p.logits_processors = f.string_list("logits_processors");
  p.allowed_token_ids = f.int_list("allowed_token_ids");
  p.bad_words = f.string_list("bad_words");
  refuse_if_set(f, "cache_salt", "per-request prefix-cache salts are not wired to the API yet");
  refuse_if_set(f, "kv_transfer_params", "no disaggregated prefill yet");
  refuse_if_set(f, "vllm_xargs", "no custom sampling plugins yet");
  refuse_if_set(f, "mm_processor_kwargs", "troupe serves text-only models for now");
  refuse_if_set(f, "lora_request", "LoRA adapters are not implemented yet");
}

/// SamplingParams' own checks (ranges, best_of, min_tokens <= max_tokens) as a 400.
void check_params(const SamplingParams& p) {
  try {
    validate(p);
  } catch (const Error& e) {
    throw ApiException(error_from_message(e.what()));
  }
}

std::vector<PromptInput> read_prompts(Fields& f) {
  const json* v = f.raw("prompt");
  if (!v) {
    refuse_if_set(f, "prompt_embeds", "prompts are text or token ids");
    bad_request("prompt",
                "prompt: required (a string, a list of strings, a list of token ids "
                "or a list of such lists)");
  }
  refuse_if_set(f, "prompt_embeds", "prompts are text or token ids");
  std::vector<PromptInput> out;
  const auto tokens = [&](const json& list) {
    PromptInput p;
    p.is_tokens = true;
    for (const auto& e : list) p.token_ids.push_back(Fields::to_token("prompt", e, *v));
    if (p.token_ids.empty()) bad_request("prompt", "prompt: an empty list of token ids");
    return p;
  };
  if (v->is_string()) {
    out.push_back(PromptInput{v->get<std::string>(), {}, false});
  } else if (v->is_array()) {
    if (v->empty()) bad_request("prompt", "prompt: an empty list");
    const json& first = v->front();
    if (first.is_string()) {
      for (const auto& e : *v) {
        if (!e.is_string()) wrong("prompt", *v, "a list of strings (not mixed)");
        out.push_back(PromptInput{e.get<std::string>(), {}, false});
      }
    } else if (first.is_number()) {
      out.push_back(tokens(*v));
    } else if (first.is_array()) {
      for (const auto& e : *v) {
        if (!e.is_array()) wrong("prompt", *v, "a list of token-id lists (not mixed)");
        out.push_back(tokens(e));
      }
    } else {
      wrong("prompt", *v,
            "a string, a list of strings, a list of token ids or a list of such lists");
    }
  } else {
    wrong("prompt", *v, "a string, a list of strings, a list of token ids or a list of such lists");
  }
  return out;
}

/// One message's content as the "string" content format renders it.
std::string content_text(const json& content, size_t index) {
  const std::string key = fmt::format("messages[{}].content", index);
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong(key, content, "a string or a list of content parts");
  std::string text;
  bool first = true;
  for (const auto& part : content) {
    if (part.is_string()) {  // vLLM accepts bare strings in the list too
      if (!first) text += '\n';
      text += part.get_ref<const std::string&>();
      first = false;
      continue;
    }
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      wrong(key, content, "content parts with a \"type\"");
    const std::string type = part["type"].get<std::string>();
    if (type == "text" || type == "input_text" || type == "refusal") {
      const char* field = type == "refusal" ? "refusal" : "text";
      if (!part.contains(field) || !part[field].is_string())
        wrong(key, content, fmt::format("a \"{}\" string in each {} part", field, type));
      if (!first) text += '\n';
      text += part[field].get_ref<const std::string&>();
      first = false;
    } else {
      bad_request(key, fmt::format("{}: a \"{}\" part: not supported yet in troupe (troupe "
                                   "serves text-only models for now)",
                                   key, type));
    }
  }
  return text;
}

json read_messages(Fields& f) {
  const json* v = f.raw("messages");
  if (!v) bad_request("messages", "messages: required (a list of {\"role\", \"content\"} objects)");
  if (!v->is_array()) wrong("messages", *v, "a list of messages");
  if (v->empty()) bad_request("messages", "messages: empty (at least one message is needed)");
  json out = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    if (!m.is_object()) wrong(fmt::format("messages[{}]", i), m, "an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      bad_request(fmt::format("messages[{}].role", i),
                  fmt::format("messages[{}].role: required, a string", i));
    json msg = json::object();
    msg["role"] = *role;
    msg["content"] = content_text(m.value("content", json()), i);
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
      if (!tc->is_array()) wrong(fmt::format("messages[{}].tool_calls", i), *tc, "a list");
      msg["tool_calls"] = *tc;
    }
    if (auto id = m.find("tool_call_id"); id != m.end() && id->is_string())
      msg["tool_call_id"] = *id;
    if (auto name = m.find("name"); name != m.end() && name->is_string()) msg["name"] = *name;
    out.push_back(std::move(msg));
  }
  return out;
}

void reject_unknown_tool_choice(Fields& f, bool has_tools) {
  const json* tc = f.raw("tool_choice");
  if (!tc || (tc->is_string() && tc->get<std::string>() == "none")) return;
  if (tc->is_string() && (*tc == "auto" || *tc == "required")) {
    if (!has_tools) bad_request("tool_choice", "When using `tool_choice`, `tools` must be set.");
    not_yet("tool_choice", *tc, "tool calls need a tool-call parser (--enable-auto-tool-choice)");
  }
  if (tc->is_object()) {
    if (!has_tools) bad_request("tool_choice", "When using `tool_choice`, `tools` must be set.");
    not_yet("tool_choice", *tc, "named tool choice needs guided decoding");
  }
  wrong("tool_choice", *tc, "\"none\", \"auto\", \"required\" or a named tool");
}

}  // namespace

json parse_body(std::string_view bytes) {
  json j;
  try {
    j = json::parse(bytes.begin(), bytes.end());
  } catch (const json::parse_error& e) {
    bad_request("",
                fmt::format("invalid JSON in the request body (byte {}): {}", e.byte, e.what()));
  } catch (const json::exception& e) {
    // A number beyond a double (1e400) is out_of_range, not a parse_error (found by the fuzz
    // target; it was a 500). Python reads it as inf, which every numeric field refuses.
    bad_request("", fmt::format("invalid JSON in the request body: {}", e.what()));
  }
  if (!j.is_object())
    bad_request("", fmt::format("the request body must be a JSON object, got {}", show(j)));
  return j;
}

CompletionRequest parse_completion_request(const json& body, const SamplingDefaults& d) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  Fields f(body);
  CompletionRequest r;
  r.prompts = read_prompts(f);
  read_common(f, r, d);
  refuse_if_set(f, "suffix", "suffix is not currently supported");
  r.add_special_tokens = f.opt_bool("add_special_tokens").value_or(true);
  // Completions default to 16 tokens (vLLM's CompletionRequest); an explicit null means up to
  // what max_model_len leaves.
  r.max_tokens = body.contains("max_tokens") ? f.opt_int("max_tokens") : std::optional<int64_t>(16);
  (void)f.raw("max_tokens");
  r.logprobs = f.opt_int("logprobs");
  auto prompt_logprobs = f.opt_int("prompt_logprobs");
  if (r.logprobs && *r.logprobs < -1)
    bad_request("logprobs", fmt::format("logprobs = {}: must be >= 0 (or -1: the whole "
                                        "vocabulary)",
                                        *r.logprobs));
  if (prompt_logprobs) {
    if (r.stream && *prompt_logprobs > 0)
      bad_request("prompt_logprobs", "`prompt_logprobs` are not available when `stream=True`.");
    if (*prompt_logprobs < -1)
      bad_request("prompt_logprobs",
                  fmt::format("prompt_logprobs = {}: must be >= 0", *prompt_logprobs));
  }
  SamplingParams& p = r.params;
  p.logprobs = r.logprobs;
  p.prompt_logprobs = prompt_logprobs ? prompt_logprobs : (r.echo ? r.logprobs : std::nullopt);
  // echo with max_tokens = 0 returns the prompt only; the engine still samples one token.
  const bool echo_only = r.echo && r.max_tokens && *r.max_tokens == 0;
  p.max_tokens = echo_only ? std::optional<int64_t>(1) : r.max_tokens;
  r.ignored_fields = f.unknown();
  check_params(p);
  return r;
}

ChatRequest parse_chat_request(const json& body, const SamplingDefaults& d) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  Fields f(body);
  ChatRequest r;
  r.messages = read_messages(f);
  read_common(f, r, d);
  r.add_special_tokens = f.opt_bool("add_special_tokens").value_or(false);
  r.add_generation_prompt = f.opt_bool("add_generation_prompt").value_or(true);
  r.continue_final_message = f.opt_bool("continue_final_message").value_or(false);
  if (r.add_generation_prompt && r.continue_final_message)
    bad_request("continue_final_message",
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  r.chat_template = f.opt_string("chat_template");
  // max_completion_tokens wins; 0 falls through to max_tokens, as Python's `or` does.
  auto mct = f.opt_int("max_completion_tokens");
  auto mt = f.opt_int("max_tokens");
  r.max_tokens = (mct && *mct != 0) ? mct : mt;
  r.logprobs = f.opt_bool("logprobs").value_or(false);
  const bool top_given = f.has("top_logprobs");
  r.top_logprobs = f.opt_int("top_logprobs").value_or(0);
  if (top_given && r.top_logprobs < 0)
    bad_request("top_logprobs", fmt::format("top_logprobs = {}: must be >= 0", r.top_logprobs));
  if (r.top_logprobs > 0 && !r.logprobs)
    bad_request("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.");
  auto prompt_logprobs = f.opt_int("prompt_logprobs");
  if (prompt_logprobs) {
    if (r.stream && *prompt_logprobs > 0)
      bad_request("prompt_logprobs", "`prompt_logprobs` are not available when `stream=True`.");
    if (*prompt_logprobs < -1)
      bad_request("prompt_logprobs",
                  fmt::format("prompt_logprobs = {}: must be >= 0", *prompt_logprobs));
  }
  SamplingParams& p = r.params;
  p.logprobs = r.logprobs ? std::optional<int64_t>(r.top_logprobs) : std::nullopt;
  // vLLM: an echoed chat computes prompt logprobs at top_logprobs when none are asked for.
  p.prompt_logprobs = prompt_logprobs
                          ? prompt_logprobs
                          : (r.echo ? std::optional<int64_t>(r.top_logprobs) : std::nullopt);
  p.max_tokens = r.max_tokens;

  // Template inputs: tools and documents are passed to the template as vLLM does.
  const json* tools = f.raw("tools");
  if (tools) {
    if (!tools->is_array()) wrong("tools", *tools, "a list of tools");
    r.template_context["tools"] = *tools;
  }
  reject_unknown_tool_choice(f, tools != nullptr);
  (void)f.opt_bool("parallel_tool_calls");
  if (auto effort = f.opt_string("reasoning_effort");
      effort && *effort != "low" && *effort != "medium" && *effort != "high")
    wrong("reasoning_effort", *effort, "\"low\", \"medium\" or \"high\"");
  (void)f.opt_bool("include_reasoning");
  if (const json* docs = f.raw("documents")) {
    if (!docs->is_array()) wrong("documents", *docs, "a list of objects");
    r.template_context["documents"] = *docs;
  }
  if (const json* kw = f.raw("chat_template_kwargs")) {
    if (!kw->is_object()) wrong("chat_template_kwargs", *kw, "an object");
    for (const auto& [k, v] : kw->items()) {
      if (k == "messages" || k == "add_generation_prompt" || k == "continue_final_message")
        bad_request("chat_template_kwargs",
                    fmt::format("chat_template_kwargs: \"{}\" is set by the request itself", k));
      r.template_context[k] = v;
    }
  }
  r.ignored_fields = f.unknown();
  check_params(p);
  return r;
}

TokenizeRequest parse_tokenize_request(const json& body) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  TokenizeRequest r;
  if (body.contains("messages")) {
    r.chat = parse_chat_request(body);
    r.model = r.chat->model;
    r.add_special_tokens = r.chat->add_special_tokens;
    Fields f(body);
    r.return_token_strs = f.opt_bool("return_token_strs").value_or(false);
    // The chat parser listed what it does not know; return_token_strs is ours.
    for (const auto& k : r.chat->ignored_fields)
      if (k != "return_token_strs") r.ignored_fields.push_back(k);
    return r;
  }
  Fields f(body);
  r.model = f.opt_string("model").value_or("");
  r.prompt = f.opt_string("prompt");
  if (!r.prompt) bad_request("prompt", "prompt: required (a string), or messages");
  r.add_special_tokens = f.opt_bool("add_special_tokens").value_or(true);
  r.return_token_strs = f.opt_bool("return_token_strs").value_or(false);
  r.ignored_fields = f.unknown();
  return r;
}

DetokenizeRequest parse_detokenize_request(const json& body) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  Fields f(body);
  DetokenizeRequest r;
  r.model = f.opt_string("model").value_or("");
  if (!f.has("tokens")) bad_request("tokens", "tokens: required (a list of token ids)");
  r.tokens = f.int_list("tokens");
  r.ignored_fields = f.unknown();
  return r;
}

PlainGenerateRequest parse_plain_generate_request(const json& body) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  PlainGenerateRequest r;
  json rest = body;
  auto prompt = rest.find("prompt");
  if (prompt == rest.end() || !prompt->is_string())
    bad_request("prompt", "prompt: required, a string");
  r.prompt = prompt->get<std::string>();
  rest.erase("prompt");
  if (auto s = rest.find("stream"); s != rest.end()) {
    Fields f(rest);
    r.stream = f.opt_bool("stream").value_or(false);
    rest.erase("stream");
  }
  try {
    r.params = sampling_params_from_json(rest, SamplingParams{});
  } catch (const Error& e) {
    throw ApiException(error_from_message(e.what()));
  }
  return r;
}

ParsedRequest parse_request(Endpoint endpoint, std::string_view bytes) {
  try {
    const json body = parse_body(bytes);
    switch (endpoint) {
      case Endpoint::completions:
        return parse_completion_request(body);
      case Endpoint::chat_completions:
        return parse_chat_request(body);
      case Endpoint::tokenize:
        return parse_tokenize_request(body);
      case Endpoint::detokenize:
        return parse_detokenize_request(body);
      case Endpoint::generate:
        return parse_plain_generate_request(body);
    }
  } catch (const ApiException& e) {
    return e.error();
  }
  return make_error(400, "unknown endpoint");
}

int64_t resolve_max_tokens(std::optional<int64_t> requested, int64_t prompt_len,
                           int64_t max_model_len, std::optional<int64_t> default_max_tokens) {
  if (prompt_len >= max_model_len)
    bad_request("prompt", fmt::format("This model's maximum context length is {} tokens. However, "
                                      "your request has {} input tokens. Please reduce the length "
                                      "of the input messages.",
                                      max_model_len, prompt_len));
  if (requested && prompt_len + *requested > max_model_len)
    bad_request(
        "max_tokens",
        fmt::format("'max_tokens' or 'max_completion_tokens' is too large: {}. This "
                    "model's maximum context length is {} tokens and your request has {} "
                    "input tokens ({} > {} - {}).",
                    *requested, max_model_len, prompt_len, *requested, max_model_len, prompt_len));
  int64_t n = max_model_len - prompt_len;
  if (requested) n = std::min(n, *requested);
  if (default_max_tokens) n = std::min(n, *default_max_tokens);
  return n;
}

ApiError error_from_message(const std::string& message) {
  // "temperature = -1: allowed: >= 0" or "prompt: 600 tokens, ..." name their field first.
  std::string param;
  const size_t end = message.find_first_of(" :=[");
  if (end != std::string::npos && end > 0) {
    const std::string word = message.substr(0, end);
    const bool identifier = std::all_of(word.begin(), word.end(), [](char c) {
      return std::islower(static_cast<unsigned char>(c)) || c == '_' ||
             std::isdigit(static_cast<unsigned char>(c));
    });
    if (identifier) param = word;
  }
  return make_error(400, message, param);
}

}  // namespace troupe::openai
