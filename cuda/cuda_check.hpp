// Turning CUDA runtime and cuBLAS status codes into troupe::Error. Host-only (g++).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string_view>

#include "runtime/error.hpp"

namespace troupe::cuda {

/// Throws "<what>: <CUDA error name>: <message>" unless `e` is cudaSuccess.
void check_cuda(cudaError_t e, std::string_view what);
/// Throws "<what>: cuBLAS status <name> (<code>)" unless `s` is CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t s, std::string_view what);

}  // namespace troupe::cuda
