// Skinny GEMM for decode steps: out[T, N] = x[T, K] @ w[N, K]^T (+ bias[N]) for T = 1 row,
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
// Fused variants (GemvFusion) take the small ops around a decode layer's GEMVs into the GEMV,
// so that a layer is five kernels instead of nine, each giving the very bits of the separate ops:
// - rms_norm prologue (qkv, gate_up): each CTA recomputes the inverse RMS of its x rows in the
//   norm kernel's summation order and stages the normalised rows in shared memory, once per
//   CTA; warps then read x from there instead of L1.
// - add epilogue (o_proj, down): the rounded product is added into the residual in place.
// - rope epilogue (qkv, after the norm prologue): a warp computes both rows of a rotation pair
//   and writes them rotated to q_out or the k cache (v rows and unrotated tails as they are),
//   as rope_qkv_to_cache would from the rounded qkv row (gemv_rope_kernel).
// - act_mul epilogue (gate_up): a warp computes gate row j and up row n + j and stores
//   act(gate) * up, so the activation runs once per element. (Applying it to x in the down
//   GEMV's prologue instead would recompute it for every output row or CTA: at 14336 x 4096
//   that is as much arithmetic as the GEMV's own, and the GEMV would stop being memory-bound.)
// - copy prologue (where x fits kGemvMaxStagedBytes): the plain and add variants stage x as
//   it is, like the norm prologue, instead of every warp reading it through L1 (batch-1
//   decode on the H200: 4.213/4.234 ms per token against 4.361/4.349 without, alternating in
//   one call; o_proj 8.7 -> 6.8 us, down 32.9 -> 30.3 us, lm_head 253 -> 246 us).
//
// Used by CudaBackend::linear (and the fused ops) when T <= kGemvMaxRows (fused: at most
// kGemvMaxFusedRows, with the norm prologue kGemvMaxNormRows), K % 8 == 0 and every pointer is
// 16-byte aligned (launch_gemv returns false otherwise and cuBLASLt, or the separate ops, run).
#include <cstdint>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/activation.cuh"
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/rms_norm.cuh"
#include "cuda/rope.cuh"

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

/// What happens to x before the product: nothing (warps read it through L1: x past
/// kGemvMaxStagedBytes), copied into shared memory as it is, or rms_norm staged there.
enum class Prologue { none, copy, rms_norm };
/// What happens to a product row: stored, added into out (the residual), or paired with the
/// row n further on as act_mul's [gate | up].
enum class Epilogue { store, add, act_mul };

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

// Where a warp reads x's 16-byte chunks: global memory through L1 (the plain GEMV: x is a few
// KB that every warp reads), or the rows the CTA staged in shared memory (rms_norm prologue).
template <class T>
struct GlobalRows {
  const T* __restrict__ x;
  int64_t k;
  __device__ __forceinline__ uint4 chunk(int t, int64_t c) const {
    return __ldg(reinterpret_cast<const uint4*>(x + int64_t(t) * k) + c);
  }
};
struct StagedRows {
  const uint4* __restrict__ s;
  int64_t chunks;
  __device__ __forceinline__ uint4 chunk(int t, int64_t c) const {
    return s[int64_t(t) * chunks + c];
  }
};

template <class T, int R, class X>
__device__ __forceinline__ void fma_chunk(const uint4& wraw, const X& x, int rows, int64_t c,
                                          float (&acc)[R]) {
  float wf[8];
  unpack8<T>(wraw, wf);
#pragma unroll
  for (int t = 0; t < R; ++t) {
    if (t < rows) {
      float xf[8];
      unpack8<T>(x.chunk(t, c), xf);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[t] = fmaf(wf[e], xf[e], acc[t]);
    }
  }
}

/// Issues a weight row's first kUnroll chunk loads of this lane into wv (when the row has that
/// many for every lane; dot_row checks the same condition).
__device__ __forceinline__ void preload_row(const uint4* __restrict__ wr, int64_t chunks, int lane,
                                            uint4 (&wv)[kUnroll]) {
  if (lane + 32 * (kUnroll - 1) < chunks) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + lane + 32 * u);
  }
}

