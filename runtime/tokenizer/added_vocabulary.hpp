// tokenizer.json "added_tokens": tokens matched in the text before the model runs, leftmost
// first and longest among those starting at one place (HF's LeftmostLongest Aho-Corasick).
// Tokens with normalized=false are matched on the raw text, the others on the normalized text
// of the pieces between; lstrip/rstrip swallow neighbouring whitespace and single_word drops a
// match that touches a word character, as in HF tokenizers.
#pragma once

#include "runtime/tokenizer/json_fields.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::tokenizer_detail {

class Normalizer;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = true;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

class AddedVocabulary {
 public:
  /// A piece of the text: [begin, end) byte offsets, and the added token it is, or -1.
  struct Span {
    std::size_t begin, end;
    int32_t id;
  };

  /// `value` is the "added_tokens" list (may be null). Tokens with normalized=true are matched
  /// in their normalized form.
  static AddedVocabulary from_json(const tokenizer_json::json& value,
                                   const tokenizer_json::Where& where,
                                   const Normalizer& normalizer);

  /// Splits `text` on the tokens of one kind: normalized=false ones when `normalized` is false
  /// (pass 1, raw text), normalized=true ones otherwise (pass 2, normalized pieces). Appends
  /// spans covering all of `text`; empty spans are left out.
  void split(std::string_view text, bool normalized, std::vector<Span>& out) const;

  [[nodiscard]] const std::vector<AddedToken>& tokens() const { return tokens_; }
  [[nodiscard]] const AddedToken* find(int32_t id) const;
  [[nodiscard]] std::optional<int32_t> token_to_id(std::string_view content) const;
  /// Whether any token of the kind exists (lets encode skip a pass).
  [[nodiscard]] bool has(bool normalized) const {
    return !(normalized ? normalized_trie_ : raw_trie_).nodes.empty();
  }

 private:
  // A byte trie; node 0 is the root.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;
      int32_t token = -1;  // index in tokens_ of the token ending here
    };
    std::vector<Node> nodes;
    void insert(std::string_view key, int32_t token);
    /// Length and token of the longest key that starts at text[pos], or {0, -1}.
    [[nodiscard]] std::pair<std::size_t, int32_t> longest(std::string_view text,
                                                          std::size_t pos) const;
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, std::size_t> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
  Trie raw_trie_, normalized_trie_;
};

}  // namespace troupe::tokenizer_detail
