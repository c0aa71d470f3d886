// Row gathers and scatters: embedding and gather_rows (out[t] = src[idx[t]]) and the KV-cache
// write (cache[slot[t]] = k[t]). Rows are copied as byte strings with the widest access
// (16 bytes when sizes and pointers allow it), so one kernel serves every dtype.
#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 256;

// Widest access in {16, 8, 4, 2, 1} bytes that divides the row and aligns every pointer.
int access_width(int64_t row_bytes, const void* a, const void* b, const void* c = nullptr,
                 const void* d = nullptr) {
  for (int w = 16; w > 1; w >>= 1) {
    if (row_bytes % w != 0) continue;
    if (!aligned_to(a, unsigned(w)) || !aligned_to(b, unsigned(w))) continue;
    if (c != nullptr && !aligned_to(c, unsigned(w))) continue;
    if (d != nullptr && !aligned_to(d, unsigned(w))) continue;
    return w;
  }
  return 1;
}

template <int W>
struct Word;
template <>
struct Word<16> {
  using type = uint4;
};
template <>
struct Word<8> {
  using type = uint2;
};
template <>
struct Word<4> {
  using type = uint32_t;
};
template <>
struct Word<2> {
  using type = uint16_t;
};
template <>
struct Word<1> {
  using type = uint8_t;
};

// One block per output row (grid-stride over rows beyond the grid).
template <int W>
__global__ void __launch_bounds__(kThreads)
    gather_rows_kernel(const char* __restrict__ src, int64_t n_src, const int32_t* __restrict__ idx,
                       char* __restrict__ out, int64_t n_out, int64_t row_bytes, int err_bit,
                       int* err) {
  using V = typename Word<W>::type;
  pdl_wait();  // launched with launch_pdl
  const int64_t words = row_bytes / W;
  for (int64_t t = blockIdx.x; t < n_out; t += gridDim.x) {
    const int64_t i = idx[t];
    V* dst = reinterpret_cast<V*>(out + t * row_bytes);
    if (i < 0 || i >= n_src) {
      if (threadIdx.x == 0) atomicOr(err, err_bit);
      for (int64_t w = threadIdx.x; w < words; w += kThreads) dst[w] = V{};
      continue;
    }
    const V* s = reinterpret_cast<const V*>(src + i * row_bytes);
    for (int64_t w = threadIdx.x; w < words; w += kThreads) dst[w] = s[w];
  }
}

// One block per token: its k and v rows go to cache row slot[t].
template <int W>
__global__ void __launch_bounds__(kThreads)
    write_kv_kernel(const char* __restrict__ k, const char* __restrict__ v,
                    char* __restrict__ k_cache, char* __restrict__ v_cache,
                    const int32_t* __restrict__ slots, int64_t n_tokens, int64_t n_slots,
                    int64_t row_bytes, int* err) {
  using V = typename Word<W>::type;
  const int64_t words = row_bytes / W;
  for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
    const int64_t slot = slots[t];
    if (slot < 0) continue;  // padding token: nothing to cache
    if (slot >= n_slots) {
      if (threadIdx.x == 0) atomicOr(err, int(kErrKvSlot));
      continue;
    }
    const V* ks = reinterpret_cast<const V*>(k + t * row_bytes);
    const V* vs = reinterpret_cast<const V*>(v + t * row_bytes);
    V* kd = reinterpret_cast<V*>(k_cache + slot * row_bytes);
    V* vd = reinterpret_cast<V*>(v_cache + slot * row_bytes);
    for (int64_t w = threadIdx.x; w < words; w += kThreads) {
      kd[w] = ks[w];
      vd[w] = vs[w];
    }
  }
}

unsigned grid_for(int64_t rows) {
  return unsigned(rows < (int64_t(1) << 30) ? rows : (int64_t(1) << 30));
}

}  // namespace

