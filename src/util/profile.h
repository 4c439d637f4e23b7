// Wall time split by phase (weight quantization, activation quantization,
// GEMMs, attention, the optimizer, allocation), for `mxrl bench train` and
// the step traces of the report. An Exec may carry a PhaseTimes; code that
// runs a phase opens a PhaseTimer on it (no cost when none is attached).
// Only the calling thread times: phases are entered from the top level, never
// from inside a parallel region. With a Timeline attached, each phase is also
// a span on the calling thread and on every pool thread that works in it
// (util/timeline.h).
#pragma once
#include <chrono>

#include "util/timeline.h"

namespace mxrl {

enum class Phase : int { WeightQuant = 0, ActQuant = 1, Gemm = 2, Attention = 3, Optimizer = 4, Alloc = 5 };
inline constexpr int kNumPhases = 6;
inline const char* phase_name(Phase p) {
  static const char* names[] = {"weight_quant", "act_quant", "gemm", "attention", "optimizer", "alloc"};
  return names[static_cast<int>(p)];
}

struct PhaseTimes {
  double sec[kNumPhases] = {};
  Timeline* timeline = nullptr;  // when set, every phase is also a span there
  double operator[](Phase p) const { return sec[static_cast<int>(p)]; }
  double total() const { return sec[0] + sec[1] + sec[2]; }  // quantization and GEMMs
};

class PhaseTimer {
 public:
  PhaseTimer(PhaseTimes* t, Phase p) : t_(t), p_(p) {
    if (!t_) return;
    start_ = std::chrono::steady_clock::now();
    if (t_->timeline) saved_ = current_trace(), current_trace() = {t_->timeline, phase_name(p_)};
  }
  ~PhaseTimer() {
    if (!t_) return;
    const auto end = std::chrono::steady_clock::now();
    t_->sec[static_cast<int>(p_)] += std::chrono::duration<double>(end - start_).count();
    if (t_->timeline) t_->timeline->span(phase_name(p_), start_, end), current_trace() = saved_;
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  PhaseTimes* t_;
  Phase p_;
  std::chrono::steady_clock::time_point start_;
  TraceContext saved_;
};

}  // namespace mxrl
