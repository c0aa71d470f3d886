// Shared by the tokenizer tests: fixture paths, cached loads of the fixture tokenizers, and
// temporary tokenizer directories made from edited copies of the tiny fixture.
#pragma once

#include "runtime/tokenizer/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace troupe::tokenizer_test {

inline std::filesystem::path fixtures() {
  return std::filesystem::path(TROUPE_FIXTURES_DIR) / "tokenizers";
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return nlohmann::json::parse(in);
}

// Real tokenizers take a moment to load: one load per test process.
inline std::shared_ptr<const Tokenizer> qwen3() {
  static const auto tok = Tokenizer::load(fixtures() / "qwen3");
  return tok;
}
inline std::shared_ptr<const Tokenizer> llama3() {
  static const auto tok = Tokenizer::load(fixtures() / "llama3");
  return tok;
}
inline std::shared_ptr<const Tokenizer> tiny() {
  static const auto tok = Tokenizer::load(fixtures() / "tiny_bpe");
  return tok;
}

/// A fresh directory under the temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ =
        std::filesystem::temp_directory_path() /
        ("troupe_tokenizer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
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

  void write(const std::string& name, const std::string& content) const {
    std::ofstream out(path_ / name, std::ios::binary);
    out << content;
  }
  void write_json(const std::string& name, const nlohmann::json& value) const {
    write(name, value.dump());
  }

 private:
  std::filesystem::path path_;
};

/// The tiny fixture's tokenizer.json / tokenizer_config.json, to edit and write to a TempDir.
inline nlohmann::json tiny_json() {
  return read_json(fixtures() / "tiny_bpe" / "tokenizer.json");
}
inline nlohmann::json tiny_config() {
  return read_json(fixtures() / "tiny_bpe" / "tokenizer_config.json");
}

}  // namespace troupe::tokenizer_test
