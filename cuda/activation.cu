// silu_mul: out = silu(gate) * up for gate_up = [gate | up]. As in transformers and vLLM, silu
// is computed in f32 and rounded to the compute dtype before the multiply by up.
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float silu(float g) {
  return g / (1.0f + expf(-g));
}

template <class T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    silu_mul_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t rows,
                    int64_t inter) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const T* g = gate_up + t * 2 * inter;
    const T* u = g + inter;
    T* o = out + t * inter;
    if constexpr (kVec) {
      constexpr int N = kVec16<T>;
      for (int64_t i = int64_t(threadIdx.x) * N; i < inter; i += int64_t(kThreads) * N) {
        float gv[N], uv[N];
        load16(g + i, gv);
        load16(u + i, uv);
#pragma unroll
        for (int e = 0; e < N; ++e) gv[e] = round_to<T>(silu(gv[e])) * uv[e];
        store16(o + i, gv);
      }
    } else {
      for (int64_t i = threadIdx.x; i < inter; i += kThreads)
        o[i] = from_f32<T>(round_to<T>(silu(to_f32(g[i]))) * to_f32(u[i]));
    }
  }
}

template <class T>
void launch_typed(const void* gate_up, void* out, int64_t rows, int64_t inter,
                  cudaStream_t stream) {
  const bool vec = inter % kVec16<T> == 0 && aligned_to(gate_up, 16) && aligned_to(out, 16);
  const dim3 grid(unsigned(rows < (1 << 30) ? rows : (1 << 30)));
  const auto* in = static_cast<const T*>(gate_up);
  auto* o = static_cast<T*>(out);
  if (vec)
    silu_mul_kernel<T, true><<<grid, kThreads, 0, stream>>>(in, o, rows, inter);
  else
    silu_mul_kernel<T, false><<<grid, kThreads, 0, stream>>>(in, o, rows, inter);
}

}  // namespace

void launch_silu_mul(DType dt, const void* gate_up, void* out, int64_t rows, int64_t inter,
                     cudaStream_t stream) {
  if (rows <= 0 || inter <= 0) return;
  switch (dt) {
    case DType::f32:
      launch_typed<float>(gate_up, out, rows, inter, stream);
      break;
    case DType::f16:
      launch_typed<__half>(gate_up, out, rows, inter, stream);
      break;
    case DType::bf16:
      launch_typed<__nv_bfloat16>(gate_up, out, rows, inter, stream);
      break;
    default:
      break;
  }
}

}  // namespace troupe::cuda
