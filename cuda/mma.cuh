// Warp-level tensor-core and async-copy helpers shared by the attention kernels (nvcc only):
// mma.sync.m16n8k16 with f32 accumulators, ldmatrix, packing f32 pairs to f16/bf16, and
// cp.async 16-byte copies into shared memory.
//
// Register fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
// with g = lane / 4 and t = lane % 4,
//   A (16x16): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16x8):  b0 = (k = 2t..2t+1, n = g), b1 = (k = 2t+8..2t+9, n = g)
//   C (16x8):  c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
// The low half of each 32-bit register holds the lower index.
#pragma once

#include <type_traits>

#include "cuda/device_common.cuh"

namespace troupe::cuda {

/// c += a * b for one m16n8k16 tile, T = __half or __nv_bfloat16.
template <class T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

/// c0 += a * b[0..1] and c1 += a * b[2..3]: two adjacent n8 tiles whose B fragments one
/// ldmatrix_x4 (or ldmatrix_x4_trans) loaded.
template <class T>
__device__ __forceinline__ void mma16816_x2(float (&c0)[4], float (&c1)[4],
                                            const uint32_t (&a)[4], const uint32_t (&b)[4]) {
  const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
  mma16816<T>(c0, a, b0);
  mma16816<T>(c1, a, b1);
}

/// Two floats rounded to T and packed, `lo` in the low half.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

/// The max / sum of v over the 4 lanes of this lane's quad (the owners of one C-fragment row).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/// One step of FlashAttention's online softmax (base 2) over a warp's score tile in C-fragment
/// layout: s[NT][4] holds rows g (elements 0, 1) and g + 8 (elements 2, 3) of NT n8 tiles of
/// keys, as Q K^T left them. Elements with visible(nt, e) false become -inf, the others
/// s * scale_log2. Per row r (0: g, 1: g + 8): the running max m[r] takes the tile's (over the
/// quad), s becomes p = 2^(s - m[r]), o[DT][4] (that row's accumulators) is rescaled by
/// alpha[r] = 2^(old m[r] - m[r]), and sum[r] is this lane's share of the row's sum of p (the
/// caller adds the quad's shares, now or at the end). A row with no visible key yet keeps
/// max -inf; its exponents are then taken against 0, so p and alpha are 0 rather than NaN.
template <int NT, int DT, class Visible>
__device__ __forceinline__ void online_softmax_step(float (&s)[NT][4], const Visible& visible,
                                                    float scale_log2, float (&m)[2],
                                                    float (&o)[DT][4], float (&alpha)[2],
                                                    float (&sum)[2]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float v = visible(nt, e) ? s[nt][e] * scale_log2 : -INFINITY;
      s[nt][e] = v;
      mx[e >> 1] = fmaxf(mx[e >> 1], v);
    }
  }
  float use[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float new_m = fmaxf(m[r], quad_max(mx[r]));
    use[r] = new_m == -INFINITY ? 0.0f : new_m;
    alpha[r] = exp2f(m[r] - use[r]);
    m[r] = new_m;
    sum[r] = 0.0f;
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float p = exp2f(s[nt][e] - use[e >> 1]);
      s[nt][e] = p;
      sum[e >> 1] += p;
    }
  }
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
    o[dt][0] *= alpha[0];
    o[dt][1] *= alpha[0];
    o[dt][2] *= alpha[1];
    o[dt][3] *= alpha[1];
  }
}

/// A 32-bit load (two 16-bit elements) from shared or global memory.
__device__ __forceinline__ uint32_t lds32(const void* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Four 8x8 matrices of 16-bit elements from shared memory: lanes 8i..8i+7 give the row
/// addresses (16 bytes each) of matrix i; r[i] receives this lane's pair of matrix i, row
/// lane / 4, columns 2 (lane % 4) and + 1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

/// The same, transposed: r[i] receives matrix i's elements at rows 2 (lane % 4) and + 1,
/// column lane / 4.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

/// Copies 16 bytes global -> shared asynchronously; src_bytes 0 zero-fills without reading.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;");
}
/// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace troupe::cuda
