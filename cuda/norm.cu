// rms_norm and add_rms_norm: one block per row, 16-byte loads when the row and pointers allow,
// f32 accumulation, and transformers' rounding: the normalised value is rounded to the compute
// dtype before the multiply by the weight (LlamaRMSNorm: weight * hidden.to(input_dtype)).
// add_rms_norm rounds residual + x to the dtype first, as the residual tensor holds it; `add`
// is that residual add alone. The arithmetic lives in rms_norm.cuh, which the skinny GEMM's
// rms_norm prologue shares.
#include <algorithm>

#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/rms_norm.cuh"

namespace troupe::cuda {
namespace {

template <class T, bool kVec, bool kAdd>
__global__ void __launch_bounds__(1024)
    rms_norm_kernel(T* __restrict__ residual, const T* __restrict__ x, const T* __restrict__ w,
                    float eps, T* __restrict__ out, int64_t h) {
  __shared__ float red[32];
  pdl_wait();  // launched with launch_pdl
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
      for (int e = 0; e < N; ++e) ss = add_square(ss, a[e]);
    }
  } else {
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
      float a = to_f32(xr[i]);
      if constexpr (kAdd) {
        a = round_to<T>(to_f32(rr[i]) + a);
        rr[i] = from_f32<T>(a);
      }
      ss = add_square(ss, a);
    }
  }
  ss = block_sum(ss, red);
  const float inv = inv_rms(ss, h, eps);

  if constexpr (kVec) {
    constexpr int N = kVec16<T>;
    for (int64_t i = int64_t(threadIdx.x) * N; i < h; i += int64_t(blockDim.x) * N) {
      float a[N], wv[N];
      load16(src + i, a);
      load16(w + i, wv);
#pragma unroll
      for (int e = 0; e < N; ++e) a[e] = rms_scale<T>(a[e], inv, wv[e]);
      store16(orow + i, a);
    }
  } else {
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x)
      orow[i] = from_f32<T>(rms_scale<T>(to_f32(src[i]), inv, to_f32(w[i])));
  }
}

// residual = round(residual + x), elementwise: the first half of add_rms_norm_kernel alone.
template <class T, bool kVec>
__global__ void __launch_bounds__(256)
    add_kernel(T* __restrict__ residual, const T* __restrict__ x, int64_t n) {
  pdl_wait();  // launched with launch_pdl
  constexpr int N = kVec ? kVec16<T> : 1;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x * N;
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * N; i < n; i += stride) {
    if constexpr (kVec) {
      float r[N], a[N];
      load16(residual + i, r);
      load16(x + i, a);
#pragma unroll
      for (int e = 0; e < N; ++e) r[e] += a[e];
      store16(residual + i, r);
    } else {
      residual[i] = from_f32<T>(to_f32(residual[i]) + to_f32(x[i]));
    }
  }
}

template <class T>
void launch_add_typed(void* residual, const void* x, int64_t n, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const bool vec = n % kVec16<T> == 0 && aligned_to(residual, 16) && aligned_to(x, 16);
  const int64_t per_block = int64_t(kThreads) * (vec ? kVec16<T> : 1);
  const int64_t blocks = std::min<int64_t>((n + per_block - 1) / per_block, 4096);
  auto* r = static_cast<T*>(residual);
  const auto* xs = static_cast<const T*>(x);
  if (vec)
    launch_pdl(add_kernel<T, true>, dim3(unsigned(blocks)), dim3(kThreads), 0, stream, r, xs, n);
  else
    launch_pdl(add_kernel<T, false>, dim3(unsigned(blocks)), dim3(kThreads), 0, stream, r, xs, n);
}

// Per-head rms_norm in place (Qwen3's q_norm / k_norm): one warp per head, kHeadsPerBlock heads
// per block; lane i adds the squares of elements i, i + 32, ... in order, then warp_sum. The
// arithmetic (add_square, inv_rms, rms_scale) is rms_norm_kernel's.
constexpr int kHeadsPerBlock = 8;

