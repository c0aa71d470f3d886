// A small fork-join pool for the CPU backend's row-parallel ops.
//
// One pool per CpuBackend. parallel_for is not re-entrant and must be called from one thread
// at a time (the backend's owner): a Backend object is used by one thread, so the pool needs
// no queue, only a "run this range now" handshake. The calling thread takes chunks too.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace troupe::cpu {

class ThreadPool {
 public:
  /// `num_threads` counts the caller: 1 runs everything inline; 0 = hardware concurrency.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  [[nodiscard]] int size() const { return int(workers_.size()) + 1; }

  using RangeFn = std::function<void(int64_t begin, int64_t end)>;

  /// Calls fn(begin, end) on disjoint chunks covering [0, n), each at least `grain` long
  /// (except the last), spread over the pool with dynamic scheduling (uneven rows, such as
  /// causal attention, balance themselves). Returns when all chunks are done; rethrows the
  /// first exception a chunk threw.
  void parallel_for(int64_t n, int64_t grain, const RangeFn& fn);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // bumped per parallel_for; workers run each generation once
  int busy_ = 0;             // workers still inside the current generation
  bool stop_ = false;

  // The current job; written under mutex_ before generation_ is bumped.
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;
};

}  // namespace troupe::cpu
