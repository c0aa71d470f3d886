#include "runtime/tokenizer/pre_tokenizer.hpp"

#include "runtime/error.hpp"
#include "runtime/tokenizer/byte_level.hpp"
#include "runtime/tokenizer/utf8.hpp"

#include <oniguruma.h>

#include <algorithm>
#include <mutex>
#include <optional>

namespace troupe::tokenizer_detail {

using tokenizer_json::json;
using tokenizer_json::Where;

namespace {

// onig_new and onig_initialize are not thread-safe (searching is); tokenizers may be loaded from
// several threads at once.
std::mutex& onig_compile_mutex() {
  static std::mutex m;
  return m;
}

std::string onig_message(int code, OnigErrorInfo* info) {
  OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int n =
      info != nullptr ? onig_error_code_to_str(buf, code, info) : onig_error_code_to_str(buf, code);
  return std::string(reinterpret_cast<const char*>(buf), n > 0 ? static_cast<std::size_t>(n) : 0);
}

// GPT-2's pre-tokenization regex, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const OnigPattern& gpt2_pattern() {
  static const OnigPattern pattern(kGpt2Pattern, "ByteLevel pre-tokenizer regex");
  return pattern;
}

// HF compiles Split's String patterns as an escaped regex; escaping Oniguruma's metacharacters
// gives the same literal match.
std::string escape_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view(R"(\.+*?()|[]{}^$#&-~)").find(c) != std::string_view::npos) {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

// ---- OnigPattern -------------------------------------------------------------------------

OnigPattern::OnigPattern(std::string_view pattern, std::string_view what) {
  std::lock_guard<std::mutex> lock(onig_compile_mutex());
  static const bool initialized = [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
    return true;
  }();
  (void)initialized;
  OnigErrorInfo info{};
  const auto* begin = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int rc = onig_new(&regex_, begin, begin + pattern.size(), ONIG_OPTION_NONE,
                          ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &info);
  if (rc != ONIG_NORMAL) {
    regex_ = nullptr;
    fail("{}: cannot compile regex \"{}\": {}", what, pattern, onig_message(rc, &info));
  }
}

OnigPattern::~OnigPattern() {
  if (regex_ != nullptr) onig_free(regex_);
}

void OnigPattern::find_all(std::string_view text,
                           std::vector<std::pair<std::size_t, std::size_t>>& out) const {
  OnigRegion* region = onig_region_new();
  std::unique_ptr<OnigRegion, void (*)(OnigRegion*)> guard(
      region, [](OnigRegion* r) { onig_region_free(r, 1); });
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = str + text.size();
  std::size_t last_end = 0;
  std::optional<std::size_t> last_match_end;
  while (last_end <= text.size()) {
    const int rc = onig_search(regex_, str, end, str + last_end, end, region, ONIG_OPTION_NONE);
    if (rc == ONIG_MISMATCH) break;
    if (rc < 0) fail("tokenizer regex search failed: {}", onig_message(rc, nullptr));
    const auto b = static_cast<std::size_t>(region->beg[0]);
    const auto e = static_cast<std::size_t>(region->end[0]);
    if (b == e && last_match_end == e) {
      // An empty match where the last match ended: step over one character.
      if (last_end < text.size()) {
        std::size_t i = last_end;
        (void)utf8::next(text, i);
        last_end = i;
      } else {
        ++last_end;
      }
      continue;
    }
    last_end = e;
    last_match_end = e;
    out.emplace_back(b, e);
  }
}

// ---- PreTokenizer ------------------------------------------------------------------------

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

PreTokenizer PreTokenizer::from_json(const json& value, const Where& where) {
  PreTokenizer p;
  if (!value.is_null()) add_component(value, where, p.steps_);
  return p;
}

void PreTokenizer::add_component(const json& value, const Where& where, std::vector<Step>& steps) {
  const std::string type = tokenizer_json::type_of(value, where);
  if (type == "Sequence") {
    const json* list = tokenizer_json::member(value, "pretokenizers");
    if (list == nullptr || !list->is_array()) (where / "pretokenizers").fail("expected a list");
    for (std::size_t i = 0; i < list->size(); ++i) {
      add_component((*list)[i], (where / "pretokenizers")[i], steps);
    }
  } else if (type == "ByteLevel") {
    steps.emplace_back(
        ByteLevelStep{tokenizer_json::bool_member(value, "add_prefix_space", true, where),
                      tokenizer_json::bool_member(value, "use_regex", true, where)});
  } else if (type == "Split") {
    const json* pattern = tokenizer_json::member(value, "pattern");
    const Where pattern_where = where / "pattern";
    if (pattern == nullptr || !pattern->is_object() || pattern->size() != 1) {
      pattern_where.fail(R"(expected {"Regex": "..."} or {"String": "..."})");
    }
    std::string regex;
    if (const json* r = tokenizer_json::member(*pattern, "Regex")) {
      if (!r->is_string()) (pattern_where / "Regex").fail("expected a string");
      regex = r->get<std::string>();
    } else if (const json* s = tokenizer_json::member(*pattern, "String")) {
      if (!s->is_string()) (pattern_where / "String").fail("expected a string");
      regex = escape_literal(s->get<std::string>());
    } else {
      pattern_where.fail(R"(expected {"Regex": "..."} or {"String": "..."})");
    }
    const std::string behavior = tokenizer_json::string_member(value, "behavior", where);
    Behavior b{};
    if (behavior == "Removed") {
      b = Behavior::removed;
    } else if (behavior == "Isolated") {
      b = Behavior::isolated;
    } else if (behavior == "MergedWithPrevious") {
      b = Behavior::merged_with_previous;
    } else if (behavior == "MergedWithNext") {
      b = Behavior::merged_with_next;
    } else if (behavior == "Contiguous") {
      b = Behavior::contiguous;
    } else {
      (where / "behavior")
          .fail(fmt::format("unknown behavior \"{}\" (allowed: Removed, Isolated, "
                            "MergedWithPrevious, MergedWithNext, Contiguous)",
                            behavior));
    }
    steps.emplace_back(SplitStep{std::make_shared<const OnigPattern>(regex, pattern_where.str()), b,
                                 tokenizer_json::bool_member(value, "invert", false, where)});
  } else {
    (where / "type")
        .fail(fmt::format("unsupported pre_tokenizer type \"{}\" (supported: Split, ByteLevel, "
                          "Sequence)",
                          type));
  }
}

void PreTokenizer::split(std::string_view segment, std::vector<std::string>& words) const {
  if (segment.empty()) return;
  std::vector<std::string> pieces{std::string(segment)};
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (const std::string& piece : pieces) {
      std::visit([&](const auto& s) { apply(s, piece, next); }, step);
    }
    pieces.swap(next);
  }
  for (std::string& p : pieces) words.push_back(std::move(p));
}

