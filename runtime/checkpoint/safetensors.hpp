// One .safetensors file, memory-mapped read-only and validated when opened.
//
// Format: 8 bytes little-endian u64 N, then N bytes of JSON header
//   {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}}
// then the data buffer; offsets are relative to the buffer's start. Opening checks everything
// a reader could trip on later (header length beyond the file, bad JSON, unknown dtype,
// offsets out of range or overlapping, byte counts that disagree with the shape), so a
// tensor handed out is always in bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/backend/dtype.hpp"

namespace troupe {

/// A tensor as stored in a checkpoint: host memory (the mmap), row-major, possibly unaligned
/// (the header length is not always a multiple of 8), valid while its reader lives.
struct TensorInfo {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;

  [[nodiscard]] int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

/// "[4, 64]"
std::string shape_string(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  struct Entry {
    std::string st_dtype;        // as written: "F32", "BF16", "F8_E4M3", ...
    std::optional<DType> dtype;  // empty for a valid safetensors dtype troupe cannot compute in
    std::vector<int64_t> shape;
    size_t offset = 0;  // from the file's start
    size_t nbytes = 0;
  };

  /// What the header says, every entry checked against the file's size.
  struct Header {
    std::map<std::string, Entry, std::less<>> entries;
    std::map<std::string, std::string> metadata;
  };

  /// Maps and validates `path`; throws troupe::Error naming the file (and tensor) on any flaw.
  static SafetensorsFile open(const std::filesystem::path& path);

  /// The checks open() makes, on a whole file held in memory (`file`: its bytes, length
  /// prefix, header and data); `origin` starts each error. Throws troupe::Error on any flaw.
  static Header read_header(std::span<const unsigned char> file, std::string_view origin);

  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }
  [[nodiscard]] bool contains(std::string_view name) const;
  /// Throws troupe::Error when absent or stored in a dtype troupe does not support.
  [[nodiscard]] TensorInfo get(std::string_view name) const;
  [[nodiscard]] const std::map<std::string, Entry, std::less<>>& entries() const {
    return header_.entries;
  }
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const {
    return header_.metadata;
  }

 private:
  SafetensorsFile() = default;
  void unmap() noexcept;

  std::filesystem::path path_;
  const unsigned char* base_ = nullptr;
  size_t size_ = 0;
  Header header_;
};

}  // namespace troupe
