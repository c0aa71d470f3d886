// Incremental detokenization, the lossy UTF-8 decoder under it, and concurrent use of one
// tokenizer.
#include "tests/runtime/test_tokenizer_util.hpp"

#include "runtime/tokenizer/utf8.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <thread>

using troupe::IncrementalDetokenizer;
using troupe::Tokenizer;
using namespace troupe::tokenizer_test;
using Ids = std::vector<int32_t>;

namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// Streams `ids` in chunks of 1..max_chunk ids; returns the concatenated pieces and checks that
// every piece is valid UTF-8 and that text() is their concatenation.
std::string stream(const std::shared_ptr<const Tokenizer>& tok, const Ids& ids, bool skip,
                   std::mt19937& rng, std::size_t max_chunk) {
  IncrementalDetokenizer detok(tok, Ids{1, 2, 3}, skip);
  std::string all;
  std::size_t i = 0;
  while (i < ids.size()) {
    const std::size_t n =
        std::min(ids.size() - i, std::uniform_int_distribution<std::size_t>(1, max_chunk)(rng));
    const std::string piece = detok.push(std::span<const int32_t>(ids).subspan(i, n));
    CHECK(troupe::tokenizer_detail::utf8::find_invalid(piece) == std::string_view::npos);
    all += piece;
    i += n;
  }
  all += detok.flush();
  CHECK(detok.text() == all);
  return all;
}

}  // namespace

