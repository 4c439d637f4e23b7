// A fixed pool of worker threads with one primitive, parallel_for, that cuts
// [0, n) into contiguous chunks. Kernels that use it write disjoint outputs
// per index, so results never depend on the thread count.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "util/timeline.h"

namespace mxrl {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads <= 0: all hardware threads
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(begin, end) over chunks of at least `grain` indices; the caller runs
  // one chunk itself. A call from inside a task runs serially. If chunks
  // throw, parallel_for returns only after every chunk has finished and then
  // rethrows one of the exceptions (the caller's own first).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  static int hardware_threads();

 private:
  void worker_loop(int id);
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* task_ = nullptr;
  TraceContext trace_;  // the caller's: workers record their chunk as a span of its phase
  int64_t n_ = 0;
  int chunks_ = 0;
  std::exception_ptr error_;  // a worker chunk's exception (under mu_)
  // Written under mu_; also read without it while spinning (waking a
  // sleeping thread costs tens of microseconds, more than small tasks).
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

// Serial when pool is null.
void parallel_for(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

}  // namespace mxrl
