#include "runtime/tokenizer/bpe_model.hpp"

#include "runtime/error.hpp"
#include "runtime/tokenizer/utf8.hpp"

#include <functional>
#include <limits>
#include <mutex>
#include <queue>

namespace troupe::tokenizer_detail {

using tokenizer_json::json;
using tokenizer_json::Where;

namespace {

// Ids index dense tables; a bigger id in a file is a mistake, not a vocabulary.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

// ---- the word cache ------------------------------------------------------------------------

// Sharded so that concurrent encodes rarely contend; a full shard is simply cleared (words
// repeat a lot, so it refills with the words that matter now).
class BpeModel::WordCache {
 public:
  static constexpr std::size_t kShards = 16;
  static constexpr std::size_t kShardCapacity = 4096;
  static constexpr std::size_t kMaxWordBytes = 256;  // longer words are rare: not cached

  bool get(std::string_view word, std::vector<int32_t>& ids) {
    if (word.size() >= kMaxWordBytes) return false;
    Shard& shard = shard_of(word);
    std::shared_lock lock(shard.mutex);
    const auto it = shard.map.find(word);
    if (it == shard.map.end()) return false;
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return true;
  }

  void put(std::string_view word, std::vector<int32_t> ids) {
    if (word.size() >= kMaxWordBytes) return;
    Shard& shard = shard_of(word);
    std::unique_lock lock(shard.mutex);
    if (shard.map.size() >= kShardCapacity) shard.map.clear();
    shard.map.emplace(std::string(word), std::move(ids));
  }

