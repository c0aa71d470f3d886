// A CUDA tensor-parallel group's collectives: NCCL, with the custom all-reduce over CUDA IPC
// (custom_all_reduce.hpp) taking the all-reduces of at most `crossover` bytes, where
// `crossover` is measured when the group starts, on its own GPUs: every rank times both paths
// at 8 KiB, 16 KiB, ... up to the custom path's max_bytes (bf16, 20 calls each after 5 warm-up
// calls), the ranks sum their timings with NCCL (so all of them see the same numbers and pick
// the same path for every call), and the custom path takes the sizes up to the first one where
// it is not faster. A custom path that is never faster gives crossover 0: NCCL only, as with
// --disable-custom-all-reduce (no custom path at all). all_gather is NCCL's.
//
// This header has no CUDA include.
#pragma once

#include <memory>
#include <vector>

#include "runtime/backend/collectives.hpp"
#include "transport/nccl/custom_all_reduce.hpp"
#include "transport/nccl/nccl_collectives.hpp"

namespace troupe {

/// One measured size: the summed (over ranks) mean microseconds per call of each path.
struct AllReduceTiming {
  size_t bytes = 0;
  double nccl_us = 0, custom_us = 0;
};

class CudaTpCollectives final : public Collectives {
 public:
  /// custom may be null (NCCL only). Measures the crossover when custom is given (a collective
  /// call: every rank of the group must construct its object at the same time). `stream` is the
  /// cudaStream_t both were connected with.
  CudaTpCollectives(std::shared_ptr<NcclCollectives> nccl, std::shared_ptr<CustomAllReduce> custom,
                    void* stream);

  [[nodiscard]] int32_t rank() const override { return nccl_->rank(); }
  [[nodiscard]] int32_t size() const override { return nccl_->size(); }
  void all_reduce_sum(const Tensor& x) override;
  void all_gather(const Tensor& in, const Tensor& out) override { nccl_->all_gather(in, out); }

  /// The largest message the custom path takes (0: NCCL for every message).
  [[nodiscard]] size_t crossover() const { return crossover_; }
  [[nodiscard]] const std::vector<AllReduceTiming>& timings() const { return timings_; }

 private:
  std::shared_ptr<NcclCollectives> nccl_;
  std::shared_ptr<CustomAllReduce> custom_;
  size_t crossover_ = 0;
  std::vector<AllReduceTiming> timings_;
};

}  // namespace troupe
