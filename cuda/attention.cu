// The attention op's dispatch: which kernels run for a batch, the decode split count, zeros for
// padding rows (rows past the last sequence, e.g. a CUDA-graph batch padded to its bucket;
// the CPU backend zeroes them too), and the one-time kernel attribute setup.
#include <algorithm>

#include "cuda/attention_common.cuh"
#include "cuda/attention_decode.cuh"

namespace troupe::cuda {
namespace {

// Zeroes out rows [query_start_loc[S], T): they belong to no sequence.
__global__ void __launch_bounds__(256)
    zero_padding_rows_kernel(const int32_t* __restrict__ qsl, int num_seqs, int64_t num_tokens,
                             int64_t row_words, uint32_t* __restrict__ out) {
  int64_t used = qsl[num_seqs];
  used = used < 0 ? 0 : used > num_tokens ? num_tokens : used;
  const int64_t total = (num_tokens - used) * row_words;
  uint32_t* base = out + used * row_words;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x)
    base[i] = 0u;
}

void zero_padding_rows(const AttentionArgs& a, int elem_bytes, cudaStream_t stream) {
  if (a.num_tokens <= 0) return;
  // Row bytes are num_heads * head_dim * elem_bytes, a multiple of 4 for supported head dims.
  const int64_t row_words = int64_t(a.num_heads) * a.head_dim * elem_bytes / 4;
  const int64_t blocks = (a.num_tokens * row_words + 255) / 256;
  zero_padding_rows_kernel<<<unsigned(blocks < 1024 ? blocks : 1024), 256, 0, stream>>>(
      a.query_start_loc, a.num_seqs, a.num_tokens, row_words, static_cast<uint32_t*>(a.out));
}

}  // namespace

cudaError_t attention_init() {
  return attention_prefill_init();
}

DecodePlan plan_decode(const AttentionArgs& a, int num_sms, const DecodeWorkspace& ws) {
  if (a.num_seqs <= 0 || a.max_seq_len <= 0) return {1, kDecodeMinSplitKeys};
  // About one full wave of CTAs (the decode kernels keep two CTAs resident per SM), rounded
  // down so that the grid never spills a few CTAs into a second wave, in splits of at least
  // kDecodeSmallBatchSplitKeys. A batch that fills a wave by itself takes one split per
  // sequence. Never more splits than the workspace holds. This is the grid's split
  // count; each sequence then uses as many of them as its own length needs
  // (attention_decode.cuh), so under a CUDA graph (max_seq_len at its bound) a short sequence
  // still takes few splits.
  const int64_t base = int64_t(a.num_seqs) * a.num_kv_heads;
  const int64_t target = 2 * int64_t(num_sms > 0 ? num_sms : 132);
  int64_t splits = 1, split_keys = kDecodeMinSplitKeys;
  if (base < target) {
    splits = target / base;
    split_keys = kDecodeSmallBatchSplitKeys;
  }
  const int64_t by_length = (a.max_seq_len + split_keys - 1) / split_keys;
  if (splits > by_length) splits = by_length;
  const int64_t per_split_floats = int64_t(a.num_seqs) * a.num_heads * (a.head_dim + 2);
  const int64_t by_workspace = per_split_floats > 0 ? int64_t(ws.floats) / per_split_floats : 1;
  if (splits > by_workspace) splits = by_workspace;
  if (splits > 1024) splits = 1024;
  return {splits < 1 ? 1 : int32_t(splits), int32_t(split_keys)};
}

void launch_attention_half(DType dt, const AttentionArgs& args, int num_sms,
                           const DecodeWorkspace& ws, cudaStream_t stream) {
  if (args.num_seqs <= 0) {  // no decode grid to zero the padding rows
    zero_padding_rows(args, 2, stream);
    return;
  }
  if (args.all_rows_prefill) {  // batch-invariant mode: one kernel for every row
    zero_padding_rows(args, 2, stream);
    launch_attention_prefill(dt, args, stream);
    return;
  }
  const DecodePlan plan = plan_decode(args, num_sms, ws);
  AttentionArgs a = args;
  a.decode_split_keys = plan.split_keys;
  // Both kernels read the per-sequence query lengths on the device and skip the sequences
  // that are the other's: the host only knows max_query_len. The decode kernel, always
  // launched, also zeroes the padding rows.
  if (a.max_query_len >= 2) launch_attention_prefill(dt, a, stream);
  launch_attention_decode(dt, a, plan.splits, ws, stream);
}

void launch_attention_f32(const AttentionArgs& a, cudaStream_t stream) {
  zero_padding_rows(a, 4, stream);
  launch_attention_f32_rows(a, stream);
}

}  // namespace troupe::cuda
