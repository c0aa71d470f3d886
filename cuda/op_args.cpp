#include "cuda/op_args.hpp"

#include "cuda/kernels.hpp"

namespace troupe::cuda {

void check_compute_dtype(const OpCheck& check, std::string_view name, const Tensor& t) {
  if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16)
    check.fail("{} {} must be float32, float16 or bfloat16", name, describe(t));
}

void check_cuda_attention(const OpCheck& check, const Tensor& q, const Tensor& k_cache,
                          const Tensor& v_cache, const AttentionBatch& batch,
                          const AttentionShape& shape, const Tensor& out) {
  if (!attention_head_dim_supported(shape.head_dim))
    check.fail("head_dim = {} has no CUDA kernel (supported: 16, 32, 64, 80, 96, 128, 256)",
               shape.head_dim);
  if (!attention_block_size_supported(shape.block_size))
    check.fail("block_size = {} has no CUDA kernel (supported: 8, 16, 32)", shape.block_size);
  if (shape.num_heads > 65535) check.fail("num_heads = {} exceeds 65535", shape.num_heads);
  check_compute_dtype(check, "q", q);
  check_attention(check, q, k_cache, v_cache, batch, shape, out);
  if (q.dtype != DType::f32) {  // the f16/bf16 kernels read rows with 16-byte vectors
    check.aligned("q", q, 16);
    check.aligned("out", out, 16);
    check.aligned("k_cache", k_cache, 16);
    check.aligned("v_cache", v_cache, 16);
  }
  check.fits_int("T", q.dim(0));
  check.fits_int("num_blocks", k_cache.dim(0));
  if (batch.num_seqs > 65535) check.fail("num_seqs = {} must be in [0, 65535]", batch.num_seqs);
  check.fits_int("max_blocks_per_seq * block_size",
                 batch.block_tables.dim(1) * int64_t(shape.block_size));
  if (int64_t(batch.max_seq_len) > batch.block_tables.dim(1) * shape.block_size)
    check.fail(
        "max_seq_len = {} needs more than the {} blocks of {} per sequence in "
        "block_tables {}",
        batch.max_seq_len, batch.block_tables.dim(1), shape.block_size,
        describe(batch.block_tables));
}

}  // namespace troupe::cuda
