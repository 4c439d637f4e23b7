// The timeline: a phase timed on a PhaseTimes with a Timeline is a span on
// the calling thread and on every pool thread that worked in it, written as
// Chrome trace-event JSON.
#include "util/timeline.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>

#include "util/profile.h"
#include "util/thread_pool.h"

namespace mxrl {
namespace {

TEST(Timeline, PhasesAreSpansOnEveryThreadThatWorkedInThem) {
  ThreadPool pool(2);
  Timeline tl;
  PhaseTimes times;
  times.timeline = &tl;
  {
    PhaseTimer t(&times, Phase::Gemm);
    pool.parallel_for(2, [](int64_t, int64_t) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
  }
  pool.parallel_for(2, [](int64_t, int64_t) {});  // outside any phase: no span
  {
    PhaseTimer t(&times, Phase::Attention);
    { PhaseTimer inner(&times, Phase::Alloc); }
    pool.parallel_for(2, [](int64_t, int64_t) {});  // the outer phase is the context again
  }
  EXPECT_EQ(current_trace().timeline, nullptr);  // restored after the timers closed
  EXPECT_GT(times[Phase::Gemm], 0.0);
  const nlohmann::json j = nlohmann::json::parse(tl.to_chrome_json("test"));
  std::map<std::pair<std::string, int>, int> spans;
  std::map<int, std::string> names;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      ++spans[{e["name"].get<std::string>(), e["tid"].get<int>()}];
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    } else if (e["name"] == "thread_name") {
      names[e["tid"].get<int>()] = e["args"]["name"];
    }
  }
  EXPECT_EQ(names.at(0), "main");
  EXPECT_EQ(names.at(1), "worker 1");
  EXPECT_EQ((spans[{"gemm", 0}]), 1);
  EXPECT_EQ((spans[{"gemm", 1}]), 1);
  EXPECT_EQ((spans[{"alloc", 0}]), 1);
  EXPECT_EQ((spans[{"attention", 0}]), 1);
  EXPECT_EQ((spans[{"attention", 1}]), 1);
  EXPECT_EQ(spans.size(), 5u);
  EXPECT_EQ(tl.size(), 5u);
}

TEST(Timeline, NoTimelineNoSpans) {
  ThreadPool pool(2);
  PhaseTimes times;
  {
    PhaseTimer t(&times, Phase::Gemm);
    EXPECT_EQ(current_trace().timeline, nullptr);
    pool.parallel_for(2, [](int64_t, int64_t) {});
  }
  EXPECT_GT(times[Phase::Gemm], 0.0);
}

}  // namespace
}  // namespace mxrl
