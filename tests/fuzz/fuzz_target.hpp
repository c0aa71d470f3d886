// What the fuzz targets share. Each target defines LLVMFuzzerTestOneInput; an input is either
// accepted or rejected with troupe::Error (what the parsers promise). Anything else is a bug:
// another exception escaping, a broken invariant (broken() throws a std::logic_error, which no
// target catches), a crash, a sanitizer report or a hang. Under libFuzzer an escaping exception
// ends the process (the input is saved as a crash); the replay driver (replay_main.cpp) names
// the corpus file and length.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string_view>

#include "runtime/error.hpp"

namespace troupe::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return size == 0 ? std::string_view()
                   : std::string_view(reinterpret_cast<const char*>(data), size);
}

/// Runs `parse`; false when it rejects the input with troupe::Error.
template <class F>
bool accepted(F&& parse) {
  try {
    parse();
    return true;
  } catch (const Error&) {
    return false;
  }
}

/// Reports a broken invariant (a bug, not a rejected input).
template <class... Args>
[[noreturn]] void broken(fmt::format_string<Args...> f, Args&&... args) {
  throw std::logic_error("fuzz invariant broken: " + fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace troupe::fuzz
