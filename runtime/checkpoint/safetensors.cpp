#include "runtime/checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "runtime/error.hpp"

namespace troupe {

namespace {

using nlohmann::json;

// safetensors refuses headers over 100 MB; so do we (a bigger value is a corrupt length).
constexpr uint64_t max_header_bytes = 100'000'000;

struct StDType {
  std::string_view name;
  size_t bytes;
  std::optional<DType> dtype;
};

// Every byte-sized dtype the safetensors format defines. Sub-byte ones (F4, F6) are unknown here.
constexpr StDType st_dtypes[] = {
    {"F64", 8, std::nullopt},     {"F32", 4, DType::f32},       {"F16", 2, DType::f16},
    {"BF16", 2, DType::bf16},     {"I64", 8, DType::i64},       {"I32", 4, DType::i32},
    {"I16", 2, std::nullopt},     {"I8", 1, std::nullopt},      {"U64", 8, std::nullopt},
    {"U32", 4, std::nullopt},     {"U16", 2, std::nullopt},     {"U8", 1, DType::u8},
    {"BOOL", 1, std::nullopt},    {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
    {"F8_E8M0", 1, std::nullopt},
};

const StDType* find_st_dtype(std::string_view s) {
  for (const auto& d : st_dtypes)
    if (d.name == s) return &d;
  return nullptr;
}

// a * b, or nullopt on overflow.
std::optional<uint64_t> mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return std::nullopt;
  return a * b;
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string p = path.string();
  SafetensorsFile f;
  f.path_ = path;

  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open ({})", p, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("{}: cannot stat ({})", p, std::strerror(e));
  }
  const auto file_size = size_t(st.st_size);
  if (file_size > 0) {  // mmap refuses an empty range; read_header names the empty file
    void* m = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (m == MAP_FAILED) fail("{}: mmap failed ({})", p, std::strerror(map_errno));
    f.base_ = static_cast<const unsigned char*>(m);
    f.size_ = file_size;
  } else {
    ::close(fd);
  }
  f.header_ = read_header(std::span(f.base_, f.size_), p);  // f unmaps if this throws
  return f;
}

SafetensorsFile::Header SafetensorsFile::read_header(std::span<const unsigned char> file,
                                                     std::string_view origin) {
  const std::string_view p = origin;
  const uint64_t file_size = file.size();
  if (file_size < 8)
    fail("{}: truncated: {} bytes, shorter than the 8-byte header length", p, file_size);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file[size_t(i)];  // little-endian
  if (header_len > max_header_bytes || header_len > file_size - 8)
    fail(
        "{}: header length {} runs past the end of the {}-byte file (truncated or not a "
        "safetensors file)",
        p, header_len, file_size);

  json header;
  try {
    header = json::parse(file.begin() + 8, file.begin() + 8 + std::ptrdiff_t(header_len));
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
    fail("{}: the header is not valid JSON ({})", p, e.what());
  }
  if (!header.is_object()) fail("{}: the header is {}, not a JSON object", p, header.type_name());

  Header out;
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("{}: '__metadata__' must be an object of strings", p);
      for (auto m2 = v.begin(); m2 != v.end(); ++m2) {
        if (!m2.value().is_string())
          fail("{}: '__metadata__.{}' must be a string, got {}", p, m2.key(), m2.value().dump());
        out.metadata[m2.key()] = m2.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) fail("{}: tensor '{}': entry must be an object, got {}", p, name, v.dump());
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string())
      fail("{}: tensor '{}': missing or non-string 'dtype'", p, name);
    const StDType* sd = find_st_dtype(dt->get<std::string>());
    if (!sd)
      fail(
          "{}: tensor '{}': unknown dtype \"{}\" (known: F64, F32, F16, BF16, I64, I32, I16, I8, "
          "U64, U32, U16, U8, BOOL, F8_E4M3, F8_E5M2, F8_E8M0)",
          p, name, dt->get<std::string>());
    if (sh == v.end() || !sh->is_array())
      fail("{}: tensor '{}': missing or non-list 'shape'", p, name);
    Entry e;
    e.st_dtype = std::string(sd->name);
    e.dtype = sd->dtype;
    uint64_t numel = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned())
        fail("{}: tensor '{}': shape {} has a negative or non-integer dimension", p, name,
             sh->dump());
      // Every running product must fit in int64, as TensorInfo::numel() multiplies them: a
      // zero dimension after [2^62, 3] made the count 0 here and overflowed there.
      auto n = mul(numel, d.get<uint64_t>());
      if (!n || *n > uint64_t(std::numeric_limits<int64_t>::max()))
        fail("{}: tensor '{}': shape {} overflows", p, name, sh->dump());
      numel = *n;
      e.shape.push_back(d.get<int64_t>());
    }
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      fail("{}: tensor '{}': 'data_offsets' must be two non-negative integers, got {}", p, name,
           off == v.end() ? std::string("nothing") : off->dump());
    const uint64_t b = (*off)[0].get<uint64_t>();
    const uint64_t end = (*off)[1].get<uint64_t>();
    if (b > end || end > data_size)
      fail(
          "{}: tensor '{}': data_offsets [{}, {}] out of range (the data buffer has {} bytes; "
          "truncated file?)",
          p, name, b, end, data_size);
    auto want = mul(numel, sd->bytes);
    if (!want || *want != end - b)
      fail("{}: tensor '{}': {} {} needs {} bytes but data_offsets [{}, {}] hold {}", p, name,
           e.st_dtype, shape_string(e.shape), want ? *want : 0, b, end, end - b);
    e.offset = size_t(data_start + b);
    e.nbytes = size_t(end - b);
    out.entries.emplace(name, std::move(e));
  }

  // Overlap check: sorted by start, each tensor must begin at or after the previous one's end.
  std::vector<std::pair<size_t, const std::string*>> spans;
  for (const auto& [name, e] : out.entries)
    if (e.nbytes > 0) spans.emplace_back(e.offset, &name);
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    const Entry& prev = out.entries.find(*spans[i - 1].second)->second;
    if (spans[i].first < prev.offset + prev.nbytes)
      fail("{}: tensors '{}' and '{}' overlap in the data buffer", p, *spans[i - 1].second,
           *spans[i].second);
  }
  return out;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      base_(std::exchange(o.base_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      header_(std::move(o.header_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    header_ = std::move(o.header_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  unmap();
}

void SafetensorsFile::unmap() noexcept {
  if (base_) ::munmap(const_cast<unsigned char*>(base_), size_);
  base_ = nullptr;
  size_ = 0;
}

bool SafetensorsFile::contains(std::string_view name) const {
  return header_.entries.find(name) != header_.entries.end();
}

TensorInfo SafetensorsFile::get(std::string_view name) const {
  auto it = header_.entries.find(name);
  if (it == header_.entries.end()) fail("{}: no tensor '{}'", path_.string(), name);
  const Entry& e = it->second;
  if (!e.dtype)
    fail("{}: tensor '{}' is stored as {}, which troupe cannot load (F32, F16, BF16, I32, I64, U8)",
         path_.string(), name, e.st_dtype);
  TensorInfo t;
  t.dtype = *e.dtype;
  t.shape = e.shape;
  t.data = base_ + e.offset;
  t.nbytes = e.nbytes;
  return t;
}

}  // namespace troupe
