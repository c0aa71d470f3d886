// Test helpers: write safetensors files (well-formed or deliberately broken) and checkpoint
// directories into a fresh temporary directory.
#pragma once

#include <nlohmann/json.hpp>

#include <unistd.h>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace troupe::testing {

/// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("troupe_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  write_bytes(p, text);
}

/// 8-byte little-endian length + header + data, exactly as given (for broken files).
inline std::string raw_safetensors(uint64_t header_len, const std::string& header,
                                   const std::string& data) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((header_len >> (8 * i)) & 0xff);
  return s + header + data;
}

struct StTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::string bytes;  // raw little-endian data
};

template <class T>
std::string as_bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

/// A well-formed file: tensors back to back in the given order.
inline std::string make_safetensors(const std::vector<StTensor>& tensors,
                                    const nlohmann::json& metadata = nullptr) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.is_null()) h["__metadata__"] = metadata;
  std::string data;
  for (const auto& t : tensors) {
    h[t.name] = {{"dtype", t.dtype},
                 {"shape", t.shape},
                 {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  std::string header = h.dump();
  while (header.size() % 8 != 0) header += ' ';  // as the reference writer pads
  return raw_safetensors(header.size(), header, data);
}

inline const char* tiny_config_json() {
  return R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 8,
             "hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1,
             "num_attention_heads": 2, "max_position_embeddings": 16})";
}

}  // namespace troupe::testing
