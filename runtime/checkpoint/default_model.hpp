// Where troupe finds the checkpoint it ships (models/troupe-fortunes), wherever it runs from.
//
// Looked for, in order, and the first directory holding a config.json wins:
//   1. $TROUPE_DEFAULT_MODEL, when set (then only there);
//   2. directories added with add_default_model_dir() (the installed CMake package adds its
//      share directory for host applications: see TROUPE_INSTALLED_MODEL_DIR below);
//   3. <the running executable's directory>/../share/troupe/models/troupe-fortunes (an
//      installed `troupe`: <prefix>/bin/troupe);
//   4. <the running executable's directory>/models/troupe-fortunes (a copy next to it);
//   5. models/troupe-fortunes in the source tree the library was built from (a build tree).
// The working directory plays no part. When none holds the model, the error lists every
// place looked at.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace troupe {

/// The embedded model's directory. Throws troupe::Error naming every place it looked.
[[nodiscard]] std::string default_model_dir();

/// Adds `dir` to the places default_model_dir() looks (after TROUPE_DEFAULT_MODEL, before the
/// executable-relative ones). Thread-safe; adding a directory twice keeps one.
void add_default_model_dir(const std::string& dir);

/// What default_model_dir() searches with, separated so tests can give their own.
struct DefaultModelSearch {
  std::optional<std::string> env;  // $TROUPE_DEFAULT_MODEL (nullopt or "": unset)
  std::vector<std::string> added;  // add_default_model_dir(), in order
  std::string executable;          // /proc/self/exe ("" if unknown)
  std::string source_tree_model;   // the build's source tree copy ("" if none)
};

/// The search of the running process: the environment, the added directories, this
/// executable, and the source tree compiled in.
[[nodiscard]] DefaultModelSearch current_default_model_search();

/// The candidate directories of `search`, in the order they are tried.
[[nodiscard]] std::vector<std::string> default_model_candidates(const DefaultModelSearch& search);

/// The first candidate that holds a config.json. Throws troupe::Error listing them all.
[[nodiscard]] std::string find_default_model(const DefaultModelSearch& search);

}  // namespace troupe

// The installed package's troupe::troupe target defines TROUPE_INSTALLED_MODEL_DIR (its
// <prefix>/share/troupe/models/troupe-fortunes) for the code that links it, so a host
// application finds the installed model from any directory without setting anything.
#ifdef TROUPE_INSTALLED_MODEL_DIR
namespace {
[[maybe_unused]] const bool troupe_installed_model_dir_added =
    (troupe::add_default_model_dir(TROUPE_INSTALLED_MODEL_DIR), true);
}  // namespace
#endif
