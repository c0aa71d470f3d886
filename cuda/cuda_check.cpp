#include "cuda/cuda_check.hpp"

namespace troupe::cuda {

void check_cuda(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return;
  fail("{}: CUDA error {}: {}", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

void check_cublas(cublasStatus_t s, std::string_view what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fail("{}: cuBLAS status {} ({})", what, cublasLtGetStatusName(s), int(s));
}

}  // namespace troupe::cuda
