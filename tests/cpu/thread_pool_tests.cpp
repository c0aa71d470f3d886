// The CPU backend's fork-join pool: every index exactly once, errors come back to the caller.
#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "cpu/thread_pool.hpp"

using troupe::cpu::ThreadPool;

TEST_CASE("thread pool covers every index exactly once", "[cpu][pool]") {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (int64_t n : {0, 1, 3, 17, 1000, 4099}) {
      for (int64_t grain : {1, 7, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> empty_chunks{0};  // Catch's macros are not thread-safe: count here
        pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
          if (begin >= end) ++empty_chunks;
          for (int64_t i = begin; i < end; ++i) hits[size_t(i)].fetch_add(1);
        });
        CHECK(empty_chunks.load() == 0);
        for (auto& h : hits) REQUIRE(h.load() == 1);
      }
    }
  }
  CHECK(ThreadPool(0).size() >= 1);
}

TEST_CASE("thread pool rethrows a chunk's exception and stays usable", "[cpu][pool]") {
  ThreadPool pool(3);
  for (int round = 0; round < 50; ++round) {
    CHECK_THROWS_WITH(pool.parallel_for(100, 1,
                                        [&](int64_t begin, int64_t end) {
                                          if (begin <= 42 && 42 < end)
                                            throw std::runtime_error("chunk 42");
                                        }),
                      "chunk 42");
    std::atomic<int64_t> sum{0};
    pool.parallel_for(100, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) sum += i;
    });
    CHECK(sum.load() == 4950);
  }
}
