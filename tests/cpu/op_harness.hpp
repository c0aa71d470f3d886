// Shared pieces of the CPU op tests: tensors made through the backend's own upload and
// download, seeded random inputs, and the error measure every op test reports.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu/cpu_backend.hpp"

namespace troupe::test {

/// Owns a backend and the buffers of the tensors made through it.
class OpHarness {
 public:
  explicit OpHarness(int num_threads = 2) : backend_(make_cpu_backend(num_threads)) {}

  [[nodiscard]] Backend& backend() { return *backend_; }

  [[nodiscard]] Tensor f32(std::initializer_list<int64_t> dims, const std::vector<float>& host) {
    return make(DType::f32, dims, host.data(), host.size() * sizeof(float));
  }
  [[nodiscard]] Tensor i32(std::initializer_list<int64_t> dims, const std::vector<int32_t>& host) {
    return make(DType::i32, dims, host.data(), host.size() * sizeof(int32_t));
  }
  /// Filled with NaN, so an op that leaves an element unwritten shows up.
  [[nodiscard]] Tensor f32_nan(std::initializer_list<int64_t> dims) {
    Tensor t(nullptr, DType::f32, Device{}, dims);
    return f32(dims, std::vector<float>(size_t(t.numel()), std::nanf("")));
  }
  [[nodiscard]] Tensor of(DType dtype, std::initializer_list<int64_t> dims) {
    buffers_.push_back(backend_->allocate(Tensor(nullptr, dtype, Device{}, dims).nbytes()));
    return buffers_.back().tensor(dtype, dims);
  }

  [[nodiscard]] std::vector<float> read(const Tensor& t) {
    std::vector<float> host(size_t(t.numel()));
    backend_->download(host.data(), t, t.nbytes());
    return host;
  }

 private:
  Tensor make(DType dtype, std::initializer_list<int64_t> dims, const void* host, size_t bytes) {
    Tensor t = of(dtype, dims);
    REQUIRE(bytes == t.nbytes());
    backend_->upload(t, host, bytes);
    return t;
  }

  std::unique_ptr<Backend> backend_;
  std::vector<Buffer> buffers_;
};

inline std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// max_i |got_i - want_i| / max_i |want_i|: the error relative to the tensor's scale (an
/// element-wise ratio would blow up on elements that cancel to nearly zero).
inline double max_rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(double(got[i]) - want[i]);
    err = std::isnan(e) ? INFINITY : std::max(err, e);
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0.0 ? err / scale : err;
}

/// Prints "op case: max rel err" (the op test report) and checks it against the f32 bound.
inline void report(const std::string& what, double err, double bound = 1e-5) {
  std::printf("%-60s max rel err %.3g\n", what.c_str(), err);
  INFO(what << ": max rel err " << err);
  CHECK(err < bound);
}

}  // namespace troupe::test
