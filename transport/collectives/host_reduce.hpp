// What both CPU Collectives implementations share: checking their host tensors, splitting a
// tensor into per-rank chunks, and the fixed-order sum that makes every rank's bits identical.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "runtime/backend/tensor.hpp"

namespace troupe {

/// out[i] = ((srcs[0][i] + srcs[1][i]) + srcs[2][i]) + ..., in f32, for i < n. The order is the
/// rank order whatever order the data came in, and no rank-dependent path exists, so every
/// rank that sums the same inputs gets the same bits. `out` may alias any source.
void sum_in_rank_order(float* out, std::span<const float* const> srcs, size_t n);

/// Elements [begin, end) of chunk `r` when n elements are split over `parts` ranks (the first
/// n % parts chunks one element longer).
struct Chunk {
  size_t begin = 0;
  size_t end = 0;
  [[nodiscard]] size_t size() const { return end - begin; }
};
[[nodiscard]] Chunk chunk_of(size_t n, int32_t parts, int32_t r);

/// Throws troupe::Error unless x is a non-empty f32 tensor in host memory ("<who>: ...").
void check_all_reduce_arg(std::string_view who, const Tensor& x);
/// Throws unless in and out are host tensors of one dtype with out.numel() == size * in.numel().
void check_all_gather_args(std::string_view who, const Tensor& in, const Tensor& out, int32_t size);

}  // namespace troupe
