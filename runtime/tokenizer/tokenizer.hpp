// Hugging Face `tokenizer.json` tokenizers for byte-level BPE (GPT-2, Llama 3, Qwen2/Qwen3 and
// models trained with HF `tokenizers`' ByteLevel BPE), giving the ids HF gives.
//
// What encode does, in HF tokenizers' order:
//   1. added tokens with normalized=false are cut out of the raw text (longest match first);
//   2. the pieces between are normalized (NFC, ...) and cut on normalized=true added tokens;
//   3. the pre-tokenizer splits the rest into words (Split regexes via Oniguruma, ByteLevel);
//   4. BPE turns each word into ids (lowest merge rank first, words cached);
//   5. with add_special_tokens the post_processor adds its special tokens (Llama 3: BOS).
// decode concatenates the tokens' bytes (ByteLevel decoder; special tokens skipped on request)
// and replaces ill-formed UTF-8 with U+FFFD, exactly like HF `tokenizers`' decode. It does not
// apply transformers' Python-side `clean_up_tokenization_spaces` (vLLM streams HF's plain
// decode too).
//
// tokenizer_config.json (optional, beside tokenizer.json) gives bos/eos, chat_template (or
// chat_template.jinja beside it) and model_max_length. add_bos_token / add_eos_token = true make
// encode(add_special_tokens=true) add BOS / EOS when the post_processor does not already
// (transformers' LlamaTokenizerFast behaviour). Truncation and padding in tokenizer.json are
// ignored: transformers turns them off unless a call asks for them, and so does vLLM.
//
// A loaded Tokenizer is immutable; all const members may be called from any number of threads.
#pragma once

#include "runtime/tokenizer/utf8.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

class Tokenizer {
 public:
  /// `path` is a directory holding tokenizer.json (+ optional tokenizer_config.json) or the
  /// tokenizer.json file itself. Throws troupe::Error naming the path and the field for a missing
  /// file, bad JSON, or an unsupported model / normalizer / pre_tokenizer / post_processor /
  /// decoder type.
  static std::shared_ptr<const Tokenizer> load(const std::filesystem::path& path);

  /// A tokenizer from the text of a tokenizer.json alone (no tokenizer_config.json: no bos/eos
  /// ids, chat template or model_max_length); `origin` names it in errors. Throws troupe::Error
  /// as load() does.
  static std::shared_ptr<const Tokenizer> from_json_text(std::string_view tokenizer_json,
                                                         std::string_view origin);

  /// Token ids of `text` (UTF-8; throws troupe::Error naming the offset of an invalid byte).
  /// Special tokens written in the text ("<|im_start|>") are always recognised;
  /// `add_special_tokens` only controls what the post_processor adds (Llama 3's BOS).
  [[nodiscard]] std::vector<int32_t> encode(std::string_view text,
                                            bool add_special_tokens = true) const;
  /// Text of `ids`. Throws troupe::Error for an id < 0 or >= vocab_size().
  [[nodiscard]] std::string decode(std::span<const int32_t> ids,
                                   bool skip_special_tokens = true) const;

  /// Highest id + 1, added tokens included.
  [[nodiscard]] int32_t vocab_size() const;
  /// Id of a token given in its raw vocab form ("Ġhello", "<|im_end|>"), added tokens first.
  [[nodiscard]] std::optional<int32_t> token_to_id(std::string_view token) const;
  /// Raw token string of `id` ("Ġhello"); "" for an id that no token has. Throws troupe::Error
  /// for an id outside 0..vocab_size()-1.
  [[nodiscard]] std::string id_to_token(int32_t id) const;
  /// Whether `id` is an added token marked special (what skip_special_tokens skips). False for
  /// ids out of range.
  [[nodiscard]] bool is_special(int32_t id) const;
  /// From tokenizer_config.json (bos_token / eos_token); nullopt when absent or not in the vocab.
  [[nodiscard]] std::optional<int32_t> bos_token_id() const;
  [[nodiscard]] std::optional<int32_t> eos_token_id() const;
  /// The Jinja chat template as text; "" when none.
  [[nodiscard]] const std::string& chat_template() const;
  /// tokenizer_config.json's model_max_length; 0 when unknown (absent, or transformers'
  /// "no limit" placeholder int(1e30)).
  [[nodiscard]] int64_t model_max_length() const;

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

 private:
  friend class IncrementalDetokenizer;
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);

  /// load() and from_json_text(): tokenizer.json's text, then tokenizer_config.json (and
  /// chat_template.jinja) from `config_dir` when it is given.
  static std::shared_ptr<const Tokenizer> build(std::string_view tokenizer_json,
                                                std::string_view origin,
                                                const std::filesystem::path* config_dir);

  /// Checks every id (throwing "<who>: token id ..." for a bad one), then appends the bytes the
  /// ByteLevel decoder makes of them to `out` (when not null).
  void append_bytes(std::span<const int32_t> ids, bool skip_special_tokens, std::string_view who,
                    std::string* out) const;
  /// The content of added token `id` ("<|im_end|>"), or null when `id` is no added token.
  [[nodiscard]] const std::string* added_content(int32_t id) const;

  std::unique_ptr<Impl> impl_;
};

// Streaming detokenization that never emits a broken UTF-8 sequence mid-stream: push() returns
// only text that is final; flush() returns what is left at the end (an incomplete trailing
// sequence becomes U+FFFD, like HF decode). text() is everything emitted so far.
//
// Byte-level decoding needs no context: the text of an id sequence is the lossy UTF-8 decoding
// of its tokens' concatenated bytes, and that decoding can be done byte by byte, holding back at
// most 3 bytes of an unfinished character. So, for every sequence of output ids,
// concat(push(...)...) + flush() == tok->decode(all output ids, skip_special_tokens). The prompt
// ids are checked but not needed (vLLM's prefix/read offsets exist for decoders that need
// context).
//
// spaces_between_special_tokens follows vLLM with a tokenizer.json ("fast") tokenizer, which is
// every tokenizer troupe loads (vllm/v1/engine/detokenizer.py, FastIncrementalDetokenizer): true
// (the default) adds nothing, the text is the decoder's, as above; false, with
// skip_special_tokens false, writes an added token that directly follows another output added
// token as its raw content instead of what the decoder makes of it (for decoders that prefix a
// space). transformers' " ".join of special tokens belongs to Python ("slow") tokenizers only,
// which vLLM does not use for these models. With the ByteLevel decoder the two differ only for an
// added token whose content is not its own byte-level spelling ("<Ġx>" decodes to "< x>"); for
// Qwen3's and Llama 3's added tokens they are the same text.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tok, std::span<const int32_t> prompt_ids,
                         bool skip_special_tokens = true,
                         bool spaces_between_special_tokens = true);
  /// Text completed by `new_ids`. Throws troupe::Error (and changes nothing) for a bad id.
  std::string push(std::span<const int32_t> new_ids);
  /// Text still held back (U+FFFD for an unfinished character, "" otherwise).
  std::string flush();
  [[nodiscard]] const std::string& text() const { return text_; }

 private:
  std::shared_ptr<const Tokenizer> tok_;
  bool skip_special_tokens_;
  bool raw_added_after_added_;  // spaces_between_special_tokens false (see above)
  bool last_added_ = false;     // the last output token was an added token
  tokenizer_detail::utf8::LossyDecoder decoder_;
  std::string text_;
  std::string bytes_;  // scratch
};

}  // namespace troupe
