#include "transport/bootstrap.hpp"

#include <unistd.h>

#include <cstring>

#include "runtime/error.hpp"

namespace troupe {

std::string to_hex(std::span<const uint8_t> b) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (uint8_t c : b) {
    s += kDigits[c >> 4];
    s += kDigits[c & 15];
  }
  return s;
}

Blob from_hex(std::string_view s) {
  auto digit = [&](char c) -> uint8_t {
    if (c >= '0' && c <= '9') return uint8_t(c - '0');
    if (c >= 'a' && c <= 'f') return uint8_t(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return uint8_t(c - 'A' + 10);
    fail("from_hex: '{}' is not a hex digit", c);
  };
  if (s.size() % 2 != 0) fail("from_hex: {} characters, an even number is needed", s.size());
  Blob b(s.size() / 2);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(digit(s[2 * i]) << 4 | digit(s[2 * i + 1]));
  return b;
}

PeerName PeerName::self() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  return PeerName{host, int32_t(getpid())};
}

std::string PeerName::describe(int32_t rank) const {
  return fmt::format("rank {} (pid {} on {})", rank, pid, host);
}

BlobWriter::BlobWriter(uint32_t magic) {
  u32(magic);
}

BlobWriter& BlobWriter::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(uint8_t(v >> (8 * i)));
  return *this;
}

BlobWriter& BlobWriter::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(uint8_t(v >> (8 * i)));
  return *this;
}

BlobWriter& BlobWriter::bytes(std::span<const uint8_t> b) {
  u64(b.size());
  out_.insert(out_.end(), b.begin(), b.end());
  return *this;
}

BlobWriter& BlobWriter::str(std::string_view s) {
  return bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
}

BlobWriter& BlobWriter::peer(const PeerName& p) {
  return str(p.host).i32(p.pid);
}

BlobReader::BlobReader(std::span<const uint8_t> b, uint32_t magic, std::string what)
    : b_(b), what_(std::move(what)) {
  if (b_.size() < 4 || u32() != magic)
    fail("{} is not a bootstrap blob of this kind ({} bytes; wrong magic or truncated)", what_,
         b.size());
}

void BlobReader::need(size_t n) const {
  if (b_.size() - pos_ < n)
    fail("{} is truncated: {} bytes, needed {} at offset {}", what_, b_.size(), n, pos_);
}

uint32_t BlobReader::u32() {
  need(4);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(b_[pos_++]) << (8 * i);
  return v;
}

uint64_t BlobReader::u64() {
  need(8);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(b_[pos_++]) << (8 * i);
  return v;
}

std::vector<uint8_t> BlobReader::bytes() {
  const uint64_t n = u64();
  need(n);
  std::vector<uint8_t> v(b_.begin() + ptrdiff_t(pos_), b_.begin() + ptrdiff_t(pos_ + n));
  pos_ += n;
  return v;
}

std::string BlobReader::str() {
  auto v = bytes();
  return {v.begin(), v.end()};
}

PeerName BlobReader::peer() {
  PeerName p;
  p.host = str();
  p.pid = i32();
  return p;
}

void BlobReader::finish() const {
  if (pos_ != b_.size()) fail("{} has {} unread bytes at its end", what_, b_.size() - pos_);
}

}  // namespace troupe
