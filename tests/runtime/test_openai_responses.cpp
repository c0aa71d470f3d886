// RequestOutputs -> OpenAI responses (runtime/openai/responses): the shapes vLLM's
// serving_completion.py / serving_chat.py build, worked out by hand from their code for
// hand-made outputs: field order and nulls, usage, logprob layouts (the chosen token first,
// then by rank; completions show logprobs + 1 entries, chat top_logprobs), text offsets in
// code points, -inf clamped, streams sending what is new.
#include <catch2/catch.hpp>

// GCC 12 at -O3 warns about std::string assignments of literals here (a false positive,
// GCC bug 105329); the warning is an error in this build.
#pragma GCC diagnostic ignored "-Wrestrict"

#include <cmath>

#include "runtime/openai/responses.hpp"

using namespace troupe;
using namespace troupe::openai;
using json = nlohmann::json;

namespace {

PositionLogprobMap position(std::vector<std::tuple<int32_t, float, int32_t, std::string>> e) {
  PositionLogprobMap m;
  for (auto& [id, lp, rank, text] : e) m[id] = Logprob{lp, rank, text};
  return m;
}

/// One choice that generated " a b" as tokens 7, 9 with logprobs, finished by length.
RequestOutput sample_output() {
  RequestOutput o;
  o.request_id = "cmpl-x-0";
  o.prompt = "P";
  o.prompt_token_ids = {0, 5};
  CompletionOutput c;
  c.index = 0;
  c.text = " a b";
  c.token_ids = {7, 9};
  c.logprobs.emplace();
  // Position 0: the chosen token 7 is rank 2; rank 1 is token 3.
  c.logprobs->push_back(position({{7, -1.5f, 2, " a"}, {3, -0.5f, 1, " c"}, {4, -2.0f, 3, " d"}}));
  // Position 1: chosen 9 has rank 1; -inf for another.
  c.logprobs->push_back(position({{9, -0.25f, 1, " b"}, {2, -INFINITY, 2, "!"}}));
  c.finish_reason = "length";
  o.outputs.push_back(c);
  o.finished = true;
  return o;
}

ResponseContext ctx() {
  ResponseContext c;
  c.id = "cmpl-x";
  c.created = 1700000000;
  c.model = "m";
  return c;
}

std::vector<json> events_of(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    const std::string e = sse.substr(pos, end - pos);
    REQUIRE(e.rfind("data: ", 0) == 0);
    const std::string payload = e.substr(6);
    out.push_back(payload == "[DONE]" ? json("[DONE]") : json::parse(payload));
    pos = end + 2;
  }
  return out;
}

std::vector<std::string> keys(const json& j) {
  std::vector<std::string> k;
  for (const auto& [key, v] : j.items()) {
    (void)v;
    k.push_back(key);
  }
  return k;
}

}  // namespace

TEST_CASE("openai responses: a completion with logprobs", "[openai]") {
  CompletionRequest req = parse_completion_request(parse_body(R"({"prompt": "P", "logprobs": 1})"));
  const auto j = json::parse(completion_response(req, ctx(), {sample_output()}, {"P"}).dump());
  // vLLM's CompletionResponse, every field present.
  CHECK(j["id"] == "cmpl-x");
  CHECK(j["object"] == "text_completion");
  CHECK(j["created"] == 1700000000);
  CHECK(j["model"] == "m");
  CHECK(j["system_fingerprint"].is_null());
  CHECK(j["service_tier"].is_null());
  CHECK(j["kv_transfer_params"].is_null());
  CHECK(j["usage"] == json{{"prompt_tokens", 2},
                           {"total_tokens", 4},
                           {"completion_tokens", 2},
                           {"prompt_tokens_details", nullptr}});
  const auto& c = j["choices"][0];
  CHECK(c["index"] == 0);
  CHECK(c["text"] == " a b");
  CHECK(c["finish_reason"] == "length");
  CHECK(c["stop_reason"].is_null());
  CHECK(c["prompt_logprobs"].is_null());
  const auto& lp = c["logprobs"];
  CHECK(lp["tokens"] == json{" a", " b"});
  CHECK(lp["token_logprobs"] == json{-1.5, -0.25});
  CHECK(lp["text_offset"] == json{0, 2});
  // logprobs = 1: the chosen token and one more (the first two in vLLM's dict order).
  CHECK(lp["top_logprobs"][0] == json{{" a", -1.5}, {" c", -0.5}});
  CHECK(lp["top_logprobs"][1] == json{{" b", -0.25}, {"!", -9999.0}});
}

