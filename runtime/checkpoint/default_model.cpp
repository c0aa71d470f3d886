#include "runtime/checkpoint/default_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "runtime/error.hpp"

// runtime/CMakeLists.txt compiles the source tree's copy in; a library built elsewhere has none.
#ifndef TROUPE_SOURCE_MODEL_DIR
#define TROUPE_SOURCE_MODEL_DIR ""
#endif

namespace troupe {

namespace fs = std::filesystem;

namespace {

constexpr const char* kModelName = "troupe-fortunes";

struct AddedDirs {
  std::mutex mutex;
  std::vector<std::string> dirs;
};

// A function-local static: host translation units add to it from their own static
// initialisers (default_model.hpp), which may run before this file's.
AddedDirs& added_dirs() {
  static AddedDirs d;
  return d;
}

bool holds_model(const std::string& dir) {
  std::error_code ec;
  return !dir.empty() && fs::is_regular_file(fs::path(dir) / "config.json", ec);
}

}  // namespace

void add_default_model_dir(const std::string& dir) {
  AddedDirs& d = added_dirs();
  std::lock_guard lock(d.mutex);
  if (std::find(d.dirs.begin(), d.dirs.end(), dir) == d.dirs.end()) d.dirs.push_back(dir);
}

DefaultModelSearch current_default_model_search() {
  DefaultModelSearch s;
  if (const char* env = std::getenv("TROUPE_DEFAULT_MODEL")) s.env = env;
  {
    AddedDirs& d = added_dirs();
    std::lock_guard lock(d.mutex);
    s.added = d.dirs;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) s.executable = exe.string();
  s.source_tree_model = TROUPE_SOURCE_MODEL_DIR;
  return s;
}

std::vector<std::string> default_model_candidates(const DefaultModelSearch& search) {
  if (search.env && !search.env->empty()) return {*search.env};
  std::vector<std::string> out = search.added;
  if (!search.executable.empty()) {
    const fs::path bin = fs::path(search.executable).parent_path();
    out.push_back((bin.parent_path() / "share" / "troupe" / "models" / kModelName).string());
    out.push_back((bin / "models" / kModelName).string());
  }
  if (!search.source_tree_model.empty()) out.push_back(search.source_tree_model);
  return out;
}

std::string find_default_model(const DefaultModelSearch& search) {
  const std::vector<std::string> candidates = default_model_candidates(search);
  for (const auto& dir : candidates)
    if (holds_model(dir)) return dir;
  if (search.env && !search.env->empty())
    fail(
        "TROUPE_DEFAULT_MODEL = '{}': not a model directory (no config.json there); unset it "
        "to use the embedded model, or give --model DIR",
        *search.env);
  fail(
      "the embedded model ({}) was not found; looked in: {}. Set TROUPE_DEFAULT_MODEL to its "
      "directory, or give --model DIR",
      kModelName,
      candidates.empty() ? std::string("nowhere") : fmt::format("{}", fmt::join(candidates, ", ")));
}

std::string default_model_dir() {
  return find_default_model(current_default_model_search());
}

}  // namespace troupe
