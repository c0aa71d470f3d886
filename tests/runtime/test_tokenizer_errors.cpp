// Every error path of Tokenizer / IncrementalDetokenizer: a troupe::Error with one line that
// names the file or the field, the value and what is allowed; never a crash.
#include "tests/runtime/test_error_of.hpp"
#include "tests/runtime/test_tokenizer_util.hpp"

#include "runtime/error.hpp"

#include <catch2/catch.hpp>

using troupe::IncrementalDetokenizer;
using troupe::Tokenizer;
using namespace troupe::tokenizer_test;
using nlohmann::json;
using troupe::test::error_of;

namespace {

// Loads the tiny tokenizer with an edited tokenizer.json; returns the error message.
template <class Edit>
std::string load_error(Edit edit) {
  json tok = tiny_json();
  edit(tok);
  TempDir dir;
  dir.write_json("tokenizer.json", tok);
  return error_of([&] { (void)Tokenizer::load(dir.path()); });
}

bool has(const std::string& message, std::initializer_list<std::string_view> parts) {
  for (std::string_view p : parts) {
    if (message.find(p) == std::string::npos) return false;
  }
  return message.find('\n') == std::string::npos;  // one line
}

}  // namespace

TEST_CASE("tokenizer errors: missing path, missing tokenizer.json, unreadable JSON",
          "[tokenizer]") {
  const std::string missing = "/nonexistent/troupe/tokenizer_dir";
  const auto m1 = error_of([&] { (void)Tokenizer::load(missing); });
  CHECK(has(m1, {missing, "does not exist"}));

  TempDir empty;
  CHECK(has(error_of([&] { (void)Tokenizer::load(empty.path()); }),
            {empty.path().string(), "no tokenizer.json"}));

  TempDir sp;
  sp.write("tokenizer.model", "not really");
  CHECK(has(error_of([&] { (void)Tokenizer::load(sp.path()); }),
            {"no tokenizer.json", "SentencePiece"}));

  TempDir bad;
  bad.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
  CHECK(has(error_of([&] { (void)Tokenizer::load(bad.path()); }),
            {(bad.path() / "tokenizer.json").string(), "not valid JSON"}));
  // A number beyond a double is nlohmann's out_of_range, not parse_error (found by fuzzing).
  bad.write("tokenizer.json", R"({"model": {"type": "BPE", "dropout": 1e999}})");
  CHECK(has(error_of([&] { (void)Tokenizer::load(bad.path()); }),
            {(bad.path() / "tokenizer.json").string(), "not valid JSON", "overflow"}));

  TempDir not_object;
  not_object.write("tokenizer.json", "[1, 2]");
  CHECK(has(error_of([&] { (void)Tokenizer::load(not_object.path()); }), {"JSON object"}));

  TempDir bad_config;
  bad_config.write_json("tokenizer.json", tiny_json());
  bad_config.write("tokenizer_config.json", "{oops");
  CHECK(has(error_of([&] { (void)Tokenizer::load(bad_config.path()); }),
            {"tokenizer_config.json", "not valid JSON"}));
}