TEST_CASE("openai responses: echo puts the prompt and its logprobs first", "[openai]") {
  CompletionRequest req =
      parse_completion_request(parse_body(R"({"prompt": "P", "echo": true, "logprobs": 0})"));
  RequestOutput o = sample_output();
  o.prompt_logprobs.emplace();
  o.prompt_logprobs->push_back({});  // the first prompt token has none
  o.prompt_logprobs->push_back(position({{5, -3.0f, 4, "Q"}}));
  const auto j = json::parse(completion_response(req, ctx(), {o}, {"<s>Q"}).dump());
  const auto& c = j["choices"][0];
  CHECK(c["text"] == "<s>Q a b");
  const auto& lp = c["logprobs"];
  REQUIRE(lp["tokens"].size() == 4);
  CHECK(lp["token_logprobs"][0].is_null());
  CHECK(lp["top_logprobs"][0].is_null());
  CHECK(lp["token_logprobs"][1] == -3.0);
  CHECK(lp["top_logprobs"][1] == json{{"Q", -3.0}});
  CHECK(lp["top_logprobs"][2] == json{{" a", -1.5}});  // logprobs = 0: the chosen token only
  // vLLM's prompt_logprobs: null first, then {id: {logprob, rank, decoded_token}}.
  CHECK(c["prompt_logprobs"][0].is_null());
  CHECK(c["prompt_logprobs"][1]["5"] ==
        json{{"logprob", -3.0}, {"rank", 4}, {"decoded_token", "Q"}});
}

TEST_CASE("openai responses: tokens as token ids", "[openai]") {
  CompletionRequest req = parse_completion_request(parse_body(R"({"prompt": "P", "logprobs": 1})"));
  ResponseContext c = ctx();
  c.tokens_as_ids = true;
  const auto j = json::parse(completion_response(req, c, {sample_output()}, {"P"}).dump());
  CHECK(j["choices"][0]["logprobs"]["tokens"] == json{"token_id:7", "token_id:9"});
  CHECK(j["choices"][0]["logprobs"]["top_logprobs"][0] ==
        json{{"token_id:7", -1.5}, {"token_id:3", -0.5}});
}

TEST_CASE("openai responses: a completion stream sends deltas, usage and [DONE]", "[openai]") {
  CompletionRequest req = parse_completion_request(
      parse_body(R"({"prompt": "P", "stream": true, "stream_options": {"include_usage": true}})"));
  ResponseContext c = ctx();
  c.include_usage = true;
  CompletionStream s(req, c, {"P"});
  RequestOutput o = sample_output();
  o.outputs[0].logprobs.reset();
  RequestOutput first = o;
  first.outputs[0].text = " a";
  first.outputs[0].token_ids = {7};
  first.outputs[0].finish_reason.clear();
  first.finished = false;
  auto ev = events_of(s.on_output(0, first));
  REQUIRE(ev.size() == 1);
  CHECK(keys(ev[0]) ==
        std::vector<std::string>{"choices", "created", "id", "model", "object", "usage"});
  CHECK(ev[0]["usage"].is_null());
  CHECK(ev[0]["choices"][0]["text"] == " a");
  CHECK(ev[0]["choices"][0]["finish_reason"].is_null());
  CHECK(s.on_output(0, first).empty());  // nothing new
  ev = events_of(s.on_output(0, o));
  REQUIRE(ev.size() == 1);
  CHECK(ev[0]["choices"][0]["text"] == " b");
  CHECK(ev[0]["choices"][0]["finish_reason"] == "length");
  ev = events_of(s.finish());
  REQUIRE(ev.size() == 2);
  CHECK(ev[0]["choices"] == json::array());
  // The usage event leaves out what is null (exclude_none).
  CHECK(ev[0]["usage"] ==
        json{{"prompt_tokens", 2}, {"total_tokens", 4}, {"completion_tokens", 2}});
  CHECK(ev[1] == "[DONE]");
}

