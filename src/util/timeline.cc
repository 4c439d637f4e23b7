#include "util/timeline.h"

#include <nlohmann/json.hpp>

namespace mxrl {

void Timeline::span(const char* name, Clock::time_point t0, Clock::time_point t1) {
  const auto me = std::this_thread::get_id();
  std::lock_guard lk(mu_);
  int tid = -1;
  for (const auto& [id, k] : tids_)
    if (id == me) tid = k;
  if (tid < 0) tid = static_cast<int>(tids_.size()), tids_.emplace_back(me, tid);
  events_.push_back({name, tid, std::chrono::duration<double, std::micro>(t0 - origin_).count(),
                     std::chrono::duration<double, std::micro>(t1 - t0).count()});
}

size_t Timeline::size() const {
  std::lock_guard lk(mu_);
  return events_.size();
}

std::string Timeline::to_chrome_json(const std::string& process_name) const {
  std::lock_guard lk(mu_);
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", process_name}}}});
  for (const auto& [id, k] : tids_)
    ev.push_back({{"name", "thread_name"},
                  {"ph", "M"},
                  {"pid", 1},
                  {"tid", k},
                  {"args", {{"name", k == 0 ? std::string("main") : "worker " + std::to_string(k)}}}});
  for (const Event& e : events_)
    ev.push_back({{"name", e.name}, {"ph", "X"}, {"pid", 1}, {"tid", e.tid}, {"ts", e.ts_us}, {"dur", e.dur_us}});
  return nlohmann::json{{"traceEvents", ev}, {"displayTimeUnit", "ms"}}.dump();
}

TraceContext& current_trace() {
  thread_local TraceContext c;
  return c;
}

}  // namespace mxrl
