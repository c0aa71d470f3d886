#include "cuda/cuda_check.hpp"

#include <climits>
#include <cstdint>

namespace troupe::cuda {

void check_cuda(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return;
  fail("{}: CUDA error {}: {}", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

void check_cublas(cublasStatus_t s, std::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fail("{}: cuBLAS status {} ({})", what, cublasLtGetStatusName(s), int(s));
}

void OpCheck::tensor(std::string_view name, const Tensor& t, int ndim) const {
  if (t.device != device_) fail("{} {} must be on {}", name, describe(t), to_string(device_));
  if (t.ndim != ndim) fail("{} {} must have {} dimensions", name, describe(t), ndim);
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[size_t(i)] < 0) fail("{} {} has a negative dimension", name, describe(t));
  if (t.numel() > 0 && t.data == nullptr) fail("{} {} has no memory", name, describe(t));
}

void OpCheck::tensor(std::string_view name, const Tensor& t, DType dtype, int ndim) const {
  tensor(name, t, ndim);
  if (t.dtype != dtype)
    fail("{} {} must be {}, not {}", name, describe(t), dtype_name(dtype), dtype_name(t.dtype));
}

void OpCheck::float_dtype(std::string_view name, const Tensor& t) const {
  if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16)
    fail("{} {} must be float32, float16 or bfloat16", name, describe(t));
}

void OpCheck::dim(std::string_view name, const Tensor& t, int i, int64_t expected,
                  std::string_view why) const {
  if (t.dim(i) != expected)
    fail("{} {}: dim {} is {}, expected {} ({})", name, describe(t), i, t.dim(i), expected, why);
}

void OpCheck::same_shape(std::string_view name, const Tensor& t, std::string_view ref_name,
                         const Tensor& ref) const {
  bool same = t.ndim == ref.ndim && t.dtype == ref.dtype;
  for (int i = 0; same && i < t.ndim; ++i) same = t.shape[size_t(i)] == ref.shape[size_t(i)];
  if (!same) fail("{} {} must match {} {}", name, describe(t), ref_name, describe(ref));
}

void OpCheck::disjoint(std::string_view name, const Tensor& t, std::string_view other_name,
                       const Tensor& other) const {
  if (t.numel() == 0 || other.numel() == 0) return;
  const auto a = reinterpret_cast<uintptr_t>(t.data), b = reinterpret_cast<uintptr_t>(other.data);
  if (a < b + other.nbytes() && b < a + t.nbytes())
    fail("{} {} overlaps {} {}", name, describe(t), other_name, describe(other));
}

void OpCheck::fits_int(std::string_view name, int64_t value) const {
  if (value < 0 || value > INT_MAX)
    fail("{} = {} exceeds the kernels' limit of 2^31 - 1", name, value);
}

void OpCheck::aligned(std::string_view name, const Tensor& t, size_t bytes) const {
  if (reinterpret_cast<uintptr_t>(t.data) % bytes != 0)
    fail("{} {} must start on a {}-byte boundary (pass a view at a multiple of {} bytes)", name,
         describe(t), bytes, bytes);
}

}  // namespace troupe::cuda
