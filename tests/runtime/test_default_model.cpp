// Where the embedded model is found (runtime/checkpoint/default_model): the order of the
// places looked at, TROUPE_DEFAULT_MODEL alone when set, an installed layout found from the
// executable's path, and an error naming every place when none holds it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "runtime/checkpoint/default_model.hpp"
#include "runtime/error.hpp"
#include "tests/runtime/test_checkpoint_writer.hpp"

using namespace troupe;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

void make_model(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{}";
}

}  // namespace

TEST_CASE("default model: the places looked at, in order", "[default_model]") {
  DefaultModelSearch s;
  s.added = {"/opt/host/share/troupe/models/troupe-fortunes"};
  s.executable = "/usr/local/bin/troupe";
  s.source_tree_model = "/src/troupe/models/troupe-fortunes";
  CHECK(default_model_candidates(s) ==
        std::vector<std::string>{"/opt/host/share/troupe/models/troupe-fortunes",
                                 "/usr/local/share/troupe/models/troupe-fortunes",
                                 "/usr/local/bin/models/troupe-fortunes",
                                 "/src/troupe/models/troupe-fortunes"});
  // TROUPE_DEFAULT_MODEL, when set, is the only place; an empty value counts as unset.
  s.env = "/models/mine";
  CHECK(default_model_candidates(s) == std::vector<std::string>{"/models/mine"});
  s.env = "";
  CHECK(default_model_candidates(s).size() == 4);
}

TEST_CASE("default model: an installed layout is found from the executable", "[default_model]") {
  testing::TempDir prefix("default_model_prefix");
  const fs::path installed = prefix.path() / "share" / "troupe" / "models" / "troupe-fortunes";
  DefaultModelSearch s;
  s.executable = (prefix.path() / "bin" / "troupe").string();
  s.source_tree_model = "/nonexistent/models/troupe-fortunes";
  CHECK_THROWS(find_default_model(s));
  make_model(installed);
  CHECK(find_default_model(s) == installed.string());
  // A copy next to the binary comes after the install's share directory.
  make_model(prefix.path() / "bin" / "models" / "troupe-fortunes");
  CHECK(find_default_model(s) == installed.string());
}

TEST_CASE("default model: the errors say where they looked", "[default_model]") {
  DefaultModelSearch s;
  s.executable = "/nowhere/bin/troupe";
  s.source_tree_model = "/nowhere/src/models/troupe-fortunes";
  try {
    (void)find_default_model(s);
    FAIL("found a model in /nowhere");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Contains("/nowhere/share/troupe/models/troupe-fortunes"));
    CHECK_THAT(msg, Contains("/nowhere/bin/models/troupe-fortunes"));
    CHECK_THAT(msg, Contains("/nowhere/src/models/troupe-fortunes"));
    CHECK_THAT(msg, Contains("TROUPE_DEFAULT_MODEL"));
    CHECK_THAT(msg, Contains("--model"));
  }
  s.env = "/nowhere/mine";
  CHECK_THROWS_WITH(find_default_model(s),
                    Contains("TROUPE_DEFAULT_MODEL = '/nowhere/mine': not a model directory"));
}

TEST_CASE("default model: this build finds the source tree's copy from any directory",
          "[default_model]") {
  const DefaultModelSearch s = current_default_model_search();
  const fs::path source = fs::path(TROUPE_SOURCE_DIR) / "models" / "troupe-fortunes";
  CHECK(s.source_tree_model == source.string());
  CHECK(fs::path(s.executable).filename() == "troupe_runtime_tests");
  DefaultModelSearch no_env = s;
  no_env.env.reset();
  const fs::path before = fs::current_path();
  testing::TempDir elsewhere("default_model_cwd");
  fs::current_path(elsewhere.path());
  const std::string found = find_default_model(no_env);
  fs::current_path(before);
  CHECK(found == source.string());
}

TEST_CASE("default model: added directories are kept once, in order", "[default_model]") {
  add_default_model_dir("/added/one");
  add_default_model_dir("/added/two");
  add_default_model_dir("/added/one");
  const auto added = current_default_model_search().added;
  REQUIRE(added.size() >= 2);
  CHECK(std::count(added.begin(), added.end(), "/added/one") == 1);
  const auto one = std::find(added.begin(), added.end(), "/added/one");
  const auto two = std::find(added.begin(), added.end(), "/added/two");
  CHECK(one < two);
}
