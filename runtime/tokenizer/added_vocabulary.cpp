#include "runtime/tokenizer/added_vocabulary.hpp"

#include "runtime/error.hpp"
#include "runtime/tokenizer/normalizer.hpp"
#include "runtime/tokenizer/utf8.hpp"

#include <algorithm>

namespace troupe::tokenizer_detail {

using tokenizer_json::json;
using tokenizer_json::Where;

namespace {

constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// Start of the whitespace run that ends `text` (text.size() if none).
std::size_t trailing_space_start(std::string_view text) {
  std::size_t i = text.size();
  while (i > 0) {
    std::size_t j = i;
    if (!utf8::is_whitespace(utf8::prev(text, j))) break;
    i = j;
  }
  return i;
}

// Length of the whitespace run that starts `text`.
std::size_t leading_space_length(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = i;
    if (!utf8::is_whitespace(utf8::next(text, j))) break;
    i = j;
  }
  return i;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view key, int32_t token) {
  if (nodes.empty()) nodes.emplace_back();
  std::size_t node = 0;
  for (char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    auto& children = nodes[node].children;
    const auto it = std::find_if(children.begin(), children.end(),
                                 [c](const auto& child) { return child.first == c; });
    if (it != children.end()) {
      node = static_cast<std::size_t>(it->second);
    } else {
      const auto fresh = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace_back(c, fresh);
      nodes.emplace_back();
      node = static_cast<std::size_t>(fresh);
    }
  }
  nodes[node].token = token;
}

std::pair<std::size_t, int32_t> AddedVocabulary::Trie::longest(std::string_view text,
                                                               std::size_t pos) const {
  std::pair<std::size_t, int32_t> best{0, -1};
  if (nodes.empty()) return best;
  std::size_t node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto& children = nodes[node].children;
    const auto it = std::find_if(children.begin(), children.end(),
                                 [c](const auto& child) { return child.first == c; });
    if (it == children.end()) break;
    node = static_cast<std::size_t>(it->second);
    if (nodes[node].token >= 0) best = {i + 1 - pos, nodes[node].token};
  }
  return best;
}

AddedVocabulary AddedVocabulary::from_json(const json& value, const Where& where,
                                           const Normalizer& normalizer) {
  AddedVocabulary v;
  if (value.is_null()) return v;
  if (!value.is_array()) where.fail("expected a list of added tokens");
  for (std::size_t i = 0; i < value.size(); ++i) {
    const json& item = value[i];
    const Where w = where[i];
    tokenizer_json::require_object(item, w);
    AddedToken t;
    const json* id = tokenizer_json::member(item, "id");
    if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > kMaxTokenId) {
      (w / "id").fail(fmt::format("expected an integer in 0..{}, got {}", kMaxTokenId,
                                  id == nullptr ? "nothing" : tokenizer_json::brief(*id)));
    }
    t.id = static_cast<int32_t>(id->get<int64_t>());
    t.content = tokenizer_json::string_member(item, "content", w);
    if (t.content.empty()) continue;  // HF ignores empty added tokens
    t.special = tokenizer_json::bool_member(item, "special", false, w);
    t.normalized = tokenizer_json::bool_member(item, "normalized", !t.special, w);
    t.lstrip = tokenizer_json::bool_member(item, "lstrip", false, w);
    t.rstrip = tokenizer_json::bool_member(item, "rstrip", false, w);
    t.single_word = tokenizer_json::bool_member(item, "single_word", false, w);
    v.tokens_.push_back(std::move(t));
  }
  for (std::size_t i = 0; i < v.tokens_.size(); ++i) {
    const AddedToken& t = v.tokens_[i];
    // A normalized token is searched in normalized text, so in its normalized form.
    const std::string form = t.normalized ? normalizer.apply(t.content) : t.content;
    (t.normalized ? v.normalized_trie_ : v.raw_trie_).insert(form, static_cast<int32_t>(i));
    v.by_id_[t.id] = i;
    v.by_content_[t.content] = t.id;
  }
  return v;
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

void AddedVocabulary::split(std::string_view text, bool normalized, std::vector<Span>& out) const {
  const Trie& trie = normalized ? normalized_trie_ : raw_trie_;
  std::size_t start_offset = 0;  // end of the last emitted added token
  std::size_t pos = 0;
  while (!trie.nodes.empty() && pos < text.size()) {
    const auto [length, index] = trie.longest(text, pos);
    if (length == 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[static_cast<std::size_t>(index)];
    std::size_t start = pos;
    std::size_t stop = pos + length;
    pos = stop;  // matches never overlap
    if (t.single_word) {
      bool word_before = false, word_after = false;
      if (start > 0) {
        std::size_t j = start;
        word_before = utf8::is_word_char(utf8::prev(text, j));
      }
      if (stop < text.size()) {
        std::size_t j = stop;
        word_after = utf8::is_word_char(utf8::next(text, j));
      }
      if (word_before || word_after) continue;
    }
    if (t.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (t.rstrip) stop += leading_space_length(text.substr(stop));
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, t.id});
    start_offset = stop;
    pos = std::max(pos, stop);
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace troupe::tokenizer_detail
