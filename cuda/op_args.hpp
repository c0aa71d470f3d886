// The CUDA backend's own op-argument checks (cuda_backend.cpp), on top of the rules every
// backend shares (runtime/backend/op_checks.hpp): the dtypes it computes in and what its
// kernels need. Each throws one line naming the op, the argument, its shape and what is
// allowed, before anything is launched. Host-only.
#pragma once

#include <string_view>

#include "runtime/backend/backend.hpp"
#include "runtime/backend/op_checks.hpp"

namespace troupe::cuda {

/// A compute dtype of this backend: float32, float16 or bfloat16.
void check_compute_dtype(const OpCheck& check, std::string_view name, const Tensor& t);
/// attention's: the shared rules (check_attention), plus a head dim and block size with a
/// kernel, at most 65535 heads and sequences (grid dimensions), 16-byte aligned rows below
/// f32, 32-bit row and block indices, and block tables long enough for max_seq_len.
void check_cuda_attention(const OpCheck& check, const Tensor& q, const Tensor& k_cache,
                          const Tensor& v_cache, const AttentionBatch& batch,
                          const AttentionShape& shape, const Tensor& out);

}  // namespace troupe::cuda