/// acc[t] = (weight row wr) . x[t] for t < rows, summed in the one order every variant shares
/// (so fused and plain GEMVs agree bit for bit): lane l takes chunks l, l + 32, ... with kUnroll
/// loads in flight, then the lanes meet by warp_sum. With `preloaded`, wv already holds the
/// row's first loads (preload_row). Until `waited`, the row's first loads go out before
/// pdl_wait: the weights do not depend on earlier kernels, x may.
template <class T, int R, class X>
__device__ __forceinline__ void dot_row(const uint4* __restrict__ wr, int64_t chunks, int lane,
                                        const X& x, int rows, uint4 (&wv)[kUnroll], bool preloaded,
                                        bool& waited, float (&acc)[R]) {
#pragma unroll
  for (int t = 0; t < R; ++t) acc[t] = 0.0f;
  int64_t c = lane;
  const bool full = c + 32 * (kUnroll - 1) < chunks;
  if (full && !preloaded) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + c + 32 * u);
  }
  if (!waited) {
    pdl_wait();
    waited = true;
  }
  if (full) {
    for (;;) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) fma_chunk<T, R>(wv[u], x, rows, c + 32 * u, acc);
      c += 32 * kUnroll;
      if (c + 32 * (kUnroll - 1) >= chunks) break;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = load_stream(wr + c + 32 * u);
    }
  }
  for (; c < chunks; c += 32) fma_chunk<T, R>(load_stream(wr + c), x, rows, c, acc);
#pragma unroll
  for (int t = 0; t < R; ++t) acc[t] = warp_sum(acc[t]);
}

/// The rms_norm prologue: writes rows x [rows, k] normalised by norm_w into `staged` (rows x k
/// values of T in shared memory), bit for bit what rms_norm_kernel (norm.cu) would store with
/// its vectorised plan of `norm_threads` threads. Every CTA recomputes the rows' inverse RMS
/// (a few KB from L2) instead of a separate kernel writing h: pass 1 replays the norm block's
/// sum of squares with the CTA's warps standing in for its norm_threads / 32 warps (virtual
/// thread i adds vectors i, i + norm_threads, ...; each virtual warp's warp_sum; then one
/// warp_sum over the zero-padded warp totals, as block_sum does); pass 2 normalises. Every
/// thread of the CTA must call it (it has barriers).
template <class T>
__device__ __forceinline__ void stage_rms_norm(const T* __restrict__ x, int64_t k, int rows,
                                               const T* __restrict__ norm_w, float eps,
                                               int norm_threads, uint4* __restrict__ staged) {
  __shared__ float partial[kGemvMaxRows][32];
  __shared__ float inv[kGemvMaxRows];
  constexpr int V = kVec16<T>;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int norm_warps = norm_threads >> 5;
  for (int t = 0; t < rows; ++t) {
    const T* xr = x + int64_t(t) * k;
    for (int vw = warp; vw < norm_warps; vw += kWarps) {
      float ss = 0.0f;
      for (int64_t i = int64_t(vw * 32 + lane) * V; i < k; i += int64_t(norm_threads) * V) {
        float a[V];
        load16(xr + i, a);
#pragma unroll
        for (int e = 0; e < V; ++e) ss = add_square(ss, a[e]);
      }
      ss = warp_sum(ss);
      if (lane == 0) partial[t][vw] = ss;
    }
  }
  __syncthreads();
  if (warp < rows) {
    const float ss = warp_sum(lane < norm_warps ? partial[warp][lane] : 0.0f);
    if (lane == 0) inv[warp] = inv_rms(ss, k, eps);
  }
  __syncthreads();
  const int64_t chunks = k / V;
  for (int64_t i = threadIdx.x; i < rows * chunks; i += kThreads) {
    const int t = int(i / chunks);
    const int64_t c = i - t * chunks;
    float a[V], nw[V];
    load16(x + int64_t(t) * k + c * V, a);
    load16(norm_w + c * V, nw);
    const float r = inv[t];
#pragma unroll
    for (int e = 0; e < V; ++e) a[e] = rms_scale<T>(a[e], r, nw[e]);
    store16(reinterpret_cast<T*>(staged + i), a);  // staged row t, chunk c
  }
  __syncthreads();
}

