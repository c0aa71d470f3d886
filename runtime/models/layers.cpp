#include "runtime/models/layers.hpp"

namespace troupe {

ResidualStream::ResidualStream(Backend& backend, const Tensor& residual)
    : backend_(backend),
      residual_(residual),
      fused_(backend.fuses_norm_and_add_into_linear(residual.dim(0))),
      tp_(backend.tp_size() > 1) {}

void ResidualStream::settle_for_fused() {
  if (pending_.empty()) return;
  backend_.add(residual_, pending_);
  pending_ = Tensor{};
}

void ResidualStream::norm(const Tensor& norm_weight, float eps, const Tensor& out) {
  if (pending_.empty()) {
    backend_.rms_norm(residual_, norm_weight, eps, out);
  } else {
    backend_.add_rms_norm(residual_, pending_, norm_weight, eps, out);
    pending_ = Tensor{};
  }
}

void ResidualStream::norm_linear(const Tensor& norm_weight, float eps, const Tensor& h,
                                 const Tensor& w, const Tensor* bias, const Tensor& out) {
  if (fused_) {
    settle_for_fused();
    backend_.rms_norm_linear(residual_, norm_weight, eps, h, w, bias, out);
    return;
  }
  norm(norm_weight, eps, h);
  backend_.linear(h, w, bias, out);
}

void ResidualStream::norm_linear_act(const Tensor& norm_weight, float eps, const Tensor& h,
                                     const Tensor& w, const Tensor* bias, GatedActivation act,
                                     const Tensor& gate_up, const Tensor& out) {
  if (fused_) {
    settle_for_fused();
    backend_.rms_norm_linear_act_mul(residual_, norm_weight, eps, h, w, bias, act, gate_up, out);
    return;
  }
  norm(norm_weight, eps, h);
  backend_.linear(h, w, bias, gate_up);
  backend_.act_mul(act, gate_up, out);
}

void ResidualStream::norm_qkv_rope(const Tensor& norm_weight, float eps, const Tensor& h,
                                   const Tensor& w, const Tensor* bias, const Tensor& qkv,
                                   const Tensor& positions, const Tensor& cos_sin,
                                   int32_t head_dim, int32_t rotary_dim, RopeStyle style,
                                   int32_t num_heads, int32_t num_kv_heads, const Tensor& k_cache,
                                   const Tensor& v_cache, const Tensor& slot_mapping,
                                   const Tensor& q_out) {
  if (fused_) {
    settle_for_fused();
    backend_.rms_norm_linear_rope_qkv_to_cache(residual_, norm_weight, eps, h, w, bias, qkv,
                                               positions, cos_sin, head_dim, rotary_dim, style,
                                               num_heads, num_kv_heads, k_cache, v_cache,
                                               slot_mapping, q_out);
    return;
  }
  norm(norm_weight, eps, h);
  backend_.linear(h, w, bias, qkv);
  backend_.rope_qkv_to_cache(qkv, positions, cos_sin, head_dim, rotary_dim, style, num_heads,
                             num_kv_heads, k_cache, v_cache, slot_mapping, q_out);
}

void ResidualStream::add_linear(const Tensor& x, const Tensor& w, const Tensor* bias,
                                const Tensor& scratch) {
  settle_for_fused();  // programs norm between blocks, so nothing is pending here
  if (tp_) {
    backend_.linear(x, w, backend_.tp_rank() == 0 ? bias : nullptr, scratch);
    backend_.all_reduce(scratch);
    pending_ = scratch;
  } else if (fused_) {
    backend_.linear_add(x, w, bias, residual_, scratch);
  } else {
    backend_.linear(x, w, bias, scratch);
    pending_ = scratch;
  }
}

void ResidualStream::flush() { settle_for_fused(); }

}  // namespace troupe
