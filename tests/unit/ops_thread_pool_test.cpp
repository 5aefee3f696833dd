// cpu::ThreadPool: every index exactly once, exceptions propagate, nested and concurrent calls.
#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace rlm::cpu {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (int64_t n : {0, 1, 3, 17, 129, 10007}) {
    for (int64_t grain : {1, 7, 1000}) {
      for (int per_thread : {ThreadPool::kChunksPerThread, ThreadPool::kLongCallChunksPerThread}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int64_t> chunks{0};
        pool.parallel_for(
            n, grain,
            [&](int64_t b, int64_t e) {
              ASSERT_LT(b, e);
              chunks.fetch_add(1);
              for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
            },
            per_thread);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "n " << n << " grain " << grain << " per thread " << per_thread << " i " << i;
        }
        // Chunks of at least `grain` items, per_thread per thread where there are enough items.
        if (n > grain) {
          const int64_t size = std::max<int64_t>(grain, (n + 4 * per_thread - 1) / (4 * per_thread));
          EXPECT_EQ(chunks.load(), (n + size - 1) / size) << "n " << n << " grain " << grain << " per thread " << per_thread;
        }
      }
    }
  }
}

TEST(ThreadPool, RethrowsAndStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](int64_t b, int64_t e) {
                                   for (int64_t i = b; i < e; ++i)
                                     if (i == 57) throw std::runtime_error("item 57");
                                 }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, NestedAndConcurrentCallsComplete) {
  ThreadPool pool(4);
  std::atomic<int64_t> count{0};
  pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.parallel_for(10, 1, [&](int64_t b2, int64_t e2) { count += e2 - b2; });  // runs inline
    }
  });
  EXPECT_EQ(count.load(), 80);
  count = 0;
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) pool.parallel_for(64, 1, [&](int64_t b, int64_t e) { count += e - b; });
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(count.load(), 3 * 50 * 64);
}

}  // namespace
}  // namespace rlm::cpu