/// The copy prologue: x [rows, k] into `staged` as it is. Every thread of the CTA must call
/// it (it ends with a barrier).
template <class T>
__device__ __forceinline__ void stage_copy(const T* __restrict__ x, int64_t k, int rows,
                                           uint4* __restrict__ staged) {
  const int64_t chunks = int64_t(rows) * (k / 8);
  for (int64_t i = threadIdx.x; i < chunks; i += kThreads)
    staged[i] = __ldg(reinterpret_cast<const uint4*>(x) + i);
  __syncthreads();
}

template <class T>
__device__ __forceinline__ float bias_at(const void* bias, bool bias_f32, int64_t i) {
  if (bias == nullptr) return 0.0f;
  return bias_f32 ? static_cast<const float*>(bias)[i] : to_f32(static_cast<const T*>(bias)[i]);
}

/// rows (<= R) rows of out [rows, n] from x [rows, k] and w [n, k] (act_mul: [2n, k]); the
/// options say what happens before and after the product (kernels.hpp's GemvFusion).
template <class T, class OutT, int R, Prologue kPro, Epilogue kEpi, int kAct>
__device__ __forceinline__ void gemv_body(const T* __restrict__ x, const T* __restrict__ w,
                                          const void* __restrict__ bias, bool bias_f32,
                                          OutT* __restrict__ out, int rows, int64_t n, int64_t k,
                                          int64_t rows_per_warp, const T* __restrict__ norm_w,
                                          float eps, int norm_threads) {
  static_assert(kEpi == Epilogue::store || std::is_same_v<OutT, T>,
                "the fused epilogues write the input dtype");
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int64_t first = (int64_t(blockIdx.x) * kWarps + warp) * rows_per_warp;
  const int64_t last = first + rows_per_warp < n ? first + rows_per_warp : n;
  const int64_t chunks = k / 8;
  const auto row_chunks = [&](int64_t row) { return reinterpret_cast<const uint4*>(w + row * k); };
  uint4 wv[kUnroll];
  bool waited = false, preloaded = false;
  extern __shared__ uint4 staged[];
  if constexpr (kPro != Prologue::none) {
    // Every thread stages (barriers), the warps without rows too; the first weight loads
    // still go out before pdl_wait.
    if (first < last) {
      preload_row(row_chunks(first), chunks, lane, wv);
      preloaded = true;
    }
    pdl_wait();
    waited = true;
    if constexpr (kPro == Prologue::rms_norm)
      stage_rms_norm<T>(x, k, rows, norm_w, eps, norm_threads, staged);
    else
      stage_copy<T>(x, k, rows, staged);
  }
  if (first >= n) {
    if (!waited) pdl_wait();
    return;
  }
  const auto xs = [&] {
    if constexpr (kPro != Prologue::none)
      return StagedRows{staged, chunks};
    else
      return GlobalRows<T>{x, k};
  }();

  for (int64_t row = first; row < last; ++row) {
    float acc[R];
    dot_row<T, R>(row_chunks(row), chunks, lane, xs, rows, wv, preloaded, waited, acc);
    preloaded = false;
    if constexpr (kEpi == Epilogue::act_mul) {
      // acc is row `row` of gate_up (gate), up is row n + row: each rounded to T as
      // gate_up would hold it, then act_mul's element.
      float up[R];
      dot_row<T, R>(row_chunks(n + row), chunks, lane, xs, rows, wv, false, waited, up);
      if (lane == 0) {
        const float bg = bias_at<T>(bias, bias_f32, row);
        const float bu = bias_at<T>(bias, bias_f32, n + row);
#pragma unroll
        for (int t = 0; t < R; ++t)
          if (t < rows)
            out[int64_t(t) * n + row] = from_f32<OutT>(
                act_mul_value<T, kAct>(round_to<T>(acc[t] + bg), round_to<T>(up[t] + bu)));
      }
    } else if (lane == 0) {
      const float b = bias_at<T>(bias, bias_f32, row);
#pragma unroll
      for (int t = 0; t < R; ++t) {
        if (t < rows) {
          OutT* o = out + int64_t(t) * n + row;
          // add: the product rounded as linear's output would be, then add's rounding. Each
          // element has one owner lane, so the in-place update needs no synchronisation.
          if constexpr (kEpi == Epilogue::add)
            *o = from_f32<OutT>(to_f32(*o) + round_to<OutT>(acc[t] + b));
          else
            *o = from_f32<OutT>(acc[t] + b);
        }
      }
    }
  }
}

