// tokenizer.json "pre_tokenizer": Split (Oniguruma regex or literal string; behavior Removed,
// Isolated, MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space,
// use_regex with GPT-2's regex) and Sequence of these, with HF tokenizers' semantics (empty
// pieces dropped, ByteLevel's prefix space added to every piece it sees).
#pragma once

#include "runtime/tokenizer/json_fields.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

struct re_pattern_buffer;  // Oniguruma's regex_t; oniguruma.h stays out of headers

namespace troupe::tokenizer_detail {

/// A compiled Oniguruma regex (UTF-8, Ruby syntax: what the Rust `onig` crate that HF tokenizers
/// uses compiles). Matching is thread-safe.
class OnigPattern {
 public:
  /// Throws troupe::Error("<what>: <Oniguruma's message>") for a pattern it cannot compile.
  OnigPattern(std::string_view pattern, std::string_view what);
  ~OnigPattern();
  OnigPattern(const OnigPattern&) = delete;
  OnigPattern& operator=(const OnigPattern&) = delete;

  /// Appends the [begin, end) byte ranges of the matches in `text`, in the order and with the
  /// empty-match rule of onig's find_iter (an empty match right where the previous match ended
  /// is skipped by advancing one character).
  void find_all(std::string_view text, std::vector<std::pair<std::size_t, std::size_t>>& out) const;

 private:
  re_pattern_buffer* regex_ = nullptr;
};

class PreTokenizer {
 public:
  /// `value` is the "pre_tokenizer" field (may be null).
  static PreTokenizer from_json(const tokenizer_json::json& value,
                                const tokenizer_json::Where& where);

  /// Splits one (normalized, added-token-free) segment into words and appends them to `words`.
  /// With a ByteLevel step the words are in the byte-level alphabet.
  void split(std::string_view segment, std::vector<std::string>& words) const;

  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

 private:
  enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };
  struct SplitStep {
    std::shared_ptr<const OnigPattern> pattern;
    Behavior behavior;
    bool invert;
  };
  struct ByteLevelStep {
    bool add_prefix_space;
    bool use_regex;
  };
  using Step = std::variant<SplitStep, ByteLevelStep>;

  static void add_component(const tokenizer_json::json& value, const tokenizer_json::Where& where,
                            std::vector<Step>& steps);
  static void apply(const SplitStep& step, std::string_view piece, std::vector<std::string>& out);
  static void apply(const ByteLevelStep& step, std::string_view piece,
                    std::vector<std::string>& out);

  std::vector<Step> steps_;
};

}  // namespace troupe::tokenizer_detail
