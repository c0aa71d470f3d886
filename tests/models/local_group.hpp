// An in-process tensor-parallel group and pipeline links for tests whose ranks are threads of
// one process (the model-level TP/PP tests). The real groups and links are in transport/.
// Host (f32) tensors only; every wait is bounded (a test that deadlocks fails instead).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/backend/collectives.hpp"
#include "runtime/error.hpp"

namespace troupe::testing {

class LocalGroup {
 public:
  explicit LocalGroup(int32_t size) : size_(size), posted_(size_t(size)) {}

  /// The Collectives of rank `rank`.
  std::shared_ptr<Collectives> rank(int32_t rank);

  // Each collective posts every rank's input pointer, then every rank computes its result
  // from all of them in rank order (identical bits everywhere), then all leave together.
  void exchange(int32_t rank, const void* in, const std::function<void()>& compute) {
    std::unique_lock<std::mutex> lock(m_);
    const uint64_t gen = generation_;
    posted_[size_t(rank)] = in;
    if (++arrived_ == size_) cv_.notify_all();
    wait(lock, [&] { return arrived_ == size_ || generation_ != gen; });
    lock.unlock();
    compute();
    lock.lock();
    if (++done_ == size_) {
      arrived_ = 0;
      done_ = 0;
      ++generation_;
      cv_.notify_all();
    }
    wait(lock, [&] { return generation_ != gen; });
  }
  [[nodiscard]] const void* posted(int32_t rank) const { return posted_[size_t(rank)]; }
  [[nodiscard]] int32_t size() const { return size_; }

 private:
  template <class Pred>
  void wait(std::unique_lock<std::mutex>& lock, Pred pred) {
    if (!cv_.wait_for(lock, std::chrono::seconds(30), pred))
      fail("local group: a rank did not arrive within 30 s");
  }
  int32_t size_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<const void*> posted_;
  int32_t arrived_ = 0, done_ = 0;
  uint64_t generation_ = 0;
};

class LocalCollectives final : public Collectives {
 public:
  LocalCollectives(LocalGroup& g, int32_t rank) : g_(g), rank_(rank) {}
  [[nodiscard]] int32_t rank() const override { return rank_; }
  [[nodiscard]] int32_t size() const override { return g_.size(); }
  void all_reduce_sum(const Tensor& x) override {
    if (x.dtype != DType::f32) fail("local group: all_reduce_sum of {} (f32 only)", describe(x));
    const auto n = size_t(x.numel());
    std::vector<float> sum(n, 0.0f);
    g_.exchange(rank_, x.data, [&] {
      for (int32_t r = 0; r < g_.size(); ++r) {
        const auto* in = static_cast<const float*>(g_.posted(r));
        for (size_t i = 0; i < n; ++i) sum[i] += in[i];
      }
    });
    std::memcpy(x.data, sum.data(), n * sizeof(float));
  }
  void all_gather(const Tensor& in, const Tensor& out) override {
    const auto bytes = size_t(in.nbytes());
    if (size_t(out.nbytes()) != bytes * size_t(g_.size()))
      fail("local group: all_gather into {} of {}", describe(out), describe(in));
    g_.exchange(rank_, in.data, [&] {
      for (int32_t r = 0; r < g_.size(); ++r)
        std::memcpy(static_cast<char*>(out.data) + size_t(r) * bytes, g_.posted(r), bytes);
    });
  }

 private:
  LocalGroup& g_;
  int32_t rank_;
};

inline std::shared_ptr<Collectives> LocalGroup::rank(int32_t rank) {
  return std::make_shared<LocalCollectives>(*this, rank);
}

/// A one-way pipe of tagged messages between two stages.
class LocalPipe {
 public:
  void put(uint64_t tag, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(m_);
    auto& v = msgs_[tag];
    v.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    cv_.notify_all();
  }
  void take(uint64_t tag, void* data, size_t bytes) {
    std::unique_lock<std::mutex> lock(m_);
    if (!cv_.wait_for(lock, std::chrono::seconds(30), [&] { return msgs_.count(tag) > 0; }))
      fail("local pipe: nothing tagged {} within 30 s", tag);
    auto it = msgs_.find(tag);
    if (it->second.size() != bytes)
      fail("local pipe: message {} holds {} bytes, {} expected", tag, it->second.size(), bytes);
    std::memcpy(data, it->second.data(), bytes);
    msgs_.erase(it);
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::map<uint64_t, std::vector<char>> msgs_;
};

class LocalStageLink final : public StageLink {
 public:
  LocalStageLink(std::shared_ptr<LocalPipe> prev, std::shared_ptr<LocalPipe> next)
      : prev_(std::move(prev)), next_(std::move(next)) {}
  void send_next(uint64_t tag, const void* data, size_t bytes) override {
    if (!next_) fail("local link: the last stage has no next stage");
    next_->put(tag, data, bytes);
  }
  void recv_prev(uint64_t tag, void* data, size_t bytes) override {
    if (!prev_) fail("local link: the first stage has no previous stage");
    prev_->take(tag, data, bytes);
  }

 private:
  std::shared_ptr<LocalPipe> prev_, next_;
};

}  // namespace troupe::testing
