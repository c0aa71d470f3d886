// SamplingParams: how one request is sampled and returned, with vLLM's field names, order and
// defaults (vllm/sampling_params.py), so `troupe::SamplingParams{.temperature = 0.8,
// .top_p = 0.95}` reads as `SamplingParams(temperature=0.8, top_p=0.95)` does in Python.
//
// Every field is described once in sampling_param_fields() (sampling_params.cpp): type,
// default, allowed values and whether troupe supports it yet. Fields troupe does not
// support yet are refused by validate() when set to anything but their default; they are
// never silently ignored.
//
// vLLM's `None` is std::nullopt (seed, best_of, max_tokens, logprobs, ...); vLLM's
// `list | None` and `dict | None` fields are empty containers when None. Internal vLLM fields
// (_real_n, output_text_buffer_length, skip_clone, ...) are not part of the API and are not
// here.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/field_info.hpp"
#include "runtime/sampling/early_stopping.hpp"
#include "runtime/sampling/logits_processors.hpp"
#include "runtime/sampling/sampling_knobs.hpp"

namespace troupe {

struct GenerationConfig;

/// vLLM's RequestOutputKind: what each streamed RequestOutput carries.
enum class RequestOutputKind {
  cumulative,  // everything generated so far (the default)
  delta,       // only what is new since the last output
  final_only,  // nothing until the request finishes
};

struct SamplingParams {
  int64_t n = 1;                        // output sequences to return
  std::optional<int64_t> best_of;       // sequences to generate (>= n); unset = n
  double presence_penalty = 0.0;        // [-2, 2]
  double frequency_penalty = 0.0;       // [-2, 2]
  double repetition_penalty = 1.0;      // > 0; 1 = off
  double temperature = 1.0;             // >= 0; < 1e-5 is greedy
  double top_p = 1.0;                   // (0, 1]
  int64_t top_k = 0;                    // 0 or -1 = off, else >= 1
  double min_p = 0.0;                   // [0, 1]
  std::optional<int64_t> seed;          // per-request seed; unset = the engine's stream
  // Beam search (vLLM V0's fields, transformers' semantics: runtime/sched/beam_search.hpp):
  // best_of beams (unset: n), the n best hypotheses returned. Greedy only (temperature 0).
  bool use_beam_search = false;
  double length_penalty = 1.0;  // hypothesis score = cumulative logprob / length ** this
  EarlyStopping early_stopping = EarlyStopping::heuristic;  // false | true | "never"
  std::vector<std::string> stop;        // stop strings (not in the output unless asked)
  std::vector<int32_t> stop_token_ids;  // stop tokens (in the output)
  bool ignore_eos = false;
  std::optional<int64_t> max_tokens = 16;  // per output sequence; unset = up to max_model_len
  int64_t min_tokens = 0;                  // before EOS / stop_token_ids may end a sequence
  std::optional<int64_t> logprobs;         // top-N logprobs per output token; -1 = all
  std::optional<int64_t> prompt_logprobs;  // top-N logprobs per prompt token; -1 = all
  bool flat_logprobs = false;
  bool detokenize = true;
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;
  // Processors named from the loaded plug-ins ("name" or "name:argument"; logits_processors.hpp).
  std::vector<std::string> logits_processors;
  bool include_stop_str_in_output = false;
  std::optional<int64_t> truncate_prompt_tokens;  // keep the last k prompt tokens; -1 = model max
  RequestOutputKind output_kind = RequestOutputKind::cumulative;
  nlohmann::json structured_outputs;       // not supported yet (null = none)
  std::map<int32_t, double> logit_bias;    // token id -> bias added to its logit, [-100, 100]
  std::vector<int32_t> allowed_token_ids;  // only these may be sampled; empty = every token
  nlohmann::json extra_args;               // not supported yet (null = none)
  std::vector<std::string> bad_words;      // words never generated (see the field table)
  /// C++ only (vLLM's callables in logits_processors): each sees (prompt ids, output ids so
  /// far, logits row) and may change the row; after the named processors, in order. Needs
  /// the in-process executor (a callable cannot reach a `troupe worker`). Not in the field table:
  /// no text form.
  std::vector<LogitsProcessorFn> logits_processor_fns;

  bool operator==(const SamplingParams&) const = default;
};

/// One row per SamplingParams field, in declaration order.
const std::vector<FieldInfo>& sampling_param_fields();

/// vLLM's beam-search request fields that are not SamplingParams members: BeamSearchParams'
/// beam_width (LLM::beam_search takes it; a request asks for beams with use_beam_search and
/// best_of). Every front end (the command line, TOML, --input JSON, the server) takes them from
/// this table and refuses them by name.
const std::vector<FieldInfo>& beam_search_fields();
/// Refuses a value of a beam_search_fields() row (troupe::Error naming `label`), or accepts its
/// neutral value.
void apply_beam_search_field(const FieldInfo& f, const nlohmann::json& value,
                             std::string_view label);

/// Range, enum and consistency checks. Throws troupe::Error naming the field, the value and
/// what is allowed, or "<field> = <value>: not supported yet in troupe (...)".
void validate(const SamplingParams& p);

/// Sets one field from text as the command line gives it (`name` in snake, kebab or --flag
/// form). List fields take one value per call (or a JSON array); use the command line for
/// several. Refuses bad and not-yet values at once; errors name the --flag.
void set_sampling_param(SamplingParams& p, std::string_view name, std::string_view value);

/// A JSON object (one --input line, or a server request): known keys applied over `base`,
/// then validated. Unknown keys -> troupe::Error naming the key.
SamplingParams sampling_params_from_json(const nlohmann::json& j, const SamplingParams& base);

/// The per-token knobs of `p` as every sequence of the request samples with them (float, top_k
/// -1 as 0), with `seed` (a request's n > 1 sequences each get their own): the one place
/// SamplingParams' knobs are carried over to SamplingKnobs.
[[nodiscard]] SamplingKnobs sampling_knobs(const SamplingParams& p, uint64_t seed);

/// Every field, with vLLM's names; None is null.
nlohmann::json to_json(const SamplingParams& p);

/// What a request gets when it sets nothing: vLLM's defaults with the fields of the model's
/// generation_config.json over them (see generation_config_key).
[[nodiscard]] SamplingParams sampling_defaults_from(const GenerationConfig& g);
/// The generation_config.json key whose value sampling_defaults_from uses as `field`'s default
/// (max_tokens <- max_new_tokens), or "" when the field's default is always vLLM's.
[[nodiscard]] std::string_view generation_config_key(std::string_view field);

[[nodiscard]] std::string_view to_string(RequestOutputKind k);

}  // namespace troupe
