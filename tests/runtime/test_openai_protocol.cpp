// The OpenAI request parsers (runtime/openai/protocol): vLLM's field names and defaults, the
// 400s for bad values (naming field, value and what is allowed), unknown fields accepted,
// known-but-unsupported fields refused, and no input that makes them do anything else.
#include <catch2/catch.hpp>

#include <random>
#include <tuple>

#include "runtime/openai/protocol.hpp"

using namespace troupe;
using namespace troupe::openai;
using json = nlohmann::json;

namespace {

/// The ApiError a parse throws (fails the test when it does not throw one).
ApiError error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiException& e) {
    return e.error();
  }
  FAIL("expected an ApiException");
  return {};
}

ApiError completion_error(const std::string& body) {
  return error_of([&] { (void)parse_completion_request(parse_body(body)); });
}

ApiError chat_error(const std::string& body) {
  return error_of([&] { (void)parse_chat_request(parse_body(body)); });
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("openai: a completion request takes vLLM's defaults", "[openai]") {
  const auto r = parse_completion_request(parse_body(R"({"prompt": "Once upon a time"})"));
  REQUIRE(r.prompts.size() == 1);
  CHECK(r.prompts[0].text == "Once upon a time");
  CHECK_FALSE(r.prompts[0].is_tokens);
  CHECK(r.max_tokens == 16);  // CompletionRequest.max_tokens = 16
  CHECK(r.params.max_tokens == 16);
  CHECK(r.params.n == 1);
  CHECK(r.params.temperature == 1.0);
  CHECK(r.params.top_p == 1.0);
  CHECK(r.params.top_k == 0);
  CHECK_FALSE(r.params.logprobs);
  CHECK_FALSE(r.stream);
  CHECK(r.add_special_tokens);  // completions add BOS
  CHECK(r.ignored_fields.empty());
  // An explicit null max_tokens means "up to max_model_len".
  CHECK_FALSE(
      parse_completion_request(parse_body(R"({"prompt": "x", "max_tokens": null})")).max_tokens);
}

TEST_CASE("openai: unset sampling fields take the model's generation config", "[openai]") {
  SamplingDefaults d;
  d.temperature = 0.8;
  d.top_p = 0.95;
  d.top_k = 40;
  const auto r = parse_completion_request(parse_body(R"({"prompt": "x", "top_p": 0.5})"), d);
  CHECK(r.params.temperature == 0.8);
  CHECK(r.params.top_p == 0.5);  // the request wins
  CHECK(r.params.top_k == 40);
}

TEST_CASE("openai: every prompt form of /v1/completions", "[openai]") {
  auto r = parse_completion_request(parse_body(R"({"prompt": ["a", "b"]})"));
  REQUIRE(r.prompts.size() == 2);
  CHECK(r.prompts[1].text == "b");
  r = parse_completion_request(parse_body(R"({"prompt": [1, 2, 3]})"));
  REQUIRE(r.prompts.size() == 1);
  CHECK(r.prompts[0].is_tokens);
  CHECK(r.prompts[0].token_ids == std::vector<int32_t>{1, 2, 3});
  r = parse_completion_request(parse_body(R"({"prompt": [[1, 2], [3]]})"));
  REQUIRE(r.prompts.size() == 2);
  CHECK(r.prompts[1].token_ids == std::vector<int32_t>{3});

  for (const char* bad : {R"({"prompt": ["a", 1]})", R"({"prompt": [[1], "a"]})",
                          R"({"prompt": {"a": 1}})", R"({"prompt": []})", R"({"prompt": [[]]})",
                          R"({"prompt": [1.5]})", R"({"prompt": [3000000000]})", R"({})"}) {
    INFO(bad);
    const auto e = completion_error(bad);
    CHECK(e.status == 400);
    CHECK(e.param == "prompt");
  }
}

TEST_CASE("openai: wrong types are 400s naming the field, the value and the type", "[openai]") {
  auto e = completion_error(R"({"prompt": "x", "max_tokens": "abc"})");
  CHECK(e.status == 400);
  CHECK(e.type == "BadRequestError");
  CHECK(e.param == "max_tokens");
  CHECK(e.message == R"(max_tokens = "abc": expected an integer)");
  e = completion_error(R"({"prompt": "x", "temperature": [1]})");
  CHECK(e.param == "temperature");
  CHECK(contains(e.message, "expected a number"));
  e = completion_error(R"({"prompt": "x", "stream": "maybe"})");
  CHECK(e.param == "stream");
  CHECK(contains(e.message, "boolean"));
  e = completion_error(R"({"prompt": "x", "stop": 5})");
  CHECK(e.param == "stop");
  e = completion_error(R"({"prompt": "x", "logit_bias": {"abc": 1}})");
  CHECK(e.param == "logit_bias");
  e = completion_error(R"({"prompt": "x", "n": 2.5})");
  CHECK(e.param == "n");
  e = completion_error(R"({"prompt": 7})");
  CHECK(e.param == "prompt");
}

TEST_CASE("openai: numbers and booleans are read leniently, as pydantic does", "[openai]") {
  const auto r = parse_completion_request(parse_body(
      R"({"prompt": "x", "n": "2", "temperature": "0.5", "max_tokens": 4.0, "echo": "true",
          "ignore_eos": 1})"));
  CHECK(r.params.n == 2);
  CHECK(r.params.temperature == 0.5);
  CHECK(r.max_tokens == 4);
  CHECK(r.echo);
  CHECK(r.params.ignore_eos);
}

TEST_CASE("openai: out-of-range values are 400s saying what is allowed", "[openai]") {
  struct Case {
    const char* body;
    const char* param;
    const char* says;
  };
  for (const auto& c : std::vector<Case>{
           {R"({"prompt": "x", "temperature": -1})", "temperature", "allowed: >= 0"},
           {R"({"prompt": "x", "top_p": 0})", "top_p", "allowed: (0, 1]"},
           {R"({"prompt": "x", "top_p": 1.5})", "top_p", "allowed: (0, 1]"},
           {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty", "[-2, 2]"},
           {R"({"prompt": "x", "n": 0})", "n", ">= 1"},
           {R"({"prompt": "x", "max_tokens": 0})", "max_tokens", ">= 1"},
           {R"({"prompt": "x", "min_tokens": 20, "max_tokens": 10})", "min_tokens", "max_tokens"},
           {R"({"prompt": "x", "logprobs": -5})", "logprobs", ">= 0"},
           {R"({"prompt": "x", "truncate_prompt_tokens": 0})", "truncate_prompt_tokens", ">= 1"},
           {R"({"prompt": "x", "stop": [""]})", "stop", "non-empty"},
       }) {
    INFO(c.body);
    const auto e = completion_error(c.body);
    CHECK(e.status == 400);
    CHECK(e.param == c.param);
    CHECK(contains(e.message, c.says));
  }
}

TEST_CASE("openai: unknown fields are accepted and listed, never a 400", "[openai]") {
  const auto r = parse_completion_request(
      parse_body(R"({"prompt": "x", "zeta": 1, "alpha": {"nested": true}, "user": "u"})"));
  CHECK(r.ignored_fields == std::vector<std::string>{"alpha", "zeta"});  // "user" is known
  const auto c = parse_chat_request(parse_body(
      R"({"messages": [{"role": "user", "content": "hi"}], "store": true, "metadata": {}})"));
  CHECK(c.ignored_fields == std::vector<std::string>{"metadata", "store"});
}

TEST_CASE("openai: fields troupe cannot honour yet are refused by name", "[openai]") {
  for (const char* field :
       {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs",
        "suffix", "prompt_embeds", "cache_salt", "vllm_xargs", "kv_transfer_params", "priority"}) {
    json body = {{"prompt", "x"}};
    if (std::string(field) == "priority")
      body[field] = 1;
    else
      body[field] = "something";
    INFO(body.dump());
    const auto e = completion_error(body.dump());
    CHECK(e.status == 400);
    CHECK(e.param == field);
    CHECK(contains(e.message, field));
  }
  auto e = completion_error(R"({"prompt": "x", "response_format": {"type": "json_object"}})");
  CHECK(e.param == "response_format");
  // Their defaults are fine.
  const auto r = parse_completion_request(parse_body(
      R"({"prompt": "x", "use_beam_search": false, "best_of": 1, "priority": 0, "bad_words": [],
          "response_format": {"type": "text"}, "length_penalty": 1.0})"));
  CHECK(r.params.best_of == 1);
}

TEST_CASE("openai: beam search's fields on both endpoints, beam_width refused by name",
          "[openai]") {
  const auto r0 = parse_completion_request(parse_body(
      R"({"prompt": "x", "use_beam_search": "true", "best_of": 3, "n": 2, "temperature": 0,
          "length_penalty": 0.6, "early_stopping": "never"})"));
  CHECK(r0.params.use_beam_search);
  CHECK(r0.params.best_of == 3);
  CHECK(r0.params.length_penalty == 0.6);
  CHECK(r0.params.early_stopping == EarlyStopping::never);
  const auto c0 = parse_chat_request(parse_body(
      R"({"messages": [{"role": "user", "content": "hi"}], "use_beam_search": true, "n": 2,
          "temperature": 0, "early_stopping": true})"));
  CHECK(c0.params.use_beam_search);
  CHECK(c0.params.early_stopping == EarlyStopping::when_full);
  const std::tuple<const char*, json, const char*> refused[] = {
      {"use_beam_search", true, "best_of"},  // one beam: n = 1 and best_of unset
      {"length_penalty", 0.6, "length_penalty"},
      {"length_penalty", "2", "length_penalty"},
      {"early_stopping", true, "early_stopping"},
      {"early_stopping", "sometimes", "early_stopping"},
      {"beam_width", 3, "beam_width"}};
  for (const auto& [field, value, param] : refused) {
    json completion = {{"prompt", "x"}, {field, value}};
    json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {field, value}};
    for (const json& body : {completion, chat}) {
      INFO(body.dump());
      const auto e =
          body.contains("prompt") ? completion_error(body.dump()) : chat_error(body.dump());
      CHECK(e.status == 400);
      CHECK(e.param == param);
      CHECK(contains(e.message, std::string(param) + " = "));
    }
    // vLLM's plain /generate reads SamplingParams' JSON: refused there too.
    const auto g = parse_request(Endpoint::generate, json{{"prompt", "x"}, {field, value}}.dump());
    REQUIRE(std::holds_alternative<ApiError>(g));
    CHECK(contains(std::get<ApiError>(g).message, std::string(param) + " = "));
  }
  // The values that ask for no beam search are fine, and none of them is an ignored field.
  const auto r = parse_completion_request(parse_body(
      R"({"prompt": "x", "use_beam_search": "false", "length_penalty": 1, "early_stopping": false})"));
  CHECK(r.ignored_fields.empty());
}

TEST_CASE("openai: best_of, bad_words and allowed_token_ids reach SamplingParams", "[openai]") {
  const auto r = parse_completion_request(parse_body(
      R"({"prompt": "x", "n": 2, "best_of": 3, "bad_words": ["no", "never"],
          "allowed_token_ids": [5, 7]})"));
  CHECK(r.params.n == 2);
  CHECK(r.params.best_of == 3);
  CHECK(r.params.bad_words == std::vector<std::string>{"no", "never"});
  CHECK(r.params.allowed_token_ids == std::vector<int32_t>{5, 7});
  auto e = completion_error(R"({"prompt": "x", "n": 3, "best_of": 2})");
  CHECK(e.param == "best_of");
  CHECK(contains(e.message, ">= n"));
  e = completion_error(R"({"prompt": "x", "allowed_token_ids": [1, -4]})");
  CHECK(e.param == "allowed_token_ids");
  e = completion_error(R"({"prompt": "x", "bad_words": ["  "]})");
  CHECK(e.param == "bad_words");
  const auto c = parse_chat_request(parse_body(
      R"({"messages": [{"role": "user", "content": "hi"}], "bad_words": ["x"],
          "allowed_token_ids": [1]})"));
  CHECK(c.params.bad_words == std::vector<std::string>{"x"});
  CHECK(c.params.allowed_token_ids == std::vector<int32_t>{1});
  // Plug-in processor names pass through (the engine checks them); objects are refused.
  CHECK(parse_completion_request(
            parse_body(R"({"prompt": "x", "logits_processors": ["no_repeat_ngram:3"]})"))
            .params.logits_processors == std::vector<std::string>{"no_repeat_ngram:3"});
  e = completion_error(R"({"prompt": "x", "logits_processors": [{"qualname": "m.P"}]})");
  CHECK(e.param == "logits_processors");
}

TEST_CASE("openai: vLLM's cross-field checks", "[openai]") {
  auto e = completion_error(R"({"prompt": "x", "stream_options": {"include_usage": true}})");
  CHECK(e.param == "stream_options");
  CHECK(e.message == "Stream options can only be defined when `stream=True`.");
  e = completion_error(R"({"prompt": "x", "stream": true, "prompt_logprobs": 1})");
  CHECK(e.param == "prompt_logprobs");
  e = chat_error(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})");
  CHECK(e.param == "top_logprobs");
  CHECK(e.message == "when using `top_logprobs`, `logprobs` must be set to true.");
  e = chat_error(
      R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})");
  CHECK(e.param == "continue_final_message");
}