// Two kernels, for their launch bounds. Without a minimum CTA count (gemv_kernel: the plain
// GEMV and the residual-add epilogue, which is the plain code plus three instructions) ptxas
// allocates as for the plain kernel, spilling 4 bytes at R = 1 and 12 at R = 4 as that kernel
// always has; asked for two CTAs per SM, its add variant compiled spill-free but ran 30-60%
// slower at T = 2..8 on the H200 (op bench). The rms_norm-prologue kernels, whose bodies differ
// more, compile spill-free and as fast with two CTAs per SM (56-69 registers), and spill
// (up to 24 bytes) without.
template <class T, class OutT, int R, Epilogue kEpi>
__global__ void __launch_bounds__(kThreads)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const void* __restrict__ bias,
                bool bias_f32, OutT* __restrict__ out, int rows, int64_t n, int64_t k,
                int64_t rows_per_warp, const T* __restrict__ norm_w, float eps, int norm_threads) {
  gemv_body<T, OutT, R, Prologue::none, kEpi, 0>(x, w, bias, bias_f32, out, rows, n, k,
                                                 rows_per_warp, norm_w, eps, norm_threads);
}

template <class T, int R, Epilogue kEpi, int kAct>
__global__ void __launch_bounds__(kThreads, 2)
    gemv_norm_kernel(const T* __restrict__ x, const T* __restrict__ w,
                     const void* __restrict__ bias, bool bias_f32, T* __restrict__ out, int rows,
                     int64_t n, int64_t k, int64_t rows_per_warp, const T* __restrict__ norm_w,
                     float eps, int norm_threads) {
  gemv_body<T, T, R, Prologue::rms_norm, kEpi, kAct>(x, w, bias, bias_f32, out, rows, n, k,
                                                     rows_per_warp, norm_w, eps, norm_threads);
}

// The copy prologue (the default): the plain and add variants with x staged in shared memory.
// Four CTAs per SM, as many warps as the plain kernel keeps resident (48 registers: five);
// left to itself ptxas takes 104 registers, which allows two.
template <class T, class OutT, int R, Epilogue kEpi>
__global__ void __launch_bounds__(kThreads, 4)
    gemv_staged_kernel(const T* __restrict__ x, const T* __restrict__ w,
                       const void* __restrict__ bias, bool bias_f32, OutT* __restrict__ out,
                       int rows, int64_t n, int64_t k, int64_t rows_per_warp,
                       const T* __restrict__ norm_w, float eps, int norm_threads) {
  gemv_body<T, OutT, R, Prologue::copy, kEpi, 0>(x, w, bias, bias_f32, out, rows, n, k,
                                                 rows_per_warp, norm_w, eps, norm_threads);
}