TEST_CASE("tokenizer errors: unsupported component types name the path and the type",
          "[tokenizer]") {
  CHECK(has(load_error([](json& t) { t["model"]["type"] = "Unigram"; }),
            {"tokenizer.json", "model.type", "Unigram", "BPE"}));
  CHECK(has(load_error([](json& t) {
              t["model"] = {{"type", "WordPiece"}, {"vocab", json::object()}};
            }),
            {"model.type", "WordPiece"}));
  CHECK(has(load_error([](json& t) { t.erase("model"); }), {"model", "missing"}));
  CHECK(has(load_error([](json& t) {
              t["pre_tokenizer"] = {{"type", "Metaspace"}};
            }),
            {"pre_tokenizer.type", "Metaspace", "Split, ByteLevel, Sequence"}));
  CHECK(has(load_error([](json& t) {
              t["pre_tokenizer"] = {
                  {"type", "Sequence"},
                  {"pretokenizers", {{{"type", "ByteLevel"}}, {{"type", "Digits"}}}}};
            }),
            {"pre_tokenizer.pretokenizers[1].type", "Digits"}));
  CHECK(has(load_error([](json& t) {
              t["normalizer"] = {{"type", "Lowercase"}};
            }),
            {"normalizer.type", "Lowercase", "NFC"}));
  CHECK(has(load_error([](json& t) {
              t["post_processor"] = {{"type", "Frobnicate"}};
            }),
            {"post_processor.type", "Frobnicate", "TemplateProcessing"}));
  CHECK(has(load_error([](json& t) {
              t["decoder"] = {{"type", "Metaspace"}};
            }),
            {"decoder.type", "Metaspace", "ByteLevel"}));
  CHECK(has(load_error([](json& t) { t["decoder"] = nullptr; }), {"decoder", "missing"}));
  CHECK(has(load_error([](json& t) {
              t["normalizer"] = {{"kind", "NFC"}};
            }),
            {"normalizer.type", "missing"}));
}

TEST_CASE("tokenizer errors: bad model, regex, added token and template content", "[tokenizer]") {
  CHECK(has(load_error([](json& t) { t["model"]["merges"].push_back("q zz"); }),
            {"model.merges[15]", "\"zz\"", "not in the vocab"}));
  CHECK(has(load_error([](json& t) { t["model"]["merges"].push_back("a b c"); }),
            {"model.merges[15]", "one space"}));
  CHECK(has(load_error([](json& t) { t["model"]["merges"].push_back(42); }),
            {"model.merges[15]", "42"}));
  CHECK(has(load_error([](json& t) { t["model"]["merges"].push_back("x y"); }),
            {"model.merges[15]", "merged token \"xy\""}));
  CHECK(has(load_error([](json& t) { t["model"]["vocab"]["neg"] = -3; }),
            {"model.vocab.neg", "-3", "0.."}));
  CHECK(has(load_error([](json& t) { t["model"]["vocab"]["big"] = 1 << 30; }),
            {"model.vocab.big", "1073741824"}));
  CHECK(has(load_error([](json& t) { t["model"]["vocab"]["str"] = "7"; }), {"model.vocab.str"}));
  CHECK(has(load_error([](json& t) { t["model"]["dropout"] = 0.1; }),
            {"model.dropout", "0.1", "not supported"}));
  CHECK(has(load_error([](json& t) { t["model"]["unk_token"] = "<unk>"; }),
            {"model.unk_token", "<unk>", "not in the vocab"}));
  CHECK(has(load_error([](json& t) {
              t["pre_tokenizer"] = {{"type", "Split"},
                                    {"pattern", {{"Regex", "(unclosed"}}},
                                    {"behavior", "Isolated"},
                                    {"invert", false}};
            }),
            {"pre_tokenizer.pattern", "cannot compile regex", "(unclosed"}));
  CHECK(has(load_error([](json& t) {
              t["pre_tokenizer"] = {{"type", "Split"},
                                    {"pattern", {{"Regex", "a"}}},
                                    {"behavior", "Sideways"},
                                    {"invert", false}};
            }),
            {"pre_tokenizer.behavior", "Sideways", "Isolated"}));
  CHECK(has(load_error([](json& t) { t["added_tokens"][0]["id"] = -1; }),
            {"added_tokens[0].id", "-1"}));
  CHECK(has(load_error([](json& t) { t["added_tokens"][1]["special"] = "yes"; }),
            {"added_tokens[1].special", "true or false"}));
  CHECK(has(load_error([](json& t) {
              t["post_processor"] = {
                  {"type", "TemplateProcessing"},
                  {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}},
                  {"special_tokens", json::object()}};
            }),
            {"post_processor.special_tokens", "<s>"}));
  // Ids the post_processor adds must be tokens' ids, or encode would give ids decode refuses
  // (found by the tokenizer_json fuzz target: a template id past the vocabulary).
  const auto template_with = [](int64_t id) {
    return [id](json& t) {
      t["post_processor"] = {
          {"type", "TemplateProcessing"},
          {"single",
           {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {id}}, {"tokens", {"<s>"}}}}}}};
    };
  };
  CHECK(has(load_error(template_with(100000)),
            {"post_processor", "adds token id 100000", "no token"}));
  CHECK(has(load_error([](json& t) {
              t["post_processor"] = {
                  {"type", "RobertaProcessing"}, {"cls", {"<s>", 0}}, {"sep", {"</s>", 5000}}};
            }),
            {"post_processor", "adds token id 5000"}));
  CHECK(load_error(template_with(0)).empty());  // a real token is fine
}

