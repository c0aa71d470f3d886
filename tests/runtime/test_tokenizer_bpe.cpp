// Precise behaviour on the hand-written tiny GPT-2 style tokenizer (tests/fixtures/tokenizers/
// tiny_bpe): byte ids equal byte values, merges in rank order, GPT-2 pre-tokenization, added
// tokens, and edited copies for every option of normalizer / pre-tokenizer / BPE /
// post-processor / tokenizer_config.json. Expected ids are worked out by hand from the merge list
// (l l, e ll, h ell, hell o, h e, Ġ t, Ġt he, Ġ w, o r, Ġw or, l d, Ġwor ld, a a, Ċ Ċ, Ã ©).
#include "tests/runtime/test_tokenizer_util.hpp"

#include <catch2/catch.hpp>

using troupe::Tokenizer;
using namespace troupe::tokenizer_test;
using Ids = std::vector<int32_t>;
using nlohmann::json;

namespace {

constexpr int32_t kLL = 256, kELL = 257, kHELL = 258, kHELLO = 259, kHE = 260, kGT = 261,
                  kGTHE = 262, kGW = 263, kOR = 264, kGWOR = 265, kLD = 266, kGWORLD = 267,
                  kAA = 268, kNLNL = 269, kEACUTE = 270, kGXYZ = 271, kEOT = 272, kX = 273,
                  kXY = 274, kMASK = 275;

// Loads the tiny tokenizer after `edit` changed its tokenizer.json / tokenizer_config.json.
template <class Edit>
std::shared_ptr<const Tokenizer> tiny_with(Edit edit) {
  json tok = tiny_json();
  json config = tiny_config();
  edit(tok, config);
  TempDir dir;
  dir.write_json("tokenizer.json", tok);
  dir.write_json("tokenizer_config.json", config);
  return Tokenizer::load(dir.path());
}

json split_then_bytes(const json& split) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {split, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
}

Ids encode_with_split(const std::string& regex, const std::string& behavior, bool invert,
                      const std::string& text) {
  auto tok = tiny_with([&](json& t, json&) {
    t["pre_tokenizer"] = split_then_bytes({{"type", "Split"},
                                           {"pattern", {{"Regex", regex}}},
                                           {"behavior", behavior},
                                           {"invert", invert}});
  });
  return tok->encode(text, false);
}

}  // namespace

TEST_CASE("tokenizer bpe: byte-level alphabet, byte ids and decode", "[tokenizer]") {
  const auto tok = tiny();
  CHECK(tok->vocab_size() == 276);
  // GPT-2's table: printable Latin-1 stands for itself, other bytes map to U+0100.. in order.
  CHECK(tok->id_to_token('a') == "a");
  CHECK(tok->id_to_token(0) == "\u0100");
  CHECK(tok->id_to_token(' ') == "\u0120");   // Ġ
  CHECK(tok->id_to_token('\n') == "\u010A");  // Ċ
  CHECK(tok->id_to_token(0x7F) == "\u0121");
  CHECK(tok->id_to_token(0xAD) == "\u0143");
  CHECK(tok->id_to_token(0xE9) == "\u00E9");
  // Bytes not covered by merges come out as their own value.
  CHECK(tok->encode("\xE2\x82\xAC", false) == Ids{0xE2, 0x82, 0xAC});  // €
  CHECK(tok->encode(std::string("a\0b", 3), false) == Ids{'a', 0, 'b'});
  for (int b = 0; b < 128; ++b) {
    const int32_t id = b;
    CHECK(tok->decode(std::span<const int32_t>(&id, 1)) == std::string(1, static_cast<char>(b)));
  }
  // A lone byte of a multi-byte character decodes to U+FFFD; the whole character to itself.
  CHECK(tok->decode(Ids{0xE2}) == "\xEF\xBF\xBD");
  CHECK(tok->decode(Ids{0xE2, 0x82, 0xAC}) == "\xE2\x82\xAC");
  CHECK(tok->decode(Ids{0xE2, 0x82, 'x'}) == "\xEF\xBF\xBDx");
  CHECK(tok->encode("", true).empty());
}

