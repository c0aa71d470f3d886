#include "runtime/tokenizer/tokenizer.hpp"

#include "runtime/error.hpp"

namespace troupe {

using namespace tokenizer_detail;  // the pieces in runtime/tokenizer/*.hpp

IncrementalDetokenizer::IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tok,
                                               std::span<const int32_t> prompt_ids,
                                               bool skip_special_tokens,
                                               bool spaces_between_special_tokens)
    : tok_(std::move(tok)),
      skip_special_tokens_(skip_special_tokens),
      // vLLM: skip_special_tokens or spaces_between_special_tokens keeps the decoder's text.
      raw_added_after_added_(!skip_special_tokens && !spaces_between_special_tokens) {
  if (!tok_) fail("IncrementalDetokenizer: the tokenizer is null");
  // The prompt gives no context to byte-level decoding (see the header), but a bad id in it is
  // still a caller's mistake worth reporting here.
  tok_->append_bytes(prompt_ids, true, "IncrementalDetokenizer (prompt)", nullptr);
}

std::string IncrementalDetokenizer::push(std::span<const int32_t> new_ids) {
  constexpr std::string_view who = "IncrementalDetokenizer::push";
  bytes_.clear();
  if (!raw_added_after_added_) {
    tok_->append_bytes(new_ids, skip_special_tokens_, who, &bytes_);
  } else {
    tok_->append_bytes(new_ids, false, who, nullptr);  // every id checked before any is used
    for (const int32_t id : new_ids) {
      const std::string* raw = tok_->added_content(id);
      if (raw != nullptr && last_added_)
        bytes_ += *raw;
      else
        tok_->append_bytes(std::span(&id, 1), false, who, &bytes_);
      last_added_ = raw != nullptr;
    }
  }
  std::string out;
  decoder_.feed(bytes_, out);
  text_ += out;
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  decoder_.finish(out);
  text_ += out;
  return out;
}

}  // namespace troupe
