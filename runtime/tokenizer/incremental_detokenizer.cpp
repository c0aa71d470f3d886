#include "runtime/tokenizer/tokenizer.hpp"

#include "runtime/error.hpp"

namespace troupe {

using namespace tokenizer_detail;  // the pieces in runtime/tokenizer/*.hpp

IncrementalDetokenizer::IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tok,
                                               std::span<const int32_t> prompt_ids,
                                               bool skip_special_tokens,
                                               bool /*spaces_between_special_tokens*/)
    : tok_(std::move(tok)), skip_special_tokens_(skip_special_tokens) {
  if (!tok_) fail("IncrementalDetokenizer: the tokenizer is null");
  // The prompt gives no context to byte-level decoding (see the header), but a bad id in it is
  // still a caller's mistake worth reporting here.
  tok_->append_bytes(prompt_ids, true, "IncrementalDetokenizer (prompt)", nullptr);
}

std::string IncrementalDetokenizer::push(std::span<const int32_t> new_ids) {
  bytes_.clear();
  tok_->append_bytes(new_ids, skip_special_tokens_, "IncrementalDetokenizer::push", &bytes_);
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
