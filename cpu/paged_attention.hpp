// Causal paged attention on the CPU: the reference for every other backend's kernel.
#pragma once

#include "cpu/thread_pool.hpp"
#include "runtime/backend/backend.hpp"

namespace troupe::cpu {

/// Backend::attention (see backend.hpp), after checking every shape and every index it reads
/// (query_start_loc, seq_lens and the block table entries in use).
///
/// Rows of `out` past query_start_loc[S] (padding tokens) are set to zero.
/// Scores are f32 dot products times `scale`; the softmax subtracts the row max and sums its
/// exponentials in double; the value sum is accumulated in f32.
void paged_attention(ThreadPool& pool, const Tensor& q, const Tensor& k_cache,
                     const Tensor& v_cache, const AttentionBatch& batch,
                     const AttentionShape& shape, const Tensor& out);

}  // namespace troupe::cpu