TEST_CASE("openai responses: a stream sends the text it is given, the stop at the end",
          "[openai]") {
  // What a stop string may still cut is held back before the stream sees it (the engine's delta
  // outputs, tests/runtime/test_output_processor.cpp); the stream sends all it is given.
  CompletionRequest req =
      parse_completion_request(parse_body(R"({"prompt": "P", "stream": true, "stop": ["world"]})"));
  CompletionStream s(req, ctx(), {"P"});
  RequestOutput o = sample_output();
  o.outputs[0].logprobs.reset();
  o.outputs[0].finish_reason.clear();
  o.finished = false;
  o.outputs[0].text = "Hello";
  o.outputs[0].token_ids = {1, 2};
  auto ev = events_of(s.on_output(0, o));
  REQUIRE(ev.size() == 1);
  CHECK(ev[0]["choices"][0]["text"] == "Hello");
  CHECK(ev[0]["choices"][0]["finish_reason"] == nullptr);
  o.outputs[0].text = "Hello ";
  o.outputs[0].token_ids = {1, 2, 3};
  o.outputs[0].finish_reason = "stop";
  o.outputs[0].stop_reason_text = "world";
  o.finished = true;
  ev = events_of(s.on_output(0, o));
  REQUIRE(ev.size() == 1);
  CHECK(ev[0]["choices"][0]["text"] == " ");
  CHECK(ev[0]["choices"][0]["finish_reason"] == "stop");
  CHECK(ev[0]["choices"][0]["stop_reason"] == "world");
}

TEST_CASE("openai responses: a chat completion", "[openai]") {
  ChatRequest req = parse_chat_request(parse_body(
      R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 1})"));
  RequestOutput o = sample_output();
  o.outputs[0].finish_reason = "stop";
  o.outputs[0].stop_reason_token = 9;
  const auto j = json::parse(chat_response(req, ctx(), o, "").dump());
  CHECK(j["object"] == "chat.completion");
  CHECK(j["system_fingerprint"].is_null());
  CHECK(j["prompt_logprobs"].is_null());
  const auto& c = j["choices"][0];
  CHECK(c["message"]["role"] == "assistant");
  CHECK(c["message"]["content"] == " a b");
  CHECK(c["message"]["tool_calls"] == json::array());
  CHECK(c["message"]["reasoning_content"].is_null());
  CHECK(c["finish_reason"] == "stop");
  CHECK(c["stop_reason"] == 9);
  const auto& first = c["logprobs"]["content"][0];
  CHECK(first["token"] == " a");
  CHECK(first["logprob"] == -1.5);
  CHECK(first["bytes"] == json{32, 97});
  // top_logprobs = 1: vLLM's first entry, which is the chosen token even when it is not rank 1.
  CHECK(first["top_logprobs"] ==
        json::array({json{{"token", " a"}, {"logprob", -1.5}, {"bytes", {32, 97}}}}));
  CHECK(c["logprobs"]["content"][1]["top_logprobs"][0]["token"] == " b");
  CHECK(j["usage"]["completion_tokens"] == 2);
}

TEST_CASE("openai responses: a chat stream", "[openai]") {
  ChatRequest req = parse_chat_request(parse_body(
      R"({"messages": [{"role": "user", "content": "hi"}], "n": 2, "stream": true,
          "stream_options": {"include_usage": true}})"));
  ResponseContext c = ctx();
  c.id = "chatcmpl-x";
  c.include_usage = true;
  ChatStream s(req, c, "");
  RequestOutput o = sample_output();
  o.outputs[0].logprobs.reset();
  o.outputs.push_back(o.outputs[0]);
  o.outputs[1].index = 1;
  o.outputs[1].text = "!";
  o.outputs[1].token_ids = {4};
  o.outputs[1].finish_reason.clear();
  o.finished = false;
  auto ev = events_of(s.on_output(o));
  // A role chunk per choice first (only the fields vLLM sets), then each choice's delta.
  REQUIRE(ev.size() == 4);
  CHECK(keys(ev[0]) == std::vector<std::string>{"choices", "created", "id", "model", "object"});
  CHECK(ev[0]["object"] == "chat.completion.chunk");
  CHECK(ev[0]["choices"][0] == json{{"index", 0},
                                    {"delta", {{"role", "assistant"}, {"content", ""}}},
                                    {"logprobs", nullptr},
                                    {"finish_reason", nullptr}});
  CHECK(ev[1]["choices"][0]["index"] == 1);
  CHECK(ev[2]["choices"][0]["delta"] == json{{"content", " a b"}});
  CHECK(ev[2]["choices"][0]["finish_reason"] == "length");
  CHECK(ev[2]["choices"][0]["stop_reason"].is_null());
  CHECK(ev[3]["choices"][0]["delta"] == json{{"content", "!"}});
  CHECK_FALSE(ev[3]["choices"][0].contains("stop_reason"));  // set only on the last chunk
  o.outputs[1].text = "!?";
  o.outputs[1].token_ids = {4, 6};
  o.outputs[1].finish_reason = "stop";
  o.finished = true;
  ev = events_of(s.on_output(o));
  REQUIRE(ev.size() == 1);  // choice 0 already finished
  CHECK(ev[0]["choices"][0]["delta"] == json{{"content", "?"}});
  ev = events_of(s.finish());
  REQUIRE(ev.size() == 2);
  CHECK(ev[0]["usage"] ==
        json{{"prompt_tokens", 2}, {"total_tokens", 6}, {"completion_tokens", 4}});
  CHECK(ev[1] == "[DONE]");
}

