// The GEMM pieces that are not cuBLASLt: a bias add for the combinations cuBLASLt's epilogue
// does not take, and a plain tiled GEMM used only when cuBLASLt declines a shape or alignment,
// so that linear never fails for a valid call. Both accumulate in f32 and round once.
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"

namespace troupe::cuda {
namespace {

constexpr int kTile = 16;

template <class TO, class TB>
__global__ void __launch_bounds__(256)
    add_bias_kernel(TO* __restrict__ out, const TB* __restrict__ bias, int64_t rows, int64_t n,
                    bool accumulate) {
  const int64_t total = rows * n;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float b = to_f32(bias[i % n]);
    out[i] = from_f32<TO>(accumulate ? to_f32(out[i]) + b : b);
  }
}

// out[t, n] = sum_k x[t, k] * w[n, k] (+ bias[n]); one 16x16 output tile per block.
template <class TI, class TB, class TO>
__global__ void __launch_bounds__(kTile* kTile)
    fallback_gemm_kernel(const TI* __restrict__ x, const TI* __restrict__ w,
                         const TB* __restrict__ bias, TO* __restrict__ out, int64_t t_rows,
                         int64_t n_cols, int64_t k_dim) {
  __shared__ float xs[kTile][kTile + 1];
  __shared__ float ws[kTile][kTile + 1];
  const int tx = threadIdx.x % kTile, ty = threadIdx.x / kTile;
  const int64_t row = int64_t(blockIdx.x) * kTile + ty;   // token
  const int64_t col = int64_t(blockIdx.y) * kTile + tx;   // output feature
  const int64_t wrow = int64_t(blockIdx.y) * kTile + ty;  // w row loaded by this thread
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < k_dim; k0 += kTile) {
    const int64_t kk = k0 + tx;
    xs[ty][tx] = (row < t_rows && kk < k_dim) ? to_f32(x[row * k_dim + kk]) : 0.0f;
    ws[ty][tx] = (wrow < n_cols && kk < k_dim) ? to_f32(w[wrow * k_dim + kk]) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kTile; ++j) acc += xs[ty][j] * ws[tx][j];
    __syncthreads();
  }
  if (row < t_rows && col < n_cols) {
    if (bias != nullptr) acc += to_f32(bias[col]);
    out[row * n_cols + col] = from_f32<TO>(acc);
  }
}

template <class F>
void with_type(DType dt, F&& f) {
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
      break;
  }
}

}  // namespace

void launch_add_bias(DType out_dt, void* out, DType bias_dt, const void* bias, int64_t rows,
                     int64_t n, bool accumulate, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  const int64_t total = rows * n;
  const int64_t blocks64 = (total + 255) / 256;
  const unsigned blocks = unsigned(blocks64 < 65536 * 16 ? blocks64 : 65536 * 16);
  with_type(out_dt, [&](auto o) {
    using TO = decltype(o);
    with_type(bias_dt, [&](auto b) {
      using TB = decltype(b);
      add_bias_kernel<TO, TB><<<blocks, 256, 0, stream>>>(
          static_cast<TO*>(out), static_cast<const TB*>(bias), rows, n, accumulate);
    });
  });
}

void launch_fallback_gemm(DType in_dt, const void* x, const void* w, DType bias_dt,
                          const void* bias, DType out_dt, void* out, int64_t t, int64_t n,
                          int64_t k, cudaStream_t stream) {
  if (t <= 0 || n <= 0) return;
  const dim3 grid(unsigned((t + kTile - 1) / kTile), unsigned((n + kTile - 1) / kTile));
  with_type(in_dt, [&](auto i) {
    using TI = decltype(i);
    with_type(out_dt, [&](auto o) {
      using TO = decltype(o);
      with_type(bias_dt, [&](auto b) {
        using TB = decltype(b);
        fallback_gemm_kernel<TI, TB, TO><<<grid, kTile * kTile, 0, stream>>>(
            static_cast<const TI*>(x), static_cast<const TI*>(w), static_cast<const TB*>(bias),
            static_cast<TO*>(out), t, n, k);
      });
    });
  });
}

}  // namespace troupe::cuda
