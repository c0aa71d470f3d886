// Splits template source into tokens the way Jinja2's lexer does with transformers'
// settings (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False): \r\n and \r
// become \n, one trailing newline is dropped, `{%-`/`-%}` strip whitespace, `+` turns the
// block settings off for one tag, and {% raw %} passes text through. Stateless: tokenize()
// is a pure function of its input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::chat {

enum class TokenType {
  data,         // template text between tags
  var_begin,    // {{
  var_end,      // }}
  block_begin,  // {%
  block_end,    // %}
  name,
  string,
  integer,
  floating,
  op,  // operator or punctuation, in text
  eof,
};

struct Token {
  TokenType type;
  std::string text;  // data, name, operator, or a string literal's decoded value
  std::int64_t int_value = 0;
  double float_value = 0;
  int line = 1, column = 1;
};

/// Throws Fault{syntax} with the line and column of the first problem.
std::vector<Token> tokenize(std::string_view source);

/// Human words for a token in syntax errors ("end of statement block", "'endfor'").
std::string describe(const Token& t);

}  // namespace troupe::chat
