// Weight declarations and tensor-parallel slicing, shared by every architecture.
//
// Each architecture lists its weights as WeightSpecs (HF name, full shape, shard rule); the
// helpers here check a checkpoint tensor against its spec and cut out this rank's slice,
// converted to the compute dtype, so TP needs no model code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/checkpoint/safetensors.hpp"
#include "runtime/models/model.hpp"

namespace troupe {

struct WeightSpec {
  std::string name;            // the Hugging Face tensor name
  std::vector<int64_t> shape;  // full (unsharded) shape, as stored
  Shard shard = Shard::replicated;
  /// How many distinct slices the split dimension is cut into; 0 means tp_size. Fewer parts
  /// than ranks replicate each part over tp_size / parts ranks (KV heads when
  /// num_kv_heads < tp_size, as vLLM does). Must divide the split dimension.
  int64_t parts = 0;
};

/// The [begin, end) range of the split dimension that `rank` holds (the whole dimension for
/// replicated weights). Throws troupe::Error when the dimension does not divide evenly.
struct SliceRange {
  int dim = 0;  // 0 for rows, 1 for cols
  int64_t begin = 0;
  int64_t end = 0;
};
SliceRange shard_range(const WeightSpec& spec, const ParallelRank& rank);

/// Shape of this rank's slice.
std::vector<int64_t> local_shape(const WeightSpec& spec, const ParallelRank& rank);

/// Throws troupe::Error naming the weight, expected and found shapes when `t` does not match.
void check_weight(const TensorInfo& t, const WeightSpec& spec);

/// Copies this rank's slice of `t` (checked against `spec`) to `dst`, converted to `dst_type`
/// (a float type). `dst` holds local_shape(spec, rank) elements.
void copy_shard(const TensorInfo& t, const WeightSpec& spec, const ParallelRank& rank, void* dst,
                DType dst_type);

/// Deterministic pseudo-normal values for dummy weights: element i of the FULL tensor
/// depends only on (seed, name, i), so every TP layout sees the same model. Fills this rank's
/// slice with mean + std * z into `dst` (local_shape elements of `dst_type`).
void fill_dummy_shard(uint64_t seed, const WeightSpec& spec, const ParallelRank& rank, double mean,
                      double std, void* dst, DType dst_type);

}  // namespace troupe