void launch_gather_rows(const void* src, int64_t n_src, const int32_t* idx, void* out,
                        int64_t n_out, int64_t row_bytes, int err_bit, int* err,
                        cudaStream_t stream) {
  if (n_out <= 0 || row_bytes <= 0) return;
  const auto* s = static_cast<const char*>(src);
  auto* o = static_cast<char*>(out);
  const dim3 grid(grid_for(n_out));
  switch (access_width(row_bytes, src, out)) {
    case 16:
      launch_pdl(gather_rows_kernel<16>, grid, dim3(kThreads), 0, stream, s, n_src, idx, o, n_out,
                 row_bytes, err_bit, err);
      break;
    case 8:
      launch_pdl(gather_rows_kernel<8>, grid, dim3(kThreads), 0, stream, s, n_src, idx, o, n_out,
                 row_bytes, err_bit, err);
      break;
    case 4:
      launch_pdl(gather_rows_kernel<4>, grid, dim3(kThreads), 0, stream, s, n_src, idx, o, n_out,
                 row_bytes, err_bit, err);
      break;
    case 2:
      launch_pdl(gather_rows_kernel<2>, grid, dim3(kThreads), 0, stream, s, n_src, idx, o, n_out,
                 row_bytes, err_bit, err);
      break;
    default:
      launch_pdl(gather_rows_kernel<1>, grid, dim3(kThreads), 0, stream, s, n_src, idx, o, n_out,
                 row_bytes, err_bit, err);
      break;
  }
}

void launch_write_kv(const void* k, const void* v, void* k_cache, void* v_cache,
                     const int32_t* slots, int64_t n_tokens, int64_t n_slots, int64_t row_bytes,
                     int* err, cudaStream_t stream) {
  if (n_tokens <= 0 || row_bytes <= 0) return;
  const auto* kp = static_cast<const char*>(k);
  const auto* vp = static_cast<const char*>(v);
  auto* kc = static_cast<char*>(k_cache);
  auto* vc = static_cast<char*>(v_cache);
  const dim3 grid(grid_for(n_tokens));
  // Cache rows start at multiples of row_bytes, so the cache bases' alignment is enough.
  switch (access_width(row_bytes, k, v, k_cache, v_cache)) {
    case 16:
      write_kv_kernel<16>
          <<<grid, kThreads, 0, stream>>>(kp, vp, kc, vc, slots, n_tokens, n_slots, row_bytes, err);
      break;
    case 8:
      write_kv_kernel<8>
          <<<grid, kThreads, 0, stream>>>(kp, vp, kc, vc, slots, n_tokens, n_slots, row_bytes, err);
      break;
    case 4:
      write_kv_kernel<4>
          <<<grid, kThreads, 0, stream>>>(kp, vp, kc, vc, slots, n_tokens, n_slots, row_bytes, err);
      break;
    case 2:
      write_kv_kernel<2>
          <<<grid, kThreads, 0, stream>>>(kp, vp, kc, vc, slots, n_tokens, n_slots, row_bytes, err);
      break;
    default:
      write_kv_kernel<1>
          <<<grid, kThreads, 0, stream>>>(kp, vp, kc, vc, slots, n_tokens, n_slots, row_bytes, err);
      break;
  }
}

namespace {

__global__ void feed_tokens_kernel(const int32_t* __restrict__ results,
                                   const int64_t* __restrict__ feeds, int n,
                                   int32_t* __restrict__ dst) {
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x)) {
    const int32_t t = results[feeds[2 * i]];
    dst[feeds[2 * i + 1]] = t < 0 ? 0 : t;  // a failed row's error code: token 0
  }
}

}  // namespace

void launch_feed_tokens(const int32_t* results, const int64_t* feeds, int n, int32_t* dst,
                        cudaStream_t stream) {
  if (n <= 0) return;
  const int blocks = (n + kThreads - 1) / kThreads;
  feed_tokens_kernel<<<blocks < 64 ? blocks : 64, kThreads, 0, stream>>>(results, feeds, n, dst);
}

}  // namespace troupe::cuda