TEST_CASE("tokenizer bpe: merges apply lowest rank first, leftmost among equals", "[tokenizer]") {
  const auto tok = tiny();
  // h e l l o: "l l" (rank 0) before "h e" (rank 4), so "hello" is one token...
  CHECK(tok->encode("hello", false) == Ids{kHELLO});
  CHECK(tok->encode("hell", false) == Ids{kHELL});
  CHECK(tok->encode("ell", false) == Ids{kELL});
  CHECK(tok->encode("ll", false) == Ids{kLL});
  // ...while "hel" has only "h e".
  CHECK(tok->encode("hel", false) == Ids{kHE, 'l'});
  CHECK(tok->encode("he", false) == Ids{kHE});
  // Equal ranks: leftmost first.
  CHECK(tok->encode("aaa", false) == Ids{kAA, 'a'});
  CHECK(tok->encode("aaaa", false) == Ids{kAA, kAA});
  CHECK(tok->encode("aaaaa", false) == Ids{kAA, kAA, 'a'});
  // " the": "h e" (4) before "Ġ t" (5), then "Ġt he" (6).
  CHECK(tok->encode(" the world", false) == Ids{kGTHE, kGWORLD});
  CHECK(tok->encode("Hello world", false) == Ids{'H', kELL, 'o', kGWORLD});
  // Merges over byte-level characters: é is "Ã©", \n\n is "ĊĊ".
  CHECK(tok->encode("caf\xC3\xA9", false) == Ids{'c', 'a', 'f', kEACUTE});
  CHECK(tok->encode("\n\n\n", false) == Ids{kNLNL, '\n'});
  CHECK(tok->decode(Ids{kHELLO, kGWORLD}) == "hello world");
}

TEST_CASE("tokenizer bpe: GPT-2 pre-tokenization decides what may merge", "[tokenizer]") {
  const auto tok = tiny();
  CHECK(tok->encode("x world", false) == Ids{'x', kGWORLD});
  // "\s+(?!\S)" leaves the last space to the word: [x][ ][ world].
  CHECK(tok->encode("x  world", false) == Ids{'x', ' ', kGWORLD});
  CHECK(tok->encode("a a", false) == Ids{'a', ' ', 'a'});
  // Contractions are split off: 'l l' cannot merge across "'ll".
  CHECK(tok->encode("I'll", false) == Ids{'I', '\'', kLL});
  CHECK(tok->encode("1234", false) == Ids{'1', '2', '3', '4'});
}

