// The arithmetic of rms_norm on the device (nvcc only), shared by the norm kernels (norm.cu)
// and the skinny GEMM's rms_norm prologue (gemv.cu), which recomputes a row's inverse RMS and
// normalised values and must get the very bits norm.cu would have stored.
//
// The sum of squares is order-dependent, so its order is part of the contract: rms_norm_kernel
// runs one block of RmsNormPlan::threads threads per row; thread i adds the squares of its
// elements in index order (with the vectorised plan: elements i*V .. i*V+V-1, then
// (i + threads)*V .. and so on, V = kVec16<T>), each block-sized warp adds its 32 lanes by
// warp_sum, and block_sum adds the warp totals (zero-padded to 32) by one more warp_sum.
#pragma once

#include "cuda/device_common.cuh"

namespace troupe::cuda {

/// ss + a^2 as one fused multiply-add (written out, so the rounding never depends on whether
/// the compiler contracts a mul and an add in a given caller).
__device__ __forceinline__ float add_square(float ss, float a) {
  return fmaf(a, a, ss);
}

/// 1 / sqrt(mean of squares + eps) from a row's sum of squares over h elements.
__device__ __forceinline__ float inv_rms(float sum_squares, int64_t h, float eps) {
  return 1.0f / sqrtf(sum_squares / float(h) + eps);
}

/// One normalised element before its final rounding to T: as in transformers
/// (weight * hidden.to(input_dtype)), x * inv is rounded to T before the weight multiplies it.
template <class T>
__device__ __forceinline__ float rms_scale(float x, float inv, float weight) {
  return round_to<T>(x * inv) * weight;
}

}  // namespace troupe::cuda
