// Wall time split by phase (weight quantization, activation quantization,
// GEMMs), for `mxrl bench train`. An Exec may carry a PhaseTimes; code that
// runs a phase opens a PhaseTimer on it (no cost when none is attached).
// Only the calling thread times: phases are entered from the top level, never
// from inside a parallel region.
#pragma once
#include <chrono>

namespace mxrl {

enum class Phase : int { WeightQuant = 0, ActQuant = 1, Gemm = 2 };
inline constexpr int kNumPhases = 3;
inline const char* phase_name(Phase p) {
  static const char* names[] = {"weight_quant", "act_quant", "gemm"};
  return names[static_cast<int>(p)];
}

struct PhaseTimes {
  double sec[kNumPhases] = {};
  double operator[](Phase p) const { return sec[static_cast<int>(p)]; }
  double total() const { return sec[0] + sec[1] + sec[2]; }
};

class PhaseTimer {
 public:
  PhaseTimer(PhaseTimes* t, Phase p) : t_(t), p_(p) {
    if (t_) start_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() {
    if (t_) t_->sec[static_cast<int>(p_)] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  PhaseTimes* t_;
  Phase p_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace mxrl