TEST_CASE("tokenizer stream: lossy UTF-8 follows Unicode's maximal-subpart rule", "[tokenizer]") {
  using troupe::tokenizer_detail::utf8::decode_lossy;
  // The example of the Unicode Standard (ch. 3, "U+FFFD Substitution of Maximal Subparts").
  const std::string bytes = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const std::string expected =
      "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d";
  CHECK(decode_lossy(bytes) == expected);
  CHECK(decode_lossy("\xED\xA0\x80") == kFffd + kFffd + kFffd);              // surrogate
  CHECK(decode_lossy("\xC0\xAF") == kFffd + kFffd);                          // overlong
  CHECK(decode_lossy("\xF4\x90\x80\x80") == kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  CHECK(decode_lossy("\xF0\x9F\x98") == kFffd);                              // truncated at the end
  CHECK(decode_lossy("\xF0\x9F\x98\x80") == "\xF0\x9F\x98\x80");             // 😀
  CHECK(decode_lossy(std::string("a\0b", 3)) == std::string("a\0b", 3));
  // Fed byte by byte, the result is the same.
  troupe::tokenizer_detail::utf8::LossyDecoder d;
  std::string out;
  for (char c : bytes) d.feed(std::string_view(&c, 1), out);
  d.finish(out);
  CHECK(out == expected);
}

TEST_CASE("tokenizer stream: characters split across tokens are held back", "[tokenizer]") {
  const auto tok = tiny();  // byte b has id b
  IncrementalDetokenizer d(tok, Ids{});
  CHECK(d.push(Ids{'h', 'i', ' ', 0xF0}) == "hi ");
  CHECK(d.push(Ids{0x9F}).empty());
  CHECK(d.push(Ids{0x98}).empty());
  CHECK(d.push(Ids{0x80, 0xE2}) == "\xF0\x9F\x98\x80");
  CHECK(d.push(Ids{0x82, 0xAC}) == "\xE2\x82\xAC");
  CHECK(d.flush().empty());
  CHECK(d.text() == "hi \xF0\x9F\x98\x80\xE2\x82\xAC");

  // A sequence broken by the next byte: U+FFFD as soon as it is known to be broken.
  IncrementalDetokenizer broken(tok, Ids{});
  CHECK(broken.push(Ids{0xF0, 0x9F}).empty());
  CHECK(broken.push(Ids{'A'}) == kFffd + "A");
  // Unfinished at the end: flush gives U+FFFD, like decode.
  IncrementalDetokenizer unfinished(tok, Ids{});
  CHECK(unfinished.push(Ids{'x', 0xE2, 0x82}) == "x");
  CHECK(unfinished.flush() == kFffd);
  CHECK(unfinished.text() == tok->decode(Ids{'x', 0xE2, 0x82}));
}

TEST_CASE("tokenizer stream: special tokens follow skip_special_tokens", "[tokenizer]") {
  TROUPE_NEED_REAL_TOKENIZERS();
  const auto tok = qwen3();
  const Ids ids = tok->encode("<|im_start|>assistant\nHi<|im_end|>");
  IncrementalDetokenizer skip(tok, Ids{}, true);
  IncrementalDetokenizer keep(tok, Ids{}, false, false);
  std::string a, b;
  for (int32_t id : ids) {
    a += skip.push(Ids{id});
    b += keep.push(Ids{id});
  }
  CHECK(a == "assistant\nHi");
  CHECK(b == "<|im_start|>assistant\nHi<|im_end|>");
  CHECK(skip.flush().empty());
}

TEST_CASE("tokenizer stream: push/flush concatenation equals decode on random ids", "[tokenizer]") {
  TROUPE_NEED_REAL_TOKENIZERS();
  std::mt19937 rng(1234);
  for (const auto& tok : {qwen3(), llama3(), tiny()}) {
    const int32_t vocab = tok->vocab_size();
    for (int round = 0; round < 150; ++round) {
      Ids ids(std::uniform_int_distribution<int>(0, 40)(rng));
      for (int32_t& id : ids) {
        // Mostly single-byte tokens (ids 0..255 in all three vocabs are the byte alphabet), so
        // that multi-byte characters are cut apart and reassembled across pushes.
        id = std::uniform_int_distribution<int>(0, 9)(rng) < 6
                 ? std::uniform_int_distribution<int32_t>(0, 255)(rng)
                 : std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
      }
      for (bool skip : {true, false}) {
        INFO("round " << round << " skip " << skip);
        CHECK(stream(tok, ids, skip, rng, 5) == tok->decode(ids, skip));
      }
    }
  }
}

TEST_CASE("tokenizer stream: streaming the HF reference id sequences gives HF's text",
          "[tokenizer]") {
  TROUPE_NEED_REAL_TOKENIZERS();
  std::mt19937 rng(99);
  const std::pair<std::string, std::shared_ptr<const Tokenizer>> cases[] = {
      {"qwen3", qwen3()}, {"llama3", llama3()}, {"tiny_bpe", tiny()}};
  for (const auto& [name, tok] : cases) {
    const auto ref = read_json(fixtures() / (name + "_reference.json"));
    for (const auto& c : ref.at("random_decode")) {
      const auto ids = c.at("ids").get<Ids>();
      INFO(name << " ids " << c.at("ids").dump());
      CHECK(stream(tok, ids, true, rng, 1) == c.at("decoded_skip_special").get<std::string>());
      CHECK(stream(tok, ids, false, rng, 3) == c.at("decoded_keep_special").get<std::string>());
    }
    // Encoded corpus texts stream back to the reference decode, one id at a time.
    for (const auto& c : ref.at("cases")) {
      const auto ids = c.at("ids").get<Ids>();
      CHECK(stream(tok, ids, true, rng, 1) == c.at("decoded_skip_special").get<std::string>());
    }
  }
}

TEST_CASE("tokenizer stream: one tokenizer used from two threads gives the same ids",
          "[tokenizer]") {
  TROUPE_NEED_REAL_TOKENIZERS();
  const auto ref = read_json(fixtures() / "qwen3_reference.json");
  std::vector<std::string> texts;
  std::vector<Ids> expected;
  std::vector<std::string> decoded;
  for (const auto& c : ref.at("cases")) {
    texts.push_back(c.at("text").get<std::string>());
    expected.push_back(c.at("ids").get<Ids>());
    decoded.push_back(c.at("decoded_keep_special").get<std::string>());
  }
  const auto tok = qwen3();
  std::atomic<int> mismatches{0};
  auto work = [&](int offset) {
    for (int round = 0; round < 20; ++round) {
      for (std::size_t k = 0; k < texts.size(); ++k) {
        const std::size_t i = (k + static_cast<std::size_t>(offset)) % texts.size();
        if (tok->encode(texts[i]) != expected[i]) ++mismatches;
        if (tok->decode(expected[i], false) != decoded[i]) ++mismatches;
      }
    }
  };
  std::thread a(work, 0);
  std::thread b(work, 17);
  a.join();
  b.join();
  CHECK(mismatches == 0);
}
