// Rotary embedding, reading the f32 cos/sin cache (row = position, first rotary_dim/2 columns
// cos, the rest sin). neox pairs (i, i + rotary_dim/2), gptj pairs (2i, 2i + 1); features past
// rotary_dim are left alone (partial rotary). Two ops:
//
// - rope: in place on contiguous q and k. One block per token, one thread per (head, pair).
// - rope_qkv_to_cache: reads one fused GEMM's output qkv [T, (nh + 2 nkv) d], writes rotated
//   q to q_out and rotated k plus v straight into the paged caches (no k/v intermediates, one
//   launch instead of rope + write_kv). One block per token; each thread moves 16 bytes of a
//   head per access where the shapes and pointers allow (d, the rotary half and the pointers
//   16-byte aligned), else single elements.
//
// Both compute every rotation with rotate_pair below, products and sums rounded separately
// (no FMA contraction), so the fused op equals rope followed by write_kv bit for bit, and both
// round like the CPU reference (which has no FMA either) before the single rounding to T.
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"
#include "cuda/rope.cuh"

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
      float y1, y2;
      rotate_pair(to_f32(x[i1]), to_f32(x[i2]), cos_row[i], sin_row[i], y1, y2);
      x[i1] = from_f32<T>(y1);
      x[i2] = from_f32<T>(y2);
    }
  }
}

// N consecutive elements of T as floats: one 16-byte access when N * sizeof(T) == 16 (the
// caller guarantees the alignment then), else element by element.
template <class T, int N>
__device__ __forceinline__ void load_n(const T* p, float (&out)[N]) {
  if constexpr (N * sizeof(T) == 16) {
    load16(p, out);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_f32(p[i]);
  }
}

template <class T, int N>
__device__ __forceinline__ void store_n(T* p, const float (&in)[N]) {
  if constexpr (N * sizeof(T) == 16) {
    store16(p, in);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) p[i] = from_f32<T>(in[i]);
  }
}

template <class T, int N>
__device__ __forceinline__ void copy_n(T* __restrict__ dst, const T* __restrict__ src) {
  if constexpr (N * sizeof(T) == 16) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = src[i];
  }
}

struct RopeQkvArgs {
  const void* qkv;  // [T, (nh + 2 nkv) d]
  const int32_t* positions;
  const float* cos_sin;  // [max_positions, rotary_dim]
  const int32_t* slots;
  void* q_out;    // [T, nh d]
  void* k_cache;  // [n_slots, nkv, d]
  void* v_cache;
  int64_t tokens;
  int64_t max_positions;
  int64_t n_slots;
  int num_heads;
  int num_kv_heads;
  int head_dim;
  int rotary_dim;
  int* err;
};

// P rotation pairs per work item (neox: P elements at i and their partners at i + half; gptj:
// 2P adjacent elements), C elements per copy item (features past rotary_dim, and v).
template <class T, int P, int C, bool NEOX>
__global__ void __launch_bounds__(kThreads) rope_qkv_kernel(const RopeQkvArgs a) {
  pdl_wait();  // launched with launch_pdl
  const int d = a.head_dim, half = a.rotary_dim / 2;
  const int rot_items = half / P;                 // per q / k head
  const int pass_items = (d - a.rotary_dim) / C;  // per q / k head: unrotated tail
  const int head_items = rot_items + pass_items;
  const int qk_items = (a.num_heads + a.num_kv_heads) * head_items;
  const int v_items = a.num_kv_heads * (d / C);
  const int64_t row = int64_t(a.num_heads + 2 * a.num_kv_heads) * d;
  const int64_t kv_row = int64_t(a.num_kv_heads) * d;
  const T* qkv = static_cast<const T*>(a.qkv);
  for (int64_t t = blockIdx.x; t < a.tokens; t += gridDim.x) {
    const int64_t pos = a.positions[t];
    if (pos < 0 || pos >= a.max_positions) {
      if (threadIdx.x == 0) atomicOr(a.err, int(kErrRopePosition));
      continue;
    }
    const int64_t slot = a.slots[t];
    if (slot >= a.n_slots && threadIdx.x == 0) atomicOr(a.err, int(kErrKvSlot));
    const bool cache = slot >= 0 && slot < a.n_slots;  // negative: a padding token
    const float* cos_row = a.cos_sin + pos * a.rotary_dim;
    const float* sin_row = cos_row + half;
    const T* src_row = qkv + t * row;
    T* k_dst = static_cast<T*>(a.k_cache) + (cache ? slot : 0) * kv_row;
    T* v_dst = static_cast<T*>(a.v_cache) + (cache ? slot : 0) * kv_row;
    const int items = cache ? qk_items + v_items : a.num_heads * head_items;
    for (int w = threadIdx.x; w < items; w += kThreads) {
      if (w >= qk_items) {  // v: copied as is
        const int vi = w - qk_items;
        const int64_t off = int64_t(vi / (d / C)) * d + int64_t(vi % (d / C)) * C;
        copy_n<T, C>(v_dst + off, src_row + row - kv_row + off);
        continue;
      }
      const int head = w / head_items, item = w % head_items;
      const T* src = src_row + int64_t(head) * d;  // k heads follow the q heads in the row
      T* dst = head < a.num_heads
                   ? static_cast<T*>(a.q_out) + t * int64_t(a.num_heads) * d + int64_t(head) * d
                   : k_dst + int64_t(head - a.num_heads) * d;
      if (item >= rot_items) {
        const int off = a.rotary_dim + (item - rot_items) * C;
        copy_n<T, C>(dst + off, src + off);
        continue;
      }
      const int i0 = item * P;  // first pair of the item
      float c[P], s[P];
#pragma unroll
      for (int j = 0; j < P; ++j) {
        c[j] = cos_row[i0 + j];
        s[j] = sin_row[i0 + j];
      }
      if constexpr (NEOX) {
        float x1[P], x2[P];
        load_n<T, P>(src + i0, x1);
        load_n<T, P>(src + i0 + half, x2);
#pragma unroll
        for (int j = 0; j < P; ++j) rotate_pair(x1[j], x2[j], c[j], s[j], x1[j], x2[j]);
        store_n<T, P>(dst + i0, x1);
        store_n<T, P>(dst + i0 + half, x2);
      } else {
        float x[2 * P];
        load_n<T, 2 * P>(src + 2 * i0, x);
#pragma unroll
        for (int j = 0; j < P; ++j)
          rotate_pair(x[2 * j], x[2 * j + 1], c[j], s[j], x[2 * j], x[2 * j + 1]);
        store_n<T, 2 * P>(dst + 2 * i0, x);
      }
    }
  }
}

