// The bytes a transport endpoint hands to the actors layer during its two-phase bootstrap, and
// the little reader and writer that build them.
//
// Every transport here starts the same way, so the actors can carry it over CAF as opaque
// bytes: (1) each rank creates its end and exposes a Blob (a shared-memory name, a UCX worker
// address, ...); (2) the head gathers the blobs in rank order and hands the full list to every
// rank; (3) each rank connects. A blob names its process (host and pid) so that every error
// about a peer can say which process it was.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

using Blob = std::vector<uint8_t>;

/// Bytes as lower-case hex (for text channels: a test's pipes, a log line) and back; from_hex
/// throws troupe::Error on anything that is not an even number of hex digits.
[[nodiscard]] std::string to_hex(std::span<const uint8_t> b);
[[nodiscard]] Blob from_hex(std::string_view s);

/// Who a peer is, for error messages: "rank 2 (pid 4242 on host-a)".
struct PeerName {
  std::string host;
  int32_t pid = 0;

  [[nodiscard]] static PeerName self();
  [[nodiscard]] std::string describe(int32_t rank) const;
};

/// Appends fixed-width little-endian integers, strings and byte strings.
class BlobWriter {
 public:
  explicit BlobWriter(uint32_t magic);
  BlobWriter& u32(uint32_t v);
  BlobWriter& u64(uint64_t v);
  BlobWriter& i32(int32_t v) { return u32(uint32_t(v)); }
  BlobWriter& bytes(std::span<const uint8_t> b);  // length-prefixed
  BlobWriter& str(std::string_view s);            // length-prefixed
  BlobWriter& peer(const PeerName& p);
  [[nodiscard]] Blob take() { return std::move(out_); }

 private:
  Blob out_;
};

/// Reads what BlobWriter wrote; throws troupe::Error naming `what` (e.g. "shm collectives
/// blob of rank 2") when the bytes are truncated or carry another magic.
class BlobReader {
 public:
  BlobReader(std::span<const uint8_t> b, uint32_t magic, std::string what);
  uint32_t u32();
  uint64_t u64();
  int32_t i32() { return int32_t(u32()); }
  std::vector<uint8_t> bytes();
  std::string str();
  PeerName peer();
  /// Throws unless every byte was read.
  void finish() const;

 private:
  void need(size_t n) const;
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  std::string what_;
};

}  // namespace troupe
