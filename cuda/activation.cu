// act_mul: out = act(gate) * up for gate_up = [gate | up] (SwiGLU, GeGLU). As in transformers
// and vLLM, act is computed in f32 and rounded to the compute dtype before the multiply by up.
// act: silu, gelu (exact, erf) or gelu with the tanh approximation (gelu_pytorch_tanh), from
// activation.cuh (the skinny GEMM's act_mul epilogue uses the same functions).
// Grid (column chunks, rows): a CTA covers kThreads x (16-byte vector) columns of a row, so a
// decode step's few rows still spread over many SMs.
#include "cuda/activation.cuh"
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 256;

template <class T, int A, bool kVec>
__global__ void __launch_bounds__(kThreads)
    act_mul_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t rows,
                   int64_t inter) {
  pdl_wait();
  constexpr int N = kVec ? kVec16<T> : 1;
  const int64_t chunk = int64_t(kThreads) * N;
  for (int64_t t = blockIdx.y; t < rows; t += gridDim.y) {
    const T* g = gate_up + t * 2 * inter;
    const T* u = g + inter;
    T* o = out + t * inter;
    if constexpr (kVec) {
      for (int64_t i = int64_t(blockIdx.x) * chunk + int64_t(threadIdx.x) * N; i < inter;
           i += int64_t(gridDim.x) * chunk) {
        float gv[N], uv[N];
        load16(g + i, gv);
        load16(u + i, uv);
#pragma unroll
        for (int e = 0; e < N; ++e) gv[e] = act_mul_value<T, A>(gv[e], uv[e]);
        store16(o + i, gv);
      }
    } else {
      for (int64_t i = int64_t(blockIdx.x) * chunk + threadIdx.x; i < inter;
           i += int64_t(gridDim.x) * chunk)
        o[i] = from_f32<T>(act_mul_value<T, A>(to_f32(g[i]), to_f32(u[i])));
    }
  }
}

template <class T, int A>
void launch_typed(const void* gate_up, void* out, int64_t rows, int64_t inter,
                  cudaStream_t stream) {
  const bool vec = inter % kVec16<T> == 0 && aligned_to(gate_up, 16) && aligned_to(out, 16);
  const int64_t chunk = int64_t(kThreads) * (vec ? kVec16<T> : 1);
  const int64_t chunks = (inter + chunk - 1) / chunk;
  const dim3 grid(unsigned(chunks < 1024 ? chunks : 1024), unsigned(rows < 65535 ? rows : 65535));
  const auto* in = static_cast<const T*>(gate_up);
  auto* o = static_cast<T*>(out);
  if (vec)
    launch_pdl(act_mul_kernel<T, A, true>, grid, dim3(kThreads), 0, stream, in, o, rows, inter);
  else
    launch_pdl(act_mul_kernel<T, A, false>, grid, dim3(kThreads), 0, stream, in, o, rows, inter);
}

template <class T>
void launch_act(int act, const void* gate_up, void* out, int64_t rows, int64_t inter,
                cudaStream_t stream) {
  switch (act) {
    case kSilu:
      launch_typed<T, kSilu>(gate_up, out, rows, inter, stream);
      break;
    case kGelu:
      launch_typed<T, kGelu>(gate_up, out, rows, inter, stream);
      break;
    case kGeluTanh:
      launch_typed<T, kGeluTanh>(gate_up, out, rows, inter, stream);
      break;
    default:
      break;
  }
}

}  // namespace

void launch_act_mul(int act, DType dt, const void* gate_up, void* out, int64_t rows, int64_t inter,
                    cudaStream_t stream) {
  if (rows <= 0 || inter <= 0) return;
  switch (dt) {
    case DType::f32:
      launch_act<float>(act, gate_up, out, rows, inter, stream);
      break;
    case DType::f16:
      launch_act<__half>(act, gate_up, out, rows, inter, stream);
      break;
    case DType::bf16:
      launch_act<__nv_bfloat16>(act, gate_up, out, rows, inter, stream);
      break;
    default:
      break;
  }
}

}  // namespace troupe::cuda
