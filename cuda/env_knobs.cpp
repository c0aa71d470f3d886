#include "cuda/env_knobs.hpp"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace troupe::cuda {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

namespace {

[[noreturn]] void refuse_env(const char* name, const char* value, const char* what) {
  throw std::invalid_argument(std::string(name) + ": '" + value + "' is not allowed (" + what +
                              ")");
}

}  // namespace

int32_t env_int(const char* name, int32_t fallback, int32_t lo, int32_t hi, const char* what,
                std::initializer_list<int32_t> allowed) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < lo || n > hi ||
      (allowed.size() > 0 && std::find(allowed.begin(), allowed.end(), n) == allowed.end()))
    refuse_env(name, v, what);
  return int32_t(n);
}

int32_t env_choice(const char* name, int32_t fallback, std::initializer_list<int32_t> allowed,
                   const char* what) {
  return env_int(name, fallback, INT32_MIN, INT32_MAX, what, allowed);
}

int env_word(const char* name, std::initializer_list<std::string_view> words, const char* what) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  const auto it = std::find(words.begin(), words.end(), std::string_view(v));
  if (it == words.end()) refuse_env(name, v, what);
  return int(it - words.begin());
}

}  // namespace troupe::cuda
