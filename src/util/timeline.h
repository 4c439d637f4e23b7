// A timeline of named spans per thread, written as Chrome trace-event JSON
// (opens in Perfetto or chrome://tracing).
//
// A PhaseTimer on a PhaseTimes that carries a Timeline records its span on
// the calling thread and, while it is open, makes that timeline and phase the
// calling thread's trace context: ThreadPool::parallel_for hands the context
// to its workers, which record a span of the same name for their chunk. So a
// GEMM shows on every thread that computed part of it.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mxrl {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  // The creating thread is thread 0, "main".
  Timeline() : origin_(Clock::now()) { tids_.emplace_back(std::this_thread::get_id(), 0); }
  // A span [t0, t1) on the calling thread; thread-safe.
  void span(const char* name, Clock::time_point t0, Clock::time_point t1);
  // {"traceEvents": [complete events "X" in microseconds, thread names], "displayTimeUnit": "ms"};
  // thread 0 (the creator) is named "main", the others "worker k" in the order they first recorded.
  std::string to_chrome_json(const std::string& process_name) const;
  size_t size() const;

 private:
  struct Event {
    const char* name;
    int tid;
    double ts_us, dur_us;
  };
  Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::pair<std::thread::id, int>> tids_;
};

// The calling thread's trace context (null timeline: not tracing).
struct TraceContext {
  Timeline* timeline = nullptr;
  const char* phase = nullptr;
};
TraceContext& current_trace();

}  // namespace mxrl
