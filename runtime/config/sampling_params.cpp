// The SamplingParams table and its front ends. Ranges follow vLLM's
// SamplingParams._verify_args; help texts are troupe's own.
#include "runtime/config/sampling_params.hpp"

#include <fmt/format.h>

#include <cmath>

#include "runtime/checkpoint/generation_config.hpp"
#include "runtime/config/field_codec.hpp"
#include "runtime/error.hpp"

namespace troupe {

namespace config_detail {

template <>
struct Codec<RequestOutputKind> {
  static constexpr std::string_view type = "str";
  static constexpr FieldInfo::Arity arity = FieldInfo::Arity::one;
  static RequestOutputKind decode(const json& v) {
    std::string s = decode_string(v);
    for (auto k :
         {RequestOutputKind::cumulative, RequestOutputKind::delta, RequestOutputKind::final_only}) {
      if (s == to_string(k)) return k;
    }
    throw Problem("allowed: cumulative|delta|final_only");
  }
  static json encode(RequestOutputKind k) { return std::string(to_string(k)); }
  static json parse(std::span<const std::string> t) { return last(t); }
};

template <>
struct Codec<EarlyStopping> {
  static constexpr std::string_view type = "bool|str";
  static constexpr FieldInfo::Arity arity = FieldInfo::Arity::one;
  static EarlyStopping decode(const json& v) {
    if (v.is_boolean()) return v.get<bool>() ? EarlyStopping::when_full : EarlyStopping::heuristic;
    if (v.is_string()) {
      const auto& t = v.get_ref<const std::string&>();
      for (auto e : {EarlyStopping::heuristic, EarlyStopping::when_full, EarlyStopping::never})
        if (t == to_string(e)) return e;
      if (t == "True") return EarlyStopping::when_full;  // Python's spelling
      if (t == "False") return EarlyStopping::heuristic;
    }
    throw Problem("allowed: true, false or \"never\"");
  }
  static json encode(EarlyStopping e) {
    if (e == EarlyStopping::never) return "never";
    return e == EarlyStopping::when_full;
  }
  static json parse(std::span<const std::string> t) { return last(t); }
};

}  // namespace config_detail

std::string_view to_string(RequestOutputKind k) {
  switch (k) {
    case RequestOutputKind::cumulative:
      return "cumulative";
    case RequestOutputKind::delta:
      return "delta";
    case RequestOutputKind::final_only:
      return "final_only";
  }
  return "?";
}

namespace {

using namespace config_detail;
using S = SamplingParams;
using Status = FieldInfo::Status;

std::vector<FieldInfo> build_table(Arena& a) {
  Predicate token_ids = [](const json& v) {
    for (const auto& e : v) {
      if (e.get<int64_t>() < 0) return false;
    }
    return true;
  };
  // A list of strings, none empty (stop strings, processor names).
  Predicate non_empty_items = [](const json& v) {
    for (const auto& e : v)
      if (e.get_ref<const std::string&>().empty()) return false;
    return true;
  };
  std::vector<FieldInfo> t;
  t.push_back(member(a, &S::n,
                     {.name = "n",
                      .help = "Number of output sequences to return for the prompt.",
                      .allowed = ">= 1",
                      .valid = at_least(1)}));
  t.push_back(
      member(a, &S::best_of,
             {.name = "best_of",
              .help = "Number of sequences to generate, of which the n with the highest cumulative "
                      "logprob are returned; unset means n.",
              .allowed = "None or >= n",
              .valid = at_least(1)}));
  t.push_back(member(a, &S::presence_penalty,
                     {.name = "presence_penalty",
                      .help = "Penalises tokens that already appear in the output: > 0 favours new "
                              "tokens, < 0 repetition.",
                      .allowed = "[-2, 2]",
                      .valid = in_range(-2, 2)}));
  t.push_back(member(a, &S::frequency_penalty,
                     {.name = "frequency_penalty",
                      .help = "Penalises tokens by how often they already appear in the output.",
                      .allowed = "[-2, 2]",
                      .valid = in_range(-2, 2)}));
  t.push_back(member(
      a, &S::repetition_penalty,
      {.name = "repetition_penalty",
       .help = "Divides (or multiplies) the logits of tokens in the prompt and output; 1 is off.",
       .allowed = "> 0",
       .valid = [](const json& v) { return at_least(0)(v) && v.get<double>() > 0; }}));
  t.push_back(member(a, &S::temperature,
                     {.name = "temperature",
                      .help = "Randomness of sampling: lower is more deterministic, 0 is greedy.",
                      .allowed = ">= 0",
                      .valid = at_least(0)}));
  t.push_back(
      member(a, &S::top_p,
             {.name = "top_p",
              .help = "Keep the smallest set of top tokens whose probabilities add up to top_p.",
              .allowed = "(0, 1]",
              .valid = in_half_open(0, 1)}));
  t.push_back(member(a, &S::top_k,
                     {.name = "top_k",
                      .help = "Keep only the k most likely tokens; 0 (or -1) keeps all.",
                      .allowed = "-1, 0 or >= 1",
                      .valid = at_least(-1)}));
  t.push_back(
      member(a, &S::min_p,
             {.name = "min_p",
              .help = "Drop tokens less likely than min_p times the most likely one; 0 is off.",
              .allowed = "[0, 1]",
              .valid = in_range(0, 1)}));
  t.push_back(member(
      a, &S::seed,
      {.name = "seed",
       .help = "Seed of this request's sampling, so it samples the same tokens whatever its batch.",
       .flag = "sampling-seed"}));
  t.push_back(member(a, &S::use_beam_search,
                     {.name = "use_beam_search",
                      .help = "Beam search (transformers' generate with num_beams): best_of beams, "
                              "the n best returned; greedy only (temperature 0)."}));
  t.push_back(member(a, &S::length_penalty,
                     {.name = "length_penalty",
                      .help = "Beam search: a hypothesis scores its cumulative logprob / "
                              "length ** length_penalty (> 0 favours longer ones).",
                      .allowed = "finite",
                      .valid = [](const json& v) { return std::isfinite(v.get<double>()); }}));
  t.push_back(member(a, &S::early_stopping,
                     {.name = "early_stopping",
                      .help = "Beam search: true stops once best_of hypotheses are done; false "
                              "when no live beam can beat them at its length (heuristic); "
                              "\"never\" only when none can at max_tokens.",
                      .allowed = "true, false or \"never\""}));
  t.push_back(member(
      a, &S::stop,
      {.name = "stop",
       .help = "Strings that end the output when generated; they are not in the output text.",
       .allowed = "non-empty strings",
       .valid = non_empty_items,
       .text_items = true}));
  t.push_back(member(
      a, &S::stop_token_ids,
      {.name = "stop_token_ids",
       .help = "Token ids that end the output when generated; they are in the output tokens.",
       .allowed = "token ids >= 0",
       .valid = token_ids}));
  t.push_back(member(a, &S::ignore_eos,
                     {.name = "ignore_eos", .help = "Keep generating after the EOS token."}));
  t.push_back(member(
      a, &S::max_tokens,
      {.name = "max_tokens",
       .help = "Most tokens to generate per output sequence; None means up to the model length.",
       .allowed = "None or >= 1",
       .valid = at_least(1)}));
  t.push_back(
      member(a, &S::min_tokens,
             {.name = "min_tokens",
              .help = "Fewest tokens to generate before EOS or stop_token_ids may end a sequence.",
              .allowed = ">= 0 and <= max_tokens",
              .valid = at_least(0)}));
  t.push_back(member(a, &S::logprobs,
                     {.name = "logprobs",
                      .help = "Return the log probabilities of the top N tokens at each output "
                              "position (and of the chosen one); -1 for the whole vocabulary.",
                      .allowed = "None, -1 or >= 0",
                      .valid = at_least(-1)}));
  t.push_back(member(a, &S::prompt_logprobs,
                     {.name = "prompt_logprobs",
                      .help = "Return the log probabilities of the top N tokens at each prompt "
                              "position; -1 for the whole vocabulary.",
                      .allowed = "None, -1 or >= 0",
                      .valid = at_least(-1)}));
  t.push_back(member(a, &S::flat_logprobs,
                     {.name = "flat_logprobs",
                      .help = "Return logprobs in vLLM's flat (FlatLogprobs) layout.",
                      .status = Status::not_yet,
                      .note = "troupe returns logprobs per position"}));
  t.push_back(member(
      a, &S::detokenize,
      {.name = "detokenize", .help = "Turn the output tokens into text (stop strings need it)."}));
  t.push_back(member(
      a, &S::skip_special_tokens,
      {.name = "skip_special_tokens", .help = "Leave special tokens out of the output text."}));
  t.push_back(member(a, &S::spaces_between_special_tokens,
                     {.name = "spaces_between_special_tokens",
                      .help = "With skip_special_tokens false: false writes an added token "
                              "that follows another as its raw text (vLLM's rule for "
                              "tokenizer.json tokenizers); true keeps the decoder's text."}));
  t.push_back(
      member(a, &S::logits_processors,
             {.name = "logits_processors",
              .help = "Logits processors of the loaded plug-ins (--logits-processor-plugin), each "
                      "\"name\" or \"name:argument\", applied in order before sampling.",
              .allowed = "names of loaded processors",
              .valid = non_empty_items,
              .flag = "sampling-logits-processors",
              .text_items = true}));
  t.push_back(member(a, &S::include_stop_str_in_output,
                     {.name = "include_stop_str_in_output",
                      .help = "Keep the stop string that ended a sequence in its output text."}));
  t.push_back(member(
      a, &S::truncate_prompt_tokens,
      {.name = "truncate_prompt_tokens",
       .help =
           "Keep only the last k prompt tokens (left truncation); -1 keeps the model's maximum.",
       .allowed = "None, -1 or >= 1",
       .valid = [](const json& v) { return v.get<int64_t>() == -1 || v.get<int64_t>() >= 1; }}));
  t.push_back(member(a, &S::output_kind,
                     {.name = "output_kind",
                      .help = "What each streamed output carries: everything so far, only the new "
                              "part, or only the final result.",
                      .choices = {"cumulative", "delta", "final_only"},
                      .supported = {"cumulative"},
                      .note = "streams carry cumulative outputs for now"}));
  t.push_back(member(
      a, &S::structured_outputs,
      {.name = "structured_outputs",
       .help =
           "Constrain the output to a JSON schema, regex, choice list or grammar (JSON object).",
       .status = Status::not_yet,
       .note = "structured outputs / guided decoding need a grammar engine"}));
  t.push_back(member(a, &S::logit_bias,
                     {.name = "logit_bias",
                      .help = "Token id -> bias added to that token's logit before sampling.",
                      .allowed = "token ids >= 0, biases in [-100, 100]",
                      .valid = [](const json& v) {
                        for (const auto& [k, b] : v.items()) {
                          if (k.starts_with('-') || !in_range(-100, 100)(b)) return false;
                        }
                        return true;
                      }}));
  t.push_back(member(a, &S::allowed_token_ids,
                     {.name = "allowed_token_ids",
                      .help = "Only these token ids may be generated (every other one is masked).",
                      .allowed = "token ids >= 0",
                      .valid = token_ids}));
  t.push_back(member(a, &S::extra_args,
                     {.name = "extra_args",
                      .help = "Free-form arguments for custom sampling code (JSON object).",
                      .status = Status::not_yet,
                      .note = "no custom sampling plugins yet"}));
  t.push_back(member(
      a, &S::bad_words,
      {.name = "bad_words",
       .help = "Words that must not be generated: the last token of a word is banned whenever "
               "the output ends with the word's other tokens (each word also with a leading "
               "space).",
       .allowed = "words with a character other than whitespace",
       .valid =
           [](const json& v) {
             for (const auto& e : v)
               if (e.get_ref<const std::string&>().find_first_not_of(" \t\n\r\f\v") ==
                   std::string::npos)
                 return false;
             return true;
           },
       .text_items = true}));
  return t;
}

const FieldTable<SamplingParams, build_table>& table() {
  return FieldTable<SamplingParams, build_table>::get();
}

std::vector<FieldInfo> build_beam_search_table(Arena& a) {
  std::vector<FieldInfo> t;
  t.push_back(
      refused<int64_t>(a,
                       {.name = "beam_width",
                        .help = "Beam search: the number of beams (vLLM's BeamSearchParams).",
                        .note = "it is LLM::beam_search's (BeamSearchParams); a request asks "
                                "for beams with use_beam_search and best_of"},
                       std::nullopt));
  return t;
}

}  // namespace

const std::vector<FieldInfo>& sampling_param_fields() {
  return table().fields;
}

const std::vector<FieldInfo>& beam_search_fields() {
  static Arena arena;
  static const std::vector<FieldInfo> fields = build_beam_search_table(arena);
  return fields;
}

void apply_beam_search_field(const FieldInfo& f, const json& value, std::string_view label) {
  f.set(nullptr, value, label, nullptr);
}

namespace {

/// vLLM V0's _verify_beam_search / _verify_non_beam_search, plus the fields beam search here
/// cannot honour: beams are ranked by raw logprobs, which penalties, biases and masks would not
/// change, so those are refused rather than ignored.
void validate_beam_search(const SamplingParams& p) {
  if (!p.use_beam_search) {
    if (p.length_penalty != 1.0)
      fail(
          "length_penalty = {}: allowed: 1.0 without use_beam_search (it only applies to beam "
          "search)",
          p.length_penalty);
    if (p.early_stopping != EarlyStopping::heuristic)
      fail(
          "early_stopping = {}: allowed: false without use_beam_search (it only applies to "
          "beam search)",
          to_string(p.early_stopping));
    return;
  }
  const int64_t beams = p.best_of.value_or(p.n);
  if (beams < 2)
    fail("best_of = {}: allowed: >= 2 with use_beam_search (the number of beams, >= n = {})", beams,
         p.n);
  if (p.temperature > 1e-5)
    fail(
        "temperature = {}: allowed: 0 with use_beam_search (beam search is deterministic: it "
        "ranks beams by their logprobs)",
        p.temperature);
  const auto refuse = [](std::string_view field, const std::string& value) {
    fail(
        "{} = {}: not supported with use_beam_search (allowed: its default; beams are ranked by "
        "raw logprobs, which it would not change)",
        field, value);
  };
  // top_p, top_k and min_p only shape sampling, which temperature 0 turns off for beams as for
  // greedy requests: they are accepted as they are there (a model's generation_config.json
  // often sets them).
  if (p.presence_penalty != 0.0) refuse("presence_penalty", fmt::format("{}", p.presence_penalty));
  if (p.frequency_penalty != 0.0)
    refuse("frequency_penalty", fmt::format("{}", p.frequency_penalty));
  if (p.repetition_penalty != 1.0)
    refuse("repetition_penalty", fmt::format("{}", p.repetition_penalty));
  if (p.min_tokens != 0) refuse("min_tokens", fmt::format("{}", p.min_tokens));
  if (!p.logit_bias.empty())
    refuse("logit_bias", show(Codec<std::map<int32_t, double>>::encode(p.logit_bias)));
  if (!p.allowed_token_ids.empty()) refuse("allowed_token_ids", show(json(p.allowed_token_ids)));
  if (!p.bad_words.empty()) refuse("bad_words", show(json(p.bad_words)));
  if (!p.logits_processors.empty()) refuse("logits_processors", show(json(p.logits_processors)));
  if (!p.logits_processor_fns.empty())
    refuse("logits_processor_fns", fmt::format("{} callables", p.logits_processor_fns.size()));
  // Hypotheses end at eos, a stop token (both transformers' eos_token_id) or max_tokens; a stop
  // string, matched on text, would end beams in ways the scoring does not know.
  if (!p.stop.empty()) refuse("stop", show(json(p.stop)));
  if (p.prompt_logprobs)
    fail("prompt_logprobs = {}: not supported with use_beam_search yet (allowed: None)",
         *p.prompt_logprobs);
}

}  // namespace

void validate(const SamplingParams& p) {
  check_all(table().fields, table().defaults, &p);
  if (p.best_of) {
    if (*p.best_of < p.n) {
      fail("best_of = {}: allowed: None or >= n (n = {})", *p.best_of, p.n);
    }
  }
  if (p.max_tokens && p.min_tokens > *p.max_tokens) {
    fail("min_tokens = {}: allowed: <= max_tokens (max_tokens = {})", p.min_tokens, *p.max_tokens);
  }
  validate_beam_search(p);
  if (!p.stop.empty() && !p.detokenize) {
    fail("stop = {}: allowed only with detokenize = true (stop strings are matched on text)",
         show(json(p.stop)));
  }
}

void set_sampling_param(SamplingParams& p, std::string_view name, std::string_view value) {
  SamplingParams copy = p;
  std::string token(value);
  set_from_text(table().fields, table().defaults, &copy, name, std::span(&token, 1), nullptr,
                "sampling parameter");
  p = std::move(copy);
}

SamplingParams sampling_params_from_json(const nlohmann::json& j, const SamplingParams& base) {
  if (!j.is_object()) fail("sampling params: expected a JSON object, got {}", show(j));
  SamplingParams p = base;
  const auto& fields = table().fields;
  for (const auto& [key, value] : j.items()) {
    const FieldInfo* f = find_field(fields, key);
    // Beam search's fields are refused by name (their neutral values change nothing).
    if (const FieldInfo* b = find_field(beam_search_fields(), key); !f && b && b->name == key) {
      apply_beam_search_field(*b, value, key);
      continue;
    }
    // JSON keys are the snake names only; "top-p" is a typo there, not an alias.
    if (!f || f->name != key) {
      fail("sampling params: unknown key '{}'{}", key, suggest(fields, key));
    }
    apply_value(*f, &p, table().defaults[size_t(f - fields.data())], value, key, nullptr);
  }
  validate(p);
  return p;
}

namespace config_detail {

void apply_sampling_value(SamplingParams& p, const FieldInfo& f, const json& value,
                          std::string_view label) {
  const auto& fields = table().fields;
  apply_value(f, &p, table().defaults[size_t(&f - fields.data())], value, label, nullptr);
}

}  // namespace config_detail

SamplingKnobs sampling_knobs(const SamplingParams& p, uint64_t seed) {
  SamplingKnobs k;
  k.temperature = float(p.temperature);
  k.top_k = p.top_k < 0 ? 0 : int32_t(p.top_k);
  k.top_p = float(p.top_p);
  k.min_p = float(p.min_p);
  k.presence_penalty = float(p.presence_penalty);
  k.frequency_penalty = float(p.frequency_penalty);
  k.repetition_penalty = float(p.repetition_penalty);
  k.seed = seed;
  return k;
}

nlohmann::json to_json(const SamplingParams& p) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : table().fields) j[std::string(f.name)] = f.get(&p);
  return j;
}

}  // namespace troupe

namespace troupe {

SamplingParams sampling_defaults_from(const GenerationConfig& g) {
  SamplingParams p;
  if (g.temperature) p.temperature = *g.temperature;
  if (g.top_p) p.top_p = *g.top_p;
  if (g.top_k) p.top_k = *g.top_k;
  if (g.repetition_penalty) p.repetition_penalty = *g.repetition_penalty;
  if (g.max_new_tokens) p.max_tokens = *g.max_new_tokens;
  return p;
}

std::string_view generation_config_key(std::string_view field) {
  // The fields sampling_defaults_from reads, by SamplingParams name.
  static constexpr std::pair<std::string_view, std::string_view> kKeys[] = {
      {"temperature", "temperature"},
      {"top_p", "top_p"},
      {"top_k", "top_k"},
      {"repetition_penalty", "repetition_penalty"},
      {"max_tokens", "max_new_tokens"},
  };
  for (const auto& [name, key] : kKeys)
    if (name == field) return key;
  return {};
}

}  // namespace troupe