TEST_CASE("openai: stream options and echo", "[openai]") {
  auto r = parse_completion_request(parse_body(
      R"({"prompt": "x", "stream": true, "stream_options": {"continuous_usage_stats": true}})"));
  CHECK(r.has_stream_options);
  CHECK(r.include_usage);  // StreamOptions.include_usage defaults to true
  CHECK(r.continuous_usage);
  // echo asks for the prompt's logprobs at `logprobs` (vLLM's to_sampling_params).
  r = parse_completion_request(parse_body(R"({"prompt": "x", "echo": true, "logprobs": 2})"));
  CHECK(r.params.prompt_logprobs == 2);
  // echo with max_tokens 0: the engine samples one token that is never shown.
  r = parse_completion_request(parse_body(R"({"prompt": "x", "echo": true, "max_tokens": 0})"));
  CHECK(r.params.max_tokens == 1);
  CHECK(r.max_tokens == 0);
}

TEST_CASE("openai: logit_bias keys are token ids and biases are clamped to +-100", "[openai]") {
  const auto r =
      parse_completion_request(parse_body(R"({"prompt": "x", "logit_bias": {"5": 200, "7": -3}})"));
  CHECK(r.params.logit_bias.at(5) == 100.0);
  CHECK(r.params.logit_bias.at(7) == -3.0);
}

