#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
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

// A chunk that throws, the caller's (index 0) or a worker's (the last index):
// parallel_for rethrows it only after every other chunk has finished (they
// read the caller's fn), and the pool runs the next call normally.
TEST(ThreadPool, RethrowsAChunksExceptionAfterEveryChunkFinished) {
  ThreadPool pool(4);
  for (int64_t bad : {int64_t{0}, int64_t{7}}) {
    std::vector<std::atomic<int>> hits(8);
    try {
      pool.parallel_for(8, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          if (i == bad) throw std::runtime_error("chunk " + std::to_string(i));
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // still running when the throw happens
          hits[i]++;
        }
      });
      ADD_FAILURE() << "no exception for index " << bad;
    } catch (const std::runtime_error& err) {
      EXPECT_EQ(std::string(err.what()), "chunk " + std::to_string(bad));
    }
    for (int64_t i = 0; i < 8; ++i) {  // 4 chunks of 2: only the throwing index's chunk stopped early
      if (i / 2 != bad / 2) {
        EXPECT_EQ(hits[i].load(), 1) << "bad " << bad << " index " << i;
      }
    }
    std::atomic<int64_t> sum{0};
    pool.parallel_for(100, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i;
    });
    EXPECT_EQ(sum.load(), 4950);
  }
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
