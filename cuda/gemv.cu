// Skinny GEMM for decode steps: out[T, N] = x[T, K] @ w[N, K]^T (+ bias[N]) for T <= 8 rows,
// f16/bf16 inputs, out in the input dtype or f32 (logits), f32 accumulation.
//
// At a few rows a linear layer is a stream over its weights (batch-1 decode reads 16 GB of
// Llama-3-8B weights per token), so the kernel is built to keep HBM busy rather than the tensor
// cores: one warp per output row, each lane reading 16-byte chunks of the weight row with
// several loads in flight (kUnroll) that skip L1 (ld.global.nc.L1::no_allocate: the weights are
// read once), while x (a few KB, read by every warp) stays in L1/L2. Each warp takes an equal
// run of whole rows, sized so that every warp of the grid is resident at once (no last partial
// wave, whose few warps could not keep HBM busy). The lanes' partial sums
// meet by shuffles; bias is added in f32 before the one rounding to the output dtype, like
// cuBLASLt's bias epilogue. No split-K, so no reduction kernel and no workspace.
//
// Used by CudaBackend::linear when T <= kGemvMaxRows, K % 8 == 0 and every pointer is 16-byte
// aligned (launch_gemv returns false otherwise and cuBLASLt runs).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"

namespace troupe::cuda {
namespace {

struct GemmArgs {
  DType in_dtype;
  const void* x;
  const void* w;
  DType bias_dtype;
  const void* bias;
  DType out_dtype;
  void* out;
  int64_t t, n, k;
};

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kUnroll = 4;

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

template <class T>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8]) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) out[i] = to_f32(e[i]);
}

template <class T, int R>
__device__ __forceinline__ void fma_chunk(const uint4& wraw, const T* __restrict__ x, int rows,
                                          int64_t k, int64_t c, float (&acc)[R]) {
  float wf[8];
  unpack8<T>(wraw, wf);
#pragma unroll
  for (int t = 0; t < R; ++t) {
    if (t < rows) {
      const uint4 xraw = __ldg(reinterpret_cast<const uint4*>(x + int64_t(t) * k) + c);
      float xf[8];
      unpack8<T>(xraw, xf);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[t] = fmaf(wf[e], xf[e], acc[t]);
    }
  }
}

template <class T, class OutT, int R>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const void* __restrict__ bias,
                bool bias_f32, OutT* __restrict__ out, int rows, int64_t n, int64_t k,
                int64_t rows_per_warp, bool pdl_early) {
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int64_t first = (int64_t(blockIdx.x) * kWarps + warp) * rows_per_warp;
  const int64_t last = first + rows_per_warp < n ? first + rows_per_warp : n;
  if (first >= n) {
    pdl_wait();
    return;
  }
  const int64_t chunks = k / 8;
  bool waited = false;
  for (int64_t row = first; row < last; ++row) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + row * k);
    float acc[R];
#pragma unroll
    for (int t = 0; t < R; ++t) acc[t] = 0.0f;
    int64_t c = lane;
    // The weights do not depend on earlier kernels: the first loads go out before pdl_wait.
    uint4 wv[kUnroll];
    const bool full = c + 32 * (kUnroll - 1) < chunks;
    if (full) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + c + 32 * u);
    }
    if (!waited) {
      pdl_wait();
      pdl_trigger(pdl_early);
      waited = true;
    }
    if (full) {
      for (;;) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) fma_chunk<T, R>(wv[u], x, rows, k, c + 32 * u, acc);
        c += 32 * kUnroll;
        if (c + 32 * (kUnroll - 1) >= chunks) break;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + c + 32 * u);
      }
    }
    for (; c < chunks; c += 32) fma_chunk<T, R>(load_stream(wr + c), x, rows, k, c, acc);