void PreTokenizer::apply(const SplitStep& step, std::string_view piece,
                         std::vector<std::string>& out) {
  struct Span {
    std::size_t begin, end;
    bool is_match;
  };
  std::vector<std::pair<std::size_t, std::size_t>> found;
  step.pattern->find_all(piece, found);
  // Cover the whole piece with alternating non-match / match spans (HF's find_matches).
  std::vector<Span> spans;
  std::size_t prev = 0;
  for (const auto& [b, e] : found) {
    if (prev != b) spans.push_back({prev, b, false});
    spans.push_back({b, e, true});
    prev = e;
  }
  if (prev != piece.size()) spans.push_back({prev, piece.size(), false});
  if (step.invert) {
    for (Span& s : spans) s.is_match = !s.is_match;
  }

  std::vector<Span> kept;  // is_match here means "remove"
  bool previous_match = false;
  switch (step.behavior) {
    case Behavior::isolated:
      for (const Span& s : spans) kept.push_back({s.begin, s.end, false});
      break;
    case Behavior::removed:
      for (const Span& s : spans) kept.push_back(s);
      break;
    case Behavior::contiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::merged_with_previous:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::merged_with_next:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Span& s : kept) {
    if (!s.is_match && s.end > s.begin) out.emplace_back(piece.substr(s.begin, s.end - s.begin));
  }
}

void PreTokenizer::apply(const ByteLevelStep& step, std::string_view piece,
                         std::vector<std::string>& out) {
  std::string text;
  if (step.add_prefix_space && (piece.empty() || piece.front() != ' ')) text.push_back(' ');
  text.append(piece);
  auto emit = [&](std::string_view part) {
    if (part.empty()) return;
    std::string mapped;
    byte_level::encode(part, mapped);
    out.push_back(std::move(mapped));
  };
  if (!step.use_regex) {
    emit(text);
    return;
  }
  std::vector<std::pair<std::size_t, std::size_t>> found;
  gpt2_pattern().find_all(text, found);
  std::size_t prev = 0;
  for (const auto& [b, e] : found) {
    if (prev != b) emit(std::string_view(text).substr(prev, b - prev));
    emit(std::string_view(text).substr(b, e - b));
    prev = e;
  }
  if (prev != text.size()) emit(std::string_view(text).substr(prev));
}

}  // namespace troupe::tokenizer_detail
