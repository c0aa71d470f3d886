#include "runtime/chat/unicode.hpp"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>

namespace troupe::chat {

char32_t utf8_next(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : 1;
  char32_t cp = b0 & (0x3F >> n);
  for (int k = 1; k <= n && i + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n + 1;
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void append_escaped(std::string& out, char32_t cp) {
  if (cp <= 0xFF) {
    out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
  } else if (cp <= 0xFFFF) {
    out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
  } else {
    out += fmt::format("\\U{:08x}", static_cast<unsigned>(cp));
  }
}

std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) out.push_back(utf8_next(s, i));
  return out;
}

std::string utf8_encode(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) utf8_append(out, cp);
  return out;
}

std::size_t utf8_length(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool utf8_valid(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    int n;
    char32_t min;
    if ((b0 & 0xE0) == 0xC0) {
      n = 1, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      n = 2, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      n = 3, min = 0x10000;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;
    char32_t cp = b0 & (0x3F >> n);
    for (int k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return false;
    i += n + 1;
  }
  return true;
}

std::size_t utf8_offset(std::string_view s, std::size_t n) {
  std::size_t i = 0;
  while (n > 0 && i < s.size()) {
    utf8_next(s, i);
    --n;
  }
  return i;
}

namespace {

bool in_ranges(const unicode_tables::CodepointRange* table, std::size_t size, char32_t cp) {
  const auto* end = table + size;
  const auto* it =
      std::upper_bound(table, end, cp, [](char32_t c, const auto& r) { return c < r.first; });
  return it != table && cp <= (it - 1)->last;
}

// Appends the full mapping of cp from a multi-character table, or the simple one.
void append_mapped(std::string& out, char32_t cp, const unicode_tables::MultiMapping* table,
                   std::size_t size, utf8proc_int32_t (*simple)(utf8proc_int32_t)) {
  const auto* end = table + size;
  const auto* it =
      std::lower_bound(table, end, cp, [](const auto& m, char32_t c) { return m.from < c; });
  if (it != end && it->from == cp) {
    for (int k = 0; k < it->size; ++k) utf8_append(out, it->to[k]);
    return;
  }
  utf8_append(out, static_cast<char32_t>(simple(static_cast<utf8proc_int32_t>(cp))));
}

void append_upper(std::string& out, char32_t cp) {
  append_mapped(out, cp, unicode_tables::upper_multi, unicode_tables::upper_multi_size,
                utf8proc_toupper);
}
void append_title(std::string& out, char32_t cp) {
  append_mapped(out, cp, unicode_tables::title_multi, unicode_tables::title_multi_size,
                utf8proc_totitle);
}

// Python's lower_ucs4: the full lower mapping, with U+03A3 becoming final sigma where the
// Final_Sigma context holds.
void append_lower(std::string& out, const std::vector<char32_t>& cps, std::size_t i) {
  const char32_t c = cps[i];
  if (c == 0x3A3) {
    std::size_t j = i;
    char32_t prev = 0;
    bool found = false;
    while (j > 0) {
      prev = cps[--j];
      if (!py_is_case_ignorable(prev)) {
        found = true;
        break;
      }
    }
    bool final_sigma = found && py_iscased(prev);
    if (final_sigma && i + 1 < cps.size()) {
      std::size_t k = i + 1;
      while (k < cps.size() && py_is_case_ignorable(cps[k])) ++k;
      final_sigma = k == cps.size() || !py_iscased(cps[k]);
    }
    utf8_append(out, final_sigma ? 0x3C2 : 0x3C3);
    return;
  }
  append_mapped(out, c, unicode_tables::lower_multi, unicode_tables::lower_multi_size,
                utf8proc_tolower);
}

}  // namespace

bool py_isspace(char32_t cp) {
  if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool py_isprintable(char32_t cp) {
  return !in_ranges(unicode_tables::not_printable, unicode_tables::not_printable_size, cp);
}
bool py_iscased(char32_t cp) {
  return in_ranges(unicode_tables::cased, unicode_tables::cased_size, cp);
}
bool py_is_case_ignorable(char32_t cp) {
  return in_ranges(unicode_tables::case_ignorable, unicode_tables::case_ignorable_size, cp);
}
bool py_isalpha(char32_t cp) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}
bool py_isdecimal(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp)) == UTF8PROC_CATEGORY_ND;
}

bool py_isdigit(char32_t cp) {
  return in_ranges(unicode_tables::digit, unicode_tables::digit_size, cp);
}
bool py_isnumeric(char32_t cp) {
  return in_ranges(unicode_tables::numeric, unicode_tables::numeric_size, cp);
}

namespace {
bool is_lower_char(char32_t cp) {
  return in_ranges(unicode_tables::lowercase, unicode_tables::lowercase_size, cp);
}
bool is_upper_char(char32_t cp) {
  return in_ranges(unicode_tables::uppercase, unicode_tables::uppercase_size, cp);
}
bool is_title_char(char32_t cp) {
  return in_ranges(unicode_tables::titlecase, unicode_tables::titlecase_size, cp);
}

// CPython's unicode_islower_impl / unicode_isupper_impl: no character of the other case
// (or title case), and at least one of this case.
bool all_cased_as(std::string_view s, bool (*same)(char32_t), bool (*other)(char32_t)) {
  bool cased = false;
  for (std::size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    if (other(c) || is_title_char(c)) return false;
    if (same(c)) cased = true;
  }
  return cased;
}

}  // namespace

bool py_islower(std::string_view s) {
  return all_cased_as(s, is_lower_char, is_upper_char);
}
bool py_isupper(std::string_view s) {
  return all_cased_as(s, is_upper_char, is_lower_char);
}

// CPython's unicode_istitle_impl.
bool py_istitle(std::string_view s) {
  bool cased = false, previous_is_cased = false;
  for (std::size_t i = 0; i < s.size();) {
    const char32_t c = utf8_next(s, i);
    if (is_upper_char(c) || is_title_char(c)) {
      if (previous_is_cased) return false;
      previous_is_cased = cased = true;
    } else if (is_lower_char(c)) {
      if (!previous_is_cased) return false;
      previous_is_cased = cased = true;
    } else {
      previous_is_cased = false;
    }
  }
  return cased;
}

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) append_upper(out, utf8_next(s, i));
  return out;
}

std::string py_lower(std::string_view s) {
  const auto cps = utf8_decode(s);
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < cps.size(); ++i) append_lower(out, cps, i);
  return out;
}

// CPython's do_swapcase: upper-case letters lower (with final sigma), lower-case ones upper.
std::string py_swapcase(std::string_view s) {
  const auto cps = utf8_decode(s);
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < cps.size(); ++i) {
    if (is_upper_char(cps[i])) {
      append_lower(out, cps, i);
    } else if (is_lower_char(cps[i])) {
      append_upper(out, cps[i]);
    } else {
      utf8_append(out, cps[i]);
    }
  }
  return out;
}

std::string py_title(std::string_view s) {
  const auto cps = utf8_decode(s);
  std::string out;
  out.reserve(s.size());
  bool previous_is_cased = false;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    if (previous_is_cased) {
      append_lower(out, cps, i);
    } else {
      append_title(out, cps[i]);
    }
    previous_is_cased = py_iscased(cps[i]);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  const auto cps = utf8_decode(s);
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      append_title(out, cps[0]);
    } else {
      append_lower(out, cps, i);
    }
  }
  return out;
}

}  // namespace troupe::chat
