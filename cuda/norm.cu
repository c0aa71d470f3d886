// rms_norm and add_rms_norm: one block per row, 16-byte loads when the row and pointers allow,
// f32 accumulation, and transformers' rounding: the normalised value is rounded to the compute
// dtype before the multiply by the weight (LlamaRMSNorm: weight * hidden.to(input_dtype)).
// add_rms_norm rounds residual + x to the dtype first, as the residual tensor holds it.
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"

namespace troupe::cuda {
namespace {

template <class T, bool kVec, bool kAdd>
__global__ void __launch_bounds__(1024)
    rms_norm_kernel(T* __restrict__ residual, const T* __restrict__ x, const T* __restrict__ w,
                    float eps, T* __restrict__ out, int64_t h, bool pdl_early) {
  __shared__ float red[32];
  pdl_wait();  // launched with launch_pdl
  pdl_trigger(pdl_early);
  const int64_t row = blockIdx.x;
  const T* xr = x + row * h;
  T* rr = kAdd ? residual + row * h : nullptr;
  T* orow = out + row * h;
  // `src` is what gets normalised: x, or the updated residual (each thread re-reads only the
  // elements it wrote itself, so no barrier is needed between the two passes for them).
  const T* src = kAdd ? rr : xr;

  float ss = 0.0f;
  if constexpr (kVec) {
    constexpr int N = kVec16<T>;
    for (int64_t i = int64_t(threadIdx.x) * N; i < h; i += int64_t(blockDim.x) * N) {
      float a[N];
      load16(xr + i, a);
      if constexpr (kAdd) {
        float r[N];
        load16(rr + i, r);
#pragma unroll
        for (int e = 0; e < N; ++e) a[e] = round_to<T>(r[e] + a[e]);
        store16(rr + i, a);
      }
#pragma unroll
      for (int e = 0; e < N; ++e) ss += a[e] * a[e];
    }
  } else {
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
      float a = to_f32(xr[i]);
      if constexpr (kAdd) {
        a = round_to<T>(to_f32(rr[i]) + a);
        rr[i] = from_f32<T>(a);
      }
      ss += a * a;
    }
  }
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / float(h) + eps);

  if constexpr (kVec) {
    constexpr int N = kVec16<T>;
    for (int64_t i = int64_t(threadIdx.x) * N; i < h; i += int64_t(blockDim.x) * N) {
      float a[N], wv[N];
      load16(src + i, a);
      load16(w + i, wv);
#pragma unroll
      for (int e = 0; e < N; ++e) a[e] = round_to<T>(a[e] * inv) * wv[e];
      store16(orow + i, a);
    }
  } else {
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x)
      orow[i] = from_f32<T>(round_to<T>(to_f32(src[i]) * inv) * to_f32(w[i]));
  }
}

template <class T>
void launch_typed(void* residual, const void* x, const void* weight, float eps, void* out,
                  int64_t rows, int64_t h, cudaStream_t stream) {
  constexpr int N = kVec16<T>;
  const bool vec = h % N == 0 && aligned_to(x, 16) && aligned_to(weight, 16) &&
                   aligned_to(out, 16) && (residual == nullptr || aligned_to(residual, 16));
  const int64_t per_thread = vec ? N : 1;
  int64_t threads = ((h + per_thread - 1) / per_thread + 31) / 32 * 32;
  threads = threads < 32 ? 32 : threads > 1024 ? 1024 : threads;
  auto* r = static_cast<T*>(residual);
  const auto* xs = static_cast<const T*>(x);
  const auto* w = static_cast<const T*>(weight);
  auto* o = static_cast<T*>(out);
  const dim3 grid{unsigned(rows)}, block{unsigned(threads)};
  if (residual != nullptr) {
    if (vec)
      launch_pdl(rms_norm_kernel<T, true, true>, grid, block, 0, stream, r, xs, w, eps, o, h);
    else
      launch_pdl(rms_norm_kernel<T, false, true>, grid, block, 0, stream, r, xs, w, eps, o, h);
  } else {
    if (vec)
      launch_pdl(rms_norm_kernel<T, true, false>, grid, block, 0, stream, r, xs, w, eps, o, h);
    else
      launch_pdl(rms_norm_kernel<T, false, false>, grid, block, 0, stream, r, xs, w, eps, o, h);
  }
}

}  // namespace

void launch_rms_norm(DType dt, void* residual, const void* x, const void* weight, float eps,
                     void* out, int64_t rows, int64_t h, cudaStream_t stream) {
  if (rows <= 0 || h <= 0) return;
  switch (dt) {
    case DType::f32:
      launch_typed<float>(residual, x, weight, eps, out, rows, h, stream);
      break;
    case DType::f16:
      launch_typed<__half>(residual, x, weight, eps, out, rows, h, stream);
      break;
    case DType::bf16:
      launch_typed<__nv_bfloat16>(residual, x, weight, eps, out, rows, h, stream);
      break;
    default:
      break;  // the host validated the dtype
  }
}

}  // namespace troupe::cuda