TEST_CASE("openai: a chat request and its messages", "[openai]") {
  const auto r = parse_chat_request(parse_body(R"({
      "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
          "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"}],
      "max_completion_tokens": 9, "max_tokens": 20, "logprobs": true, "top_logprobs": 3,
      "tools": [{"type": "function", "function": {"name": "f"}}],
      "chat_template_kwargs": {"enable_thinking": false}})"));
  REQUIRE(r.messages.size() == 4);
  CHECK(r.messages[1]["content"] == "one\ntwo");  // vLLM's "string" content format
  CHECK(r.messages[2]["content"] == "");
  CHECK(r.messages[2]["tool_calls"][0]["id"] == "c1");
  CHECK(r.messages[3]["tool_call_id"] == "c1");
  CHECK(r.max_tokens == 9);  // max_completion_tokens wins over max_tokens
  CHECK(r.params.logprobs == 3);
  CHECK(r.top_logprobs == 3);
  CHECK_FALSE(r.add_special_tokens);  // the template adds BOS
  CHECK(r.add_generation_prompt);
  CHECK(r.template_context["tools"][0]["function"]["name"] == "f");
  CHECK(r.template_context["enable_thinking"] == false);
  // Without max tokens, chat leaves it to max_model_len.
  CHECK_FALSE(parse_chat_request(parse_body(R"({"messages": [{"role": "user", "content": "x"}]})"))
                  .max_tokens);
}

