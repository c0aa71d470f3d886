#include "runtime/checkpoint/checkpoint.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "runtime/error.hpp"

namespace troupe {

namespace {

using nlohmann::json;

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("'{}' cannot be opened for reading", p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

CheckpointReader CheckpointReader::open(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail("model directory '{}' does not exist or is not a directory", dir.string());
  if (!fs::is_regular_file(dir / "config.json", ec))
    fail("'{}' not found: a model directory needs a Hugging Face config.json",
         (dir / "config.json").string());

  CheckpointReader r;
  r.dir_ = dir;
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single_path = dir / "model.safetensors";

  auto add_file = [&r](const fs::path& p) {
    r.files_.push_back(SafetensorsFile::open(p));
    const size_t idx = r.files_.size() - 1;
    for (const auto& [name, e] : r.files_.back().entries()) {
      auto [it, inserted] = r.where_.emplace(name, idx);
      if (!inserted)
        fail("tensor '{}' is stored twice: in '{}' and in '{}'", name,
             r.files_[it->second].path().string(), p.string());
    }
  };

  if (fs::is_regular_file(index_path, ec)) {
    const std::string ip = index_path.string();
    json index;
    try {
      index = json::parse(read_text(index_path));
    } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e400
      fail("{}: not valid JSON ({})", ip, e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail("{}: expected an object with a 'weight_map' object (tensor name -> shard file)", ip);
    const json& wm = index["weight_map"];
    if (wm.empty()) fail("{}: 'weight_map' is empty", ip);
    // Shards in first-mention order (by sorted tensor name), each opened once.
    std::map<std::string, size_t> shard_order;
    std::vector<std::string> shards;
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      if (!it.value().is_string())
        fail("{}: weight_map['{}'] must be a file name, got {}", ip, it.key(), it.value().dump());
      const std::string file = it.value().get<std::string>();
      const fs::path fp(file);
      const bool escapes =
          std::any_of(fp.begin(), fp.end(), [](const fs::path& c) { return c == ".."; });
      if (file.empty() || fp.is_absolute() || escapes)
        fail("{}: weight_map['{}'] = \"{}\" is not a file name inside the directory", ip, it.key(),
             file);
      if (shard_order.emplace(file, shards.size()).second) shards.push_back(file);
    }
    for (const auto& s : shards) {
      if (!fs::is_regular_file(dir / s, ec))
        fail("{}: shard '{}' named in the index does not exist", ip, (dir / s).string());
      add_file(dir / s);
    }
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      const size_t want = shard_order.at(it.value().get<std::string>());
      auto w = r.where_.find(it.key());
      if (w == r.where_.end() || w->second != want)
        fail("{}: the index puts tensor '{}' in '{}', but that shard does not hold it", ip,
             it.key(), it.value().get<std::string>());
    }
  } else if (fs::is_regular_file(single_path, ec)) {
    add_file(single_path);
  } else {
    const bool has_bin = fs::exists(dir / "pytorch_model.bin", ec) ||
                         fs::exists(dir / "pytorch_model.bin.index.json", ec);
    fail("no weights in '{}': expected model.safetensors or model.safetensors.index.json{}",
         dir.string(),
         has_bin ? " (pytorch_model.bin is not supported; convert it to safetensors)" : "");
  }
  return r;
}

bool CheckpointReader::contains(std::string_view name) const {
  return where_.find(std::string(name)) != where_.end();
}

TensorInfo CheckpointReader::get(std::string_view name) const {
  auto it = where_.find(std::string(name));
  if (it == where_.end()) fail("checkpoint '{}' has no tensor '{}'", dir_.string(), name);
  return files_[it->second].get(name);
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, idx] : where_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::filesystem::path> CheckpointReader::files() const {
  std::vector<std::filesystem::path> out;
  for (const auto& f : files_) out.push_back(f.path());
  return out;
}

std::string checkpoint_fingerprint(const std::filesystem::path& dir, const std::string& load_format,
                                   uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  const auto mix = [&](std::string_view bytes) {
    for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  };
  std::ifstream in(dir / "config.json", std::ios::binary);
  std::stringstream config;
  config << in.rdbuf();
  mix(config.str());
  std::string architecture = "?";
  try {
    const auto j = nlohmann::json::parse(config.str());
    if (j.contains("architectures") && j["architectures"].is_array() &&
        !j["architectures"].empty() && j["architectures"][0].is_string())
      architecture = j["architectures"][0].get<std::string>();
  } catch (const std::exception&) {
  }
  if (load_format == "dummy") {
    mix("dummy:" + std::to_string(seed));
  } else {
    std::vector<std::pair<std::string, uintmax_t>> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors")
        files.emplace_back(e.path().filename().string(), e.file_size(ec));
    std::sort(files.begin(), files.end());
    for (const auto& [name, size] : files) mix(name + ":" + std::to_string(size) + ";");
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return architecture + " " + hex;
}

}  // namespace troupe
