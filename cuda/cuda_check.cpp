#include "cuda/cuda_check.hpp"

#include "cuda/lt_api.hpp"

namespace troupe::cuda {

void check_cuda(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return;
  fail("{}: CUDA error {}: {}", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

void check_cublas(cublasStatus_t s, std::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  // A status comes from a call through lt_api(), so the library is loaded.
  fail("{}: cuBLAS status {} ({})", what, lt_api().get_status_name(s), int(s));
}

}  // namespace troupe::cuda
