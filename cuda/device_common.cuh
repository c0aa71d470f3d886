// Device helpers shared by the .cu files: float conversions for the three compute dtypes,
// 16-byte vectors, warp and block reductions. nvcc only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

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

// ---- programmatic dependent launch (Hopper) ----
//
// Decode steps are chains of short kernels; launched with the programmatic-stream-serialization
// attribute, a kernel's CTAs may start while its predecessor's last CTAs still run, hiding the
// launch latency and the kernel's own prologue (gemv.cu even issues its first weight loads).
// The rule that keeps this safe: a kernel launched by launch_pdl calls pdl_wait() before it
// reads or writes any memory an earlier kernel of the stream may touch (pdl_wait returns once
// every earlier kernel has finished and its writes are visible; it is a no-op for a kernel
// launched normally). CUDA graphs record the programmatic edges. No kernel signals
// griddepcontrol.launch_dependents early (right after its wait it measured no faster:
// docs/engine.md), so a kernel's CTAs start as its predecessor's CTAs finish.

__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

/// Launches `kernel` with `args` and the programmatic-stream-serialization attribute.
template <class... KArgs, class... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // A launch error stays the stream's last error, which the backend's after_launch reports.
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
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
