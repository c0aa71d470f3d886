// Inner loops shared by the CPU kernels, written so that GCC vectorises them without
// -ffast-math: reductions keep eight independent partial sums (a fixed reassociation, so
// results do not depend on the thread count or on -march).
#pragma once

#include <cstdint>

namespace troupe::cpu {

/// sum_i a[i] * b[i], f32 accumulation in eight lanes.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

/// y[i] += a * x[i].
inline void axpy(float* __restrict y, float a, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace troupe::cpu
