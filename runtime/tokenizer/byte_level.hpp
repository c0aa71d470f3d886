// GPT-2's byte-level alphabet: every byte 0..255 is shown as one printable Unicode character
// ("Ġ" for a space, "Ċ" for a newline) so that BPE vocabularies are ordinary strings. Printable
// Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the other 68
// bytes map, in byte order, to U+0100.. U+0143.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace troupe::tokenizer_detail::byte_level {

/// The character (UTF-8 encoded) that stands for byte `b`.
[[nodiscard]] std::string_view char_of(unsigned char b);

/// The byte that code point `cp` stands for, or -1 if `cp` is not in the alphabet.
[[nodiscard]] int byte_of(char32_t cp);

/// Appends the byte-level form of `text` (each byte replaced by its character) to `out`.
void encode(std::string_view text, std::string& out);

/// HF's ByteLevel decoder for one token: the bytes its characters stand for, or the token's own
/// UTF-8 bytes when any character is outside the alphabet (added tokens such as "<|im_end|>" are
/// all inside it; one holding e.g. a raw "\n" is not).
[[nodiscard]] std::string decode_token(std::string_view token);

}  // namespace troupe::tokenizer_detail::byte_level
