// Owning wrappers for the CUDA backend's own memory (workspaces, staging buffers), so that a
// constructor that throws halfway frees what it already took. Host-only (g++).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string_view>

namespace troupe::cuda {

/// cudaMalloc'd bytes on the current device; grows (without keeping contents) on demand.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  /// At least `bytes` bytes; reallocates (synchronously) when smaller. `what` names the use
  /// in the error thrown when cudaMalloc fails.
  void ensure(size_t bytes, std::string_view what);
  void release();
  [[nodiscard]] void* data() const { return ptr_; }
  [[nodiscard]] size_t bytes() const { return bytes_; }
  template <class T>
  [[nodiscard]] T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// Page-locked host bytes (cudaMallocHost), for copies that must be truly asynchronous.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { release(); }

  void ensure(size_t bytes, std::string_view what);
  void release();
  [[nodiscard]] void* data() const { return ptr_; }
  template <class T>
  [[nodiscard]] T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace troupe::cuda
