// Fuzz target for building a tokenizer from tokenizer.json (runtime/tokenizer,
// Tokenizer::from_json_text: the model, normalizer, pre-tokenizer with its regexes, added
// tokens, post-processor and decoder), then using what was built. The input is the
// tokenizer.json text, optionally followed by a NUL byte and a text to encode (a NUL cannot
// occur in JSON text, so the split is unambiguous); without one a fixed sample is encoded.
//
// A tokenizer that builds must keep its promises on every text: encode gives ids in
// 0..vocab_size-1 (or throws troupe::Error, for text that is not UTF-8), decode takes those ids
// back without an error, and an IncrementalDetokenizer fed them one at a time emits exactly
// decode's text.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/tokenizer.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using troupe::fuzz::accepted;
using troupe::fuzz::broken;

namespace {

// Words, digits, punctuation, whitespace runs, non-ASCII and a special-token-like run.
constexpr std::string_view kSample =
    "Hello world! It's 2026-12-05, 42 tokens.\n\t  caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 "
    "\xF0\x9F\x98\x80<|endoftext|> <s>[INST]";

void check(const std::shared_ptr<const troupe::Tokenizer>& tok, std::string_view text) {
  std::vector<int32_t> ids;
  if (!accepted([&] { ids = tok->encode(text, /*add_special_tokens=*/true); })) return;
  for (const int32_t id : ids)
    if (id < 0 || id >= tok->vocab_size())
      broken("encode gave id {} outside the vocabulary (size {})", id, tok->vocab_size());
  for (const bool skip : {true, false}) {
    const std::string whole = tok->decode(ids, skip);  // in range: may not throw
    troupe::IncrementalDetokenizer detok(tok, {}, skip);
    std::string streamed;
    for (const int32_t id : ids) streamed += detok.push(std::span(&id, 1));
    streamed += detok.flush();
    if (streamed != whole)
      broken("streamed text ({} bytes) differs from decode ({} bytes)", streamed.size(),
             whole.size());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = troupe::fuzz::as_text(data, size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? kSample : input.substr(nul + 1);
  std::shared_ptr<const troupe::Tokenizer> tok;
  if (!accepted([&] { tok = troupe::Tokenizer::from_json_text(json, "fuzz/tokenizer.json"); }))
    return 0;
  check(tok, text);
  return 0;
}
