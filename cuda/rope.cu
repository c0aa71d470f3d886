// Rotary embedding in place on q and k, reading the f32 cos/sin cache (row = position, first
// rotary_dim/2 columns cos, the rest sin). neox pairs (i, i + rotary_dim/2), gptj pairs
// (2i, 2i + 1); features past rotary_dim are left alone (partial rotary). One block per token,
// one thread per (head, pair); the rotation is computed in f32 and rounded once.
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(T* __restrict__ q, T* __restrict__ k, const int32_t* __restrict__ positions,
                const float* __restrict__ cos_sin, int64_t tokens, int q_heads, int k_heads,
                int head_dim, int rotary_dim, int64_t max_positions, bool neox, int* err) {
  const int half = rotary_dim / 2;
  const int work = (q_heads + k_heads) * half;
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const int64_t pos = positions[t];
    if (pos < 0 || pos >= max_positions) {
      if (threadIdx.x == 0) atomicOr(err, int(kErrRopePosition));
      continue;
    }
    const float* cos_row = cos_sin + pos * rotary_dim;
    const float* sin_row = cos_row + half;
    for (int w = threadIdx.x; w < work; w += kThreads) {
      const int head = w / half, i = w % half;
      T* x = head < q_heads ? q + (t * q_heads + head) * head_dim
                            : k + (t * k_heads + (head - q_heads)) * head_dim;
      const int i1 = neox ? i : 2 * i;
      const int i2 = neox ? i + half : 2 * i + 1;
      const float x1 = to_f32(x[i1]), x2 = to_f32(x[i2]);
      const float c = cos_row[i], s = sin_row[i];
      x[i1] = from_f32<T>(x1 * c - x2 * s);
      x[i2] = from_f32<T>(x2 * c + x1 * s);
    }
  }
}

template <class T>
void launch_typed(void* q, void* k, const int32_t* positions, const float* cos_sin, int64_t tokens,
                  int q_heads, int k_heads, int head_dim, int rotary_dim, int64_t max_positions,
                  bool neox, int* err, cudaStream_t stream) {
  const dim3 grid(unsigned(tokens < (1 << 30) ? tokens : (1 << 30)));
  rope_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<T*>(q), static_cast<T*>(k), positions,
                                                cos_sin, tokens, q_heads, k_heads, head_dim,
                                                rotary_dim, max_positions, neox, err);
}

}  // namespace

void launch_rope(DType dt, void* q, void* k, const int32_t* positions, const float* cos_sin,
                 int64_t tokens, int q_heads, int k_heads, int head_dim, int rotary_dim,
                 int64_t max_positions, bool neox, int* err, cudaStream_t stream) {
  if (tokens <= 0 || q_heads + k_heads <= 0 || rotary_dim < 2) return;
  switch (dt) {
    case DType::f32:
      launch_typed<float>(q, k, positions, cos_sin, tokens, q_heads, k_heads, head_dim, rotary_dim,
                          max_positions, neox, err, stream);
      break;
    case DType::f16:
      launch_typed<__half>(q, k, positions, cos_sin, tokens, q_heads, k_heads, head_dim, rotary_dim,
                           max_positions, neox, err, stream);
      break;
    case DType::bf16:
      launch_typed<__nv_bfloat16>(q, k, positions, cos_sin, tokens, q_heads, k_heads, head_dim,
                                  rotary_dim, max_positions, neox, err, stream);
      break;
    default:
      break;
  }
}

}  // namespace troupe::cuda
