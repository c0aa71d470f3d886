// tokenizer.json "model" of type BPE: vocab, merges (both the "a b" string form and the [a, b]
// list form), ignore_merges, unk_token / fuse_unk, byte_fallback, continuing_subword_prefix and
// end_of_word_suffix, with HF tokenizers' merge order (lowest rank first, leftmost among equal
// ranks). Words are cached: encode runs concurrently on one const tokenizer, so the cache is
// sharded and locked.
#pragma once

#include "runtime/tokenizer/json_fields.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::tokenizer_detail {

/// Hash for unordered maps keyed by std::string that are searched with std::string_view.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
 public:
  /// `value` is the "model" field. Throws troupe::Error naming `where` for bad or unsupported
  /// content (another model type, a merge whose parts or result are not in the vocab, ...).
  static BpeModel from_json(const tokenizer_json::json& value, const tokenizer_json::Where& where);

  /// Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  [[nodiscard]] std::optional<int32_t> token_to_id(std::string_view token) const;
  /// The token of `id`, or nullptr if no vocab entry has that id.
  [[nodiscard]] const std::string* id_to_token(int32_t id) const;
  /// Highest id in the vocab, -1 when it is empty.
  [[nodiscard]] int32_t max_id() const { return static_cast<int32_t>(tokens_.size()) - 1; }

  BpeModel();
  ~BpeModel();
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;

 private:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  class WordCache;

  void merge_word(std::string_view word, std::vector<int32_t>& ids) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> tokens_;  // id -> token ("" where no token has the id)
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::array<int32_t, 256> byte_fallback_ids_{};  // "<0xAB>" tokens, -1 if absent
  std::unique_ptr<WordCache> cache_;
};

}  // namespace troupe::tokenizer_detail
