#include "runtime/chat/lexer.hpp"

#include "runtime/chat/unicode.hpp"
#include "runtime/chat/value.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

namespace troupe::chat {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Jinja2's string literal decoding: the text is first made ASCII with Python's
// "backslashreplace" and then decoded with "unicode-escape", so Python's escapes work and
// every other backslash stays as it is.
std::string decode_string_literal(std::string_view body) {
  std::string ascii;
  for (std::size_t i = 0; i < body.size();) {
    const char32_t c = utf8_next(body, i);
    if (c < 0x80) {
      ascii += static_cast<char>(c);
    } else {
      append_escaped(ascii, c);
    }
  }
  std::string out;
  auto hex_escape = [&](std::size_t& i, int digits, const char* what) {
    char32_t cp = 0;
    for (int k = 0; k < digits; ++k) {
      const int h = i + 1 + k < ascii.size() ? hex_value(ascii[i + 1 + k]) : -1;
      if (h < 0) fault(FaultKind::syntax, fmt::format("truncated {} escape", what));
      cp = cp * 16 + static_cast<char32_t>(h);
    }
    i += static_cast<std::size_t>(digits);
    return cp;
  };
  for (std::size_t i = 0; i < ascii.size(); ++i) {
    const char c = ascii[i];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i >= ascii.size()) fault(FaultKind::syntax, "\\ at end of string");
    char32_t cp;
    switch (ascii[i]) {
      case '\n':
        continue;
      case '\\':
      case '\'':
      case '"':
        cp = static_cast<unsigned char>(ascii[i]);
        break;
      case 'a':
        cp = 7;
        break;
      case 'b':
        cp = 8;
        break;
      case 'f':
        cp = 0xC;
        break;
      case 'n':
        cp = '\n';
        break;
      case 'r':
        cp = '\r';
        break;
      case 't':
        cp = '\t';
        break;
      case 'v':
        cp = 0xB;
        break;
      case 'x':
        cp = hex_escape(i, 2, "\\xXX");
        break;
      case 'u':
        cp = hex_escape(i, 4, "\\uXXXX");
        break;
      case 'U':
        cp = hex_escape(i, 8, "\\UXXXXXXXX");
        if (cp > 0x10FFFF) fault(FaultKind::syntax, "illegal Unicode character");
        break;
      case 'N':
        fault(FaultKind::unsupported, "\\N{...} escapes in string literals are not supported");
      default:
        if (ascii[i] >= '0' && ascii[i] <= '7') {
          cp = 0;
          for (int k = 0; k < 3 && i < ascii.size() && ascii[i] >= '0' && ascii[i] <= '7'; ++k)
            cp = cp * 8 + static_cast<char32_t>(ascii[i++] - '0');
          --i;
          break;
        }
        out += '\\';
        out += ascii[i];
        continue;
    }
    if (cp >= 0xD800 && cp < 0xE000)
      fault(FaultKind::syntax, "string literal holds a lone surrogate, which is not text");
    utf8_append(out, cp);
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Newlines become \n and one trailing newline goes (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (std::size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      std::size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_data(pos_, src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      const char kind = src_[tag + 1];
      std::size_t after = tag + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
      std::size_t raw_end = kind == '%' ? match_raw_begin(after) : std::string::npos;
      std::string text = src_.substr(pos_, tag - pos_);
      strip_before_tag(text, sign, kind != '{');
      emit_data(pos_, std::move(text));
      line_starting_ = false;
      if (kind == '#') {
        pos_ = skip_comment(after, tag);
      } else if (raw_end != std::string::npos) {
        line_starting_ = src_[raw_end - 1] == '\n';
        pos_ = raw_body(raw_end, tag);
      } else {
        push(kind == '%' ? TokenType::block_begin : TokenType::var_begin, tag, "");
        pos_ = lex_tag(after, kind == '%');
      }
    }
    push(TokenType::eof, src_.size(), "");
    return std::move(out_);
  }

 private:
  std::string src_;
  std::vector<std::size_t> line_starts_;
  std::vector<Token> out_;
  std::size_t pos_ = 0;
  bool line_starting_ = true;

  void locate(std::size_t offset, int& line, int& column) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const std::size_t start = *(it - 1);
    line = static_cast<int>(it - line_starts_.begin());
    column =
        static_cast<int>(utf8_length(std::string_view(src_).substr(start, offset - start))) + 1;
  }

  [[noreturn]] void error(std::size_t offset, std::string message,
                          FaultKind kind = FaultKind::syntax) const {
    Fault f{kind, std::move(message)};
    locate(std::min(offset, src_.size()), f.line, f.column);
    throw f;
  }

  Token& push(TokenType type, std::size_t offset, std::string text) {
    Token t{type, std::move(text)};
    locate(offset, t.line, t.column);
    out_.push_back(std::move(t));
    return out_.back();
  }

  void emit_data(std::size_t offset, std::string text) {
    if (!text.empty()) push(TokenType::data, offset, std::move(text));
  }

  bool starts_with(std::size_t at, std::string_view s) const {
    return src_.compare(at, s.size(), s) == 0;
  }

  std::size_t skip_space(std::size_t at) const {
    while (at < src_.size()) {
      std::size_t next = at;
      if (!py_isspace(utf8_next(src_, next))) break;
      at = next;
    }
    return at;
  }

  std::size_t find_tag(std::size_t from) const {
    for (std::size_t at = src_.find('{', from); at != std::string::npos;
         at = src_.find('{', at + 1)) {
      if (at + 1 < src_.size() &&
          (src_[at + 1] == '{' || src_[at + 1] == '%' || src_[at + 1] == '#'))
        return at;
    }
    return std::string::npos;
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})`: the offset after it, or npos when this is not a raw tag.
  std::size_t match_raw_begin(std::size_t after_sign) const {
    std::size_t p = skip_space(after_sign);
    if (!starts_with(p, "raw")) return std::string::npos;
    p = skip_space(p + 3);
    if (starts_with(p, "-%}")) return skip_space(p + 3);
    if (starts_with(p, "%}")) return p + 2;
    return std::string::npos;
  }

  // Jinja2's OptionalLStrip: `-` strips all whitespace before the tag; otherwise
  // lstrip_blocks strips spaces and tabs between a line start and a block or comment tag.
  void strip_before_tag(std::string& text, char sign, bool lstrip_applies) const {
    if (sign == '-') {
      std::size_t end = 0;
      for (std::size_t i = 0; i < text.size();) {
        if (!py_isspace(utf8_next(text, i))) end = i;
      }
      text.resize(end);
      return;
    }
    if (sign == '+' || !lstrip_applies) return;
    const std::size_t nl = text.rfind('\n');
    const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return;
    if (l_pos == text.size()) return;
    for (std::size_t i = l_pos; i < text.size();)
      if (!py_isspace(utf8_next(text, i))) return;
    text.resize(l_pos);
  }

  std::size_t skip_comment(std::size_t from, std::size_t tag) {
    for (std::size_t k = from; k < src_.size(); ++k) {
      if (starts_with(k, "+#}")) return k + 3;
      if (starts_with(k, "-#}")) {
        const std::size_t end = skip_space(k + 3);
        line_starting_ = end > k + 3 && src_[end - 1] == '\n';
        return end;
      }
      if (starts_with(k, "#}")) {
        std::size_t end = k + 2;
        if (end < src_.size() && src_[end] == '\n') {
          ++end;
          line_starting_ = true;
        }
        return end;
      }
    }
    error(tag, "missing end of comment tag");
  }

  std::size_t raw_body(std::size_t from, std::size_t tag) {
    for (std::size_t k = src_.find("{%", from); k != std::string::npos;
         k = src_.find("{%", k + 1)) {
      std::size_t p = k + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_space(p);
      if (!starts_with(p, "endraw")) continue;
      p = skip_space(p + 6);
      std::size_t end;
      bool newline_end = false;
      if (starts_with(p, "+%}")) {
        end = p + 3;
      } else if (starts_with(p, "-%}")) {
        end = skip_space(p + 3);
        newline_end = end > p + 3 && src_[end - 1] == '\n';
      } else if (starts_with(p, "%}")) {
        end = p + 2;
        if (end < src_.size() && src_[end] == '\n') {
          ++end;
          newline_end = true;
        }
      } else {
        continue;
      }
      std::string text = src_.substr(from, k - from);
      strip_before_tag(text, sign, true);
      emit_data(from, std::move(text));
      line_starting_ = newline_end;
      return end;
    }
    error(tag, "Missing end of raw directive");
  }

  // Tokens inside {% ... %} or {{ ... }}, up to and including the closing delimiter.
  std::size_t lex_tag(std::size_t p, bool block) {
    std::string balance;  // the closing brackets we wait for
    while (true) {
      if (p >= src_.size())
        error(p, block ? "unexpected end of template, expected 'end of statement block'"
                       : "unexpected end of template, expected 'end of print statement'");
      if (balance.empty()) {
        const char* close = block ? "%}" : "}}";
        if (src_[p] == '-' && starts_with(p + 1, close)) {
          push(block ? TokenType::block_end : TokenType::var_end, p, "");
          const std::size_t end = skip_space(p + 3);
          line_starting_ = end > p + 3 && src_[end - 1] == '\n';
          return end;
        }
        if (block && starts_with(p, "+%}")) {
          push(TokenType::block_end, p, "");
          line_starting_ = false;
          return p + 3;
        }
        if (starts_with(p, close)) {
          push(block ? TokenType::block_end : TokenType::var_end, p, "");
          std::size_t end = p + 2;
          line_starting_ = false;
          if (block && end < src_.size() && src_[end] == '\n') {  // trim_blocks
            ++end;
            line_starting_ = true;
          }
          return end;
        }
      }
      const char c = src_[p];
      std::size_t next = p;
      if (py_isspace(utf8_next(src_, next))) {
        p = skip_space(p);
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else if (is_name_start(c)) {
        std::size_t e = p;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        push(TokenType::name, p, src_.substr(p, e - p));
        p = e;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        p = lex_operator(p, balance);
      }
    }
  }

  std::size_t digits_with_underscores(std::size_t p, bool (*ok)(char)) const {
    // (\d+_)*\d+ style: digits, single underscores between digits.
    if (p >= src_.size() || !ok(src_[p])) return std::string::npos;
    while (p < src_.size()) {
      if (ok(src_[p])) {
        ++p;
      } else if (src_[p] == '_' && p + 1 < src_.size() && ok(src_[p + 1])) {
        p += 2;
      } else {
        break;
      }
    }
    return p;
  }

  std::size_t lex_number(std::size_t p) {
    auto dec = [](char ch) { return ch >= '0' && ch <= '9'; };
    auto strip_underscores = [](std::string s) {
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      return s;
    };
    // float_re: (?<!\.) digits ( (\.digits)? e[+-]?digits | \.digits )
    if (p == 0 || src_[p - 1] != '.') {
      const std::size_t int_end = digits_with_underscores(p, dec);
      std::size_t frac_end = std::string::npos;
      if (int_end < src_.size() && src_[int_end] == '.')
        frac_end = digits_with_underscores(int_end + 1, dec);
      const std::size_t mant_end = frac_end != std::string::npos ? frac_end : int_end;
      std::size_t exp_end = std::string::npos;
      if (mant_end < src_.size() && (src_[mant_end] == 'e' || src_[mant_end] == 'E')) {
        std::size_t q = mant_end + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        exp_end = digits_with_underscores(q, dec);
      }
      const std::size_t end = exp_end != std::string::npos ? exp_end : frac_end;
      if (end != std::string::npos) {
        auto& t = push(TokenType::floating, p, src_.substr(p, end - p));
        t.float_value = std::strtod(strip_underscores(t.text).c_str(), nullptr);
        return end;
      }
    }
    // integer_re: 0b.., 0o.., 0x.., [1-9](_?\d)*, 0(_?0)*
    std::size_t end = std::string::npos;
    int base = 10;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      const char b = static_cast<char>(src_[p + 1] | 0x20);
      bool (*ok)(char) = nullptr;
      if (b == 'b') {
        base = 2, ok = [](char ch) { return ch == '0' || ch == '1'; };
      } else if (b == 'o') {
        base = 8, ok = [](char ch) { return ch >= '0' && ch <= '7'; };
      } else if (b == 'x') {
        base = 16, ok = [](char ch) { return hex_value(ch) >= 0; };
      }
      if (ok) {
        // (_?digit)+ after the prefix
        std::size_t q = p + 2;
        if (q < src_.size() && src_[q] == '_') ++q;
        end = digits_with_underscores(q, ok);
        if (end == std::string::npos) base = 10;
      }
    }
    if (end == std::string::npos) {
      base = 10;
      if (src_[p] == '0') {
        end = p + 1;
        while (end < src_.size() &&
               (src_[end] == '0' ||
                (src_[end] == '_' && end + 1 < src_.size() && src_[end + 1] == '0')))
          end += src_[end] == '_' ? 2 : 1;
      } else {
        end = digits_with_underscores(p, dec);
      }
    }
    std::string text = src_.substr(p, end - p);
    std::string digits = strip_underscores(base == 10 ? text : text.substr(2));
    errno = 0;
    char* stop = nullptr;
    const long long v = std::strtoll(digits.c_str(), &stop, base);
    if (errno == ERANGE)
      error(
          p,
          fmt::format("integer literal {} is beyond the 64-bit range troupe's templates use", text),
          FaultKind::unsupported);
    auto& t = push(TokenType::integer, p, std::move(text));
    t.int_value = v;
    return end;
  }

  std::size_t lex_string(std::size_t p) {
    const char quote = src_[p];
    std::size_t q = p + 1;
    while (q < src_.size() && src_[q] != quote) q += src_[q] == '\\' ? 2 : 1;
    if (q >= src_.size())
      error(p, fmt::format("unexpected char {} at {}", str_repr(std::string(1, quote)), p));
    std::string value;
    try {
      value = decode_string_literal(std::string_view(src_).substr(p + 1, q - p - 1));
    } catch (Fault& f) {
      locate(p, f.line, f.column);
      throw;
    }
    push(TokenType::string, p, std::move(value));
    return q + 1;
  }

  std::size_t lex_operator(std::size_t p, std::string& balance) {
    static constexpr std::string_view two[] = {"**", "//", "==", "!=", ">=", "<="};
    for (auto op : two) {
      if (starts_with(p, op)) {
        push(TokenType::op, p, std::string(op));
        return p + 2;
      }
    }
    const char c = src_[p];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      std::size_t next = p;
      std::string ch;
      utf8_append(ch, utf8_next(src_, next));
      error(p, fmt::format("unexpected char {} at {}", str_repr(ch), p));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance += c == '(' ? ')' : c == '[' ? ']' : '}';
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) error(p, fmt::format("unexpected '{}'", c));
      if (balance.back() != c)
        error(p, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      balance.pop_back();
    }
    push(TokenType::op, p, std::string(1, c));
    return p + 1;
  }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::data:
      return "template data / text";
    case TokenType::var_begin:
      return "begin of print statement";
    case TokenType::var_end:
      return "end of print statement";
    case TokenType::block_begin:
      return "begin of statement block";
    case TokenType::block_end:
      return "end of statement block";
    case TokenType::name:
    case TokenType::op:
      return "'" + t.text + "'";
    case TokenType::string:
      return "string";
    case TokenType::integer:
      return "integer";
    case TokenType::floating:
      return "float";
    case TokenType::eof:
      return "end of template";
  }
  return "token";
}

}  // namespace troupe::chat
