#include "runtime/tokenizer/utf8.hpp"

#include <utf8proc.h>

namespace troupe::tokenizer_detail::utf8 {
namespace {

// Well-formed UTF-8 (Unicode Table 3-7): for a lead byte, the sequence length and the allowed
// range of the second byte (later continuation bytes are always 80..BF). Length 0: the byte
// cannot start a sequence.
struct Lead {
  std::size_t length;
  unsigned char lo, hi;
};

constexpr Lead lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

}  // namespace

std::size_t find_invalid(std::string_view s) {
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    const Lead lead = lead_info(b);
    if (lead.length == 0 || i + lead.length > n) return i;
    const auto b1 = static_cast<unsigned char>(s[i + 1]);
    if (b1 < lead.lo || b1 > lead.hi) return i;
    for (std::size_t k = 2; k < lead.length; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < 0x80 || c > 0xBF) return i;
    }
    i += lead.length;
  }
  return std::string_view::npos;
}

char32_t next(std::string_view s, std::size_t& i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  const std::size_t len = lead_info(b).length;
  char32_t cp = b & (0xFF >> (len + 1));
  for (std::size_t k = 1; k < len; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

char32_t prev(std::string_view s, std::size_t& i) {
  std::size_t start = i - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  std::size_t j = start;
  const char32_t cp = next(s, j);
  i = start;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_whitespace(char32_t cp) {
  // The White_Space property is a short fixed list (PropList.txt).
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

void LossyDecoder::feed(std::string_view bytes, std::string& out) {
  std::size_t i = 0;
  const std::size_t n = bytes.size();
  while (i < n) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    if (len_ == 0) {
      // Fast path: a run of ASCII.
      if (b < 0x80) {
        std::size_t j = i + 1;
        while (j < n && static_cast<unsigned char>(bytes[j]) < 0x80) ++j;
        out.append(bytes.substr(i, j - i));
        i = j;
        continue;
      }
      const Lead lead = lead_info(b);
      if (lead.length == 0) {
        out.append(kReplacement);
      } else {
        buf_[0] = b;
        len_ = 1;
        need_ = lead.length;
        lo_ = lead.lo;
        hi_ = lead.hi;
      }
      ++i;
      continue;
    }
    if (b < lo_ || b > hi_) {
      // The held bytes are a maximal ill-formed subpart: one U+FFFD, then `b` starts afresh.
      out.append(kReplacement);
      len_ = 0;
      continue;
    }
    buf_[len_++] = b;
    lo_ = 0x80;
    hi_ = 0xBF;
    ++i;
    if (len_ == need_) {
      out.append(reinterpret_cast<const char*>(buf_), len_);
      len_ = 0;
    }
  }
}

void LossyDecoder::finish(std::string& out) {
  if (len_ != 0) out.append(kReplacement);
  len_ = 0;
}

std::string decode_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  LossyDecoder decoder;
  decoder.feed(bytes, out);
  decoder.finish(out);
  return out;
}

}  // namespace troupe::tokenizer_detail::utf8
