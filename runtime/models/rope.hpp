// Rotary-embedding tables, computed on the host exactly as transformers computes them.
//
// transformers builds inv_freq in float32 (`1 / base ** (arange(0, d, 2).float() / d)`), applies
// the scaling of the rope type to it in float32, then takes cos/sin of the float32 product
// `inv_freq * position`. We follow the same roundings: each float32 intermediate is computed
// in double and rounded to float32, so the table matches to the last bit or so.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/checkpoint/model_config.hpp"

namespace troupe {

/// inv_freq [rotary_dim / 2], float32 values, after the config's rope scaling.
/// Supports rope types "" (default), "linear" and "llama3"; throws troupe::Error naming the
/// type otherwise.
std::vector<float> rope_inv_freq(const ModelConfig& config, int32_t rotary_dim);

/// Rows the cos/sin table needs: max_position_embeddings (times the factor for "linear").
/// Throws troupe::Error naming config.json when that product reaches 2^62.
int64_t rope_max_positions(const ModelConfig& config);

/// The table the backend's rope op reads: [max_positions, rotary_dim] f32, row p holds
/// cos(p * inv_freq) in the first rotary_dim / 2 columns and sin(p * inv_freq) in the rest.
std::vector<float> rope_cos_sin_table(const ModelConfig& config, int32_t rotary_dim,
                                      int64_t max_positions);

}  // namespace troupe
