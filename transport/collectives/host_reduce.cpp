#include "transport/collectives/host_reduce.hpp"

#include <algorithm>
#include <cstring>

#include "runtime/error.hpp"

namespace troupe {

void sum_in_rank_order(float* out, std::span<const float* const> srcs, size_t n) {
  // Blocks small enough to stay in L1 while every source is added, the inner loop over
  // elements so that it vectorises: the per-element order of additions is unchanged.
  constexpr size_t kBlock = 1024;
  float acc[kBlock];
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t m = std::min(kBlock, n - b);
    std::memcpy(acc, srcs[0] + b, m * sizeof(float));
    for (size_t r = 1; r < srcs.size(); ++r) {
      const float* s = srcs[r] + b;
      for (size_t i = 0; i < m; ++i) acc[i] += s[i];
    }
    std::memcpy(out + b, acc, m * sizeof(float));
  }
}

Chunk chunk_of(size_t n, int32_t parts, int32_t r) {
  const size_t p = size_t(parts), base = n / p, extra = n % p, i = size_t(r);
  const size_t begin = i * base + std::min(i, extra);
  return Chunk{begin, begin + base + (i < extra ? 1 : 0)};
}

void check_all_reduce_arg(std::string_view who, const Tensor& x) {
  if (x.empty() || x.numel() == 0) fail("{}: all_reduce_sum of an empty tensor", who);
  if (x.device.kind != DeviceKind::cpu)
    fail("{}: all_reduce_sum needs a host tensor, got {}", who, describe(x));
  if (x.dtype != DType::f32)
    fail("{}: all_reduce_sum sums float32 host tensors, got {}", who, describe(x));
}

void check_all_gather_args(std::string_view who, const Tensor& in, const Tensor& out,
                           int32_t size) {
  if (in.empty() || out.empty() || in.numel() == 0)
    fail("{}: all_gather of an empty tensor ({} into {})", who, describe(in), describe(out));
  if (in.device.kind != DeviceKind::cpu || out.device.kind != DeviceKind::cpu)
    fail("{}: all_gather needs host tensors, got {} into {}", who, describe(in), describe(out));
  if (in.dtype != out.dtype)
    fail("{}: all_gather of {} into {}: dtypes differ", who, describe(in), describe(out));
  if (out.numel() != int64_t(size) * in.numel())
    fail("{}: all_gather of {} into {}: out must hold {} x {} = {} elements", who, describe(in),
         describe(out), size, in.numel(), int64_t(size) * in.numel());
}

}  // namespace troupe
