// UTF-8 helpers for the tokenizer: validation, code point iteration, the two Unicode character
// classes the added-token rules need, and a streaming "lossy" decoder.
//
// The lossy decoder replaces every maximal ill-formed subpart with one U+FFFD (Unicode's
// "substitution of maximal subparts", which Rust's String::from_utf8_lossy and the WHATWG
// TextDecoder both follow). Because it decides each byte only from the bytes before it, feeding
// a byte string in any number of pieces gives exactly the same text as feeding it at once; that
// is what lets IncrementalDetokenizer stream text equal to Tokenizer::decode.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::tokenizer_detail::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

/// Byte offset of the first byte that is not part of well-formed UTF-8, or npos if `s` is valid.
[[nodiscard]] std::size_t find_invalid(std::string_view s);

/// Decodes the code point at s[i] and advances i past it. `s` must be valid UTF-8.
[[nodiscard]] char32_t next(std::string_view s, std::size_t& i);

/// Decodes the code point that ends at s[i - 1] and moves i back to its first byte.
/// `s` must be valid UTF-8 and i > 0.
[[nodiscard]] char32_t prev(std::string_view s, std::size_t& i);

/// Appends the UTF-8 encoding of `cp` (a Unicode scalar value) to `out`.
void append(std::string& out, char32_t cp);

/// Unicode White_Space (what `\s` means in Rust's regex crate and in HF tokenizers).
[[nodiscard]] bool is_whitespace(char32_t cp);

/// Rust regex's Unicode `\w`: letters, marks, decimal and letter numbers, connector
/// punctuation, ZWJ/ZWNJ.
[[nodiscard]] bool is_word_char(char32_t cp);

/// Streaming UTF-8 -> valid UTF-8 conversion (see the file comment).
class LossyDecoder {
 public:
  /// Appends the text that `bytes` completes to `out`; an incomplete trailing sequence is held
  /// back until the next call.
  void feed(std::string_view bytes, std::string& out);
  /// Ends the stream: an incomplete held-back sequence becomes one U+FFFD.
  void finish(std::string& out);
  /// Whether bytes are held back.
  [[nodiscard]] bool pending() const { return len_ != 0; }

 private:
  unsigned char buf_[4] = {};
  std::size_t len_ = 0;                  // bytes held in buf_
  std::size_t need_ = 0;                 // total length of the sequence started in buf_
  unsigned char lo_ = 0x80, hi_ = 0xBF;  // allowed range of the next continuation byte
};

/// Whole-string form of LossyDecoder.
[[nodiscard]] std::string decode_lossy(std::string_view bytes);

}  // namespace troupe::tokenizer_detail::utf8
