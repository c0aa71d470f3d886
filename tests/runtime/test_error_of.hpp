// Shared by the runtime tests that check error messages.
#pragma once

#include <string>

#include "runtime/error.hpp"

namespace troupe::test {

/// The message of the troupe::Error that `f` throws ("" if it throws nothing).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const troupe::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace troupe::test
