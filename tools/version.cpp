#include <fmt/format.h>

#include "tools/commands.hpp"
#include "troupe_version.hpp"  // generated at build time by cmake/troupe_version.cmake

namespace troupe::cli {

std::string version_text() {
  const std::string commit = TROUPE_GIT_COMMIT;
  return commit.empty() ? fmt::format("troupe {}", TROUPE_VERSION)
                        : fmt::format("troupe {} (git {})", TROUPE_VERSION, commit);
}

}  // namespace troupe::cli
