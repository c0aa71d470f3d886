// SamplingParams: the table against vLLM's field list and defaults, every validation rule of
// vLLM's _verify_args that troupe keeps, not-yet refusals, JSON and the text setter.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/config/field_codec.hpp"
#include "runtime/config/sampling_params.hpp"
#include "runtime/error.hpp"

using Catch::Matchers::Contains;
using troupe::FieldInfo;
using troupe::SamplingParams;
using json = nlohmann::json;

namespace {

// vLLM's public SamplingParams fields, in its declaration order (vllm/sampling_params.py).
const std::vector<std::string> kVllmSamplingFields = {
    "n", "best_of", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature",
    "top_p", "top_k", "min_p", "seed",
    // vLLM V0's beam search (V1 dropped it)
    "use_beam_search", "length_penalty", "early_stopping", "stop", "stop_token_ids", "ignore_eos",
    "max_tokens", "min_tokens", "logprobs", "prompt_logprobs", "flat_logprobs", "detokenize",
    "skip_special_tokens", "spaces_between_special_tokens", "logits_processors",
    "include_stop_str_in_output", "truncate_prompt_tokens", "output_kind", "structured_outputs",
    "logit_bias", "allowed_token_ids", "extra_args", "bad_words"};

std::string error_of(const SamplingParams& p) {
  try {
    troupe::validate(p);
  } catch (const troupe::Error& e) {
    return e.what();
  }
  return "";
}

std::string json_error(const json& j) {
  try {
    (void)troupe::sampling_params_from_json(j, SamplingParams{});
  } catch (const troupe::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("SamplingParams is an aggregate with designated initialisers in vLLM's order",
          "[config]") {
  static_assert(std::is_aggregate_v<SamplingParams>);
  SamplingParams p{.temperature = 0.8, .top_p = 0.95};
  CHECK(p.temperature == 0.8);
  CHECK(p.top_p == 0.95);
  SamplingParams q{.n = 2,
                   .temperature = 0.0,
                   .seed = 7,
                   .stop = {"\n"},
                   .max_tokens = 32,
                   .logprobs = 5,
                   .logit_bias = {{50256, -100.0}}};
  CHECK(q.seed == 7);
  CHECK(q.max_tokens == 32);
  CHECK(q.logit_bias.at(50256) == -100.0);
}

TEST_CASE("SamplingParams defaults are vLLM's", "[config]") {
  SamplingParams p;
  CHECK(p.n == 1);
  CHECK_FALSE(p.best_of);
  CHECK(p.presence_penalty == 0.0);
  CHECK(p.frequency_penalty == 0.0);
  CHECK(p.repetition_penalty == 1.0);
  CHECK(p.temperature == 1.0);
  CHECK(p.top_p == 1.0);
  CHECK(p.top_k == 0);
  CHECK(p.min_p == 0.0);
  CHECK_FALSE(p.seed);
  CHECK(p.stop.empty());
  CHECK_FALSE(p.ignore_eos);
  CHECK(p.max_tokens == 16);
  CHECK(p.min_tokens == 0);
  CHECK_FALSE(p.logprobs);
  CHECK_FALSE(p.prompt_logprobs);
  CHECK(p.detokenize);
  CHECK(p.skip_special_tokens);
  CHECK(p.spaces_between_special_tokens);
  CHECK_FALSE(p.include_stop_str_in_output);
  CHECK_FALSE(p.truncate_prompt_tokens);
  CHECK(p.output_kind == troupe::RequestOutputKind::cumulative);
  CHECK(p.structured_outputs.is_null());
  CHECK(p.logit_bias.empty());
  CHECK_NOTHROW(troupe::validate(p));
}

TEST_CASE("the SamplingParams table has every vLLM field, in order, and complete rows",
          "[config]") {
  std::vector<std::string> names;
  const SamplingParams defaults;
  for (const auto& f : troupe::sampling_param_fields()) {
    INFO(f.name);
    names.push_back(std::string(f.name));
    CHECK_FALSE(f.help.empty());
    if (f.status != FieldInfo::Status::supported) CHECK_FALSE(f.note.empty());
    REQUIRE(f.get);
    std::vector<std::string> tokens{std::string(f.default_text)};
    SamplingParams p;
    f.set(&p, f.parse_text(tokens, f.name), f.name, nullptr);
    CHECK(f.get(&p) == f.get(&defaults));
  }
  CHECK(names == kVllmSamplingFields);
}

TEST_CASE("SamplingParams flags are kebab names, renamed where an engine flag has the name",
          "[config]") {
  for (const auto& f : troupe::sampling_param_fields()) {
    std::string kebab(f.name);
    std::replace(kebab.begin(), kebab.end(), '_', '-');
    if (f.name == "seed") {
      CHECK(f.flag == "sampling-seed");
    } else if (f.name == "logits_processors") {
      CHECK(f.flag == "sampling-logits-processors");
    } else {
      CHECK(f.flag == kebab);
    }
  }
}

TEST_CASE("SamplingParams range checks", "[config]") {
  const double inf = std::numeric_limits<double>::infinity();
  CHECK_THAT(error_of({.n = 0}), Contains("n = 0: allowed: >= 1"));
  CHECK_THAT(error_of({.presence_penalty = 2.5}),
             Contains("presence_penalty = 2.5: allowed: [-2, 2]"));
  CHECK_THAT(error_of({.presence_penalty = -2.5}), Contains("presence_penalty = -2.5"));
  CHECK(error_of({.presence_penalty = -2.0}).empty());
  CHECK_THAT(error_of({.frequency_penalty = 3}),
             Contains("frequency_penalty = 3.0: allowed: [-2, 2]"));
  CHECK_THAT(error_of({.repetition_penalty = 0}),
             Contains("repetition_penalty = 0.0: allowed: > 0"));
  CHECK_THAT(error_of({.temperature = -0.1}), Contains("temperature = -0.1: allowed: >= 0"));
  CHECK_THAT(error_of({.temperature = inf}), Contains("temperature = inf"));
  CHECK(error_of({.temperature = 0}).empty());
  CHECK_THAT(error_of({.top_p = 0}), Contains("top_p = 0.0: allowed: (0, 1]"));
  CHECK_THAT(error_of({.top_p = 1.1}), Contains("top_p = 1.1"));
  CHECK_THAT(error_of({.top_p = std::nan("")}), Contains("top_p = nan"));
  CHECK_THAT(error_of({.top_k = -2}), Contains("top_k = -2: allowed: -1, 0 or >= 1"));
  CHECK(error_of({.top_k = -1}).empty());
  CHECK(error_of({.top_k = 50}).empty());
  CHECK_THAT(error_of({.min_p = -0.1}), Contains("min_p = -0.1: allowed: [0, 1]"));
  CHECK_THAT(error_of({.min_p = 1.5}), Contains("min_p = 1.5"));
  CHECK_THAT(error_of({.stop = {"a", ""}}), Contains("stop = [\"a\",\"\"]: allowed: non-empty"));
  CHECK_THAT(error_of({.stop_token_ids = {2, -1}}),
             Contains("stop_token_ids = [2,-1]: allowed: token ids >= 0"));
  CHECK_THAT(error_of({.max_tokens = 0}), Contains("max_tokens = 0: allowed: None or >= 1"));
  CHECK(error_of({.max_tokens = std::nullopt}).empty());
  CHECK_THAT(error_of({.min_tokens = -1}), Contains("min_tokens = -1"));
  CHECK_THAT(error_of({.logprobs = -2}), Contains("logprobs = -2: allowed: None, -1 or >= 0"));
  CHECK(error_of({.logprobs = -1}).empty());
  CHECK(error_of({.logprobs = 0}).empty());
  CHECK_THAT(error_of({.prompt_logprobs = -3}), Contains("prompt_logprobs = -3"));
  CHECK_THAT(error_of({.truncate_prompt_tokens = 0}),
             Contains("truncate_prompt_tokens = 0: allowed: None, -1 or >= 1"));
  CHECK_THAT(error_of({.truncate_prompt_tokens = -2}), Contains("truncate_prompt_tokens = -2"));
  CHECK(error_of({.truncate_prompt_tokens = -1}).empty());
  CHECK(error_of({.truncate_prompt_tokens = 100}).empty());
  CHECK_THAT(
      error_of({.logit_bias = {{5, 101.0}}}),
      Contains("logit_bias = {\"5\":101.0}: allowed: token ids >= 0, biases in [-100, 100]"));
  CHECK_THAT(error_of({.logit_bias = {{-1, 1.0}}}), Contains("logit_bias = {\"-1\":1.0}"));
  CHECK(error_of({.logit_bias = {{5, -100.0}, {6, 100.0}}}).empty());
}

TEST_CASE("SamplingParams cross-field checks", "[config]") {
  CHECK_THAT(error_of({.max_tokens = 4, .min_tokens = 5}),
             Contains("min_tokens = 5: allowed: <= max_tokens (max_tokens = 4)"));
  CHECK(error_of({.max_tokens = 5, .min_tokens = 5}).empty());
  CHECK(error_of({.max_tokens = std::nullopt, .min_tokens = 500}).empty());
  CHECK_THAT(error_of({.n = 3, .best_of = 2}),
             Contains("best_of = 2: allowed: None or >= n (n = 3)"));
  CHECK(error_of({.n = 2, .best_of = 4}).empty());  // the best 2 of 4 samples
  CHECK(error_of({.n = 2, .best_of = 2}).empty());
  CHECK_THAT(error_of({.stop = {"x"}, .detokenize = false}),
             Contains("stop = [\"x\"]: allowed only with detokenize = true"));
  CHECK(error_of({.allowed_token_ids = {1, 2}, .bad_words = {"darn"}}).empty());
}

TEST_CASE("not-yet SamplingParams fields are refused, naming the field", "[config]") {
  CHECK_THAT(error_of({.structured_outputs = {{"regex", "[0-9]+"}}}),
             Contains("structured_outputs = {\"regex\":\"[0-9]+\"}: not supported yet"));
  CHECK_THAT(error_of({.logits_processors = {""}}),
             Contains("logits_processors = [\"\"]: allowed: names of loaded processors"));
  CHECK_THAT(error_of({.extra_args = {{"k", 1}}}),
             Contains("extra_args = {\"k\":1}: not supported yet"));
  CHECK_THAT(error_of({.flat_logprobs = true}),
             Contains("flat_logprobs = true: not supported yet"));
  CHECK_THAT(error_of({.output_kind = troupe::RequestOutputKind::delta}),
             Contains("output_kind = \"delta\": not supported yet in troupe (supported now: "
                      "cumulative"));
  CHECK_THAT(error_of({.output_kind = troupe::RequestOutputKind::final_only}),
             Contains("output_kind = \"final_only\": not supported yet"));
}

TEST_CASE("sampling_params_from_json applies known keys over the base", "[config]") {
  SamplingParams base{.temperature = 0.7, .max_tokens = 100};
  auto p = troupe::sampling_params_from_json(json{{"top_p", 0.9},
                                                  {"stop", "END"},
                                                  {"stop_token_ids", {1, 2}},
                                                  {"seed", 42},
                                                  {"logit_bias", {{"50256", -100}}},
                                                  {"max_tokens", nullptr},
                                                  {"n", "2"}},
                                             base);
  CHECK(p.temperature == 0.7);  // from the base
  CHECK(p.top_p == 0.9);
  CHECK(p.stop == std::vector<std::string>{"END"});
  CHECK(p.stop_token_ids == std::vector<int32_t>{1, 2});
  CHECK(p.seed == 42);
  CHECK(p.logit_bias.at(50256) == -100.0);
  CHECK_FALSE(p.max_tokens);  // null resets to None
  CHECK(p.n == 2);            // numeric strings are read as command-line text
  CHECK(troupe::sampling_params_from_json(json::object(), base) == base);
}

TEST_CASE("sampling_params_from_json errors name the key", "[config]") {
  CHECK_THAT(json_error({{"temprature", 0.5}}),
             Contains("unknown key 'temprature' (did you mean 'temperature'?)"));
  CHECK_THAT(json_error({{"top-p", 0.5}}), Contains("unknown key 'top-p'"));
  CHECK_THAT(json_error({{"frobnicate", 1}}), Contains("unknown key 'frobnicate'"));
  CHECK_THAT(json_error({{"temperature", "hot"}}),
             Contains("temperature = \"hot\": expected a number"));
  CHECK_THAT(json_error({{"max_tokens", 1.5}}), Contains("max_tokens = 1.5: expected an integer"));
  CHECK_THAT(json_error({{"ignore_eos", 1}}), Contains("ignore_eos = 1: expected a boolean"));
  CHECK_THAT(json_error({{"stop", {1, 2}}}), Contains("stop = [1,2]: expected a list of strings"));
  CHECK_THAT(json_error({{"logit_bias", {{"abc", 1}}}}),
             Contains("logit_bias = {\"abc\":1}: key \"abc\" is not a token id"));
  CHECK_THAT(json_error({{"stop_token_ids", {5000000000LL}}}),
             Contains("out of range for a token id"));
  // Past int64 is refused, not wrapped (2^64 - 1 was read as -1: a seed of -1, silently).
  CHECK_THAT(json_error(json::parse(R"({"seed": 18446744073709551615})")),
             Contains("seed = 18446744073709551615: integer out of range"));
  CHECK_THAT(json_error(json::parse(R"({"max_tokens": 9223372036854775808})")),
             Contains("max_tokens = 9223372036854775808: integer out of range"));
  CHECK(troupe::sampling_params_from_json(json::parse(R"({"seed": 9223372036854775807})"), {})
            .seed == INT64_MAX);
  CHECK_THAT(json_error({{"output_kind", "sometimes"}}),
             Contains("output_kind = \"sometimes\": allowed: cumulative|delta|final_only"));
  CHECK_THAT(json_error({{"top_p", 0}}), Contains("top_p = 0.0: allowed: (0, 1]"));
  CHECK_THAT(json_error({{"bad_words", {"x", " "}}}),
             Contains("bad_words = [\"x\",\" \"]: allowed: words with a character other than "
                      "whitespace"));
  CHECK_THAT(json_error({{"allowed_token_ids", {3, -1}}}),
             Contains("allowed_token_ids = [3,-1]: allowed: token ids >= 0"));
  CHECK_THAT(json_error(json::array({1})), Contains("expected a JSON object"));
}

TEST_CASE("beam search's fields in JSON: taken, checked by name, beam_width refused", "[config]") {
  const SamplingParams beams = troupe::sampling_params_from_json(json{{"use_beam_search", true},
                                                                      {"best_of", 4},
                                                                      {"n", 2},
                                                                      {"temperature", 0},
                                                                      {"length_penalty", 0.5},
                                                                      {"early_stopping", "never"}},
                                                                 {});
  CHECK(beams.use_beam_search);
  CHECK(beams.length_penalty == 0.5);
  CHECK(beams.early_stopping == troupe::EarlyStopping::never);
  CHECK(troupe::sampling_params_from_json(json{{"use_beam_search", true},
                                               {"best_of", 2},
                                               {"temperature", 0},
                                               {"early_stopping", true}},
                                          {})
            .early_stopping == troupe::EarlyStopping::when_full);
  // Never "unknown key", never ignored.
  const json on = {{"use_beam_search", true}, {"best_of", 2}, {"temperature", 0}};
  const auto with = [&](json extra) {
    json j = on;
    j.update(extra);
    return j;
  };
  const std::pair<json, std::string> refused[] = {
      {{{"use_beam_search", true}}, "best_of = 1: allowed: >= 2 with use_beam_search"},
      {{{"use_beam_search", true}, {"best_of", 2}}, "temperature = 1: allowed: 0 with"},
      {with({{"best_of", nullptr}}), "best_of = 1: allowed: >= 2 with use_beam_search"},
      {with({{"presence_penalty", 0.5}}), "presence_penalty = 0.5: not supported with"},
      {with({{"repetition_penalty", 1.3}}), "repetition_penalty = 1.3: not supported with"},
      {with({{"stop", {"x"}}}), "stop = [\"x\"]: not supported with use_beam_search"},
      {with({{"prompt_logprobs", 1}}), "prompt_logprobs = 1: not supported with use_beam_search"},
      {with({{"early_stopping", "sometimes"}}),
       "early_stopping = \"sometimes\": allowed: true, false or \"never\""},
      {{{"length_penalty", 0.5}}, "length_penalty = 0.5: allowed: 1.0 without use_beam_search"},
      {{{"early_stopping", true}}, "early_stopping = true: allowed: false without use_beam_search"},
      {{{"early_stopping", "never"}}, "early_stopping = never: allowed: false without"},
      {{{"beam_width", 4}}, "beam_width = 4: not supported yet in troupe (it is LLM::beam_search"},
      {{{"beam_width", 1}}, "beam_width = 1: not supported yet in troupe"},
  };
  for (const auto& [j, message] : refused) {
    INFO(j.dump());
    const std::string e = json_error(j);
    CHECK_THAT(e, Contains(message));
    CHECK(e.find("unknown key") == std::string::npos);
  }
  CHECK_THAT(json_error({{"use_beam_search", "yes please"}}),
             Contains("use_beam_search = \"yes please\": expected a boolean"));
  // The values that ask for no beam search change nothing.
  const SamplingParams base{.temperature = 0.5};
  CHECK(troupe::sampling_params_from_json(
            json{{"use_beam_search", false},
                 {"length_penalty", 1},
                 {"early_stopping", false},
                 {"beam_width", nullptr}},
            base) == base);
  // beam_width is BeamSearchParams': a row of its own, not a SamplingParams member.
  for (const auto& f : troupe::beam_search_fields()) {
    INFO(f.name);
    CHECK(f.status == troupe::FieldInfo::Status::not_yet);
    CHECK(troupe::config_detail::find_field(troupe::sampling_param_fields(), f.name) == nullptr);
  }
  CHECK(troupe::beam_search_fields().size() == 1);
}

TEST_CASE("to_json and sampling_params_from_json round-trip", "[config]") {
  SamplingParams p{.n = 3,
                   .presence_penalty = 0.5,
                   .temperature = 0.3,
                   .top_k = 40,
                   .seed = 9,
                   .stop = {"a", "b"},
                   .stop_token_ids = {7},
                   .max_tokens = std::nullopt,
                   .min_tokens = 2,
                   .logprobs = 3,
                   .include_stop_str_in_output = true,
                   .truncate_prompt_tokens = 512,
                   .logit_bias = {{3, 1.5}}};
  json j = troupe::to_json(p);
  CHECK(j.size() == kVllmSamplingFields.size());
  CHECK(j["max_tokens"].is_null());
  CHECK(j["seed"] == 9);
  CHECK(j["output_kind"] == "cumulative");
  CHECK(j["logit_bias"] == json{{"3", 1.5}});
  CHECK(troupe::sampling_params_from_json(j, SamplingParams{}) == p);
}

TEST_CASE("set_sampling_param takes command-line text", "[config]") {
  SamplingParams p;
  troupe::set_sampling_param(p, "top-p", "0.9");
  troupe::set_sampling_param(p, "--temperature", "0");
  troupe::set_sampling_param(p, "stop_token_ids", "1, 2,3");
  troupe::set_sampling_param(p, "logit-bias", "50256:-100,13:2.5");
  troupe::set_sampling_param(p, "sampling-seed", "7");
  troupe::set_sampling_param(p, "stop", "###");
  troupe::set_sampling_param(p, "no-skip-special-tokens", "");
  troupe::set_sampling_param(p, "max-tokens", "None");
  CHECK(p.top_p == 0.9);
  CHECK(p.temperature == 0.0);
  CHECK(p.stop_token_ids == std::vector<int32_t>{1, 2, 3});
  CHECK(p.logit_bias == std::map<int32_t, double>{{13, 2.5}, {50256, -100.0}});
  CHECK(p.seed == 7);
  CHECK(p.stop == std::vector<std::string>{"###"});
  CHECK_FALSE(p.skip_special_tokens);
  CHECK_FALSE(p.max_tokens);
  troupe::set_sampling_param(p, "seed", "8");  // the snake name works too
  CHECK(p.seed == 8);

  SamplingParams q;
  CHECK_THROWS_WITH(troupe::set_sampling_param(q, "top-p", "2"),
                    Contains("--top-p = 2.0: allowed: (0, 1]"));
  CHECK_THROWS_WITH(troupe::set_sampling_param(q, "top-k", "ten"),
                    Contains("--top-k = ten: expected an integer"));
  CHECK_THROWS_WITH(troupe::set_sampling_param(q, "logit-bias", "5"),
                    Contains("--logit-bias = 5: expected TOKEN_ID:BIAS"));
  // JSON text with a number beyond a double: nlohmann's out_of_range, named like bad JSON.
  CHECK_THROWS_WITH(troupe::set_sampling_param(q, "logit-bias", R"({"5": 1e999})"),
                    Contains("--logit-bias") && Contains("expected JSON"));
  CHECK_THROWS_WITH(troupe::set_sampling_param(q, "stop-token-ids", "[1e999]"),
                    Contains("--stop-token-ids") && Contains("expected JSON"));
  CHECK_THROWS_WITH(troupe::set_sampling_param(q, "flat-logprobs", "true"),
                    Contains("--flat-logprobs = true: not supported yet in troupe"));
  CHECK_THROWS_WITH(troupe::set_sampling_param(q, "topp", "0.5"),
                    Contains("unknown sampling parameter 'topp' (did you mean 'top_p'?)"));
  CHECK(q == SamplingParams{});
}
