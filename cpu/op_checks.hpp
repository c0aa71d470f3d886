// Shape, dtype and device checks for the backend ops, so every bad call fails with one line
// that names the op, the argument and its shape ("linear: w [32, 65] float32 on cpu: dim 1
// is 65, expected 64 (K of x [4, 64] float32 on cpu)").
//
// Only checks that need no device reads live here; the CPU backend also checks index values
// (token ids, slots, block tables) because it can read them for free.
#pragma once

#include <fmt/format.h>

#include <string_view>

#include "runtime/backend/tensor.hpp"
#include "runtime/error.hpp"

namespace troupe::cpu {

class OpCheck {
 public:
  explicit OpCheck(std::string_view op) : op_(op) {}

  /// Throws "<op>: <message>".
  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    troupe::fail("{}: {}", op_, fmt::format(f, std::forward<Args>(args)...));
  }

  /// `t` lives on the CPU, has dtype `dtype` and `ndim` dimensions, and has memory unless it
  /// is empty.
  void tensor(std::string_view name, const Tensor& t, DType dtype, int ndim) const;
  /// t.dim(i) == expected; `why` says where the expectation comes from.
  void dim(std::string_view name, const Tensor& t, int i, int64_t expected,
           std::string_view why) const;
  /// Same dtype and shape as `ref`.
  void same_shape(std::string_view name, const Tensor& t, std::string_view ref_name,
                  const Tensor& ref) const;
  /// `value` > 0.
  void positive(std::string_view name, int64_t value) const;

 private:
  std::string_view op_;
};

}  // namespace troupe::cpu
