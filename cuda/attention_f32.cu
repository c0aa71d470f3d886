// Paged attention for the f32 compute dtype: a simple CUDA-core kernel meant to match the CPU
// reference closely rather than to be fast (f32 models are for tests and debugging).
//
// One CTA of 4 warps per (query row, head). Warp w takes keys w, w + 4, ...: the lanes split
// the d features, a warp sum gives the score, and each warp keeps its own online softmax
// (natural base, as the CPU). The four warps' (max, sum, acc) meet in shared memory at the end.
#include "cuda/attention_common.cuh"

namespace troupe::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxDim = 256;
constexpr int kPerLane = kMaxDim / 32;

__global__ void __launch_bounds__(kThreads) attention_f32_kernel(const AttentionArgs a) {
  __shared__ float qsh[kMaxDim];
  __shared__ float wm[kWarps], wl[kWarps];
  __shared__ float wacc[kWarps][kMaxDim];
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const int D = a.head_dim;

  // The sequence owning row t: the last s with query_start_loc[s] <= t (binary search).
  int lo = 0, hi = a.num_seqs;  // answer in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.query_start_loc[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int s = lo;
  if (s >= a.num_seqs) return;  // padding row past the last sequence (zeroed elsewhere)
  const SeqInfo seq = load_seq(a, s);
  if (!seq.ok) {
    if (h == 0 && threadIdx.x == 0) atomicOr(a.err, int(kErrSeqLayout));
    return;
  }
  const int i = int(t - seq.q_begin);
  if (i < 0 || i >= seq.q_len) return;
  const int n = seq.kv_len - seq.q_len + i + 1;  // keys visible to this row
  const int group = a.num_heads / a.num_kv_heads, kvh = h / group;
  const int64_t q_stride = int64_t(a.num_heads) * D;
  const float* q = static_cast<const float*>(a.q) + t * q_stride + int64_t(h) * D;
  const float* kc = static_cast<const float*>(a.k_cache);
  const float* vc = static_cast<const float*>(a.v_cache);
  const int32_t* table = a.block_tables + int64_t(s) * a.max_blocks;

  for (int d = threadIdx.x; d < D; d += kThreads) qsh[d] = q[d];
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float m = -INFINITY, l = 0.0f, acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) acc[c] = 0.0f;
  for (int j = warp; j < n; j += kWarps) {
    const int64_t off = kv_offset(a, table, j, kvh, D);
    if (off < 0) continue;  // warp-uniform: every lane reads the same table entry
    float part = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = lane + 32 * c;
      if (d < D) part += qsh[d] * kc[off + d];
    }
    const float score = warp_sum(part) * a.scale;
    const float m_new = fmaxf(m, score);
    const float alpha = expf(m - m_new);  // 0 for the first key (m = -inf)
    const float p = expf(score - m_new);
    l = l * alpha + p;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = lane + 32 * c;
      acc[c] = acc[c] * alpha + (d < D ? p * vc[off + d] : 0.0f);
    }
    m = m_new;
  }
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < D) wacc[warp][d] = acc[c];
  }
  __syncthreads();

  float m_max = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m_max = fmaxf(m_max, wm[w]);
  float l_sum = 0.0f, scale_w[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    scale_w[w] = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - m_max);  // warps that saw no key
    l_sum += wl[w] * scale_w[w];
  }
  const float inv = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;
  float* out = static_cast<float*>(a.out) + t * q_stride + int64_t(h) * D;
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += wacc[w][d] * scale_w[w];
    out[d] = o * inv;
  }
}

}  // namespace

void launch_attention_f32_rows(const AttentionArgs& a, cudaStream_t stream) {
  if (a.num_seqs <= 0 || a.num_tokens <= 0 || a.num_heads <= 0) return;
  const dim3 grid(unsigned(a.num_tokens), unsigned(a.num_heads));
  attention_f32_kernel<<<grid, kThreads, 0, stream>>>(a);
}

}  // namespace troupe::cuda
