// Fuzz target for the safetensors reader (runtime/checkpoint/safetensors.hpp,
// SafetensorsFile::read_header, which open() runs on the mapped file): any bytes, taken as a
// whole .safetensors file (8-byte header length, JSON header, data), give a checked index or a
// troupe::Error. Every tensor it accepts must lie after the header and inside the file, hold
// exactly the bytes its dtype and shape need, and overlap no other: the loader hands out
// pointers into the mapping on the strength of that. Its first and last bytes are read, so
// AddressSanitizer would see one placed outside the input.
#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "runtime/checkpoint/safetensors.hpp"
#include "tests/fuzz/fuzz_target.hpp"

using troupe::SafetensorsFile;
using troupe::fuzz::accepted;
using troupe::fuzz::broken;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SafetensorsFile::Header h;
  if (!accepted([&] { h = SafetensorsFile::read_header(std::span(data, size), "fuzz"); })) return 0;
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  const uint64_t data_start = 8 + header_len;
  std::vector<std::pair<size_t, size_t>> spans;
  volatile uint8_t touched = 0;  // the reads below must happen
  for (const auto& [name, e] : h.entries) {
    if (e.offset < data_start || e.offset > size || e.nbytes > size - e.offset)
      broken("tensor '{}' at [{}, +{}) is outside the data of a {}-byte file", name, e.offset,
             e.nbytes, size);
    if (e.dtype) {
      // What the loader computes from a tensor it reads.
      const troupe::TensorInfo t{*e.dtype, e.shape, data + e.offset, e.nbytes};
      if (uint64_t(t.numel()) * troupe::dtype_size(t.dtype) != t.nbytes)
        broken("tensor '{}': {} elements of {} bytes, but {} bytes", name, t.numel(),
               troupe::dtype_size(t.dtype), t.nbytes);
    }
    if (e.nbytes > 0) {
      touched = data[e.offset];
      touched = data[e.offset + e.nbytes - 1];
      spans.emplace_back(e.offset, e.offset + e.nbytes);
    }
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second)
      broken("two tensors overlap at byte {}", spans[i].first);
  (void)touched;
  return 0;
}
