// Pieces shared by the attention kernels (nvcc only): reading one sequence's layout with the
// checks the CPU backend makes on the host, finding a key's cache row through the block table,
// and the per-file launchers that attention.cu dispatches to.
#pragma once

#include "cuda/device_common.cuh"
#include "cuda/kernels.hpp"

namespace troupe::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;

/// The shortest KV range a decode split takes (the host's grid and each sequence's own split
/// count both follow it).
inline constexpr int kDecodeMinSplitKeys = 64;
/// The shortest split of a batch below a wave of CTAs: a batch-1 context of up to 256 keys
/// runs as one split (no partial results to combine), a longer one in at most 33 at batch 1.
/// Batch-1 decode on the H200 took 0.8%, 1.1% and 3.1% less time than with 64-key splits at
/// 128, 1,024 and 3,968 tokens in.
inline constexpr int kDecodeSmallBatchSplitKeys = 256;

struct SeqInfo {
  int q_begin;  // first query row of the sequence in q / out
  int q_len;    // its query rows this step
  int kv_len;   // keys in the cache after this step's writes
  bool ok;
};

/// Sequence s's layout; `ok` is false when the metadata is inconsistent (the caller sets
/// kErrSeqLayout and skips the sequence rather than read out of bounds).
__device__ __forceinline__ SeqInfo load_seq(const AttentionArgs& a, int s) {
  SeqInfo r;
  r.q_begin = a.query_start_loc[s];
  const int q_end = a.query_start_loc[s + 1];
  r.q_len = q_end - r.q_begin;
  r.kv_len = a.seq_lens[s];
  r.ok = (s > 0 || r.q_begin == 0) && r.q_begin >= 0 && r.q_len >= 0 &&
         int64_t(q_end) <= a.num_tokens && r.q_len <= a.max_query_len && r.kv_len >= r.q_len &&
         r.kv_len <= a.max_seq_len && int64_t(r.kv_len) <= int64_t(a.max_blocks) * a.block_size;
  return r;
}

/// Element offset of key j's row for KV head `kvh` in a cache [num_blocks, block_size,
/// num_kv_heads, D], or -1 (and kErrBlockTable) when the block table points outside the cache.
__device__ __forceinline__ int64_t kv_offset(const AttentionArgs& a, const int32_t* table, int j,
                                             int kvh, int head_dim) {
  const int blk = table[j >> a.log2_block_size];
  if (blk < 0 || blk >= a.num_blocks) {
    atomicOr(a.err, int(kErrBlockTable));
    return -1;
  }
  const int64_t slot = int64_t(blk) * a.block_size + (j & (a.block_size - 1));
  return (slot * a.num_kv_heads + kvh) * head_dim;
}

// ---- dispatch over the compiled (dtype, head dim) pairs ----

template <class T>
struct TypeTag {
  using type = T;
};

template <class T, class F>
void dispatch_dim(int d, F& f) {
  switch (d) {
    case 16: f(TypeTag<T>{}, std::integral_constant<int, 16>{}); break;
    case 32: f(TypeTag<T>{}, std::integral_constant<int, 32>{}); break;
    case 64: f(TypeTag<T>{}, std::integral_constant<int, 64>{}); break;
    case 80: f(TypeTag<T>{}, std::integral_constant<int, 80>{}); break;
    case 96: f(TypeTag<T>{}, std::integral_constant<int, 96>{}); break;
    case 128: f(TypeTag<T>{}, std::integral_constant<int, 128>{}); break;
    case 256: f(TypeTag<T>{}, std::integral_constant<int, 256>{}); break;
    default: break;  // the host validated head_dim (attention_head_dim_supported)
  }
}

/// f(TypeTag<T>{}, std::integral_constant<int, D>{}) for T = the element type of dt (f16 or
/// bf16) and D = head_dim; nothing for other dtypes or dims (the host validated both).
template <class F>
void dispatch_half_dim(DType dt, int head_dim, F&& f) {
  if (dt == DType::bf16)
    dispatch_dim<__nv_bfloat16>(head_dim, f);
  else if (dt == DType::f16)
    dispatch_dim<__half>(head_dim, f);
}

/// f(tag, dim) -> cudaError_t for every compiled (f16/bf16, head dim) pair; the first error.
template <class F>
cudaError_t for_each_half_dim(F&& f) {
  cudaError_t first = cudaSuccess;
  for (DType dt : {DType::bf16, DType::f16})
    for (int d : kAttentionHeadDims)
      dispatch_half_dim(dt, d, [&](auto tag, auto dim) {
        const cudaError_t e = f(tag, dim);
        if (e != cudaSuccess && first == cudaSuccess) first = e;
      });
  return first;
}

// ---- per-file launchers (attention.cu chooses among them) ----

/// Tensor-core FlashAttention-2 kernel over sequences with q_len >= 2.
void launch_attention_prefill(DType dt, const AttentionArgs& a, cudaStream_t stream);
cudaError_t attention_prefill_init();

/// Split-KV decode over sequences with q_len == 1: the tensor-core kernel (which combines the
/// splits itself where it can), or for a cache past 32-bit row indices the CUDA-core kernel of
/// attention_decode.cu (+ the reduction when splits > 1); a.decode_split_keys is the plan's.
void launch_attention_decode(DType dt, const AttentionArgs& a, int splits,
                             const DecodeWorkspace& ws, cudaStream_t stream);

/// The tensor-core decode kernel (attention_decode_mma.cu). With `counters` (one per
/// (sequence, KV head), zero) the last CTA of each sequence combines its splits too; without
/// (nullptr), sequences in several splits leave partials for decode_reduce_kernel.
void launch_attention_decode_mma(DType dt, const AttentionArgs& a, int splits, float* part_o,
                                 float* part_ml, uint32_t* counters, cudaStream_t stream);
cudaError_t attention_decode_mma_init();

/// Simple f32 kernel over every query row (no padding rows).
void launch_attention_f32_rows(const AttentionArgs& a, cudaStream_t stream);

}  // namespace troupe::cuda
