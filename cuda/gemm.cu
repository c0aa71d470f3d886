// The GEMM pieces that are not cuBLASLt: a bias add for the combinations cuBLASLt's epilogue
// does not take, a plain tiled GEMM used when cuBLASLt declines a shape or alignment (so that
// linear never fails for a valid call), and the fixed-order tensor-core GEMM of batch-invariant
// mode. All accumulate in f32 and round once.
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/mma.cuh"

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

// ---- the batch-invariant GEMM ----
//
// out[t, n] = x[t, k] w[n, k]^T (+ bias[n]) with one reduction order for every output element
// whatever the number of rows: each element is one f32 accumulator that mma.sync.m16n8k16
// steps through k in 16-wide pieces from k = 0 upwards, in every CTA and warp alike, with no
// split of k and no other kernel for other row counts. A CTA of 4 warps (2 x 2) computes a
// 64 x 64 tile of out; each warp 32 x 32 (two m16 tiles by four n8 tiles). x and w tiles of
// 32 columns come by cp.async through a three-stage ring. Rows past t or n and columns past k
// are zero-filled (they add exact zeros).
constexpr int kInvBM = 64, kInvBN = 64, kInvBK = 32, kInvStages = 3;
constexpr int kInvLD = kInvBK + 8;  // padded rows: ldmatrix row addresses in distinct banks
constexpr int kInvThreads = 128;

template <class T, class TB, class TO>
__global__ void __launch_bounds__(kInvThreads)
    invariant_gemm_kernel(const T* __restrict__ x, const T* __restrict__ w,
                          const TB* __restrict__ bias, TO* __restrict__ out, int64_t t_rows,
                          int64_t n_cols, int64_t k_dim) {
  __shared__ __align__(16) T xs[kInvStages][kInvBM * kInvLD];
  __shared__ __align__(16) T ws[kInvStages][kInvBN * kInvLD];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t4 = lane & 3;
  const int64_t n0 = int64_t(blockIdx.x) * kInvBN, m0 = int64_t(blockIdx.y) * kInvBM;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  const int k_tiles = int((k_dim + kInvBK - 1) / kInvBK);

  // A 64 x 32 tile is 256 chunks of 16 bytes: two per thread for x and two for w.
  const auto load = [&](int kt, int stage) {
    const int64_t k0 = int64_t(kt) * kInvBK;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int idx = tid + i * kInvThreads, r = idx >> 2, c = (idx & 3) * 8;
      const bool kin = k0 + c < k_dim;
      const bool xin = kin && m0 + r < t_rows, win = kin && n0 + r < n_cols;
      cp_async16(&xs[stage][r * kInvLD + c], xin ? x + (m0 + r) * k_dim + k0 + c : x, xin ? 16 : 0);
      cp_async16(&ws[stage][r * kInvLD + c], win ? w + (n0 + r) * k_dim + k0 + c : w, win ? 16 : 0);
    }
  };

  float acc[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
      acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;

#pragma unroll
  for (int s = 0; s < kInvStages - 1; ++s) {
    if (s < k_tiles) load(s, s);
    cp_async_commit();
  }
  // ldmatrix row addresses (the prefill kernel's): A rows lane % 16, column half lane / 16;
  // B (w rows) n (lane % 8) + 8 (lane / 16), column half (lane / 8) % 2.
  const int a_off = (wm + (lane & 15)) * kInvLD + (lane >> 4) * 8;
  const int b_off = (wn + (lane & 7) + ((lane >> 4) << 3)) * kInvLD + ((lane >> 3) & 1) * 8;
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kInvStages - 2>();  // tile kt has landed for this thread
    __syncthreads();                  // ... for every thread; stage (kt - 1) % S is free
    if (kt + kInvStages - 1 < k_tiles)
      load(kt + kInvStages - 1, (kt + kInvStages - 1) % kInvStages);
    cp_async_commit();
    const T* xt = xs[kt % kInvStages];
    const T* wt = ws[kt % kInvStages];
#pragma unroll
    for (int kk = 0; kk < kInvBK / 16; ++kk) {
      uint32_t af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) ldmatrix_x4(af[mt], xt + a_off + mt * 16 * kInvLD + kk * 16);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t bf[4];
        ldmatrix_x4(bf, wt + b_off + np * 16 * kInvLD + kk * 16);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
          mma16816_x2<T>(acc[mt][2 * np], acc[mt][2 * np + 1], af[mt], bf);
      }
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = m0 + wm + mt * 16 + g + (e >> 1) * 8;
        const int64_t col = n0 + wn + nt * 8 + t4 * 2 + (e & 1);
        if (row >= t_rows || col >= n_cols) continue;
        float v = acc[mt][nt][e];
        if (bias != nullptr) v = __fadd_rn(v, to_f32(bias[col]));
        out[row * n_cols + col] = from_f32<TO>(v);
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

bool invariant_gemm_takes(DType in_dt, const void* x, const void* w, int64_t k) {
  return (in_dt == DType::bf16 || in_dt == DType::f16) && k % 8 == 0 && aligned_to(x, 16) &&
         aligned_to(w, 16);
}

void launch_invariant_gemm(DType in_dt, const void* x, const void* w, DType bias_dt,
                           const void* bias, DType out_dt, void* out, int64_t t, int64_t n,
                           int64_t k, cudaStream_t stream) {
  if (t <= 0 || n <= 0) return;
  // The fallback kernel's order (k = 0 upwards, one FMA at a time) serves f32 and what the
  // tensor-core kernel does not take; the choice depends on the weights and dtype, never on t.
  if (!invariant_gemm_takes(in_dt, x, w, k)) {
    launch_fallback_gemm(in_dt, x, w, bias_dt, bias, out_dt, out, t, n, k, stream);
    return;
  }
  const dim3 grid(unsigned((n + kInvBN - 1) / kInvBN), unsigned((t + kInvBM - 1) / kInvBM));
  with_type(out_dt, [&](auto o) {
    using TO = decltype(o);
    with_type(bias_dt, [&](auto b) {
      using TB = decltype(b);
      const auto* bp = static_cast<const TB*>(bias);
      if (in_dt == DType::bf16)
        invariant_gemm_kernel<__nv_bfloat16, TB, TO><<<grid, kInvThreads, 0, stream>>>(
            static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), bp,
            static_cast<TO*>(out), t, n, k);
      else
        invariant_gemm_kernel<__half, TB, TO><<<grid, kInvThreads, 0, stream>>>(
            static_cast<const __half*>(x), static_cast<const __half*>(w), bp, static_cast<TO*>(out),
            t, n, k);
    });
  });
}

}  // namespace troupe::cuda