// The rope epilogue (GemvFusion::Rope) after the rms_norm prologue, for one row (the qkv
// projection of a batch-1 decode step): unit u is two weight rows of head h = u / (d / 2):
// a rotation pair of a q or k head (neox: j and j + rotary/2; gptj: 2j and 2j + 1), else two
// adjacent elements moved as they are (a q/k head's unrotated tail, or a v head). Each row's
// product is dot_row's, as the plain GEMV's, so the values equal linear's; lane 0 then does
// what rope_qkv_kernel does with them. Warps take equal runs of whole units. Three CTAs per
// SM: the unit bookkeeping takes 80-88 registers, which allowed only two (the op bench's qkv
// at T = 1: 18.2 us against 15.8 for the plain norm GEMV, no faster than that GEMV plus the
// rope kernel); asked for three, ptxas fits 75-78 registers without spills (four would spill).
// Batch-1 decode: 4.372 ms per token with two, 4.301 with three (H200, two calls).
template <class T, bool kNeox>
__global__ void __launch_bounds__(kThreads, 3)
    gemv_rope_kernel(const T* __restrict__ x, const T* __restrict__ w,
                     const void* __restrict__ bias, bool bias_f32, int64_t n, int64_t k,
                     int64_t units_per_warp, const T* __restrict__ norm_w, float eps,
                     int norm_threads, const GemvFusion::Rope r) {
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int d = r.head_dim, half = r.rotary_dim / 2, units_per_head = d / 2;
  const int qk_heads = r.num_heads + r.num_kv_heads;
  const int64_t units = n / 2;
  const int64_t first = (int64_t(blockIdx.x) * kWarps + warp) * units_per_warp;
  const int64_t last = first + units_per_warp < units ? first + units_per_warp : units;
  const int64_t chunks = k / 8;
  // Unit u's head, its two elements in the head, and whether they rotate (cos/sin column j).
  struct Unit {
    int head, e1, e2, j;
    bool rotate;
  };
  const auto unit_of = [&](int64_t u) {
    Unit t;
    t.head = int(u / units_per_head);
    t.j = int(u % units_per_head);
    t.rotate = t.head < qk_heads && t.j < half;
    if (t.rotate) {
      t.e1 = kNeox ? t.j : 2 * t.j;
      t.e2 = kNeox ? t.j + half : 2 * t.j + 1;
    } else {
      t.e1 = t.head < qk_heads ? r.rotary_dim + 2 * (t.j - half) : 2 * t.j;
      t.e2 = t.e1 + 1;
    }
    return t;
  };
  const auto row_chunks = [&](int64_t row) { return reinterpret_cast<const uint4*>(w + row * k); };
  uint4 wv[kUnroll];
  bool waited = true, preloaded = false;
  extern __shared__ uint4 staged[];
  if (first < last) {
    const Unit t = unit_of(first);
    preload_row(row_chunks(int64_t(t.head) * d + t.e1), chunks, lane, wv);
    preloaded = true;
  }
  pdl_wait();
  stage_rms_norm<T>(x, k, 1, norm_w, eps, norm_threads, staged);
  if (first >= units) return;
  const StagedRows xs{staged, chunks};
  const int64_t pos = r.positions[0];
  const bool pos_ok = pos >= 0 && pos < r.max_positions;
  const int64_t slot = r.slots[0];
  const bool cache = slot >= 0 && slot < r.n_slots;  // negative: a padding token
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (!pos_ok) atomicOr(r.err, int(kErrRopePosition));
    if (pos_ok && slot >= r.n_slots) atomicOr(r.err, int(kErrKvSlot));
  }
  const float* cos_row = r.cos_sin + (pos_ok ? pos : 0) * r.rotary_dim;
  const int64_t kv_row = int64_t(r.num_kv_heads) * d;
  for (int64_t u = first; u < last; ++u) {
    const Unit t = unit_of(u);
    const int64_t row1 = int64_t(t.head) * d + t.e1, row2 = int64_t(t.head) * d + t.e2;
    float a1[1], a2[1];
    dot_row<T, 1>(row_chunks(row1), chunks, lane, xs, 1, wv, preloaded, waited, a1);
    preloaded = false;
    dot_row<T, 1>(row_chunks(row2), chunks, lane, xs, 1, wv, false, waited, a2);
    if (lane != 0 || !pos_ok) continue;  // rope_qkv_kernel skips a bad position's token
    // The values linear would have stored in qkv, then the rotation as rope_qkv_kernel does it.
    float y1 = round_to<T>(a1[0] + bias_at<T>(bias, bias_f32, row1));
    float y2 = round_to<T>(a2[0] + bias_at<T>(bias, bias_f32, row2));
    if (t.rotate) rotate_pair(y1, y2, cos_row[t.j], cos_row[half + t.j], y1, y2);
    T* dst;
    if (t.head < r.num_heads) {
      dst = static_cast<T*>(r.q_out) + int64_t(t.head) * d;
    } else {
      if (!cache) continue;
      const bool is_k = t.head < qk_heads;
      dst = static_cast<T*>(is_k ? r.k_cache : r.v_cache) + slot * kv_row +
            int64_t(t.head - (is_k ? r.num_heads : qk_heads)) * d;
    }
    dst[t.e1] = from_f32<T>(y1);
    dst[t.e2] = from_f32<T>(y2);
  }
}

