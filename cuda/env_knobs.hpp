// The CUDA backend's environment knobs (docs/engine.md lists them): parsers that refuse a bad
// value with the variable's name, the value and what is allowed. Host-only.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace troupe::cuda {

/// Set, non-empty and not "0".
bool env_flag(const char* name);
/// An integer environment variable in [lo, hi] and, when `allowed` is not empty, among
/// `allowed` (described by `what`), or `fallback` when unset or empty.
int32_t env_int(const char* name, int32_t fallback, int32_t lo, int32_t hi, const char* what,
                std::initializer_list<int32_t> allowed = {});
/// An integer environment variable among `allowed` (described by `what`), or `fallback` when
/// unset or empty.
int32_t env_choice(const char* name, int32_t fallback, std::initializer_list<int32_t> allowed,
                   const char* what);
/// The index in `words` of a word-valued environment variable (described by `what`), or -1
/// when unset or empty.
int env_word(const char* name, std::initializer_list<std::string_view> words, const char* what);
}  // namespace troupe::cuda
