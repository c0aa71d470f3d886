// A Hugging Face checkpoint directory: config.json plus safetensors weights, either one
// model.safetensors or model.safetensors.index.json naming several shards.
//
// Every shard is memory-mapped and validated when the reader opens, so a corrupt checkpoint
// fails at start-up with one clear error rather than halfway through uploading weights.
// TensorInfo pointers stay valid while the reader (which owns the mappings) lives.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/checkpoint/safetensors.hpp"

namespace troupe {

class CheckpointReader {
 public:
  /// Opens `dir`. Throws troupe::Error for a missing directory, a missing config.json, no
  /// weights file, a corrupt index (bad JSON, a shard that is missing or lacks a tensor the
  /// index puts there, a tensor in two shards) or any corrupt safetensors file.
  static CheckpointReader open(const std::filesystem::path& dir);

  [[nodiscard]] const std::filesystem::path& dir() const { return dir_; }
  [[nodiscard]] bool contains(std::string_view name) const;
  /// Throws troupe::Error naming the tensor and the directory when it is absent.
  [[nodiscard]] TensorInfo get(std::string_view name) const;
  /// All tensor names, sorted.
  [[nodiscard]] std::vector<std::string> names() const;
  /// The weight files, in the order they were opened.
  [[nodiscard]] std::vector<std::filesystem::path> files() const;

 private:
  CheckpointReader() = default;

  std::filesystem::path dir_;
  std::vector<SafetensorsFile> files_;
  std::unordered_map<std::string, size_t> where_;  // tensor name -> index into files_
};

/// A short text that differs between checkpoints: the architecture, and a hash of config.json's
/// bytes and of every *.safetensors file's name and size in `dir` (with dummy weights: of
/// config.json and the seed). The ranks of one engine compare theirs, so a rank that loaded
/// a different checkpoint is refused before it computes anything.
[[nodiscard]] std::string checkpoint_fingerprint(const std::filesystem::path& dir,
                                                 const std::string& load_format, uint64_t seed);

}  // namespace troupe