 private:
  struct Shard {
    std::shared_mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  Shard& shard_of(std::string_view word) { return shards_[StringHash{}(word) % kShards]; }
  std::array<Shard, kShards> shards_;
};

// ---- loading -------------------------------------------------------------------------------

BpeModel::BpeModel() = default;
BpeModel::~BpeModel() = default;
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;

BpeModel BpeModel::from_json(const json& value, const Where& where) {
  tokenizer_json::require_object(value, where);
  // Files from old versions of `tokenizers` have no "type"; they are BPE when they have merges.
  if (const json* type = tokenizer_json::member(value, "type")) {
    if (!type->is_string() || type->get<std::string>() != "BPE") {
      (where / "type")
          .fail(fmt::format("unsupported model type {} (supported: \"BPE\")",
                            tokenizer_json::brief(*type)));
    }
  } else if (tokenizer_json::member(value, "merges") == nullptr) {
    (where / "type").fail("missing, and the model has no merges (only BPE is supported)");
  }
  if (const json* dropout = tokenizer_json::member(value, "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      (where / "dropout")
          .fail(fmt::format("{} is not supported (BPE dropout is for training; use null)",
                            tokenizer_json::brief(*dropout)));
    }
  }

  BpeModel m;
  m.cache_ = std::make_unique<WordCache>();
  m.fuse_unk_ = tokenizer_json::bool_member(value, "fuse_unk", false, where);
  m.byte_fallback_ = tokenizer_json::bool_member(value, "byte_fallback", false, where);
  m.ignore_merges_ = tokenizer_json::bool_member(value, "ignore_merges", false, where);
  m.continuing_subword_prefix_ =
      tokenizer_json::optional_string(value, "continuing_subword_prefix", where);
  m.end_of_word_suffix_ = tokenizer_json::optional_string(value, "end_of_word_suffix", where);

  // vocab
  const json* vocab = tokenizer_json::member(value, "vocab");
  const Where vocab_where = where / "vocab";
  if (vocab == nullptr || !vocab->is_object()) vocab_where.fail("expected an object {token: id}");
  m.vocab_.reserve(vocab->size());
  int64_t max_id = -1;
  for (const auto& [token, id_value] : vocab->items()) {
    if (!id_value.is_number_integer() || id_value.get<int64_t>() < 0 ||
        id_value.get<int64_t>() > kMaxTokenId) {
      (vocab_where / token)
          .fail(fmt::format("id {} is not an integer in 0..{}", tokenizer_json::brief(id_value),
                            kMaxTokenId));
    }
    const auto id = id_value.get<int64_t>();
    m.vocab_.insert_or_assign(token, static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  m.tokens_.assign(static_cast<std::size_t>(max_id + 1), std::string());
  m.has_token_.assign(static_cast<std::size_t>(max_id + 1), false);
  for (const auto& [token, id] : m.vocab_) {
    m.tokens_[static_cast<std::size_t>(id)] = token;
    m.has_token_[static_cast<std::size_t>(id)] = true;
  }

  // merges
  const json* merges = tokenizer_json::member(value, "merges");
  const Where merges_where = where / "merges";
  if (merges != nullptr) {
    if (!merges->is_array()) merges_where.fail("expected a list of merges");
    m.merges_.reserve(merges->size());
    const std::size_t prefix_len = m.continuing_subword_prefix_.size();
    for (std::size_t i = 0; i < merges->size(); ++i) {
      const json& item = (*merges)[i];
      std::string left, right;
      if (item.is_string()) {
        const std::string& s = item.get_ref<const std::string&>();
        const std::size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
          merges_where[i].fail(fmt::format("\"{}\" is not two tokens separated by one space", s));
        }
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else if (item.is_array() && item.size() == 2 && item[0].is_string() &&
                 item[1].is_string()) {
        left = item[0].get<std::string>();
        right = item[1].get<std::string>();
      } else {
        merges_where[i].fail(
            fmt::format("expected \"a b\" or [\"a\", \"b\"], got {}", tokenizer_json::brief(item)));
      }
      const auto l = m.vocab_.find(left);
      const auto r = m.vocab_.find(right);
      if (l == m.vocab_.end() || r == m.vocab_.end()) {
        merges_where[i].fail(
            fmt::format("token \"{}\" is not in the vocab", l == m.vocab_.end() ? left : right));
      }
      if (right.size() < prefix_len) {
        merges_where[i].fail(
            fmt::format("token \"{}\" lacks the continuing_subword_prefix", right));
      }
      const std::string merged = left + right.substr(prefix_len);
      const auto n = m.vocab_.find(merged);
      if (n == m.vocab_.end()) {
        merges_where[i].fail(fmt::format("merged token \"{}\" is not in the vocab", merged));
      }
      // Like HF, a pair listed twice keeps its last rank.
      m.merges_.insert_or_assign(pair_key(l->second, r->second),
                                 Merge{static_cast<uint32_t>(i), n->second});
    }
  }

  const std::string unk = tokenizer_json::optional_string(value, "unk_token", where);
  if (!unk.empty()) {
    const auto it = m.vocab_.find(unk);
    if (it == m.vocab_.end()) {
      (where / "unk_token").fail(fmt::format("\"{}\" is not in the vocab", unk));
    }
    m.unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = m.vocab_.find(fmt::format("<0x{:02X}>", b));
    m.byte_fallback_ids_[b] = it == m.vocab_.end() ? -1 : it->second;
  }
  return m;
}

// ---- lookups -------------------------------------------------------------------------------

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size() || !has_token_[id]) return nullptr;
  return &tokens_[static_cast<std::size_t>(id)];
}

// ---- tokenizing ----------------------------------------------------------------------------

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  if (cache_->get(word, ids)) return;
  std::vector<int32_t> word_ids;
  merge_word(word, word_ids);
  ids.insert(ids.end(), word_ids.begin(), word_ids.end());
  cache_->put(word, std::move(word_ids));
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, len});
  };

  // 1. One symbol per character (HF's BPE::merge_word).
  int32_t unk_id = -1;  // pending unknown run (HF merges it only with fuse_unk)
  uint32_t unk_len = 0;
  auto flush_unk = [&] {
    if (unk_id >= 0) add(unk_id, unk_len);
    unk_id = -1;
  };
  std::string piece;
  std::size_t i = 0;
  while (i < word.size()) {
    const std::size_t start = i;
    (void)utf8::next(word, i);
    const auto byte_len = static_cast<uint32_t>(i - start);
    piece.clear();
    if (start != 0) piece += continuing_subword_prefix_;
    piece.append(word.substr(start, byte_len));
    if (i == word.size()) piece += end_of_word_suffix_;

    if (const auto it = vocab_.find(piece); it != vocab_.end()) {
      flush_unk();
      add(it->second, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : piece) all = all && byte_fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : piece) add(byte_fallback_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (unk_id_) {
      if (unk_id >= 0 && fuse_unk_) {
        unk_len += byte_len;
      } else {
        flush_unk();
        unk_id = *unk_id_;
        unk_len = byte_len;
      }
    }
    // Without an unk token an unknown character is dropped, as in HF.
  }
  flush_unk();

  // 2. Merge the lowest-ranked pair first; among equal ranks the leftmost.
  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto find_merge = [&](int32_t left, int32_t right) -> const Merge* {
    const auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (std::size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const Merge* mg = find_merge(symbols[k].id, symbols[k + 1].id)) {
      queue.push({mg->rank, static_cast<int32_t>(k), mg->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& cur = symbols[static_cast<std::size_t>(top.pos)];
    if (cur.len == 0 || cur.next == -1) continue;
    const Symbol right = symbols[static_cast<std::size_t>(cur.next)];
    // Skip entries made stale by earlier merges (HF compares the pair's merge result).
    const Merge* still = find_merge(cur.id, right.id);
    if (still == nullptr || still->new_id != top.new_id) continue;

    symbols[static_cast<std::size_t>(cur.next)].len = 0;
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;

    if (cur.prev >= 0) {
      const Symbol& left = symbols[static_cast<std::size_t>(cur.prev)];
      if (const Merge* mg = find_merge(left.id, cur.id)) {
        queue.push({mg->rank, cur.prev, mg->new_id});
      }
    }
    if (cur.next >= 0) {
      const Symbol& next = symbols[static_cast<std::size_t>(cur.next)];
      if (const Merge* mg = find_merge(cur.id, next.id)) {
        queue.push({mg->rank, top.pos, mg->new_id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) ids.push_back(s.id);
  }
}

}  // namespace troupe::tokenizer_detail