TEST_CASE("tokenizer bpe: added tokens, longest match, lstrip/rstrip, special flag",
          "[tokenizer]") {
  const auto tok = tiny();
  CHECK(tok->encode("<x><y>", false) == Ids{kXY});
  CHECK(tok->encode("<x><z>", false) == Ids{kX, '<', 'z', '>'});
  CHECK(tok->encode("hello<|endoftext|>hello", false) == Ids{kHELLO, kEOT, kHELLO});
  CHECK(tok->encode("<|endoftext", false) ==
        Ids{'<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't'});
  // <mask> has lstrip and rstrip: it swallows the spaces around it.
  CHECK(tok->encode("a <mask> b", false) == Ids{'a', kMASK, 'b'});
  CHECK(tok->encode("a  \t<mask>", false) == Ids{'a', kMASK});
  CHECK(tok->encode("a<mask>b", false) == Ids{'a', kMASK, 'b'});
  CHECK(tok->is_special(kEOT));
  CHECK(tok->is_special(kMASK));
  CHECK_FALSE(tok->is_special(kX));
  CHECK_FALSE(tok->is_special(-1));
  CHECK_FALSE(tok->is_special(100000));
  CHECK(tok->token_to_id("<x>") == kX);
  CHECK(tok->token_to_id("Ġworld") == kGWORLD);
  CHECK_FALSE(tok->token_to_id("nope").has_value());
  CHECK(tok->id_to_token(kEOT) == "<|endoftext|>");
  CHECK(tok->id_to_token(kGXYZ) == "\u0120xyz");
  // Only special tokens are skipped.
  const Ids ids{kHELLO, kEOT, kX, kHELLO};
  CHECK(tok->decode(ids, true) == "hello<x>hello");
  CHECK(tok->decode(ids, false) == "hello<|endoftext|><x>hello");
}

TEST_CASE("tokenizer bpe: single_word added tokens only match whole words", "[tokenizer]") {
  const auto tok = tiny_with([](json& t, json&) {
    t["added_tokens"].push_back({{"id", 276},
                                 {"content", "cat"},
                                 {"single_word", true},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", false}});
  });
  CHECK(tok->vocab_size() == 277);
  CHECK(tok->encode("cat", false) == Ids{276});
  CHECK(tok->encode(" cat ", false) == Ids{' ', 276, ' '});
  CHECK(tok->encode("cat!", false) == Ids{276, '!'});
  CHECK(tok->encode("concat", false) == Ids{'c', 'o', 'n', 'c', 'a', 't'});
  CHECK(tok->encode("cats", false) == Ids{'c', 'a', 't', 's'});
}

TEST_CASE("tokenizer bpe: ignore_merges takes whole words from the vocab", "[tokenizer]") {
  CHECK(tiny()->encode(" xyz", false) == Ids{' ', 'x', 'y', 'z'});
  const auto tok = tiny_with([](json& t, json&) { t["model"]["ignore_merges"] = true; });
  CHECK(tok->encode(" xyz", false) == Ids{kGXYZ});
  CHECK(tok->encode("hello", false) == Ids{kHELLO});
  CHECK(tok->encode("hel", false) == Ids{kHE, 'l'});
}

TEST_CASE("tokenizer bpe: merges in the [a, b] list form equal the string form", "[tokenizer]") {
  const auto tok = tiny_with([](json& t, json&) {
    json list = json::array();
    for (const auto& m : t["model"]["merges"]) {
      const auto s = m.get<std::string>();
      const auto space = s.find(' ');
      list.push_back({s.substr(0, space), s.substr(space + 1)});
    }
    t["model"]["merges"] = list;
  });
  CHECK(tok->encode("hello the world aaa", false) == tiny()->encode("hello the world aaa", false));
}

TEST_CASE("tokenizer bpe: normalizers", "[tokenizer]") {
  const auto nfc = tiny_with([](json& t, json&) { t["normalizer"] = {{"type", "NFC"}}; });
  CHECK(nfc->encode("cafe\xCC\x81", false) == Ids{'c', 'a', 'f', kEACUTE});
  CHECK(tiny()->encode("cafe\xCC\x81", false) == Ids{'c', 'a', 'f', 'e', 0xCC, 0x81});
  const auto nfd = tiny_with([](json& t, json&) { t["normalizer"] = {{"type", "NFD"}}; });
  CHECK(nfd->encode("\xC3\xA9", false) == Ids{'e', 0xCC, 0x81});
  const auto nfkc = tiny_with([](json& t, json&) { t["normalizer"] = {{"type", "NFKC"}}; });
  CHECK(nfkc->encode("\xEF\xAC\x81", false) == Ids{'f', 'i'});  // ligature ﬁ
  const auto seq = tiny_with([](json& t, json&) {
    t["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "NFD"}}, {{"type", "NFC"}}}}};
  });
  CHECK(seq->encode("cafe\xCC\x81", false) == Ids{'c', 'a', 'f', kEACUTE});
  // NUL characters survive normalization.
  CHECK(nfc->encode(std::string("\xC3\xA9\0", 3), false) == Ids{kEACUTE, 0});
}

TEST_CASE("tokenizer bpe: Split behaviors and invert", "[tokenizer]") {
  // "hello" split on "e": [h][e][llo].
  CHECK(encode_with_split("e", "Isolated", false, "hello") == Ids{'h', 'e', kLL, 'o'});
  CHECK(encode_with_split("e", "Removed", false, "hello") == Ids{'h', kLL, 'o'});
  CHECK(encode_with_split("e", "MergedWithPrevious", false, "hello") == Ids{kHE, kLL, 'o'});
  CHECK(encode_with_split("e", "MergedWithNext", false, "hello") == Ids{'h', kELL, 'o'});
  CHECK(encode_with_split("e", "Contiguous", false, "hello") == Ids{'h', 'e', kLL, 'o'});
  // "hello" split on "l": Contiguous keeps the two l's together.
  CHECK(encode_with_split("l", "Contiguous", false, "hello") == Ids{kHE, kLL, 'o'});
  CHECK(encode_with_split("l", "Isolated", false, "hello") == Ids{kHE, 'l', 'l', 'o'});
  // invert: the pattern names what to keep.
  CHECK(encode_with_split("e", "Removed", true, "hello") == Ids{'e'});
  CHECK(encode_with_split("e", "Isolated", true, "hello") == Ids{'h', 'e', kLL, 'o'});
  // Oniguruma features the real files use: \p{L}, \p{N}, (?i:...), lookahead.
  CHECK(encode_with_split(R"((?i:'LL)|\p{L}+|\p{N}|\s+(?!\S)|\s+)", "Isolated", false, "I'LL 12") ==
        Ids{'I', '\'', 'L', 'L', ' ', '1', '2'});
  // A String pattern is literal.
  const auto lit = tiny_with([](json& t, json&) {
    t["pre_tokenizer"] = split_then_bytes({{"type", "Split"},
                                           {"pattern", {{"String", "."}}},
                                           {"behavior", "Removed"},
                                           {"invert", false}});
  });
  CHECK(lit->encode("ll.ll", false) == Ids{kLL, kLL});
  CHECK(lit->encode("llxll", false) == Ids{kLL, 'x', kLL});          // no dot: one piece
  CHECK(encode_with_split(".", "Removed", false, "llxll").empty());  // a Regex "." is any char
}

TEST_CASE("tokenizer bpe: ByteLevel add_prefix_space", "[tokenizer]") {
  const auto tok = tiny_with([](json& t, json&) { t["pre_tokenizer"]["add_prefix_space"] = true; });
  CHECK(tok->encode("world", false) == Ids{kGWORLD});
  CHECK(tok->encode(" world", false) == Ids{kGWORLD});
  // Every piece after an added token gets the space too (HF applies it per split).
  CHECK(tok->encode("world<x>world", false) == Ids{kGWORLD, kX, kGWORLD});
}

TEST_CASE("tokenizer bpe: post processors add special tokens only when asked", "[tokenizer]") {
  CHECK(tiny()->encode("hello", true) == Ids{kHELLO});  // ByteLevel adds nothing
  const json bos_template = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", nullptr},
      {"special_tokens",
       {{"<|endoftext|>",
         {{"id", "<|endoftext|>"}, {"ids", {kEOT}}, {"tokens", {"<|endoftext|>"}}}}}}};
  const auto llama_like = tiny_with([&](json& t, json&) {
    t["post_processor"] = {{"type", "Sequence"},
                           {"processors", {{{"type", "ByteLevel"}}, bos_template}}};
  });
  CHECK(llama_like->encode("hello", true) == Ids{kEOT, kHELLO});
  CHECK(llama_like->encode("hello", false) == Ids{kHELLO});
  CHECK(llama_like->encode("", true) == Ids{kEOT});

  const auto both_ends = tiny_with([&](json& t, json&) {
    json tmpl = bos_template;
    tmpl["single"].push_back({{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}});
    t["post_processor"] = tmpl;
  });
  CHECK(both_ends->encode("hello", true) == Ids{kEOT, kHELLO, kEOT});

  const auto roberta = tiny_with([](json& t, json&) {
    t["post_processor"] = {{"type", "RobertaProcessing"},
                           {"cls", {"<|endoftext|>", kEOT}},
                           {"sep", {"<mask>", kMASK}}};
  });
  CHECK(roberta->encode("hello", true) == Ids{kEOT, kHELLO, kMASK});
  CHECK(roberta->encode("hello", false) == Ids{kHELLO});
}

TEST_CASE("tokenizer bpe: tokenizer_config.json add_bos_token / add_eos_token", "[tokenizer]") {
  const auto bos = tiny_with([](json&, json& c) { c["add_bos_token"] = true; });
  CHECK(bos->encode("hello", true) == Ids{kEOT, kHELLO});
  CHECK(bos->encode("hello", false) == Ids{kHELLO});
  const auto eos = tiny_with([](json&, json& c) { c["add_eos_token"] = true; });
  CHECK(eos->encode("hello", true) == Ids{kHELLO, kEOT});
  // A post_processor that already adds BOS is not doubled.
  const auto once = tiny_with([](json& t, json& c) {
    c["add_bos_token"] = true;
    t["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "B"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"B", {{"id", "B"}, {"ids", {kEOT}}, {"tokens", {"<|endoftext|>"}}}}}}};
  });
  CHECK(once->encode("hello", true) == Ids{kEOT, kHELLO});
}

TEST_CASE("tokenizer bpe: tokenizer_config.json fields", "[tokenizer]") {
  const auto tok = tiny();
  CHECK(tok->bos_token_id() == kEOT);  // "bos_token": "<|endoftext|>"
  CHECK(tok->eos_token_id() == kEOT);  // "eos_token": {"content": "<|endoftext|>", ...}
  CHECK(tok->model_max_length() == 1024);
  CHECK(tok->chat_template() ==
        "{% for m in messages %}{{ m['content'] }}<|endoftext|>{% endfor %}");

  // Given the tokenizer.json file itself, the config beside it is still read.
  const auto by_file = Tokenizer::load(fixtures() / "tiny_bpe" / "tokenizer.json");
  CHECK(by_file->bos_token_id() == kEOT);
  CHECK(by_file->model_max_length() == 1024);

  // No config: nothing known.
  TempDir bare;
  bare.write_json("tokenizer.json", tiny_json());
  const auto none = Tokenizer::load(bare.path());
  CHECK_FALSE(none->bos_token_id().has_value());
  CHECK_FALSE(none->eos_token_id().has_value());
  CHECK(none->chat_template().empty());
  CHECK(none->model_max_length() == 0);

  // chat_template.jinja beside it (newer transformers) and the named-list form.
  bare.write("chat_template.jinja", "{{ bos_token }}jinja");
  CHECK(Tokenizer::load(bare.path())->chat_template() == "{{ bos_token }}jinja");
  const auto listed = tiny_with([](json&, json& c) {
    c["chat_template"] = json::array(
        {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}});
    c["model_max_length"] = 1e30;
    c["bos_token"] = "<not in vocab>";
  });
  CHECK(listed->chat_template() == "D");
  CHECK(listed->model_max_length() == 0);
  CHECK_FALSE(listed->bos_token_id().has_value());
}

TEST_CASE("tokenizer bpe: from_json_text builds what load builds, without the config",
          "[tokenizer]") {
  const auto text = tiny_json().dump();
  const auto from_text = Tokenizer::from_json_text(text, "in memory");
  const auto loaded = tiny();
  for (const std::string s : {"hello world", "hello<|endoftext|> wor\nld\n\n\xC3\xA9 aa"}) {
    CHECK(from_text->encode(s, true) == loaded->encode(s, true));
    CHECK(from_text->decode(loaded->encode(s, false), /*skip_special_tokens=*/false) == s);
  }
  CHECK(from_text->vocab_size() == loaded->vocab_size());
  CHECK_FALSE(from_text->bos_token_id().has_value());  // tokenizer_config.json's, not read
  CHECK(from_text->model_max_length() == 0);
  // Errors name the origin given, as load's name the file.
  CHECK_THROWS_WITH(Tokenizer::from_json_text("{\"model\": 3}", "in memory"),
                    Catch::Matchers::Contains("'in memory': model"));
}