TEST_CASE("tokenizer errors: bad tokenizer_config.json fields", "[tokenizer]") {
  auto config_error = [](auto edit) {
    json config = tiny_config();
    edit(config);
    TempDir dir;
    dir.write_json("tokenizer.json", tiny_json());
    dir.write_json("tokenizer_config.json", config);
    return error_of([&] { (void)Tokenizer::load(dir.path()); });
  };
  CHECK(has(config_error([](json& c) { c["model_max_length"] = "long"; }),
            {"tokenizer_config.json", "model_max_length", "\"long\""}));
  CHECK(has(config_error([](json& c) { c["model_max_length"] = -5; }), {"model_max_length", "-5"}));
  CHECK(has(config_error([](json& c) { c["chat_template"] = 7; }), {"chat_template", "7"}));
  CHECK(has(config_error([](json& c) { c["bos_token"] = 3; }), {"bos_token", "3"}));
  CHECK(has(config_error([](json& c) { c["add_bos_token"] = "true"; }), {"add_bos_token"}));
}

TEST_CASE("tokenizer errors: bad ids and bad text", "[tokenizer]") {
  const auto tok = tiny();
  const std::vector<int32_t> negative{1, -1};
  CHECK(has(error_of([&] { (void)tok->decode(negative); }),
            {"Tokenizer::decode", "token id -1", "vocab size 276"}));
  const std::vector<int32_t> too_big{276};
  CHECK(has(error_of([&] { (void)tok->decode(too_big); }), {"token id 276", "vocab size 276"}));
  CHECK(has(error_of([&] { (void)tok->id_to_token(276); }), {"id_to_token", "276"}));
  CHECK(has(error_of([&] { (void)tok->id_to_token(-7); }), {"-7"}));
  CHECK(has(error_of([&] { (void)tok->encode("ok \xFF bad"); }),
            {"not valid UTF-8", "0xFF", "offset 3"}));
  CHECK(
      has(error_of([&] { (void)tok->encode("\xED\xA0\x80"); }), {"not valid UTF-8"}));  // surrogate
  CHECK(has(error_of([&] { (void)tok->encode("\xE2\x82"); }), {"offset 0"}));           // truncated

  // The detokenizer rejects a bad id without changing its state.
  IncrementalDetokenizer detok(tok, std::vector<int32_t>{});
  const std::vector<int32_t> first{0xE2, 0x82};
  CHECK(detok.push(first).empty());
  const std::vector<int32_t> bad{0xAC, 999};
  CHECK(has(error_of([&] { (void)detok.push(bad); }),
            {"IncrementalDetokenizer::push", "token id 999"}));
  const std::vector<int32_t> rest{0xAC};
  CHECK(detok.push(rest) == "\xE2\x82\xAC");
  CHECK(has(error_of([&] {
              IncrementalDetokenizer d(tok, std::vector<int32_t>{5, -2});
            }),
            {"prompt", "token id -2"}));
  CHECK(
      has(error_of([&] { IncrementalDetokenizer d(nullptr, std::vector<int32_t>{}); }), {"null"}));
}
