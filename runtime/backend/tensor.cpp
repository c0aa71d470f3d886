#include "runtime/backend/tensor.hpp"

#include <fmt/format.h>

namespace troupe {

std::string to_string(const Device& d) {
  return d.kind == DeviceKind::cpu ? std::string("cpu") : fmt::format("cuda:{}", d.index);
}

Tensor::Tensor(void* p, DType t, Device dev, std::initializer_list<int64_t> dims)
    : data(p), dtype(t), device(dev), ndim(int(dims.size())) {
  if (dims.size() > 4) throw std::invalid_argument("Tensor: at most 4 dimensions");
  size_t i = 0;
  for (int64_t d : dims) {
    if (d < 0) throw std::invalid_argument("Tensor: negative dimension");
    shape[i++] = d;
  }
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  if (ndim == 0 || begin < 0 || end < begin || end > shape[0])
    throw std::out_of_range(fmt::format("Tensor::rows({}, {}) of {}", begin, end, describe(*this)));
  Tensor t = *this;
  t.data = static_cast<char*>(data) + size_t(begin * row_elems()) * dtype_size(dtype);
  t.shape[0] = end - begin;
  return t;
}

Tensor Tensor::view(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, device, dims);
  if (t.numel() != numel())
    throw std::invalid_argument(fmt::format("Tensor::view: {} elements into {} elements",
                                            numel(), t.numel()));
  return t;
}

std::string describe(const Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[size_t(i)]);
  return s + "] " + std::string(dtype_name(t.dtype)) + " on " + to_string(t.device);
}

Tensor Buffer::tensor(DType t, std::initializer_list<int64_t> dims) const {
  Tensor x(data(), t, device_, dims);
  if (x.nbytes() > bytes_)
    throw std::out_of_range(
        fmt::format("Buffer::tensor: {} needs {} bytes, buffer has {}", describe(x), x.nbytes(),
                    bytes_));
  return x;
}

}  // namespace troupe
