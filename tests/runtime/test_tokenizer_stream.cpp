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

TEST_CASE(
    "tokenizer stream: spaces_between_special_tokens adds no spaces, as vLLM with "
    "tokenizer.json tokenizers",
    "[tokenizer]") {
  TROUPE_NEED_REAL_TOKENIZERS();
  // HF's decode of the reference texts (special tokens kept, several of them side by side:
  // "<|im_start|><|im_end|><|endoftext|>"): vLLM's fast detokenizer streams exactly this text
  // whatever spaces_between_special_tokens says, for tokenizers whose added tokens are their
  // own byte-level spelling, as Qwen3's and Llama 3's are. transformers' slow-tokenizer rule
  // would have put " " between them.
  std::mt19937 rng(7);
  const std::pair<std::string, std::shared_ptr<const Tokenizer>> cases[] = {{"qwen3", qwen3()},
                                                                            {"llama3", llama3()}};
  size_t adjacent = 0;
  for (const auto& [name, tok] : cases) {
    const auto ref = read_json(fixtures() / (name + "_reference.json"));
    for (const auto& c : ref.at("cases")) {
      const auto ids = c.at("ids").get<Ids>();
      INFO(name << " " << c.at("text").dump());
      for (bool spaces : {true, false}) {
        IncrementalDetokenizer detok(tok, Ids{}, false, spaces);
        std::string text;
        for (int32_t id : ids) text += detok.push(Ids{id});
        text += detok.flush();
        CHECK(text == c.at("decoded_keep_special").get<std::string>());
      }
      for (size_t i = 1; i < ids.size(); ++i)
        adjacent += tok->id_to_token(ids[i - 1]).starts_with("<|") &&
                    tok->id_to_token(ids[i]).starts_with("<|");
    }
  }
  CHECK(adjacent >= 2);  // the case the flag is about is in the reference
}

TEST_CASE(
    "tokenizer stream: spaces_between_special_tokens false writes an added token after "
    "another as its raw content",
    "[tokenizer]") {
  // vLLM's FastIncrementalDetokenizer.decode_next: with spaces_between_special_tokens false (and
  // skip_special_tokens false), an added token right after an output added token is its content
  // as written, not what the decoder makes of it. The ByteLevel decoder reads "Ġ" as a space, so
  // added tokens spelled with it show the difference.
  TempDir dir;
  auto j = tiny_json();
  j["added_tokens"].push_back({{"id", 276},
                               {"content", "<Ġa>"},
                               {"single_word", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"normalized", false},
                               {"special", true}});
  j["added_tokens"].push_back({{"id", 277},
                               {"content", "<Ġb>"},
                               {"single_word", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"normalized", false},
                               {"special", false}});
  dir.write_json("tokenizer.json", j);
  dir.write_json("tokenizer_config.json", tiny_config());
  const auto tok = Tokenizer::load(dir.path());
  const Ids ids = {276, 277, 'x', 277, 276, 276};
  REQUIRE(tok->decode(ids, false) == "< a>< b>x< b>< a>< a>");
  const auto streamed = [&](bool skip, bool spaces, size_t chunk) {
    IncrementalDetokenizer detok(tok, Ids{276}, skip, spaces);  // the prompt does not count
    std::string text;
    for (size_t i = 0; i < ids.size(); i += chunk)
      text += detok.push(std::span<const int32_t>(ids).subspan(i, std::min(chunk, ids.size() - i)));
    return text + detok.flush();
  };
  for (size_t chunk : {1, 2, 6}) {
    INFO("pushed " << chunk << " at a time");
    // The first of a run of added tokens is decoded; the ones after it (special or not) are raw.
    CHECK(streamed(false, false, chunk) == "< a><Ġb>x< b><Ġa><Ġa>");
    CHECK(streamed(false, true, chunk) == tok->decode(ids, false));
    // skip_special_tokens: vLLM keeps the decoder's text (the non-special <Ġb> stays).
    CHECK(streamed(true, false, chunk) == tok->decode(ids, true));
  }
  CHECK(tok->decode(ids, true) == "< b>x< b>");
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
