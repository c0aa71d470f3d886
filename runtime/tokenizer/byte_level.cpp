#include "runtime/tokenizer/byte_level.hpp"

#include "runtime/tokenizer/utf8.hpp"

namespace troupe::tokenizer_detail::byte_level {
namespace {

struct Tables {
  std::array<std::string, 256> chars;  // byte -> UTF-8 of its character
  std::array<int, 0x144> bytes;        // code point -> byte, -1 outside the alphabet

  Tables() {
    bytes.fill(-1);
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable(b) ? static_cast<char32_t>(b) : next_extra++;
      utf8::append(chars[b], cp);
      bytes[cp] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::string_view char_of(unsigned char b) {
  return tables().chars[b];
}

int byte_of(char32_t cp) {
  return cp < tables().bytes.size() ? tables().bytes[cp] : -1;
}

void encode(std::string_view text, std::string& out) {
  const Tables& t = tables();
  out.reserve(out.size() + text.size() * 2);
  for (char c : text) out.append(t.chars[static_cast<unsigned char>(c)]);
}

std::string decode_token(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  std::size_t i = 0;
  while (i < token.size()) {
    const int b = byte_of(utf8::next(token, i));
    if (b < 0) return std::string(token);
    out.push_back(static_cast<char>(b));
  }
  return out;
}

}  // namespace troupe::tokenizer_detail::byte_level