template <class T, class OutT, int R, Prologue P, Epilogue E, int A>
constexpr auto kernel_of() {
  if constexpr (P == Prologue::none)
    return gemv_kernel<T, OutT, R, E>;
  else if constexpr (P == Prologue::copy)
    return gemv_staged_kernel<T, OutT, R, E>;
  else
    return gemv_norm_kernel<T, R, E, A>;
}

// Warps of `kernel` that fit on the device at once with `smem` bytes of dynamic shared memory
// per CTA (occupancy x SMs), cached per kernel and size.
int64_t resident_warps(const void* kernel, size_t smem) {
  static std::mutex mu;
  static std::vector<std::tuple<const void*, size_t, int64_t>> cache;  // (kernel, smem, warps)
  const std::lock_guard<std::mutex> lock(mu);
  for (const auto& [k, bytes, warps] : cache)
    if (k == kernel && bytes == smem) return warps;
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem) !=
          cudaSuccess)
    return int64_t(1) << 40;  // unknown: one row (or unit) per warp
  const int64_t warps = int64_t(sms) * (per_sm > 0 ? per_sm : 1) * kWarps;
  cache.emplace_back(kernel, smem, warps);
  return warps;
}

template <class T, class OutT, int R, Prologue P, Epilogue E, int A>
void launch_r(const GemmArgs& g, const GemvFusion& f, bool bias_f32, cudaStream_t stream) {
  const auto kernel = kernel_of<T, OutT, R, P, E, A>();
  // The staged rows (gemv_init raised the kernels' limit to kGemvMaxStagedBytes).
  const size_t smem = P != Prologue::none ? size_t(g.t * g.k) * sizeof(T) : 0;
  // Every warp gets the same number of whole rows and all warps are resident at once, so the
  // weight stream never drains into a last partial wave.
  const int64_t warps = resident_warps(reinterpret_cast<const void*>(kernel), smem);
  const int64_t rpw = (g.n + warps - 1) / warps;
  const int64_t ctas = (g.n + kWarps * rpw - 1) / (kWarps * rpw);
  launch_pdl(kernel, dim3(unsigned(ctas)), dim3(kThreads), smem, stream, static_cast<const T*>(g.x),
             static_cast<const T*>(g.w), g.bias, bias_f32, static_cast<OutT*>(g.out), int(g.t), g.n,
             g.k, rpw, static_cast<const T*>(f.norm_weight), f.eps, f.norm_plan.threads);
}

template <class T, class OutT, Prologue P, Epilogue E, int A = 0>
void launch_rows(const GemmArgs& g, const GemvFusion& f, bool bias_f32, cudaStream_t stream) {
  // launch_gemv bounds every variant to kGemvMaxRows rows. The kernels take any R; only the
  // row counts that launch_gemv accepts are compiled.
  static_assert(kGemvMaxRows == 1 && kGemvMaxNormRows == 1 && kGemvMaxFusedRows == 1,
                "the skinny GEMM is compiled for R = 1");
  launch_r<T, OutT, 1, P, E, A>(g, f, bias_f32, stream);
}

