// Tensors as the backend interface sees them: a non-owning view of contiguous row-major
// memory on one device (up to 4 dimensions), plus the owning Buffer it is usually cut from.
//
// Views, not a tensor library: the model programs in runtime/models/ slice and reshape
// views of buffers they allocated once, so a step allocates nothing and its launches can be
// captured in a CUDA graph.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/backend/dtype.hpp"

namespace troupe {

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

std::string to_string(const Device& d);

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int ndim = 0;
  std::array<int64_t, 4> shape{};

  Tensor() = default;
  Tensor(void* p, DType t, Device dev, std::initializer_list<int64_t> dims);

  [[nodiscard]] int64_t dim(int i) const { return shape.at(size_t(i < 0 ? ndim + i : i)); }
  [[nodiscard]] int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[size_t(i)];
    return n;
  }
  [[nodiscard]] size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  /// Elements in one index of dim 0 (the row length of a 2-D tensor).
  [[nodiscard]] int64_t row_elems() const { return ndim == 0 ? 1 : numel() / shape[0]; }
  [[nodiscard]] bool empty() const { return data == nullptr; }

  /// Rows [begin, end) of dim 0, sharing memory.
  [[nodiscard]] Tensor rows(int64_t begin, int64_t end) const;
  /// Same memory, new shape (same element count).
  [[nodiscard]] Tensor view(std::initializer_list<int64_t> dims) const;

  template <class T>
  [[nodiscard]] T* as() const {
    return static_cast<T*>(data);
  }
};

std::string describe(const Tensor& t);  // "[4, 64] bfloat16 on cuda:0"

/// Owning device memory. Move-only; frees through the backend that allocated it.
class Buffer {
 public:
  using Deleter = std::function<void(void*)>;
  Buffer() = default;
  Buffer(void* p, size_t bytes, Device dev, Deleter del)
      : ptr_(p, std::move(del)), bytes_(bytes), device_(dev) {}

  [[nodiscard]] void* data() const { return ptr_.get(); }
  [[nodiscard]] size_t bytes() const { return bytes_; }
  [[nodiscard]] Device device() const { return device_; }
  [[nodiscard]] Tensor tensor(DType t, std::initializer_list<int64_t> dims) const;

 private:
  std::unique_ptr<void, Deleter> ptr_{nullptr, [](void*) {}};
  size_t bytes_ = 0;
  Device device_{};
};

}  // namespace troupe