#pragma unroll
    for (int t = 0; t < R; ++t) acc[t] = warp_sum(acc[t]);
    if (lane == 0) {
      float b = 0.0f;
      if (bias != nullptr)
        b = bias_f32 ? static_cast<const float*>(bias)[row]
                     : to_f32(static_cast<const T*>(bias)[row]);
#pragma unroll
      for (int t = 0; t < R; ++t)
        if (t < rows) out[int64_t(t) * n + row] = from_f32<OutT>(acc[t] + b);
    }
  }
}

// Warps of this kernel that fit on the device at once (occupancy x SMs), cached per kernel.
template <class T, class OutT, int R>
int64_t resident_warps() {
  const auto kernel = gemv_kernel<T, OutT, R>;
  static int64_t cached = 0;
  if (cached == 0) {
    int dev = 0, sms = 0, per_sm = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0) != cudaSuccess)
      return int64_t(1) << 40;  // unknown: one row per warp
    cached = int64_t(sms) * (per_sm > 0 ? per_sm : 1) * kWarps;
  }
  return cached;
}

template <class T, class OutT, int R>
void launch_r(const GemmArgs& g, bool bias_f32, cudaStream_t stream) {
  // Every warp gets the same number of whole rows and all warps are resident at once, so the
  // weight stream never drains into a last partial wave.
  const auto kernel = gemv_kernel<T, OutT, R>;
  const int64_t warps = resident_warps<T, OutT, R>();
  const int64_t rpw = (g.n + warps - 1) / warps;
  const int64_t ctas = (g.n + kWarps * rpw - 1) / (kWarps * rpw);
  launch_pdl(kernel, dim3(unsigned(ctas)), dim3(kThreads), 0, stream, static_cast<const T*>(g.x),
             static_cast<const T*>(g.w), g.bias, bias_f32, static_cast<OutT*>(g.out), int(g.t), g.n,
             g.k, rpw);
}

template <class T, class OutT>
void launch_rows(const GemmArgs& g, bool bias_f32, cudaStream_t stream) {
  if (g.t == 1)
    launch_r<T, OutT, 1>(g, bias_f32, stream);
  else if (g.t == 2)
    launch_r<T, OutT, 2>(g, bias_f32, stream);
  else if (g.t <= 4)
    launch_r<T, OutT, 4>(g, bias_f32, stream);
  else
    launch_r<T, OutT, 8>(g, bias_f32, stream);
}

template <class T>
void launch_typed(const GemmArgs& g, bool bias_f32, cudaStream_t stream) {
  if (g.out_dtype == DType::f32)
    launch_rows<T, float>(g, bias_f32, stream);
  else
    launch_rows<T, T>(g, bias_f32, stream);
}

}  // namespace

bool launch_gemv(DType in_dtype, const void* x, const void* w, DType bias_dtype, const void* bias,
                 DType out_dtype, void* out, int64_t t, int64_t n, int64_t k, cudaStream_t stream) {
  const GemmArgs g{in_dtype, x, w, bias_dtype, bias, out_dtype, out, t, n, k};
  if (g.t < 1 || g.t > kGemvMaxRows || g.n < 1 || g.k < 8 || g.k % 8 != 0) return false;
  if (g.in_dtype != DType::bf16 && g.in_dtype != DType::f16) return false;
  if (g.out_dtype != g.in_dtype && g.out_dtype != DType::f32) return false;
  if (!aligned_to(g.x, 16) || !aligned_to(g.w, 16)) return false;
  const bool bias_f32 = g.bias != nullptr && g.bias_dtype == DType::f32;
  if (g.bias != nullptr && !bias_f32 && g.bias_dtype != g.in_dtype) return false;
  if (g.n > int64_t(kWarps) * 0x7fffffffLL) return false;
  if (g.in_dtype == DType::bf16)
    launch_typed<__nv_bfloat16>(g, bias_f32, stream);
  else
    launch_typed<__half>(g, bias_f32, stream);
  return true;
}

bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TROUPE_PDL");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return on;
}

bool pdl_early() {
  static const bool on = [] {
    const char* v = std::getenv("TROUPE_PDL");
    return v != nullptr && std::string_view(v) == "early";
  }();
  return on;
}

}  // namespace troupe::cuda
