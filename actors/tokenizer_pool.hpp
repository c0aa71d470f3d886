// The tokenizer pool: several tokenizer actors sharing one immutable Tokenizer. Encodes are
// spread round-robin; each sequence's incremental detokenizer lives in one member (chosen by
// sequence id), so its pushes are handled in order and its state needs no locks.
#pragma once

#include <memory>
#include <vector>

#include "actors/messages.hpp"
#include "runtime/tokenizer/tokenizer.hpp"

namespace troupe {

/// Encodes prompts and detokenizes outputs incrementally. The pool actor routes detok work by
/// sequence id (each sequence's state lives in one member) and spreads encodes round-robin.
using tokenizer_actor = caf::typed_actor<
    caf::replies_to<encode_atom, std::string, bool>::with<std::vector<int32_t>>,
    caf::replies_to<decode_atom, std::vector<int32_t>, bool>::with<std::string>,
    caf::replies_to<detok_atom, DetokBatch>::with<DetokDeltas>>;

class TokenizerPool {
 public:
  TokenizerPool() = default;
  TokenizerPool(caf::actor_system& sys, std::shared_ptr<const Tokenizer> tokenizer, int size);

  [[nodiscard]] bool empty() const { return members_.empty(); }
  [[nodiscard]] size_t size() const { return members_.size(); }
  [[nodiscard]] const tokenizer_actor& for_sequence(uint64_t seq_id) const {
    return members_[seq_id % members_.size()];
  }
  [[nodiscard]] const tokenizer_actor& next() { return members_[next_++ % members_.size()]; }
  [[nodiscard]] const std::vector<tokenizer_actor>& members() const { return members_; }

 private:
  std::vector<tokenizer_actor> members_;
  size_t next_ = 0;
};

}  // namespace troupe
