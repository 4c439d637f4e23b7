#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace mxrl {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
    }
  }
}

TEST(ThreadPool, NestedCallsRunSeriallyAndRespectGrain) {
  ThreadPool pool(4);
  std::atomic<int64_t> sum{0};
  std::atomic<int> outer_chunks{0};
  pool.parallel_for(
      8,
      [&](int64_t b, int64_t e) {
        outer_chunks++;
        for (int64_t i = b; i < e; ++i)
          pool.parallel_for(10, [&](int64_t b2, int64_t e2) {
            for (int64_t j = b2; j < e2; ++j) sum += j;
          });
      },
      4);
  EXPECT_EQ(outer_chunks.load(), 2);  // 8 indices, grain 4
  EXPECT_EQ(sum.load(), 8 * 45);
}

TEST(ThreadPool, NullPoolIsSerial) {
  int calls = 0;
  parallel_for(nullptr, 5, [&](int64_t b, int64_t e) {
    calls++;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 5);
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace mxrl
