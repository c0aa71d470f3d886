// The Unicode behaviour of Python's str that chat templates can observe: code point
// iteration over UTF-8, str.isspace(), the full case mappings of upper()/lower()/title()/
// capitalize() (with the final-sigma rule), and what repr() escapes. Strings stay UTF-8; a
// Python index or length counts code points, so callers go through these helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::chat {

/// Decodes the code point at s[i] and advances i. Input is valid UTF-8 (checked on entry).
char32_t utf8_next(std::string_view s, std::size_t& i);
void utf8_append(std::string& out, char32_t cp);
std::vector<char32_t> utf8_decode(std::string_view s);
std::string utf8_encode(const std::vector<char32_t>& cps);
/// Number of code points (Python's len()).
std::size_t utf8_length(std::string_view s);
/// True when s is well-formed UTF-8 (no surrogates, no overlongs).
bool utf8_valid(std::string_view s);
/// Byte offset of code point number n (n <= length).
std::size_t utf8_offset(std::string_view s, std::size_t n);

/// Appends cp as Python's "backslashreplace" writes it: \xhh, \uhhhh or \Uhhhhhhhh.
void append_escaped(std::string& out, char32_t cp);

/// Python's str.isspace() for one code point (also what \s matches in Python's re).
bool py_isspace(char32_t cp);
bool py_isprintable(char32_t cp);
bool py_iscased(char32_t cp);
bool py_is_case_ignorable(char32_t cp);
bool py_isalpha(char32_t cp);
bool py_isdecimal(char32_t cp);
bool py_isdigit(char32_t cp);
bool py_isnumeric(char32_t cp);
/// str.islower() / str.isupper() of UTF-8 text.
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);
bool py_istitle(std::string_view s);
std::string py_swapcase(std::string_view s);

/// str.upper(), str.lower(), str.title(), str.capitalize(), str.swapcase() of UTF-8 text.
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);

namespace unicode_tables {
struct CodepointRange {
  char32_t first, last;
};
struct MultiMapping {
  char32_t from;
  std::uint8_t size;
  char32_t to[3];
};
extern const MultiMapping upper_multi[];
extern const std::size_t upper_multi_size;
extern const MultiMapping lower_multi[];
extern const std::size_t lower_multi_size;
extern const MultiMapping title_multi[];
extern const std::size_t title_multi_size;
extern const CodepointRange cased[];
extern const std::size_t cased_size;
extern const CodepointRange case_ignorable[];
extern const std::size_t case_ignorable_size;
extern const CodepointRange not_printable[];
extern const std::size_t not_printable_size;
extern const CodepointRange lowercase[];
extern const std::size_t lowercase_size;
extern const CodepointRange uppercase[];
extern const std::size_t uppercase_size;
extern const CodepointRange titlecase[];
extern const std::size_t titlecase_size;
extern const CodepointRange digit[];
extern const std::size_t digit_size;
extern const CodepointRange numeric[];
extern const std::size_t numeric_size;
}  // namespace unicode_tables

}  // namespace troupe::chat