unsigned grid_for(int64_t tokens) {
  return unsigned(tokens < (int64_t(1) << 30) ? tokens : (int64_t(1) << 30));
}

template <class T>
void launch_rope_typed(void* q, void* k, const int32_t* positions, const float* cos_sin,
                       int64_t tokens, int q_heads, int k_heads, int head_dim, int rotary_dim,
                       int64_t max_positions, bool neox, int* err, cudaStream_t stream) {
  rope_kernel<T><<<grid_for(tokens), kThreads, 0, stream>>>(
      static_cast<T*>(q), static_cast<T*>(k), positions, cos_sin, tokens, q_heads, k_heads,
      head_dim, rotary_dim, max_positions, neox, err);
}

template <class T>
void launch_rope_qkv_typed(const RopeQkvArgs& a, bool neox, bool vectorised, cudaStream_t stream) {
  constexpr int V = kVec16<T>;  // elements per 16 bytes
  const dim3 grid(grid_for(a.tokens));
  if (vectorised) {
    if (neox)
      launch_pdl(rope_qkv_kernel<T, V, V, true>, grid, dim3(kThreads), 0, stream, a);
    else
      launch_pdl(rope_qkv_kernel<T, V / 2, V, false>, grid, dim3(kThreads), 0, stream, a);
  } else {
    if (neox)
      launch_pdl(rope_qkv_kernel<T, 1, 1, true>, grid, dim3(kThreads), 0, stream, a);
    else
      launch_pdl(rope_qkv_kernel<T, 1, 1, false>, grid, dim3(kThreads), 0, stream, a);
  }
}

}  // namespace

void launch_rope(DType dt, void* q, void* k, const int32_t* positions, const float* cos_sin,
                 int64_t tokens, int q_heads, int k_heads, int head_dim, int rotary_dim,
                 int64_t max_positions, bool neox, int* err, cudaStream_t stream) {
  if (tokens <= 0 || q_heads + k_heads <= 0 || rotary_dim < 2) return;
  switch (dt) {
    case DType::f32:
      launch_rope_typed<float>(q, k, positions, cos_sin, tokens, q_heads, k_heads, head_dim,
                               rotary_dim, max_positions, neox, err, stream);
      break;
    case DType::f16:
      launch_rope_typed<__half>(q, k, positions, cos_sin, tokens, q_heads, k_heads, head_dim,
                                rotary_dim, max_positions, neox, err, stream);
      break;
    case DType::bf16:
      launch_rope_typed<__nv_bfloat16>(q, k, positions, cos_sin, tokens, q_heads, k_heads, head_dim,
                                       rotary_dim, max_positions, neox, err, stream);
      break;
    default:
      break;
  }
}

bool rope_qkv_vectorisable(DType dt, const void* qkv, const void* q_out, const void* k_cache,
                           const void* v_cache, int head_dim, int rotary_dim, bool neox) {
  const int v = 16 / int(dtype_size(dt));
  const int rot = neox ? rotary_dim / 2 : rotary_dim;  // elements one rotation access spans
  return head_dim % v == 0 && rot % v == 0 && aligned_to(qkv, 16) && aligned_to(q_out, 16) &&
         aligned_to(k_cache, 16) && aligned_to(v_cache, 16);
}

void launch_rope_qkv_to_cache(DType dt, const void* qkv, const int32_t* positions,
                              const float* cos_sin, int64_t tokens, int num_heads, int num_kv_heads,
                              int head_dim, int rotary_dim, int64_t max_positions, bool neox,
                              const int32_t* slots, int64_t n_slots, void* k_cache, void* v_cache,
                              void* q_out, int* err, cudaStream_t stream) {
  if (tokens <= 0 || num_heads <= 0 || num_kv_heads <= 0 || rotary_dim < 2) return;
  const RopeQkvArgs a{qkv,       positions,    cos_sin,  slots,         q_out,
                      k_cache,   v_cache,      tokens,   max_positions, n_slots,
                      num_heads, num_kv_heads, head_dim, rotary_dim,    err};
  const bool vec =
      rope_qkv_vectorisable(dt, qkv, q_out, k_cache, v_cache, head_dim, rotary_dim, neox);
  switch (dt) {
    case DType::f32:
      launch_rope_qkv_typed<float>(a, neox, vec, stream);
      break;
    case DType::f16:
      launch_rope_qkv_typed<__half>(a, neox, vec, stream);
      break;
    case DType::bf16:
      launch_rope_qkv_typed<__nv_bfloat16>(a, neox, vec, stream);
      break;
    default:
      break;
  }
}

}  // namespace troupe::cuda
