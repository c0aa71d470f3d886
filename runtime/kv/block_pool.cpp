#include "runtime/kv/block_pool.hpp"

#include <algorithm>

#include "runtime/error.hpp"

namespace troupe {

namespace {
uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64 finaliser over (h ^ v): cheap and well distributed; exactness comes from the
  // token comparison, not from the hash.
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size),
      blocks_(size_t(std::max(num_blocks, 0))),
      tokens_(size_t(std::max(num_blocks, 0)) * size_t(std::max(block_size, 0))) {
  if (num_blocks <= 0) fail("BlockPool: num_blocks = {}: must be > 0", num_blocks);
  if (block_size <= 0) fail("BlockPool: block_size = {}: must be > 0", block_size);
  for (int32_t b = 0; b < num_blocks; ++b) push_free_tail(b);
}

uint64_t BlockPool::hash_of(int32_t parent, std::span<const int32_t> tokens, uint64_t salt) const {
  uint64_t h = mix(salt, parent < 0 ? 0x51ed27u : blocks_[size_t(parent)].hash);
  for (int32_t t : tokens) h = mix(h, uint64_t(uint32_t(t)));
  return h;
}

bool BlockPool::same_content(const Block& b, int32_t block_id, int32_t parent,
                             std::span<const int32_t> tokens, uint64_t salt) const {
  if (!b.cached || b.salt != salt || b.parent != parent) return false;
  if (parent >= 0 && blocks_[size_t(parent)].generation != b.parent_generation) return false;
  const int32_t* stored = tokens_.data() + size_t(block_id) * size_t(block_size_);
  return std::equal(tokens.begin(), tokens.end(), stored);
}

void BlockPool::push_free_tail(int32_t b) {
  Block& blk = blocks_[size_t(b)];
  blk.prev = free_tail_;
  blk.next = -1;
  if (free_tail_ >= 0) blocks_[size_t(free_tail_)].next = b;
  else free_head_ = b;
  free_tail_ = b;
  blk.in_free_list = true;
  ++num_free_;
}

void BlockPool::unlink_free(int32_t b) {
  Block& blk = blocks_[size_t(b)];
  if (blk.prev >= 0) blocks_[size_t(blk.prev)].next = blk.next;
  else free_head_ = blk.next;
  if (blk.next >= 0) blocks_[size_t(blk.next)].prev = blk.prev;
  else free_tail_ = blk.prev;
  blk.prev = blk.next = -1;
  blk.in_free_list = false;
  --num_free_;
}

void BlockPool::evict(int32_t b) {
  Block& blk = blocks_[size_t(b)];
  if (!blk.cached) return;
  auto [lo, hi] = index_.equal_range(blk.hash);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == b) {
      index_.erase(it);
      break;
    }
  }
  blk.cached = false;
  prompt_logprobs_.drop(b);
}

std::optional<std::vector<int32_t>> BlockPool::allocate(int32_t n) {
  if (n < 0) fail("BlockPool::allocate: n = {}: must be >= 0", n);
  if (n > num_free_) return std::nullopt;
  std::vector<int32_t> out;
  out.reserve(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t b = free_head_;
    unlink_free(b);
    evict(b);
    Block& blk = blocks_[size_t(b)];
    ++blk.generation;
    blk.refs = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::release(std::span<const int32_t> block_ids) {
  for (int32_t b : block_ids) {
    Block& blk = blocks_.at(size_t(b));
    if (blk.refs <= 0) fail("BlockPool::release: block {} has no reference (double free)", b);
    if (--blk.refs == 0) push_free_tail(b);
  }
}

void BlockPool::share(std::span<const int32_t> block_ids) {
  for (int32_t b : block_ids) {
    Block& blk = blocks_.at(size_t(b));
    if (blk.refs <= 0) fail("BlockPool::share: block {} is free (only held blocks are shared)", b);
    ++blk.refs;
  }
}

std::optional<int32_t> BlockPool::find_cached(int32_t parent, std::span<const int32_t> tokens,
                                              uint64_t salt) const {
  if (int32_t(tokens.size()) != block_size_) return std::nullopt;
  if (parent >= num_blocks()) return std::nullopt;
  const uint64_t h = hash_of(parent, tokens, salt);
  auto [lo, hi] = index_.equal_range(h);
  for (auto it = lo; it != hi; ++it)
    if (same_content(blocks_[size_t(it->second)], it->second, parent, tokens, salt))
      return it->second;
  return std::nullopt;
}

std::optional<int32_t> BlockPool::acquire_cached(int32_t parent, std::span<const int32_t> tokens,
                                                 uint64_t salt) {
  auto b = find_cached(parent, tokens, salt);
  if (!b) return std::nullopt;
  Block& blk = blocks_[size_t(*b)];
  if (blk.in_free_list) unlink_free(*b);
  ++blk.refs;
  return b;
}

void BlockPool::register_full(int32_t block, int32_t parent, std::span<const int32_t> tokens,
                              uint64_t salt) {
  if (int32_t(tokens.size()) != block_size_)
    fail("BlockPool::register_full: {} tokens for a block of {}", tokens.size(), block_size_);
  Block& blk = blocks_.at(size_t(block));
  if (blk.cached) return;
  const uint64_t h = hash_of(parent, tokens, salt);
  auto [lo, hi] = index_.equal_range(h);
  for (auto it = lo; it != hi; ++it)
    if (same_content(blocks_[size_t(it->second)], it->second, parent, tokens, salt)) return;
  blk.cached = true;
  blk.hash = h;
  blk.parent = parent;
  blk.parent_generation = parent >= 0 ? blocks_[size_t(parent)].generation : 0;
  blk.salt = salt;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + ptrdiff_t(size_t(block) * size_t(block_size_)));
  index_.emplace(h, block);
}

void BlockPool::reset_prefix_cache() {
  index_.clear();
  prompt_logprobs_.clear();
  for (auto& b : blocks_) b.cached = false;
}

std::vector<int32_t> BlockPool::blocks_with_contents() const {
  std::vector<int32_t> out;
  for (size_t b = 0; b < blocks_.size(); ++b)
    if (blocks_[b].refs > 0 || blocks_[b].cached) out.push_back(int32_t(b));
  return out;
}

}  // namespace troupe
