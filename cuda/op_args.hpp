// The CUDA backend's op-argument checks (cuda_backend.cpp): each throws one line naming the
// op, the argument, its shape and what is allowed, before anything is launched. Host-only.
#pragma once

#include <cstdint>

#include "cuda/cuda_check.hpp"
#include "runtime/backend/backend.hpp"

namespace troupe::cuda {

/// rms_norm's: x [T, H] of a compute dtype, weight [H], out like x, eps finite and >= 0.
void check_norm(const OpCheck& check, const Tensor& x, const Tensor& weight, float eps,
                const Tensor& out);
/// linear's: x [T, K], w [N, K] like x, out [T, N] like x or f32 (logits), bias [N] like x or
/// out; out apart from x and w; every extent within 32-bit indexing.
void check_linear(const OpCheck& check, const Tensor& x, const Tensor& w, const Tensor* bias,
                  const Tensor& out);
/// The fused rms_norm then linear ops': rms_norm(x) into h, then linear(h) into out (named
/// out_name in messages), h and out apart from x.
void check_norm_linear(const OpCheck& check, const Tensor& x, const Tensor& norm_weight,
                       float eps, const Tensor& h, const Tensor& w, const Tensor* bias,
                       const Tensor& out, const char* out_name);
/// act_mul's: gate_up [T, 2I] of a compute dtype, out [T, I] like it and apart from it.
void check_act_mul(const OpCheck& check, const Tensor& gate_up, const Tensor& out);
/// rope_qkv_to_cache's (and its fusion into the qkv GEMV's).
void check_rope_qkv(const OpCheck& check, const Tensor& qkv, const Tensor& positions,
                    const Tensor& cos_sin, int32_t head_dim, int32_t rotary_dim, RopeStyle style,
                    int32_t num_heads, int32_t num_kv_heads, const Tensor& k_cache,
                    const Tensor& v_cache, const Tensor& slot_mapping, const Tensor& q_out);
/// attention's: a head dim and block size with a kernel, the caches' layout, 16-byte aligned
/// rows below f32, and the batch metadata's shapes.
void check_attention(const OpCheck& check, const Tensor& q, const Tensor& k_cache,
                     const Tensor& v_cache, const AttentionBatch& batch,
                     const AttentionShape& shape, const Tensor& out);

}  // namespace troupe::cuda
