// tokenizer.json "post_processor": what encode(text, add_special_tokens=true) adds around the
// ids. TemplateProcessing (the "single" template), RobertaProcessing / BertProcessing
// (cls $A sep), ByteLevel (offsets only: nothing to do for ids) and Sequence of these. Llama 3's
// Sequence [ByteLevel, TemplateProcessing(<|begin_of_text|> $A)] is what adds its BOS.
#pragma once

#include "runtime/tokenizer/json_fields.hpp"

#include <cstdint>
#include <vector>

namespace troupe::tokenizer_detail {

class PostProcessor {
 public:
  /// `value` is the "post_processor" field (may be null).
  static PostProcessor from_json(const tokenizer_json::json& value,
                                 const tokenizer_json::Where& where);

  /// Adds the special tokens to one encoded sequence (only called for add_special_tokens=true).
  void apply(std::vector<int32_t>& ids) const;
  /// Whether apply() puts `id` first / last.
  [[nodiscard]] bool adds_leading(int32_t id) const;
  [[nodiscard]] bool adds_trailing(int32_t id) const;

 private:
  struct Item {
    bool is_sequence;          // the encoded text ("$A")
    std::vector<int32_t> ids;  // otherwise: these special token ids
  };
  using Template = std::vector<Item>;

  static void add_component(const tokenizer_json::json& value, const tokenizer_json::Where& where,
                            std::vector<Template>& templates);

  std::vector<Template> templates_;  // applied in order
};

}  // namespace troupe::tokenizer_detail
