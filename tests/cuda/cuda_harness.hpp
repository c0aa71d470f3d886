// Shared pieces of the CUDA op tests: a CUDA backend and the CPU reference backend side by
// side, tensors in any float dtype made from host f32 data, NaN-poisoned outputs, and the
// error measure every op test reports: ||out - ref|| / ||ref||.
//
// With no GPU (no driver, or cudaGetDeviceCount() == 0) every test prints a WARN and returns,
// so `ctest` passes on CI machines.
#pragma once

#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "runtime/backend/dtype.hpp"

namespace troupe::test {

/// True when a GPU is there; otherwise WARNs once per test case and the case returns.
inline bool have_gpu() {
  static const int count = cuda_device_count();
  if (count == 0) WARN("no CUDA device (or no driver): CUDA op test skipped");
  return count > 0;
}

#define TROUPE_REQUIRE_GPU() \
  if (!::troupe::test::have_gpu()) return

/// Normalised error thresholds per compute dtype (tf32 is off, so f32 is tight).
inline double tolerance(DType dt) {
  switch (dt) {
    case DType::bf16:
      return 1e-2;
    case DType::f16:
      return 3e-3;
    default:
      return 1e-5;
  }
}

/// Values as a tensor of `dt` would hold them (f32 -> dt -> f32, round to nearest even).
inline std::vector<float> rounded(const std::vector<float>& v, DType dt) {
  if (dt == DType::f32) return v;
  std::vector<uint16_t> half(v.size());
  convert_floats(v.data(), DType::f32, half.data(), dt, v.size());
  std::vector<float> out(v.size());
  convert_floats(half.data(), dt, out.data(), DType::f32, v.size());
  return out;
}

inline std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// ||got - want|| / ||want|| (L2); NaN anywhere gives +inf. ||want|| = 0 compares absolutely.
/// A rope cos/sin table [max_pos, rotary_dim] as the models build it (cos in the first half
/// of each row, sin in the second), for rotary base `theta`.
inline std::vector<float> rope_cos_sin(int64_t max_pos, int64_t rotary_dim, double theta = 10000.0) {
  std::vector<float> cs(size_t(max_pos * rotary_dim));
  const int64_t half = rotary_dim / 2;
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double freq = std::pow(theta, -2.0 * double(i) / double(rotary_dim));
      cs[size_t(p * rotary_dim + i)] = float(std::cos(double(p) * freq));
      cs[size_t(p * rotary_dim + half + i)] = float(std::sin(double(p) * freq));
    }
  return cs;
}

inline double norm_error(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = double(got[i]) - double(want[i]);
    if (std::isnan(d)) return INFINITY;
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

/// Prints "op [case]: err" (the op test report) and checks it against `bound`.
inline void report(const std::string& what, double err, double bound) {
  std::printf("%-72s err %.3g (bound %.0e)\n", what.c_str(), err, bound);
  INFO(what << ": ||out-ref||/||ref|| = " << err << ", bound " << bound);
  CHECK(err < bound);
}

/// A CUDA backend on device 0 and a CPU backend, plus the buffers of the tensors made here.
class Pair {
 public:
  Pair() : gpu_(make_cuda_backend(0)), cpu_(make_cpu_backend(0)) {}

  [[nodiscard]] Backend& gpu() { return *gpu_; }
  [[nodiscard]] Backend& cpu() { return *cpu_; }
  [[nodiscard]] CudaBackend& cuda() { return *cuda_backend_of(*gpu_); }

  /// A GPU tensor of `dt` holding `host` (rounded to dt).
  [[nodiscard]] Tensor gpu_floats(DType dt, std::initializer_list<int64_t> dims,
                                  const std::vector<float>& host) {
    Tensor t = alloc(*gpu_, dt, dims);
    REQUIRE(size_t(t.numel()) == host.size());
    std::vector<uint8_t> bytes(t.nbytes());
    convert_floats(host.data(), DType::f32, bytes.data(), dt, host.size());
    gpu_->upload(t, bytes.data(), bytes.size());
    return t;
  }
  /// A GPU tensor of `dt` filled with NaN, so unwritten elements fail the comparison.
  [[nodiscard]] Tensor gpu_nan(DType dt, std::initializer_list<int64_t> dims) {
    Tensor shape(nullptr, dt, Device{}, dims);
    return gpu_floats(dt, dims, std::vector<float>(size_t(shape.numel()), std::nanf("")));
  }
  [[nodiscard]] Tensor gpu_i32(std::initializer_list<int64_t> dims,
                               const std::vector<int32_t>& host) {
    Tensor t = alloc(*gpu_, DType::i32, dims);
    REQUIRE(size_t(t.numel()) == host.size());
    gpu_->upload(t, host.data(), t.nbytes());
    return t;
  }
  [[nodiscard]] Tensor cpu_f32(std::initializer_list<int64_t> dims,
                               const std::vector<float>& host) {
    Tensor t = alloc(*cpu_, DType::f32, dims);
    REQUIRE(size_t(t.numel()) == host.size());
    cpu_->upload(t, host.data(), t.nbytes());
    return t;
  }
  [[nodiscard]] Tensor cpu_nan(std::initializer_list<int64_t> dims) {
    Tensor shape(nullptr, DType::f32, Device{}, dims);
    return cpu_f32(dims, std::vector<float>(size_t(shape.numel()), std::nanf("")));
  }
  [[nodiscard]] Tensor cpu_i32(std::initializer_list<int64_t> dims,
                               const std::vector<int32_t>& host) {
    Tensor t = alloc(*cpu_, DType::i32, dims);
    REQUIRE(size_t(t.numel()) == host.size());
    cpu_->upload(t, host.data(), t.nbytes());
    return t;
  }

  /// Any float tensor of either backend, as f32 host values.
  [[nodiscard]] std::vector<float> read(const Tensor& t) {
    Backend& b = t.device.kind == DeviceKind::cuda ? *gpu_ : *cpu_;
    std::vector<uint8_t> bytes(t.nbytes());
    b.download(bytes.data(), t, bytes.size());
    std::vector<float> out(size_t(t.numel()));
    convert_floats(bytes.data(), t.dtype, out.data(), DType::f32, out.size());
    return out;
  }
  [[nodiscard]] std::vector<int32_t> read_i32(const Tensor& t) {
    Backend& b = t.device.kind == DeviceKind::cuda ? *gpu_ : *cpu_;
    std::vector<int32_t> out(size_t(t.numel()));
    b.download(out.data(), t, t.nbytes());
    return out;
  }

  [[nodiscard]] Tensor alloc(Backend& b, DType dt, std::initializer_list<int64_t> dims) {
    Tensor shape(nullptr, dt, b.device(), dims);
    buffers_.push_back(b.allocate(shape.nbytes()));
    return buffers_.back().tensor(dt, dims);
  }

 private:
  std::unique_ptr<Backend> gpu_;
  std::unique_ptr<Backend> cpu_;
  std::vector<Buffer> buffers_;
};

inline const char* dname(DType dt) {
  return dtype_name(dt).data();
}

inline constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

}  // namespace troupe::test
