// Bounds on one render, so that no template (a hostile --chat-template, or a request that
// drives a template into a loop) can take the process down: the size of any string and of
// the output, the bytes made in all, the work done, and how deep macros may call.
#pragma once

#include <cstddef>

namespace troupe::chat {

struct Limits {
  /// Largest string (and rendered output) one render may build, in bytes.
  std::size_t max_string_bytes = std::size_t{16} << 20;
  /// All bytes of all strings one render may build, in bytes (bounds the time spent copying).
  std::size_t max_total_bytes = std::size_t{256} << 20;
  /// Loop iterations + calls + items visited by filters, per render.
  std::size_t max_steps = 5'000'000;
  /// Nesting of macro calls, {% call %} and block renders.
  int max_call_depth = 100;
  /// Nesting of expressions and statements in the source (parser recursion).
  int max_syntax_depth = 200;
};

/// The running account of one render against its Limits (throws Fault{limit}).
class Budget {
 public:
  explicit Budget(const Limits& limits) : limits_(limits) {}
  /// A string of n bytes is about to be built.
  void bytes(std::size_t n);
  /// n units of work are about to be done.
  void steps(std::size_t n = 1);
  [[nodiscard]] const Limits& limits() const { return limits_; }

 private:
  const Limits& limits_;
  std::size_t total_bytes_ = 0;
  std::size_t steps_ = 0;
};

}  // namespace troupe::chat
