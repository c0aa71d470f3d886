// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11),
// written once for host and device: the CUDA sampler includes this header too, so a seeded
// request draws identical numbers on every backend.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TROUPE_HD __host__ __device__ __forceinline__
#else
#define TROUPE_HD inline
#endif

namespace troupe::philox {

struct U4 {
  uint32_t x, y, z, w;
};

TROUPE_HD uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  return uint32_t(p);
}

/// Ten rounds of Philox-4x32 on `ctr` with key (k0, k1).
TROUPE_HD U4 philox4x32_10(U4 ctr, uint32_t k0, uint32_t k1) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo(M0, ctr.x, &hi0);
    const uint32_t lo1 = mulhilo(M1, ctr.z, &hi1);
    ctr = U4{hi1 ^ ctr.y ^ k0, lo1, hi0 ^ ctr.w ^ k1, lo0};
    k0 += W0;
    k1 += W1;
  }
  return ctr;
}

/// Uniform float in (0, 1) from 24 random bits: never 0, so -log(u) is finite, and never 1, so
/// -log(u) > 0. The top draw, (2^24 - 0.5) / 2^24, needs 25 bits and rounds to 1.0f; it is the
/// largest float below 1 instead. (Until 2026-12-06 it stayed 1: the CPU race scored that token
/// +inf and the CUDA one -inf, so once in 2^24 entries, 0.3% of draws over a 50k vocabulary, the
/// CPU took a token whatever its probability and the GPU never took it.)
TROUPE_HD float to_open_unit(uint32_t bits) {
  const float u = (float(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
  return u < 1.0f ? u : 0x1.fffffep-1f;
}

/// The uniform draw for vocabulary entry `index` of the `offset`-th sampled token of the
/// sequence seeded `seed`. Four consecutive entries share one Philox block.
TROUPE_HD float uniform(uint64_t seed, uint64_t offset, uint32_t index) {
  const U4 ctr{index >> 2, 0u, uint32_t(offset), uint32_t(offset >> 32)};
  const U4 r = philox4x32_10(ctr, uint32_t(seed), uint32_t(seed >> 32));
  const uint32_t lane = index & 3u;
  const uint32_t bits = lane == 0 ? r.x : lane == 1 ? r.y : lane == 2 ? r.z : r.w;
  return to_open_unit(bits);
}

}  // namespace troupe::philox
