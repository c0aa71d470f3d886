// The gated-MLP activations on the device (nvcc only), shared by act_mul (activation.cu) and
// the skinny GEMM's act_mul epilogue (gemv.cu): one definition, so the fused and the separate
// kernels compute act(gate) with the same instructions and round it the same way.
#pragma once

#include "cuda/device_common.cuh"

namespace troupe::cuda {

/// The activation as launch_act_mul's `act` and troupe::GatedActivation number it.
enum Act : int { kSilu = 0, kGelu = 1, kGeluTanh = 2 };

/// act(g) in f32, before any rounding.
template <int A>
__device__ __forceinline__ float activate(float g) {
  if constexpr (A == kSilu) {
    return g / (1.0f + expf(-g));
  } else if constexpr (A == kGelu) {
    return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f));
  } else {
    const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
    return 0.5f * g * (1.0f + tanhf(inner));
  }
}

/// One element of act_mul as a T tensor holds it: act(gate) is rounded to T before the
/// multiply by up (transformers, vLLM); the caller rounds the product. gate and up are T values.
template <class T, int A>
__device__ __forceinline__ float act_mul_value(float gate, float up) {
  return round_to<T>(activate<A>(gate)) * up;
}

}  // namespace troupe::cuda