TEST_CASE("openai responses: /generate's answer", "[openai]") {
  const auto j = plain_generate_response(sample_output());
  CHECK(json::parse(j.dump()) == json{{"text", {"P a b"}}});
}

TEST_CASE("openai errors: vLLM's error object", "[openai]") {
  const auto j = json::parse(error_body(make_error(400, "bad", "temperature")));
  CHECK(j == json{{"error",
                   {{"message", "bad"},
                    {"type", "BadRequestError"},
                    {"param", "temperature"},
                    {"code", 400}}}});
  CHECK(json::parse(error_body(make_error(404, "no")))["error"]["type"] == "NotFoundError");
  CHECK(json::parse(error_body(make_error(401, "no")))["error"]["param"].is_null());
}

TEST_CASE("openai responses: a running chunk's bytes are nlohmann's dump of vLLM's fields",
          "[openai]") {
  // The server writes running chunks directly; the reference is the ordered_json the chunk
  // stands for, dumped as everywhere else (invalid UTF-8 replaced).
  using ojson = nlohmann::ordered_json;
  const auto dumped = [](const ojson& j) {
    return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  };
  // A chunk's fields in vLLM's order, up to its one choice.
  const auto envelope = [](const ResponseContext& c, const char* object, const ojson& choice) {
    ojson chunk;
    chunk["id"] = c.id;
    chunk["object"] = object;
    chunk["created"] = c.created;
    chunk["model"] = c.model;
    chunk["choices"] = ojson::array({choice});
    return chunk;
  };
  const std::vector<std::string> texts = {"plain",
                                          "say \"hi\" \\ back /",
                                          "x\x7fy",
                                          "tab\there\nnew\r",
                                          std::string("\x01\x1f\x7f", 3),
                                          "h\xc3\xa9llo \xe4\xb8\x96",
                                          "bad \xff\xfe utf8",
                                          ""};
  for (const bool ids : {false, true}) {
    for (const auto& text : texts) {
      CAPTURE(ids, text);
      ResponseContext c = ctx();
      c.model = "my \"model\" \xc3\xa9";
      const std::string body = std::string(R"({"prompt": "P", "n": 2, "stream": true)") +
                               (ids ? R"(, "return_token_ids": true})" : "}");
      CompletionRequest req = parse_completion_request(parse_body(body));
      CompletionStream s(req, c, {"P"});
      RequestOutput o;
      o.request_id = "cmpl-x-0";
      o.prompt_token_ids = {0, 5};
      CompletionOutput co;
      co.index = 1;
      co.text = text;
      co.token_ids = {7, 8};
      o.outputs.push_back(co);
      ojson choice;
      choice["index"] = 1;
      choice["text"] = text;
      choice["logprobs"] = nullptr;
      choice["finish_reason"] = nullptr;
      choice["stop_reason"] = nullptr;
      choice["prompt_token_ids"] = nullptr;
      choice["token_ids"] = ids ? ojson(std::vector<int32_t>{7, 8}) : ojson(nullptr);
      ojson chunk = envelope(c, "text_completion", choice);
      chunk["usage"] = nullptr;
      CHECK(s.on_output(0, o) == dumped(chunk));

      ChatRequest creq = parse_chat_request(parse_body(
          std::string(R"({"messages": [{"role": "user", "content": "hi"}], "stream": true)") +
          (ids ? R"(, "return_token_ids": true})" : "}")));
      ResponseContext cc = c;
      cc.id = "chatcmpl-\"x\"";
      ChatStream cs(creq, cc, "");
      o.outputs[0].index = 0;
      const std::string role_chunk = cs.on_output(RequestOutput{});  // the role chunk
      REQUIRE_FALSE(role_chunk.empty());
      ojson cchoice;
      cchoice["index"] = 0;
      cchoice["delta"] = ojson{{"content", text}};
      cchoice["logprobs"] = nullptr;
      cchoice["finish_reason"] = nullptr;
      if (ids) cchoice["token_ids"] = std::vector<int32_t>{7, 8};
      CHECK(cs.on_output(o) == dumped(envelope(cc, "chat.completion.chunk", cchoice)));
    }
  }
}
