// The building blocks every architecture's program is written with (llama.cpp's build_norm /
// build_ffn): each picks, per step, between a backend's fused kernels and the plain op
// sequence, and places the tensor-parallel all-reduce, so that one program per architecture
// serves every backend, batch size, TP size and pipeline stage.
//
// The residual stream. A decoder keeps residual [T, H] and adds each block's output to it
// before the next norm. Where the add happens is the fusion choice:
// - a backend that fuses norms and adds into its GEMMs at this size
//   (Backend::fuses_norm_and_add_into_linear; CUDA's skinny GEMM at one row) adds a block's
//   output inside the GEMM that makes it (linear_add) and normalises inside the next GEMM
//   (rms_norm_linear...);
// - otherwise the output is kept "pending" and added inside the next norm (add_rms_norm: one
//   pass over the residual where an add and a norm take two);
// - under tensor parallelism a row-parallel GEMM's output must be summed over ranks before it
//   joins the residual, so it is always pending there: linear, all_reduce, then the add inside
//   the next norm, or (fused backends) an add and the next fused norm-GEMM, keeping that
//   fusion. A row-parallel bias is added on rank 0 only, so the all-reduce adds it once.
// Every path rounds the residual exactly as `add` does (backend.hpp), so all give the same
// bits for the same TP layout, and a pipeline stage that ends with flush() hands on the same
// residual the next layer would have seen.
#pragma once

#include <cstdint>

#include "runtime/backend/backend.hpp"

namespace troupe {

class ResidualStream {
 public:
  /// `residual` [T, H] holds the stream's current values (the embedding, or the previous
  /// pipeline stage's hidden states).
  ResidualStream(Backend& backend, const Tensor& residual);

  [[nodiscard]] const Tensor& residual() const { return residual_; }
  [[nodiscard]] bool fused() const { return fused_; }

  /// out = rms_norm(residual) @ w^T (+ bias): a block's column-parallel input projection.
  /// h [T, H] is scratch.
  void norm_linear(const Tensor& norm_weight, float eps, const Tensor& h, const Tensor& w,
                   const Tensor* bias, const Tensor& out);

  /// A gated MLP's first half: act(gate) * up of rms_norm(residual) @ w_gate_up^T.
  /// gate_up [T, 2I] and h are scratch, out [T, I].
  void norm_linear_act(const Tensor& norm_weight, float eps, const Tensor& h, const Tensor& w,
                       const Tensor* bias, GatedActivation act, const Tensor& gate_up,
                       const Tensor& out);

  /// An attention block's inputs: qkv = rms_norm(residual) @ w_qkv^T (+ bias), q rotated into
  /// q_out, k rotated and v written to the caches (Backend::rope_qkv_to_cache's arguments).
  void norm_qkv_rope(const Tensor& norm_weight, float eps, const Tensor& h, const Tensor& w,
                     const Tensor* bias, const Tensor& qkv, const Tensor& positions,
                     const Tensor& cos_sin, int32_t head_dim, int32_t rotary_dim, RopeStyle style,
                     int32_t num_heads, int32_t num_kv_heads, const Tensor& k_cache,
                     const Tensor& v_cache, const Tensor& slot_mapping, const Tensor& q_out);

  /// residual += x @ w^T (+ bias), summed over the TP group: a block's row-parallel output
  /// projection. `bias` is the whole bias (every rank holds it). scratch [T, H].
  void add_linear(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& scratch);

  /// out = rms_norm(residual): the final norm before the logits head.
  void norm(const Tensor& norm_weight, float eps, const Tensor& out);

  /// Adds what is pending, so that residual() holds the stream (a stage's hand-off).
  void flush();

 private:
  /// Adds what is pending before a fused norm-GEMM, which reads the residual as it is.
  void settle_for_fused();

  Backend& backend_;
  Tensor residual_;
  Tensor pending_;  // a block output not yet added (empty: none)
  bool fused_ = false;
  bool tp_ = false;
};

}  // namespace troupe
