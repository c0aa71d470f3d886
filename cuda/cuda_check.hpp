// Turning CUDA runtime and cuBLAS status codes into troupe::Error, and the op-argument checks
// of the CUDA backend (one line per failure naming the op, the argument and its shape).
// Host-only (g++).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <string_view>

#include "runtime/backend/tensor.hpp"
#include "runtime/error.hpp"

namespace troupe::cuda {

/// Throws "<what>: <CUDA error name>: <message>" unless `e` is cudaSuccess.
void check_cuda(cudaError_t e, std::string_view what);
/// Throws "<what>: cuBLAS status <name> (<code>)" unless `s` is CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t s, std::string_view what);

class OpCheck {
 public:
  OpCheck(std::string_view op, Device device) : op_(op), device_(device) {}

  /// Throws "<op>: <message>".
  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    troupe::fail("{}: {}", op_, fmt::format(f, std::forward<Args>(args)...));
  }

  /// `t` lives on this backend's device, has `ndim` dimensions and memory (unless it is empty).
  void tensor(std::string_view name, const Tensor& t, int ndim) const;
  /// As tensor(), and its dtype is `dtype`.
  void tensor(std::string_view name, const Tensor& t, DType dtype, int ndim) const;
  /// A compute dtype: f32, f16 or bf16.
  void float_dtype(std::string_view name, const Tensor& t) const;
  void dim(std::string_view name, const Tensor& t, int i, int64_t expected,
           std::string_view why) const;
  void same_shape(std::string_view name, const Tensor& t, std::string_view ref_name,
                  const Tensor& ref) const;
  /// The tensor's memory does not overlap `other`'s.
  void disjoint(std::string_view name, const Tensor& t, std::string_view other_name,
                const Tensor& other) const;
  /// `value` fits the kernels' 32-bit indexing (< 2^31).
  void fits_int(std::string_view name, int64_t value) const;
  /// The data pointer is aligned to `bytes` (kernels that read rows with 16-byte vectors).
  void aligned(std::string_view name, const Tensor& t, size_t bytes) const;

 private:
  std::string_view op_;
  Device device_;
};

}  // namespace troupe::cuda
