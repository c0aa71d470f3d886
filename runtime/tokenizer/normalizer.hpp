// tokenizer.json "normalizer": null, a Unicode normal form (NFC, NFD, NFKC, NFKD) or a Sequence
// of them. Qwen2/Qwen3 use NFC; GPT-2 and Llama 3 use none.
#pragma once

#include "runtime/tokenizer/json_fields.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace troupe::tokenizer_detail {

class Normalizer {
 public:
  /// `value` is the "normalizer" field (may be null). Throws troupe::Error naming `where` for
  /// an unsupported type.
  static Normalizer from_json(const tokenizer_json::json& value,
                              const tokenizer_json::Where& where);

  /// Whether normalization is the identity.
  [[nodiscard]] bool empty() const { return forms_.empty(); }
  /// The normalized text. `text` must be valid UTF-8.
  [[nodiscard]] std::string apply(std::string_view text) const;

 private:
  std::vector<int> forms_;  // utf8proc option sets, applied in order
};

}  // namespace troupe::tokenizer_detail
