// Pieces every split-KV decode kernel shares (nvcc only; attention_decode.cu and
// attention_decode_mma.cu): each sequence's split count, the CTA prologue (PDL wait, zeroing the
// padding rows, the CTA's sequence and key range) and the write of one output element, either
// normalised (a sequence in one split) or as a partial for decode_reduce_kernel.
#pragma once

#include "cuda/attention_common.cuh"

namespace troupe::cuda {

// Splits a sequence of kv_len keys uses: one per started split_keys keys (the plan's,
// at least kDecodeMinSplitKeys), at most the grid's.
__device__ __forceinline__ int seq_splits(int kv_len, int splits, int split_keys) {
  split_keys = max(split_keys, kDecodeMinSplitKeys);
  const int by_length = (kv_len + split_keys - 1) / split_keys;
  return max(1, min(splits, by_length));
}

// Rows [query_start_loc[num_seqs], num_tokens) of out belong to no sequence: zero them, spread
// over every CTA of the grid.
template <class T, int D>
__device__ __forceinline__ void zero_padding(const AttentionArgs& a) {
  int64_t used = a.query_start_loc[a.num_seqs];
  used = used < 0 ? 0 : used > a.num_tokens ? a.num_tokens : used;
  const int64_t row_words = int64_t(a.num_heads) * D * int64_t(sizeof(T)) / 4;
  const int64_t total = (a.num_tokens - used) * row_words;
  if (total <= 0) return;
  const int64_t ctas = int64_t(gridDim.x) * gridDim.y * gridDim.z;
  const int64_t cta =
      blockIdx.x + int64_t(gridDim.x) * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z);
  uint32_t* base = static_cast<uint32_t*>(a.out) + used * row_words;
  const int64_t threads = blockDim.x;
  for (int64_t i = cta * threads + threadIdx.x; i < total; i += ctas * threads) base[i] = 0u;
}

/// One CTA's share of the decode grid: its sequence and the key range [start, end) of its split.
struct DecodeCta {
  SeqInfo seq;
  int split, kvh, s;
  int n_split, start, end;
};

/// What a decode CTA reads, typed: its sequence's query row (all heads), the K and V caches,
/// its block-table row, and the query heads per KV head.
template <class T, int D>
struct DecodeInputs {
  const T* qrow;
  const T* kc;
  const T* vc;
  const int32_t* table;
  int group;
};

template <class T, int D>
__device__ __forceinline__ DecodeInputs<T, D> decode_inputs(const AttentionArgs& a,
                                                           const DecodeCta& c) {
  return {static_cast<const T*>(a.q) + int64_t(c.seq.q_begin) * a.num_heads * D,
          static_cast<const T*>(a.k_cache), static_cast<const T*>(a.v_cache),
          a.block_tables + int64_t(c.s) * a.max_blocks, a.num_heads / a.num_kv_heads};
}

/// The start of every decode CTA: waits for the previous kernel (PDL), zeroes its part of the
/// padding rows, reads its sequence and split. False when the CTA has nothing to do.
template <class T, int D>
__device__ __forceinline__ bool begin_decode_cta(const AttentionArgs& a, int splits, DecodeCta& c) {
  pdl_wait();
  zero_padding<T, D>(a);
  c.split = blockIdx.x, c.kvh = blockIdx.y, c.s = blockIdx.z;
  c.seq = load_seq(a, c.s);
  if (!c.seq.ok) {
    if (c.split == 0 && c.kvh == 0 && threadIdx.x == 0) atomicOr(a.err, int(kErrSeqLayout));
    return false;
  }
  if (c.seq.q_len != 1) return false;  // prefills go to the tensor-core kernel
  c.n_split = seq_splits(c.seq.kv_len, splits, a.decode_split_keys);
  if (c.split >= c.n_split) return false;  // the reduction reads only the n_split parts
  const int per_split = (c.seq.kv_len + c.n_split - 1) / c.n_split;
  c.start = c.split * per_split;
  c.end = min(c.seq.kv_len, c.start + per_split);
  return true;
}

/// Output element d of query head h for the CTA's split: `o` is the unnormalised sum of
/// p * v over the split's keys, m the running max (base 2) and l the sum of p. A sequence in
/// one split gets o / l in `out`; otherwise (o, m, l) go to the partials the reduction reads.
template <class T, int D>
__device__ __forceinline__ void write_decode_result(const AttentionArgs& a, const DecodeCta& c,
                                                    int splits, int h, int d, float o, float m,
                                                    float l, float* __restrict__ part_o,
                                                    float* __restrict__ part_ml) {
  if (c.n_split == 1) {
    T* out = static_cast<T*>(a.out);
    const int64_t q_stride = int64_t(a.num_heads) * D;
    out[int64_t(c.seq.q_begin) * q_stride + int64_t(h) * D + d] =
        from_f32<T>(l > 0.0f ? o / l : 0.0f);
  } else {
    const int64_t part = (int64_t(c.s) * a.num_heads + h) * splits + c.split;
    part_o[part * D + d] = o;
    if (d == 0) {
      part_ml[part * 2] = m;
      part_ml[part * 2 + 1] = l;
    }
  }
}

/// Most splits whose weights the tensor-core kernel's last CTA keeps in shared memory when it
/// combines them, and most query heads per KV head it combines (one pass of 16).
inline constexpr int kCombineMaxSplits = 64;
inline constexpr int kCombineMaxGroup = 16;

/// Whether the tensor-core decode kernel can combine the splits itself (else
/// decode_reduce_kernel runs after it).
inline bool mma_can_combine(const AttentionArgs& a, int splits, const DecodeWorkspace& ws) {
  return ws.counters != nullptr && a.num_kv_heads > 0 && splits <= kCombineMaxSplits &&
         a.num_heads / a.num_kv_heads <= kCombineMaxGroup &&
         size_t(a.num_seqs) * size_t(a.num_kv_heads) <= ws.num_counters;
}

}  // namespace troupe::cuda