TEST_CASE("openai: bad chat messages are 400s naming the message", "[openai]") {
  auto e = chat_error(R"({"messages": "hello"})");
  CHECK(e.param == "messages");
  e = chat_error(R"({"messages": []})");
  CHECK(e.param == "messages");
  e = chat_error(R"({"messages": [{"content": "x"}]})");
  CHECK(e.param == "messages[0].role");
  e = chat_error(R"({"messages": [{"role": "user", "content": 5}]})");
  CHECK(e.param == "messages[0].content");
  e = chat_error(
      R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})");
  CHECK(e.param == "messages[0].content");
  CHECK(contains(e.message, "image_url"));
  CHECK(contains(e.message, "not supported yet"));
  e = chat_error(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto",
                     "tools": [{"type": "function", "function": {"name": "f"}}]})");
  CHECK(e.param == "tool_choice");
  e = chat_error(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})");
  CHECK(e.message == "When using `tool_choice`, `tools` must be set.");
}

TEST_CASE("openai: tokenize, detokenize and /generate requests", "[openai]") {
  auto t = parse_tokenize_request(parse_body(R"({"prompt": "hi", "return_token_strs": true})"));
  CHECK(t.prompt == "hi");
  CHECK(t.add_special_tokens);
  CHECK(t.return_token_strs);
  t = parse_tokenize_request(parse_body(R"({"messages": [{"role": "user", "content": "hi"}]})"));
  REQUIRE(t.chat);
  CHECK_FALSE(t.add_special_tokens);
  const auto d = parse_detokenize_request(parse_body(R"({"tokens": [1, 2]})"));
  CHECK(d.tokens == std::vector<int32_t>{1, 2});
  CHECK(error_of([] {
          (void)parse_detokenize_request(parse_body(R"({"tokens": ["a"]})"));
        }).param == "tokens");
  const auto g = parse_plain_generate_request(
      parse_body(R"({"prompt": "p", "stream": true, "max_tokens": 3, "temperature": 0})"));
  CHECK(g.prompt == "p");
  CHECK(g.stream);
  CHECK(g.params.max_tokens == 3);
  // /generate takes SamplingParams' own fields: an unknown one is an error there.
  CHECK(error_of([] {
          (void)parse_plain_generate_request(parse_body(R"({"prompt": "p", "tempreature": 1})"));
        }).status == 400);
}

