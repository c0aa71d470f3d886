// The memory check before a model is loaded: a model whose weights (and the KV cache of one
// max_model_len sequence) cannot fit in the memory the backend has free is refused with the
// sizes and the flag that would help, instead of being killed by the kernel half-way through
// loading (host memory) or failing an allocation (device memory).
//
// Sizes come from config.json alone, before anything is allocated: every architecture troupe
// has is a Llama-family layout (runtime/models/llama.cpp's weight table), cut by the executor's
// tensor- and pipeline-parallel rank.
#pragma once

#include <cstdint>

#include "runtime/backend/dtype.hpp"
#include "runtime/backend/tensor.hpp"
#include "runtime/checkpoint/model_config.hpp"
#include "runtime/models/model.hpp"

namespace troupe {

/// Parameters one rank holds (embedding, layers, final norm, lm_head unless tied). Throws
/// troupe::Error naming config.json when its sizes make more than int64 holds (as does
/// model_memory, for the bytes of one max_model_len sequence too).
[[nodiscard]] int64_t model_parameter_count(const ModelConfig& c, const ParallelRank& rank = {});

/// What one executor needs before its first step.
struct ModelMemory {
  int64_t parameters = 0;          // on this rank
  int64_t weight_bytes = 0;        // parameters in `dtype`, plus the f32 RoPE table
  int64_t kv_bytes_per_token = 0;  // K and V of every layer this rank holds, in `dtype`
  int64_t max_model_len = 0;
  DType dtype = DType::f32;  // the compute dtype weights are stored in
  [[nodiscard]] int64_t one_sequence_bytes() const {
    return weight_bytes + kv_bytes_per_token * max_model_len;
  }
};

/// The sizes of `c` run in `dtype` (the backend's compute dtype) with `max_model_len`.
[[nodiscard]] ModelMemory model_memory(const ModelConfig& c, DType dtype, int64_t max_model_len,
                                       const ParallelRank& rank = {});

/// Memory kept back from what the backend reports free (activations, the allocator, other
/// processes' growth): 5% of it, at least 512 MiB.
[[nodiscard]] int64_t memory_margin_bytes(int64_t available_bytes);

/// Throws troupe::Error when `need.one_sequence_bytes()` exceeds `available_bytes` (what the
/// backend reports free: MemAvailable on the CPU, cudaMemGetInfo's free on a GPU) less the
/// margin. The message gives the model's bytes, what is available, and what would help:
/// --dtype (a GPU running float32), --max-model-len (when the weights alone fit), another
/// device. `checkpoint_dtype` is the dtype config.json declares.
void check_model_fits(const ModelMemory& need, int64_t available_bytes, const Device& device,
                      DType checkpoint_dtype);

}  // namespace troupe
