#include "util/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace mxrl {

namespace {
thread_local bool t_in_task = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls done() for about 100 us before the caller blocks on a condition
// variable: long enough to span the gap between two kernels of a step. A
// count of PAUSEs (2048 before) lasts as long as the CPU's PAUSE makes it;
// on the AVX2 EPYC it ran out before the other thread came back, each
// parallel_for then paid two wake-ups (tens of microseconds each on a VM),
// and an M = 1 GEMM of 2 MiB ran at 7 GFLOP/s instead of 55-60.
template <typename Done>
void spin_until(Done done) {
  using Clock = std::chrono::steady_clock;
  const auto end = Clock::now() + std::chrono::microseconds(100);
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (done()) return;
      cpu_relax();
    }
    if (Clock::now() >= end) return;
  }
}

// fn(b, e) as a task (nested parallel_for calls run serially); an exception
// is returned, not thrown, so that no chunk leaves its pool mid-call.
std::exception_ptr run_chunk(const std::function<void(int64_t, int64_t)>& fn, int64_t b, int64_t e) {
  std::exception_ptr err;
  t_in_task = true;
  try {
    fn(b, e);
  } catch (...) {
    err = std::current_exception();
  }
  t_in_task = false;
  return err;
}

std::pair<int64_t, int64_t> chunk_range(int64_t n, int chunks, int i) {
  const int64_t base = n / chunks, extra = n % chunks;
  const int64_t b = i * base + std::min<int64_t>(i, extra);
  return {b, b + base + (i < extra ? 1 : 0)};
}
}  // namespace

int ThreadPool::hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = hardware_threads();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int id) {
  uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_relaxed); });
    std::unique_lock lk(mu_);
    start_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* task = task_;
    const int64_t n = n_;
    const int chunks = chunks_;
    const TraceContext trace = trace_;
    lk.unlock();
    if (id < chunks) {
      auto [b, e] = chunk_range(n, chunks, id);
      const auto t0 = trace.timeline ? Timeline::Clock::now() : Timeline::Clock::time_point{};
      if (std::exception_ptr err = run_chunk(*task, b, e)) {
        std::lock_guard elk(mu_);
        if (!error_) error_ = err;
      }
      if (trace.timeline) trace.timeline->span(trace.phase, t0, Timeline::Clock::now());
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      lk.lock();  // pairs with the caller's predicate check under mu_
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int chunks = static_cast<int>(std::min<int64_t>(size(), (n + grain - 1) / grain));
  if (chunks <= 1 || t_in_task) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard lk(mu_);
    task_ = &fn;
    trace_ = current_trace();
    n_ = n;
    chunks_ = chunks;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  auto [b, e] = chunk_range(n, chunks, 0);
  std::exception_ptr err = run_chunk(fn, b, e);  // workers read fn: wait for them before leaving
  spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
  std::unique_lock lk(mu_);
  done_cv_.wait(lk, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  task_ = nullptr;
  if (!err) err = error_;
  error_ = nullptr;
  lk.unlock();
  if (err) std::rethrow_exception(err);
}

void parallel_for(ThreadPool* pool, int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (pool)
    pool->parallel_for(n, fn, grain);
  else if (n > 0)
    fn(0, n);
}

}  // namespace mxrl
