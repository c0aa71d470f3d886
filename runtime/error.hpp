// The one exception type runtime/ throws. Its message is a complete sentence for the user:
// it names the field or path, the value and what is allowed. Actors catch it at their
// boundary and pass it on as a caf::error; it never crosses an actor.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace troupe {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

/// throw Error(fmt::format(...)), in one call.
template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace troupe