template <class T, bool kNeox>
void launch_rope_epilogue(const GemmArgs& g, const GemvFusion& f, bool bias_f32,
                          cudaStream_t stream) {
  const auto kernel = gemv_rope_kernel<T, kNeox>;
  const size_t smem = size_t(g.k) * sizeof(T);  // the staged row
  const int64_t warps = resident_warps(reinterpret_cast<const void*>(kernel), smem);
  const int64_t units = g.n / 2;
  const int64_t upw = (units + warps - 1) / warps;
  const int64_t ctas = (units + kWarps * upw - 1) / (kWarps * upw);
  launch_pdl(kernel, dim3(unsigned(ctas)), dim3(kThreads), smem, stream, static_cast<const T*>(g.x),
             static_cast<const T*>(g.w), g.bias, bias_f32, g.n, g.k, upw,
             static_cast<const T*>(f.norm_weight), f.eps, f.norm_plan.threads, f.rope);
}

// Only the combinations the model programs use are compiled: the plain GEMV (out like x or
// f32 logits), rms_norm -> GEMV (qkv), rms_norm -> GEMV -> rope to the caches (qkv at one
// row), GEMV -> residual add (o_proj, down) and rms_norm -> GEMV -> act_mul (gate_up).
// Returns false for any other.
template <class T>
bool launch_typed(const GemmArgs& g, const GemvFusion& f, bool bias_f32, cudaStream_t stream) {
  const bool norm = f.norm_weight != nullptr, act = f.act >= 0;
  if (f.rope.q_out != nullptr) {
    if (!norm || act || f.add_to_out || g.out_dtype != g.in_dtype) return false;
    if (f.rope.neox)
      launch_rope_epilogue<T, true>(g, f, bias_f32, stream);
    else
      launch_rope_epilogue<T, false>(g, f, bias_f32, stream);
    return true;
  }
  // The copy prologue where x fits the staged bytes.
  const bool copy = g.t * g.k * int64_t(sizeof(T)) <= kGemvMaxStagedBytes;
  if (!norm && !act && !f.add_to_out) {
    if (g.out_dtype == DType::f32) {
      if (copy)
        launch_rows<T, float, Prologue::copy, Epilogue::store>(g, f, bias_f32, stream);
      else
        launch_rows<T, float, Prologue::none, Epilogue::store>(g, f, bias_f32, stream);
    } else if (copy) {
      launch_rows<T, T, Prologue::copy, Epilogue::store>(g, f, bias_f32, stream);
    } else {
      launch_rows<T, T, Prologue::none, Epilogue::store>(g, f, bias_f32, stream);
    }
    return true;
  }
  if (g.out_dtype != g.in_dtype) return false;
  if (norm && !act && !f.add_to_out) {
    launch_rows<T, T, Prologue::rms_norm, Epilogue::store>(g, f, bias_f32, stream);
  } else if (!norm && !act && f.add_to_out) {
    if (copy)
      launch_rows<T, T, Prologue::copy, Epilogue::add>(g, f, bias_f32, stream);
    else
      launch_rows<T, T, Prologue::none, Epilogue::add>(g, f, bias_f32, stream);
  } else if (norm && act && !f.add_to_out) {
    switch (f.act) {
      case kSilu:
        launch_rows<T, T, Prologue::rms_norm, Epilogue::act_mul, kSilu>(g, f, bias_f32, stream);
        break;
      case kGelu:
        launch_rows<T, T, Prologue::rms_norm, Epilogue::act_mul, kGelu>(g, f, bias_f32, stream);
        break;
      case kGeluTanh:
        launch_rows<T, T, Prologue::rms_norm, Epilogue::act_mul, kGeluTanh>(g, f, bias_f32, stream);
        break;
      default:
        return false;
    }
  } else {
    return false;
  }
  return true;
}

