#include "cuda/device_buffer.hpp"

#include "cuda/cuda_check.hpp"

namespace troupe::cuda {

void DeviceBuffer::ensure(size_t bytes, std::string_view what) {
  if (bytes <= bytes_ && ptr_ != nullptr) return;
  release();
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes > 0 ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();  // cudaMalloc failures are not sticky; clear the last-error slot
    fail("{}: cudaMalloc of {} bytes failed: {}", what, bytes, cudaGetErrorString(e));
  }
  ptr_ = p;
  bytes_ = bytes;
}

void DeviceBuffer::release() {
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

void PinnedBuffer::ensure(size_t bytes, std::string_view what) {
  if (bytes <= bytes_ && ptr_ != nullptr) return;
  release();
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes > 0 ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("{}: cudaMallocHost of {} bytes failed: {}", what, bytes, cudaGetErrorString(e));
  }
  ptr_ = p;
  bytes_ = bytes;
}

void PinnedBuffer::release() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace troupe::cuda
