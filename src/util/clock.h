// Wall time on the steady clock, for the seconds that timings and progress report.
#pragma once
#include <chrono>

namespace mxrl {

using Clock = std::chrono::steady_clock;

// Seconds since t0.
inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace mxrl
