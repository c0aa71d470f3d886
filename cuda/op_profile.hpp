// TROUPE_OP_PROFILE=1: the GPU time of every op the CUDA backend launches outside graph capture,
// summed per label (op, weight shape, row bucket) and printed when the backend goes away. A
// diagnostic for the speed work (run the engine with --enforce-eager): events around each op
// on the backend's stream, read back in batches, so the host waits a little more often than
// usual. Nested ops (the sequence a fused op runs) are counted under their parent's label too.
// Each line also gives the host time spent inside the op's call (checks, planning such as a
// new cuBLASLt shape's heuristic query, launches): where it exceeds the GPU time, the GPU waits
// for the host.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace troupe::cuda {

class OpProfiler {
 public:
  explicit OpProfiler(cudaStream_t stream) : stream_(stream) {}
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  /// Times the work enqueued between its construction and its end (RAII). Inert when made
  /// from a null profiler.
  class Scope {
   public:
    Scope(OpProfiler* p, std::string label);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpProfiler* p_;
    size_t index_ = 0;
    std::chrono::steady_clock::time_point start_;
  };

  /// "1", "2-8", "9-64", "65-512", "513-4096" or ">4096": the label part for `rows` rows.
  static std::string rows_bucket(int64_t rows);

  /// The table: one line per label, by total time.
  [[nodiscard]] std::string report();

 private:
  struct Pending {
    std::string label;
    cudaEvent_t begin = nullptr, end = nullptr;
    bool top_level = true;
    double host_ms = 0;
  };
  struct Stat {
    uint64_t calls = 0;
    double ms = 0;
    double host_ms = 0;
  };
  cudaEvent_t event();
  void resolve();

  cudaStream_t stream_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  std::vector<std::string> stack_;  // labels of the open scopes
  std::map<std::string, Stat> stats_;
  double top_level_ms_ = 0;
};

}  // namespace troupe::cuda
