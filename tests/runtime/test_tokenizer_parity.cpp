// Exact parity with Hugging Face tokenizers on real tokenizer files (Qwen3, Llama 3) and on the
// hand-written tiny BPE: ids with and without special tokens, decoded text with and without
// special tokens, and decodes of random id sequences that cut characters apart. The reference
// values come from tools/tokenizer_reference/make_fixtures.mjs (@lenml/tokenizers, whose ids
// match HF tokenizers).
#include "tests/runtime/test_tokenizer_util.hpp"

#include <fmt/format.h>
#include <catch2/catch.hpp>

using troupe::Tokenizer;
using namespace troupe::tokenizer_test;

namespace {

std::string show(const std::string& s) {
  // Printable form for INFO: escapes control bytes.
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

void check_reference(const Tokenizer& tok, const std::string& name) {
  const auto ref = read_json(fixtures() / (name + "_reference.json"));
  REQUIRE(ref.at("cases").size() > 50);
  std::size_t checked = 0;
  for (const auto& c : ref.at("cases")) {
    const auto text = c.at("text").get<std::string>();
    INFO(name << " text: \"" << show(text) << "\"");
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    const auto ids_no_special = c.at("ids_no_special").get<std::vector<int32_t>>();
    CHECK(tok.encode(text, true) == ids);
    CHECK(tok.encode(text, false) == ids_no_special);
    CHECK(tok.decode(ids, true) == c.at("decoded_skip_special").get<std::string>());
    CHECK(tok.decode(ids, false) == c.at("decoded_keep_special").get<std::string>());
    ++checked;
  }
  for (const auto& c : ref.at("random_decode")) {
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    INFO(name << " random ids: " << c.at("ids").dump());
    CHECK(tok.decode(ids, true) == c.at("decoded_skip_special").get<std::string>());
    CHECK(tok.decode(ids, false) == c.at("decoded_keep_special").get<std::string>());
  }
  CHECK(checked == ref.at("cases").size());
}

}  // namespace

TEST_CASE("tokenizer parity: qwen3 matches HF ids and text on the corpus", "[tokenizer]") {
  TROUPE_NEED_REAL_TOKENIZERS();
  check_reference(*qwen3(), "qwen3");
}

TEST_CASE("tokenizer parity: llama3 matches HF ids and text on the corpus", "[tokenizer]") {
  TROUPE_NEED_REAL_TOKENIZERS();
  check_reference(*llama3(), "llama3");
}

TEST_CASE("tokenizer parity: tiny_bpe matches HF ids and text on the corpus", "[tokenizer]") {
  check_reference(*tiny(), "tiny_bpe");
}

TEST_CASE("tokenizer parity: decode(encode(x)) == x", "[tokenizer]") {
  // Llama 3 and the tiny tokenizer have no normalizer: every text comes back exactly. Qwen3
  // normalizes to NFC, so its texts come back in NFC (the reference decode, checked above);
  // here only texts that NFC leaves alone are used for it.
  TROUPE_NEED_REAL_TOKENIZERS();
  const auto ref = read_json(fixtures() / "llama3_reference.json");
  for (const auto& c : ref.at("cases")) {
    const auto text = c.at("text").get<std::string>();
    INFO("text: \"" << show(text) << "\"");
    CHECK(llama3()->decode(llama3()->encode(text, true), false) ==
          (text.empty() ? "<|begin_of_text|>" : "<|begin_of_text|>" + text));
    CHECK(llama3()->decode(llama3()->encode(text, false), false) == text);
    CHECK(tiny()->decode(tiny()->encode(text, false), false) == text);
  }
  const auto qref = read_json(fixtures() / "qwen3_reference.json");
  int unchanged_by_nfc = 0;
  for (const auto& c : qref.at("cases")) {
    const auto text = c.at("text").get<std::string>();
    if (c.at("decoded_keep_special").get<std::string>() != text) continue;  // NFC changed it
    ++unchanged_by_nfc;
    INFO("text: \"" << show(text) << "\"");
    CHECK(qwen3()->decode(qwen3()->encode(text), false) == text);
  }
  CHECK(unchanged_by_nfc > 70);
}

TEST_CASE("tokenizer parity: known ids of the real tokenizers", "[tokenizer]") {
  // Spot values that any Qwen2/Qwen3 or Llama 3 user recognises.
  TROUPE_NEED_REAL_TOKENIZERS();
  CHECK(qwen3()->encode("Hello world") == std::vector<int32_t>{9707, 1879});
  CHECK(llama3()->encode("Hello world") == std::vector<int32_t>{128000, 9906, 1917});
  CHECK(llama3()->encode("Hello world", false) == std::vector<int32_t>{9906, 1917});
  CHECK(qwen3()->vocab_size() == 151669);
  CHECK(llama3()->vocab_size() == 128256);
  CHECK(qwen3()->token_to_id("<|im_end|>") == 151645);
  CHECK(qwen3()->id_to_token(9707) == "Hello");
  CHECK(qwen3()->id_to_token(1879) == "Ġworld");
  CHECK(llama3()->bos_token_id() == 128000);
  CHECK(llama3()->eos_token_id() == 128001);
  CHECK_FALSE(qwen3()->bos_token_id().has_value());
  CHECK(qwen3()->eos_token_id() == 151645);
  CHECK(qwen3()->model_max_length() == 131072);
  CHECK(llama3()->model_max_length() == 0);  // int(1e30): no limit
  CHECK(qwen3()->chat_template().find("<|im_start|>") != std::string::npos);
  CHECK(llama3()->chat_template().find("<|start_header_id|>") != std::string::npos);
  CHECK(qwen3()->is_special(151643));
  CHECK_FALSE(qwen3()->is_special(151667));  // <think> is added but not special
  CHECK_FALSE(qwen3()->is_special(9707));
}
