// Device helpers shared by the .cu files: float conversions for the three compute dtypes,
// 16-byte vectors, warp and block reductions. nvcc only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace troupe::cuda {

// ---- scalar conversions (round to nearest even, as the host's dtype.hpp does) ----

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

/// Rounds an f32 to T and back: the value a T tensor would hold.
template <class T>
__device__ __forceinline__ float round_to(float x) {
  return to_f32(from_f32<T>(x));
}

// ---- 16-byte vectors of T ----

template <class T>
inline constexpr int kVec16 = 16 / int(sizeof(T));

/// Loads 16 bytes (kVec16<T> elements, p 16-byte aligned) and widens them to f32.
template <class T>
__device__ __forceinline__ void load16(const T* p, float (&out)[16 / sizeof(T)]) {
  alignas(16) T e[kVec16<T>];
  *reinterpret_cast<uint4*>(e) = *reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < kVec16<T>; ++i) out[i] = to_f32(e[i]);
}

/// Rounds kVec16<T> floats to T and stores them as 16 bytes (p 16-byte aligned).
template <class T>
__device__ __forceinline__ void store16(T* p, const float (&in)[16 / sizeof(T)]) {
  alignas(16) T e[kVec16<T>];
#pragma unroll
  for (int i = 0; i < kVec16<T>; ++i) e[i] = from_f32<T>(in[i]);
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(e);
}

// ---- reductions ----

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
/// `scratch` holds 32 floats. The reduction tree is fixed, so the result is deterministic.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

/// True when p is aligned to `bytes`.
__host__ __device__ __forceinline__ bool aligned_to(const void* p, unsigned bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

}  // namespace troupe::cuda