// Raises the dynamic shared-memory limit of every rms_norm-prologue kernel of dtype T.
template <class T>
cudaError_t allow_staged_rows() {
  cudaError_t first_error = cudaSuccess;
  const auto allow = [&](auto kernel) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               int(kGemvMaxStagedBytes));
    if (first_error == cudaSuccess) first_error = e;
  };
  const auto per_rows = [&](auto rows) {
    constexpr int R = decltype(rows)::value;
    allow(gemv_norm_kernel<T, R, Epilogue::store, 0>);
    allow(gemv_norm_kernel<T, R, Epilogue::act_mul, kSilu>);
    allow(gemv_norm_kernel<T, R, Epilogue::act_mul, kGelu>);
    allow(gemv_norm_kernel<T, R, Epilogue::act_mul, kGeluTanh>);
  };
  allow(gemv_rope_kernel<T, true>);
  allow(gemv_rope_kernel<T, false>);
  allow(gemv_staged_kernel<T, T, 1, Epilogue::store>);
  allow(gemv_staged_kernel<T, float, 1, Epilogue::store>);
  allow(gemv_staged_kernel<T, T, 1, Epilogue::add>);
  per_rows(std::integral_constant<int, 1>{});
  return first_error;
}

}  // namespace

cudaError_t gemv_init() {
  const cudaError_t e = allow_staged_rows<__nv_bfloat16>();
  const cudaError_t f = allow_staged_rows<__half>();
  return e != cudaSuccess ? e : f;
}

bool launch_gemv(DType in_dtype, const void* x, const void* w, DType bias_dtype, const void* bias,
                 DType out_dtype, void* out, int64_t t, int64_t n, int64_t k, cudaStream_t stream,
                 const GemvFusion& fusion) {
  const GemmArgs g{in_dtype, x, w, bias_dtype, bias, out_dtype, out, t, n, k};
  if (g.t < 1 || g.t > kGemvMaxRows || g.n < 1 || g.k < 8 || g.k % 8 != 0) return false;
  if (g.in_dtype != DType::bf16 && g.in_dtype != DType::f16) return false;
  if (g.out_dtype != g.in_dtype && g.out_dtype != DType::f32) return false;
  if (!aligned_to(g.x, 16) || !aligned_to(g.w, 16)) return false;
  const bool bias_f32 = g.bias != nullptr && g.bias_dtype == DType::f32;
  if (g.bias != nullptr && !bias_f32 && g.bias_dtype != g.in_dtype) return false;
  // act_mul reads 2n weight rows.
  if (g.n > int64_t(kWarps) * 0x7fffffffLL / (fusion.act >= 0 ? 2 : 1)) return false;
  if (fusion.act > kGeluTanh) return false;
  // Past these row counts the separate ops measured as fast or faster (docs/engine.md).
  if (fusion.norm_weight != nullptr && g.t > kGemvMaxNormRows) return false;
  if ((fusion.add_to_out || fusion.act >= 0) && g.t > kGemvMaxFusedRows) return false;
  if (fusion.rope.q_out != nullptr) {
    // One row; whole pairs per head, so the row splits into (heads x d / 2) units.
    const GemvFusion::Rope& r = fusion.rope;
    if (g.t != 1 || r.head_dim < 2 || r.head_dim % 2 != 0 || r.num_heads < 1 ||
        r.num_kv_heads < 1 || r.rotary_dim < 2 || r.rotary_dim % 2 != 0 ||
        r.rotary_dim > r.head_dim ||
        g.n != int64_t(r.num_heads + 2 * r.num_kv_heads) * r.head_dim)
      return false;
  }
  if (fusion.norm_weight != nullptr) {
    // The prologue replays the vectorised norm block only, and stages whole rows.
    const RmsNormPlan& p = fusion.norm_plan;
    if (!p.vectorised || p.threads < 32 || p.threads > 1024 || p.threads % 32 != 0) return false;
    if (!aligned_to(fusion.norm_weight, 16)) return false;
    if (g.t * g.k * 2 > kGemvMaxStagedBytes) return false;
  }
  if (g.in_dtype == DType::bf16) return launch_typed<__nv_bfloat16>(g, fusion, bias_f32, stream);
  return launch_typed<__half>(g, fusion, bias_f32, stream);
}

}  // namespace troupe::cuda