TEST_CASE("openai: max_tokens against max_model_len, as vLLM decides it", "[openai]") {
  CHECK(resolve_max_tokens(16, 10, 512, std::nullopt) == 16);
  CHECK(resolve_max_tokens(std::nullopt, 10, 512, std::nullopt) == 502);
  CHECK(resolve_max_tokens(std::nullopt, 10, 512, 64) == 64);  // generation_config's cap
  CHECK(resolve_max_tokens(100, 10, 512, 64) == 64);
  auto e = error_of([] { (void)resolve_max_tokens(16, 512, 512, std::nullopt); });
  CHECK(e.param == "prompt");
  CHECK(e.message ==
        "This model's maximum context length is 512 tokens. However, your request has 512 input "
        "tokens. Please reduce the length of the input messages.");
  e = error_of([] { (void)resolve_max_tokens(600, 2, 512, std::nullopt); });
  CHECK(e.param == "max_tokens");
  CHECK(contains(e.message, "600 > 512 - 2"));
}

TEST_CASE("openai: bodies that are not JSON objects", "[openai]") {
  for (const char* bad :
       {"", "{", "[1, 2]", "\"text\"", "null", "{\"prompt\": \"x\",}", "\xff\xfe",
        "{\"max_tokens\": 1e400}", "{\"temperature\": -1e999}"}) {
    INFO(bad);
    const auto e = error_of([&] { (void)parse_body(bad); });
    CHECK(e.status == 400);
    CHECK(e.type == "BadRequestError");
  }
}

TEST_CASE("openai: random and mutated bodies only ever give ApiErrors", "[openai]") {
  // A deterministic stand-in for a fuzz target on parse_request: truncations and byte flips of
  // real requests, and random bytes.
  const std::vector<std::string> seeds = {
      R"({"prompt": ["a", "b"], "n": 2, "stop": ["x"], "logprobs": 3, "stream": true,
          "stream_options": {"include_usage": true}, "logit_bias": {"5": 1}})",
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "t"}]}],
          "tools": [], "chat_template_kwargs": {"a": 1}, "max_completion_tokens": 3})",
      R"({"prompt": [[1, 2], [3]], "echo": true, "max_tokens": 0, "truncate_prompt_tokens": -1})",
      R"({"tokens": [1, 2, 3], "messages": [{"role": "system", "content": "s"}]})"};
  std::mt19937 rng(1234);
  int parsed = 0, refused = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string body = seeds[size_t(i) % seeds.size()];
    switch (i % 4) {
      case 0:
        body = body.substr(0, rng() % (body.size() + 1));
        break;
      case 1:
        for (int k = 0; k < 3; ++k) body[rng() % body.size()] = char(rng() % 256);
        break;
      case 2:
        body.insert(rng() % body.size(), std::string(1, "{}[]\",:0-e"[rng() % 10]));
        break;
      default:
        body.assign(rng() % 64, ' ');
        for (auto& c : body) c = char(rng() % 256);
    }
    for (auto ep : {Endpoint::completions, Endpoint::chat_completions, Endpoint::tokenize,
                    Endpoint::detokenize, Endpoint::generate}) {
      // Anything escaping parse_request fails the test case.
      const ParsedRequest r = parse_request(ep, body);
      if (const auto* e = std::get_if<ApiError>(&r)) {
        CHECK(e->status == 400);
        ++refused;
      } else {
        ++parsed;
      }
    }
  }
  CHECK(parsed > 0);
  CHECK(refused > 0);
}