template <class T>
__global__ void __launch_bounds__(32 * kHeadsPerBlock)
    rms_norm_heads_kernel(T* __restrict__ x, const T* __restrict__ w, float eps, int64_t heads,
                          int64_t row_width, int32_t head_begin, int32_t num_heads,
                          int32_t head_dim) {
  pdl_wait();  // launched with launch_pdl
  const int64_t head = int64_t(blockIdx.x) * kHeadsPerBlock + threadIdx.y;
  if (head >= heads) return;  // a whole warp leaves together: warp_sum's lanes stay full
  const int64_t row = head / num_heads;
  T* p = x + row * row_width + (int64_t(head_begin) + head % num_heads) * head_dim;
  float ss = 0.0f;
  for (int i = int(threadIdx.x); i < head_dim; i += 32) ss = add_square(ss, to_f32(p[i]));
  const float inv = inv_rms(warp_sum(ss), head_dim, eps);
  for (int i = int(threadIdx.x); i < head_dim; i += 32)
    p[i] = from_f32<T>(rms_scale<T>(to_f32(p[i]), inv, to_f32(w[i])));
}

template <class T>
RmsNormPlan plan_typed(const void* residual, const void* x, const void* weight, const void* out,
                       int64_t h) {
  constexpr int N = kVec16<T>;
  const bool vec = h % N == 0 && aligned_to(x, 16) && aligned_to(weight, 16) &&
                   aligned_to(out, 16) && (residual == nullptr || aligned_to(residual, 16));
  const int64_t per_thread = vec ? N : 1;
  int64_t threads = ((h + per_thread - 1) / per_thread + 31) / 32 * 32;
  threads = threads < 32 ? 32 : threads > 1024 ? 1024 : threads;
  return RmsNormPlan{vec, int(threads)};
}

template <class T>
void launch_typed(void* residual, const void* x, const void* weight, float eps, void* out,
                  int64_t rows, int64_t h, cudaStream_t stream) {
  const RmsNormPlan plan = plan_typed<T>(residual, x, weight, out, h);
  const bool vec = plan.vectorised;
  auto* r = static_cast<T*>(residual);
  const auto* xs = static_cast<const T*>(x);
  const auto* w = static_cast<const T*>(weight);
  auto* o = static_cast<T*>(out);
  const dim3 grid{unsigned(rows)}, block{unsigned(plan.threads)};
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

template <class F>
void with_float_type(DType dt, F&& f) {
  switch (dt) {
    case DType::f32:
      f(float{});
      break;
    case DType::f16:
      f(__half{});
      break;
    case DType::bf16:
      f(__nv_bfloat16{});
      break;
    default:
      break;  // the host validated the dtype
  }
}

}  // namespace

RmsNormPlan plan_rms_norm(DType dt, const void* residual, const void* x, const void* weight,
                          const void* out, int64_t h) {
  RmsNormPlan plan{false, 0};
  with_float_type(dt,
                  [&](auto tag) { plan = plan_typed<decltype(tag)>(residual, x, weight, out, h); });
  return plan;
}

void launch_add(DType dt, void* residual, const void* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  with_float_type(dt, [&](auto tag) { launch_add_typed<decltype(tag)>(residual, x, n, stream); });
}

void launch_rms_norm_heads(DType dt, void* x, const void* weight, float eps, int64_t rows,
                           int64_t row_width, int32_t head_begin, int32_t num_heads,
                           int32_t head_dim, cudaStream_t stream) {
  if (rows <= 0 || num_heads <= 0 || head_dim <= 0) return;
  const int64_t heads = rows * num_heads;
  const dim3 grid{unsigned((heads + kHeadsPerBlock - 1) / kHeadsPerBlock)},
      block{32, kHeadsPerBlock};
  with_float_type(dt, [&](auto tag) {
    using T = decltype(tag);
    launch_pdl(rms_norm_heads_kernel<T>, grid, block, 0, stream, static_cast<T*>(x),
               static_cast<const T*>(weight), eps, heads, row_width, head_begin, num_heads,
               head_dim);
  });
}

void launch_rms_norm(DType dt, void* residual, const void* x, const void* weight, float eps,
                     void* out, int64_t rows, int64_t h, cudaStream_t stream) {
  if (rows <= 0 || h <= 0) return;
  with_float_type(dt, [&](auto tag) {
    launch_typed<decltype(tag)>(residual, x, weight, eps, out, rows, h, stream);
  });
}

}  // namespace troupe::cuda
