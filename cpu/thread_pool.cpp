#include "cpu/thread_pool.hpp"

#include <algorithm>
#include <utility>

namespace troupe::cpu {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = int(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(size_t(num_threads - 1));
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    const int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) return;
    try {
      (*fn_)(begin, std::min(n_, begin + chunk_));
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_.store(n_, std::memory_order_relaxed);  // stop handing out chunks
      return;
    }
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();
    std::lock_guard lock(mutex_);
    if (--busy_ == 0) done_cv_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const RangeFn& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  // About four chunks per thread: enough to even out uneven rows, few enough to keep the
  // atomic cheap.
  const int64_t target = (n + int64_t(size()) * 4 - 1) / (int64_t(size()) * 4);
  {
    std::lock_guard lock(mutex_);
    fn_ = &fn;
    n_ = n;
    chunk_ = std::max(grain, target);
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    busy_ = int(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  run_chunks();
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [&] { return busy_ == 0; });
    fn_ = nullptr;
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace troupe::cpu
