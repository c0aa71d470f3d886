#include "actors/tokenizer_pool.hpp"

#include <unordered_map>

namespace troupe {

namespace {

struct tokenizer_state {
  std::shared_ptr<const Tokenizer> tok;
  std::unordered_map<uint64_t, IncrementalDetokenizer> detok;
  static inline const char* name = "troupe.tokenizer";
};

tokenizer_actor::behavior_type tokenizer_behavior(
    tokenizer_actor::stateful_pointer<tokenizer_state> self,
    std::shared_ptr<const Tokenizer> tok) {
  self->state.tok = std::move(tok);
  return {
      [=](encode_atom, const std::string& text,
          bool add_special) -> caf::result<std::vector<int32_t>> {
        try {
          return self->state.tok->encode(text, add_special);
        } catch (const std::exception& e) {
          return make_troupe_error(e.what());
        }
      },
      [=](decode_atom, const std::vector<int32_t>& ids,
          bool skip_special) -> caf::result<std::string> {
        try {
          return self->state.tok->decode(ids, skip_special);
        } catch (const std::exception& e) {
          return make_troupe_error(e.what());
        }
      },
      // One sequence's bad token id fails that sequence alone (reported in `errors`, its
      // detokenizer dropped); the rest of the batch is detokenized as usual.
      [=](detok_atom, DetokBatch& batch) -> DetokDeltas {
        auto& st = self->state;
        DetokDeltas out;
        for (auto& o : batch.open) {
          try {
            st.detok.insert_or_assign(
                o.seq_id, IncrementalDetokenizer(st.tok, o.prompt_token_ids,
                                                 o.skip_special_tokens,
                                                 o.spaces_between_special_tokens));
          } catch (const std::exception& e) {
            st.detok.erase(o.seq_id);
            out.errors.emplace_back(o.seq_id, e.what());
          }
        }
        for (auto& p : batch.push) {
          auto it = st.detok.find(p.seq_id);
          if (it == st.detok.end()) continue;  // detokenize = false, failed, or already closed
          try {
            std::string text = it->second.push(p.new_token_ids);
            if (p.finish) {
              text += it->second.flush();
              st.detok.erase(it);
            }
            out.items.emplace_back(p.seq_id, std::move(text));
          } catch (const std::exception& e) {
            st.detok.erase(it);
            out.errors.emplace_back(p.seq_id, e.what());
          }
        }
        return out;
      },
  };
}

}  // namespace

TokenizerPool::TokenizerPool(caf::actor_system& sys, std::shared_ptr<const Tokenizer> tokenizer,
                             int size) {
  for (int i = 0; i < std::max(size, 1); ++i)
    members_.push_back(sys.spawn(tokenizer_behavior, tokenizer));
}

}  // namespace troupe
