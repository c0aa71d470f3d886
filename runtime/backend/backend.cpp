#include "runtime/backend/backend.hpp"

#include "runtime/error.hpp"

namespace troupe {

const char* gated_activation_name(GatedActivation act) {
  switch (act) {
    case GatedActivation::silu:
      return "silu";
    case GatedActivation::gelu:
      return "gelu";
    case GatedActivation::gelu_tanh:
      return "gelu_tanh";
  }
  return "?";
}

// A default rather than a pure virtual: backends written against the older op set (test
// doubles that never run a model) keep compiling; running a model on one is the error.
void Backend::rope_qkv_to_cache(const Tensor& /*qkv*/, const Tensor& /*positions*/,
                                const Tensor& /*cos_sin*/, int32_t /*head_dim*/,
                                int32_t /*rotary_dim*/, RopeStyle /*style*/,
                                int32_t /*num_heads*/, int32_t /*num_kv_heads*/,
                                const Tensor& /*k_cache*/, const Tensor& /*v_cache*/,
                                const Tensor& /*slot_mapping*/, const Tensor& /*q_out*/) {
  fail("rope_qkv_to_cache: the {} backend does not implement this op", name());
}

}  // namespace troupe
